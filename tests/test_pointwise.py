"""clir_llm.pointwise: relevance generation (P(Yes) against P(No)) and query likelihood, each document scored on its own,
ordered as llm-rankers' PointwiseLlmRanker sorts; prompts in the backend's form; the capability each needs; the dry
run's estimate (one prompt per document) against a run; an encoder-decoder model through hf:."""

import math, random
import pytest
from clir_llm.core import ClirError, Run
from clir_llm.pointwise import PointwiseOptions, PointwiseReranker, pointwise_order, yes_probability
from clir_llm.rerank import RerankerSpec, TextStats, get_reranker
from clir_llm.templates import prompt_text
from clir_llm.testing import QrelsOracle, tiny_setup
from _rerankers import tiny  # noqa: F401  (a fixture)

METHOD = {"relevance": "pointwise-yes-no", "qlm": "pointwise-qlm"}


@pytest.fixture(scope="module")
def small():
    return tiny_setup(n_queries=2, n_docs=30, seed=5)


def test_pointwise_equals_llmrankers_sort(small):
    coll, first = small

    class Scores(QrelsOracle):
        def __init__(self, coll, value):
            super().__init__(coll, name="scores")
            self.value, self.given = value, []

        def score(self, prompts, candidates, **kw):
            self.usage.calls += 1
            out = [[self.value(), -0.5][: len(candidates)] for _ in prompts]
            self.given += [s for s in out]
            return out

    for template in ("relevance", "qlm"):
        for value in (random.Random(3).random, lambda: 1.0, lambda: float(random.Random(9).choice([0, 1]))):
            b = Scores(coll, value)
            pw = get_reranker(METHOD[template], b, progress=False)
            rr = pw.rerank(coll, first, k=30)
            for i, q in enumerate(first):
                given = b.given[30 * i : 30 * (i + 1)]
                score = [1 / (1 + math.exp(s[1] - s[0])) if template == "relevance" else s[0] for s in given]
                # llm-rankers' sorted(..., reverse=True)
                ref = [d for d, _ in sorted(zip(first.docids(q, 30), score), key=lambda x: x[1], reverse=True)]
                assert rr.docids(q, 30) == ref and rr.docids(q)[30:] == first.docids(q)[30:]
                assert pw.diagnostics[q]["prompts"] == 30 and pw.diagnostics[q]["calls"] == 1
    assert pointwise_order(["a", "b", "c"], {"a": 0.1, "b": 0.9, "c": 0.1}.get) == ["b", "a", "c"]


def test_yes_probability_is_the_softmax_of_the_two_answers():
    assert yes_probability(0.0, 0.0) == 0.5 and abs(yes_probability(-1.0, -2.0) - 1 / (1 + math.exp(-1))) < 1e-12
    assert yes_probability(0.0, -1e6) == 1.0 and yes_probability(-1e6, 0.0) < 1e-300  # no overflow


def test_names_prompts_and_candidates(small):
    coll, first = small
    yn, qlm = (
        get_reranker("pointwise-yes-no", QrelsOracle(coll)),
        get_reranker("pointwise-qlm", QrelsOracle(coll), doc_title=False),
    )
    assert (yn.name, qlm.name) == ("pointwise-relevance[oracle:qrels]", "pointwise-qlm[oracle:qrels][no-title]")
    assert (yn.kind, qlm.kind) == ("yes_no", "qlm") and yn._candidates("q") == ["Yes", "No"]
    assert qlm._candidates("what is x") == ["what is x"]
    # a chat backend
    assert yn._prompt("Q", "P") == [{"role": "user", "content": yn.template["prompt"].format(query="Q", passage="P")}]

    class Plain(QrelsOracle):
        is_chat = False

    # the answer prefix
    assert get_reranker("pointwise-yes-no", Plain(coll))._prompt("Q", "P").endswith("Answer 'Yes' or 'No'\n")
    assert (
        PointwiseReranker.default_prompt("pointwise-qlm") == "qlm"
        and PointwiseReranker.paper("pointwise-qlm", {}) == {}
    )
    assert list(PointwiseOptions.flat_fields())[4:] == ["query_tokens", "passage_tokens"]


def test_query_cut_for_relevance_but_whole_query_for_likelihood(small):
    coll, first = small

    class Seen(QrelsOracle):
        def score(self, prompts, candidates, **kw):
            self.seen = getattr(self, "seen", []) + [(prompt_text(p), tuple(candidates)) for p in prompts]
            return [[0.0] * len(candidates) for _ in prompts]

    one = Run({"q0": first["q0"]})
    b = Seen(coll)
    get_reranker("pointwise-yes-no", b, query_tokens=2, progress=False).rerank(coll, one, k=3)
    assert all("Query: topic 0\n" in p for p, _ in b.seen)
    b = Seen(coll)
    get_reranker("pointwise-qlm", b, query_tokens=2, progress=False).rerank(coll, one, k=3)
    assert all(c == (coll.queries["q0"].text,) for _, c in b.seen)


def test_capabilities_each_scoring_needs(small):
    coll, _ = small

    class FirstTokenOnly(QrelsOracle):
        scores_sequences = False

    class NoLogprobs(QrelsOracle):
        supports_logprobs = False

    with pytest.raises(
        ClirError, match="reranker 'pointwise-qlm' reads likelihoods, .* cannot score a continuation of several tokens"
    ):
        get_reranker("pointwise-qlm", FirstTokenOnly(coll))
    assert get_reranker("pointwise-yes-no", FirstTokenOnly(coll)).kind == "yes_no"
    with pytest.raises(
        ClirError, match="reranker 'pointwise-yes-no' reads likelihoods, .* returns no log-probabilities"
    ):
        get_reranker("pointwise-yes-no", NoLogprobs(coll))
    with pytest.raises(ClirError, match="PointwiseReranker needs a pointwise prompt; 'setwise' is a setwise prompt"):
        get_reranker("pointwise-yes-no", QrelsOracle(coll), prompt="setwise")


# ---------- (f) the dry run's estimate: one prompt per document


@pytest.mark.parametrize("method", ["pointwise-yes-no", "pointwise-qlm"])
@pytest.mark.parametrize("n,options", [(1, {}), (9, {}), (30, {}), (30, dict(batch_size=4, passage_tokens=20))])
def test_estimate_is_one_prompt_per_document(method, n, options):
    spec = RerankerSpec.parse(method, **options)
    stats = TextStats(
        docs=n, query_tokens=10, doc_words=[40, 80], tokens_per_word=1.3, template_tokens=lambda s: len(s.split())
    )
    est = PointwiseReranker.estimate(spec.options, method, stats)
    coll, first = tiny_setup(n_queries=2, n_docs=n)
    rr = spec.build(QrelsOracle(coll), progress=False)
    rr.rerank(coll, first, k=n)
    assert est.calls == n and all(d["prompts"] == est.calls for d in rr.diagnostics.values())
    assert (
        est.output_tokens == 0.0 and est.prompt_tokens > 0 and (est.prefix_tokens == 0.0) == (method == "pointwise-qlm")
    )


# ---------- an encoder-decoder model through hf:


@pytest.mark.slow
@pytest.mark.parametrize("method", ["pointwise-yes-no", "pointwise-qlm"])
def test_encoder_decoder_backend(tiny, small, method):
    from clir_llm.llm import get_backend

    coll, first = small
    b = get_backend(f"hf:{tiny['mt5']}")
    rr = get_reranker(method, b, progress=False)
    one = Run({q: first[q] for q in list(first)[:1]})
    out = rr.rerank(coll, one, k=5)
    assert all(sorted(out.docids(q)) == sorted(one.docids(q)) for q in one) and b.usage.calls > 0


# ---------- Qwen3-Reranker (issue 29): its template, instruction and label tokens, equal to its model card


def _qwen3_card(folder, pairs, max_length=8192):
    "The Qwen3-Reranker model card's usage, written again: prefix / body / suffix ids, left padding, softmax([no, yes])[yes]."
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    judge = 'Judge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be "yes" or "no".'
    head = tok.encode(f"<|im_start|>system\n{judge}<|im_end|>\n<|im_start|>user\n", add_special_tokens=False)
    tail = tok.encode("<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", add_special_tokens=False)
    body = tok(
        [
            f"<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n<Query>: {q}\n<Document>: {d}"
            for q, d in pairs
        ],
        padding=False,
        truncation="longest_first",
        return_attention_mask=False,
        max_length=max_length - len(head) - len(tail),
    )
    ids = [head + x + tail for x in body["input_ids"]]
    with torch.no_grad():
        last = model(**tok.pad({"input_ids": ids}, padding=True, return_tensors="pt")).logits[:, -1, :]
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    return ids, torch.log_softmax(torch.stack([last[:, no], last[:, yes]], 1), 1)[:, 1].exp().tolist()


def test_qwen3_reranker_equals_its_model_card(tmp_path):
    from clir_llm.llm_hf import HFBackend
    from clir_llm.pointwise import yes_probability
    from clir_llm.testing import make_tiny_hf_model

    folder = make_tiny_hf_model(tmp_path / "q3", "qwen3")
    b = HFBackend.create(str(folder), dtype="float32")
    rr = get_reranker("pointwise-qwen3-reranker", b, progress=False)
    pairs = [
        ("vaccine for malaria", "Die Katze schläft auf dem Sofa."),
        ("кошка спит", "il gatto dorme; кошка спит на диване."),
        ("the cat", "the cat sat on the mat."),
    ]
    ids, ref = _qwen3_card(str(folder), pairs)
    prompts = [rr._prompt(q, d) for q, d in pairs]
    assert [b._render(p)["ids"] for p in prompts] == ids
    ours = [yes_probability(*s) for s in b.score(prompts, rr._candidates(""), progress=False)]
    assert max(abs(a - r) for a, r in zip(ours, ref)) < 1e-5
    assert rr._candidates("") == ["yes", "no"] and rr.name.startswith("pointwise-qwen3-reranker[")


def test_qwen3_reranker_cuts_as_its_card_by_default(tmp_path):
    """Issue 38 item 4b: the card's usage cuts nothing below its 8,192-token pair: a query over 128 and a passage over 300
    tokens reach the model whole (before: cut to 128 and 300, llm-rankers' cuts); those cuts stay options."""
    from clir_llm.core import Document, Qrels, Query
    from clir_llm.llm_hf import HFBackend
    from clir_llm.pointwise import Qwen3RerankerOptions
    from clir_llm.testing import TinyCollection, make_tiny_hf_model

    folder = make_tiny_hf_model(tmp_path / "q3", "qwen3")
    b = HFBackend.create(str(folder), dtype="float32")
    query, passage = ("the cat sat on the mat " * 30).strip(), ("die Katze schläft auf dem Sofa. " * 60).strip()
    assert b.count_tokens(query) > 128 and b.count_tokens(passage) > 300
    coll = TinyCollection(
        {"q": Query("q", query, "en")}, {"d": Document("d", passage, "", "de")}, Qrels({"q": {"d": 1}})
    )
    seen, real = [], b.score
    b.score = lambda prompts, cands, **kw: seen.extend(prompts) or real(prompts, cands, **kw)
    card_ids, _ = _qwen3_card(str(folder), [(query, passage)])
    rr = get_reranker("pointwise-qwen3-reranker", b, doc_title=False, progress=False)
    assert (
        type(rr.options) is Qwen3RerankerOptions
        and RerankerSpec.parse("pointwise-yes-no").options.passage_tokens == 300
    )
    rr.rerank(coll, Run({"q": {"d": 1.0}}), k=1)
    assert [b._render(p)["ids"] for p in seen] == card_ids and not rr.diagnostics["q"]["truncated_docs"]
    seen.clear()
    get_reranker(
        "pointwise-qwen3-reranker", b, doc_title=False, progress=False, query_tokens=128, passage_tokens=300
    ).rerank(coll, Run({"q": {"d": 1.0}}), k=1)
    assert len(b._render(seen[0])["ids"]) < len(card_ids[0]) - 300  # the old cuts, as options
    seen.clear()
    short = get_reranker("pointwise-qwen3-reranker", b, doc_title=False, progress=False, max_length=256)
    short.rerank(coll, Run({"q": {"d": 1.0}}), k=1)
    n = len(b._render(seen[0])["ids"])
    assert 250 <= n <= 256 and abs(n - len(_qwen3_card(str(folder), [(query, passage)], 256)[0][0])) <= 1


def test_qwen3_reranker_needs_a_chat_backend_with_prefill(small):
    coll = small[0] if isinstance(small, tuple) else small
    from clir_llm.testing import QrelsOracle

    class Plain(QrelsOracle):
        is_chat = False

    class ChatAPI(QrelsOracle):
        supports_prefill = scores_sequences = False

    with pytest.raises(
        ClirError, match="has a system turn and an assistant prefill: backend 'oracle:qrels' renders no chat template"
    ):
        get_reranker("pointwise-qwen3-reranker", Plain(coll))
    with pytest.raises(ClirError, match="cannot continue an assistant turn"):
        get_reranker("pointwise-qwen3-reranker", ChatAPI(coll))
    rr = get_reranker("pointwise-qwen3-reranker", QrelsOracle(coll), progress=False)
    msgs = rr._prompt("q", "p")
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"] and msgs[-1][
        "content"
    ] == "<think>\n\n</think>\n\n"
    assert (
        msgs[1]["content"]
        == "<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n<Query>: q\n<Document>: p"
    )
