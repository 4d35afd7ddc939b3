"""clir_llm.listwise: sliding windows (as rank_llm 0.21.0 slides them, or with a full last window), RankGPT / RankZephyr
with the oracle, a position-biased and a garbage model, passage cuts that fit the context, titles, OG vs DT, rank_llm's
quirks (`ListwiseQuirks`), the authors' settings (`paper`), the document-length options (`at_length`), the dry run's
estimate against a run's windows, and a tiny qwen2 through the hf: backend."""

import json, re
import pytest
from clir_llm.core import ClirError, Document, Query, Run
from clir_llm.listwise import (
    LAST_WINDOWS,
    ListwiseOptions,
    ListwiseQuirks,
    ListwiseReranker,
    sliding_window,
    slide,
    window_spans,
    window_starts,
)
from clir_llm.rerank import RerankerSpec, TextStats, get_reranker
from clir_llm.templates import prompt_text, prompt_tokens
from clir_llm.testing import QrelsOracle, tiny_setup
from _rerankers import CatColl, Fixed, Recording, first_run, ideal, make, tiny, top_grades  # noqa: F401  (tiny: a fixture)

METHODS = ["listwise", "listwise-rankgpt"]


def rank_llm_windows(rank_end, window_size, step, rank_start=0):
    "rank_llm 0.21.0 `ListwiseRankLLM.sliding_windows`: the (start_pos, end_pos) it hands to `permutation_pipeline`."
    out, end_pos, start_pos = [], rank_end, rank_end - window_size
    while end_pos > rank_start and start_pos + step != rank_start:
        start_pos = max(start_pos, rank_start)
        out.append((start_pos, end_pos))
        end_pos, start_pos = end_pos - step, start_pos - step
    return out


def _passages(b):
    return [line for p in b.seen for line in p.splitlines() if re.match(r"\[\d+\] ", line)]


# ---------- windows


def test_listwise_nine_windows_over_100():
    coll, run = make(2, 100)
    rr = get_reranker("listwise", QrelsOracle(coll), progress=False)
    rr.rerank(coll, run, k=100)
    assert all(d["prompts"] == 9 for d in rr.diagnostics.values()) and window_starts(100) == [
        80,
        70,
        60,
        50,
        40,
        30,
        20,
        10,
        0,
    ]
    with pytest.raises(ClirError, match="window and step must be positive"):
        window_starts(10, 0, 1)


@pytest.mark.parametrize("window,step", [(20, 10), (20, 5), (4, 2), (5, 5), (10, 3), (3, 1)])
def test_short_last_window_is_rank_llms(window, step):
    for n in range(0, 120):
        assert window_spans(n, window, step, "short") == rank_llm_windows(n, window, step), (n, window, step)
        full = window_spans(n, window, step, "full")
        assert full[-1:] in ([], [(0, min(window, n))]) and all(e - s == min(window, n) for s, e in full)
        if n == window or (n > window and (n - window) % step == 0):
            assert full == rank_llm_windows(n, window, step)
        seen = []
        sliding_window(
            "q",
            list(range(n)),
            lambda q, ids: seen.append(len(ids)) or list(range(len(ids))),
            window,
            step,
            last="short",
        )
        assert seen == [e - s for s, e in rank_llm_windows(n, window, step)]
    with pytest.raises(ClirError, match="last window must be one of full, short"):
        window_spans(5, last="half")
    assert LAST_WINDOWS == ("full", "short")


def test_slide_groups_rounds_of_several_lists():
    "Round r of a group asks every list's r-th window in one call; lists of other groups are asked apart."
    calls = []

    def rank(jobs):
        calls.append([(q, len(ids)) for q, ids in jobs])
        return [list(range(len(ids)))[::-1] for _, ids in jobs]

    orders = {"a": list(range(6)), "b": list(range(4)), "c": list(range(6))}
    out = slide(orders, rank, window=4, step=2, groups=[["a", "b"], ["c"]])
    assert calls == [[("a", 4), ("b", 4)], [("a", 4)], [("c", 4)], [("c", 4)]]
    assert out["b"] == [3, 2, 1, 0] and out["a"] == [4, 5, 1, 0, 3, 2]  # (2, 6) reversed, then (0, 4)


# ---------- the prompt, the oracle, biased and garbage models


def test_prompt_of_another_family_is_refused():
    coll, _ = make(1, 5)
    with pytest.raises(ClirError, match="ListwiseReranker needs a listwise prompt; 'prp' is a pairwise prompt"):
        get_reranker("listwise", QrelsOracle(coll), prompt="prp")
    with pytest.raises(ClirError, match="ListwiseReranker needs a listwise prompt; 'prp' is a pairwise prompt"):
        ListwiseReranker(ListwiseOptions(prompt="prp"), QrelsOracle(coll))
    assert get_reranker("listwise", QrelsOracle(coll), prompt="rankgpt").template.name == "rankgpt"
    assert [
        get_reranker(m, QrelsOracle(coll)).template.name
        for m in ("listwise", "listwise-rankzephyr", "listwise-rankgpt")
    ] == ["rankzephyr", "rankzephyr", "rankgpt"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("answer", ["Passage A", "[1] > [2] > [3]", "garbage !!"])
def test_biased_or_garbage_model_keeps_first_stage(method, answer):
    coll, run = make()
    rr = get_reranker(method, Fixed(coll, answer), progress=False)
    out = rr.rerank(coll, run, k=40)
    if answer != "[1] > [2] > [3]":
        assert all(out.docids(q) == run.docids(q) for q in run)
    else:  # a listwise model that always puts [1] > [2] > [3] first still yields a permutation
        assert all(sorted(out.docids(q)) == sorted(run.docids(q)) for q in run)
    d = rr.diagnostics["q0"]
    assert d["parse_failures"] == (0 if answer.startswith("[1]") else d["prompts"])
    assert d["repair_missing"] > 0


def test_context_shrinks_passage_cut_and_counts_truncation():
    coll, run = make(1, 20, words=200)
    rr = get_reranker("listwise", QrelsOracle(coll), context=2000, progress=False)
    rr.rerank(coll, run, k=20)
    d = rr.diagnostics["q0"]
    assert d["words_cut_to"] < 200 and d["truncated_tokens"]["de"] > 0 and d["truncated_docs"]["de"] == 20
    with pytest.raises(ClirError, match="context 64 leaves no room for the prompt"):
        get_reranker("listwise", QrelsOracle(coll), context=64, max_new_tokens=64)


def test_doc_title_changes_what_the_prompt_shows():
    coll, first = make(n_queries=1, n_docs=12)
    coll._docs = {d: Document(d, x.text, "TITLE" + d, x.lang) for d, x in coll._docs.items()}
    for title in (True, False):
        b = Recording(coll)
        rr = get_reranker("listwise", b, window=6, step=3, doc_title=title, progress=False)
        out = rr.rerank(coll, first, k=12)
        text = " ".join(b.seen)
        assert ("TITLEq0-d" in text) is title and "doc q0-d" in text
        assert top_grades(coll, out, "q0", 2) == ideal(coll, "q0", 2)  # the oracle reads passages shown either way
        assert sorted(out.docids("q0")) == sorted(first.docids("q0"))
        assert rr.name.endswith("[no-title]") is (not title) and rr.params["doc_title"] is title


def test_og_and_dt_views_on_fixture():
    from clir_llm.collections import load_collection
    from clir_llm.retrieve import docs_view

    og = load_collection("fixture", "en-sw")
    dt = docs_view(og, "dt")
    assert dt.doc_lang == "en" and docs_view(og, "og") is og
    run = Run.from_ranked({q: [d.docid for d in og.iter_docs()] for q in og.queries})
    seen = {}
    for name, c in (("og", og), ("dt", dt)):
        b = Recording(c, name=name)
        out = get_reranker("listwise", b, progress=False).rerank(c, run, k=10)
        seen[name] = b.seen
        assert all(sorted(out.docids(q)) == sorted(run.docids(q)) for q in run)
    og_text, dt_text = json.dumps(seen["og"]), json.dumps(seen["dt"])
    d0 = next(iter(og.iter_docs())).docid
    og_words, dt_words = og.get_doc(d0).text.split()[:5], dt.get_doc(d0).text.split()[:5]
    assert og_words != dt_words
    assert " ".join(og_words) in og_text and " ".join(og_words) not in dt_text
    assert " ".join(dt_words) in dt_text and " ".join(dt_words) not in og_text
    with pytest.raises(ClirError, match="ships no document translations"):
        docs_view(load_collection("fixture", "en-de"), "dt")


# ---------- rank_llm 0.21.0's quirks (ListwiseQuirks)


def test_quirks_are_their_own_options():
    assert list(ListwiseQuirks.model_fields) == [
        "last_window",
        "answer_budget",
        "query_numbers",
        "cl100k_budget",
        "ftfy",
        "rank_llm_prefix",
        "shrink",
        "count_bos",
        "position_scores",
    ]
    o = ListwiseOptions.from_flat({"last_window": "short", "window": 4, "step": 2})
    assert o.quirks == ListwiseQuirks(last_window="short") and o.identity()["last_window"] == "short"
    assert "last_window" not in ListwiseOptions().identity()  # a quirk at its default names nothing
    with pytest.raises(ClirError, match="cl100k_budget: Input should be a valid boolean"):
        ListwiseOptions.from_flat({"cl100k_budget": "yes"}, strict=True)


def test_listwise_last_window_switch_in_the_reranker():
    coll, first = tiny_setup()
    one = Run({"q0": first["q0"]})
    for last, sizes in (("full", [20, 20]), ("short", [20, 15])):
        b = Recording(coll)
        rr = get_reranker("listwise-rankgpt", b, last_window=last, progress=False)
        rr.rerank(coll, one, k=25)
        assert [len(re.findall(r"(?m)^\[\d+\] ", p)) for p in b.seen] == sizes
        assert rr.diagnostics["q0"]["prompts"] == len(sizes) and ("[last-short]" in rr.name) == (last == "short")


class TwoTokenWords(Recording):
    "Two backend tokens per word."

    def count_tokens(self, text):
        return 2 * super().count_tokens(text)

    def truncate(self, text, max_tokens):
        return " ".join(text.split()[: max_tokens // 2])


def test_listwise_cut_in_backend_tokens():
    coll, first = tiny_setup()
    shown = {}
    for cut in ("words", "tokens"):
        b = TwoTokenWords(coll)
        rr = get_reranker("listwise", b, cut=cut, max_words=64, passage_tokens=20, progress=False)
        rr.rerank(coll, first, k=30)
        shown[cut] = {len(line.split()) - 1 for line in _passages(b)}
        assert rr.params["cut"] == cut and rr.params["passage_tokens"] == 20
        assert ("[tokens20]" in rr.name) == (cut == "tokens")
    assert shown["tokens"] == {10} and min(shown["words"]) > 10  # 20 tokens = 10 two-token words; words: uncut (< 64)
    assert rr.diagnostics["q0"]["truncated_docs"]["de"] == 30


def test_at_length_cuts_passages_in_the_rerankers_tokens():
    "A document-length run: passages cut to `tokens` of the reranker's own tokenizer (cut=tokens), and to as many words."
    o = ListwiseReranker.at_length(ListwiseOptions(window=4, step=2), 16)
    assert o.flat(defaults=False) == {"window": 4, "step": 2, "cut": "tokens", "passage_tokens": 16, "max_words": 16}
    coll, first = tiny_setup()
    b = TwoTokenWords(coll)
    get_reranker("listwise", b, progress=False, **o.flat(defaults=False)).rerank(coll, first, k=20)
    assert {len(line.split()) - 1 for line in _passages(b)} <= {8}  # 16 tokens = 8 two-token words, not 16 words


def test_rank_llm_answer_budget_is_max_and_min_new_tokens_per_window_size():
    coll, first = tiny_setup()
    one = Run({"q0": first["q0"]})
    b = Recording(coll)
    rr = get_reranker("listwise", b, answer_budget="rank_llm", last_window="short", progress=False)
    rr.rerank(coll, one, k=25)
    want = [b.count_tokens(" > ".join(f"[{i}]" for i in range(1, n + 1))) for n in (20, 15)]
    assert [(c["max_new_tokens"], c.get("min_new_tokens")) for c in b.calls] == [(w, w) for w in want]
    plain = Recording(coll)
    get_reranker("listwise", plain, progress=False).rerank(coll, one, k=25)
    assert {(c["max_new_tokens"], c.get("min_new_tokens")) for c in plain.calls} == {(want[0] + 2, None)}
    assert "[answer_budget-rank_llm]" in rr.name and rr.params["answer_budget"] == "rank_llm"


def test_query_numbers_rewritten_as_rank_llm():
    coll, first = tiny_setup()
    coll.queries["q0"] = Query("q0", "was ist [3] und [12]?")

    class Seen(QrelsOracle):  # (the oracle itself would not know the rewritten query)
        def generate(self, prompts, max_new_tokens=64, **params):
            self.seen = getattr(self, "seen", []) + [prompt_text(p) for p in prompts]
            return ["[1] > [2]"] * len(prompts)

    for mode, shown in (("keep", "[3] und [12]"), ("rewrite", "(3) und (12)")):
        b = Seen(coll)
        get_reranker("listwise", b, query_numbers=mode, progress=False).rerank(coll, Run({"q0": first["q0"]}), k=5)
        assert all(f"query: was ist {shown}?" in p for p in b.seen), mode


def test_cl100k_budget_counts_like_rank_llm_and_sends_no_max_tokens(tmp_path):
    from clir_llm.llm_openai import OpenAIBackend
    from clir_llm.listwise import rank_llm_gpt_tokens, tiktoken_encoding
    from clir_llm.testing import FakeOpenAIServer

    coll, first = tiny_setup()
    one = Run({"q0": first["q0"]})
    with FakeOpenAIServer(responder=lambda m, b: "[2] > [1]") as s:
        for on in (False, True):
            api = OpenAIBackend.create("gpt-3.5-turbo", base_url=s.url, api_key="x")
            rr = get_reranker("listwise-rankgpt", api, cl100k_budget=on, context=900, progress=False)
            rr.rerank(coll, one, k=10)
        capped, uncapped = s.requests[0]["body"], s.requests[-1]["body"]
    assert "max_tokens" in capped and "max_tokens" not in uncapped
    assert rank_llm_gpt_tokens(uncapped["messages"], "gpt-3.5-turbo") <= 900 - (
        len(tiktoken_encoding().encode(" > ".join(f"[{i}]" for i in range(1, 21)))) - 1
    )
    with pytest.raises(ClirError, match="cl100k_budget is rank_llm's budgeting of API models"):
        get_reranker("listwise", QrelsOracle(coll), cl100k_budget=True, progress=False)


# ---------- the authors' settings and the dry run's estimate

LOCAL = type("LocalModel", (), {"local_model": True, "is_api": False})
API = type("ApiModel", (), {"local_model": False, "is_api": True})


def test_paper_is_rank_llms_behaviour():
    "rank_llm 0.21.0 for a row: the short last window; RankZephyr's query rewrite; its answer budget on a local model, cl100k on an API."
    P = ListwiseReranker.paper
    every = {"last_window": "short", "shrink": "rank_llm", "position_scores": True}
    zephyr = every | {"query_numbers": "rewrite", "ftfy": "prompt", "rank_llm_prefix": True}
    assert P("listwise", {}, LOCAL) == zephyr | {"answer_budget": "rank_llm", "count_bos": True}
    assert (
        P("listwise", {"prompt": "rankgpt"}, API)
        == P("listwise-rankgpt", {}, API)
        == every | {"ftfy": "passages", "cl100k_budget": True}
    )
    assert P("listwise-rankgpt", {}, None) == every | {"ftfy": "passages"} and P("listwise-rankzephyr", {}) == zephyr
    for m in ("listwise", "listwise-rankgpt"):  # the paper's flat options are options of the family
        assert RerankerSpec.parse(m, **P(m, {}, LOCAL)).options.quirks != ListwiseQuirks()
    assert ListwiseReranker.default_prompt("listwise") == "rankzephyr" and ListwiseReranker.upstream == "rank_llm"


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "n,options",
    [
        (1, {}),
        (9, {}),
        (30, {}),
        (100, {}),
        (25, dict(window=5, step=2)),
        (25, dict(window=5, step=2, last_window="short")),
        (17, dict(window=4, step=4)),
        (40, dict(cut="tokens", passage_tokens=20)),
    ],
)
def test_estimate_counts_the_windows_a_run_asks(method, n, options):
    "(f) The dry run's calls per query are the windows a run over `stats.docs` documents asks the oracle (one prompt each)."
    spec = RerankerSpec.parse(method, **options)
    stats = TextStats(
        docs=n, query_tokens=10, doc_words=[40, 80], tokens_per_word=1.3, template_tokens=lambda s: len(s.split())
    )
    est = ListwiseReranker.estimate(spec.options, method, stats)
    coll, first = tiny_setup(n_queries=2, n_docs=n)
    rr = spec.build(QrelsOracle(coll), progress=False)
    rr.rerank(coll, first, k=n)
    o = spec.options
    assert est.calls == len(window_spans(n, o.window, o.step, o.quirks.last_window))
    assert all(d["prompts"] == est.calls for d in rr.diagnostics.values())
    assert 0 < est.prompt_tokens <= o.context and est.output_tokens > 0 and est.prefix_tokens > 0


# ---------- a tiny qwen2 through hf:


def test_listwise_on_tiny_qwen2_fits_context_exactly(tiny):
    from clir_llm.llm import get_backend

    coll = CatColl(8)
    run = first_run(coll)
    b = get_backend(f"hf:{tiny['qwen2']}")
    rr = get_reranker("listwise", b, window=4, step=2, context=420, progress=False)
    texts = [d.text * 6 for d in coll.get_docs(run.docids("q1", 4))]
    prompt, n, w = rr.build_prompt(coll.queries["q1"].text, texts)
    assert n == b.count_tokens(b.render_text(prompt)) == prompt_tokens(b, prompt) and n <= 420 - rr.max_new_tokens
    assert w < 300
    out = rr.rerank(coll, run, k=8)
    assert all(sorted(out.docids(q)) == sorted(run.docids(q)) for q in run)
    assert rr.diagnostics["q1"]["prompts"] == 3  # windows start at 4, 2, 0


def test_listwise_prompt_stream_shares_the_instruction_and_query_in_a_prefix_cache():
    "Issue 30 item 2: on the recorded window prompts a block-hash prefix cache skips the instruction and query of every window but a query's first (windows share nothing else)."
    from clir_llm.prefix_cache import prefix_hit_share

    coll, first = make(n_queries=2, n_docs=20, words=40)
    b = Recording(coll)
    get_reranker("listwise", b, window=6, step=3, progress=False).rerank(coll, first, k=20)
    stream = [[ord(c) for c in p] for p in b.seen]  # characters as tokens
    head = len(b.seen[0].split("[1]")[0])  # the text before the first passage
    per_query = len(stream) / 2
    share = prefix_hit_share(stream, 1e9, block=4)
    assert 0.8 * head * (per_query - 1) / per_query < share * sum(map(len, stream)) / len(stream) < 2 * head


# ---------- issue 27 C, F: rank_llm 0.21.0's inputs, token for token, with the quirks on
from pathlib import Path

FX = Path(__file__).parent / "fixtures" / "tokenizers"
ZEPHYR_SYSTEM = "You are RankLLM, an intelligent assistant that can rank passages based on their relevancy to the query"
RANK_LLM_QUIRKS = dict(
    last_window="short",
    query_numbers="rewrite",
    answer_budget="rank_llm",
    ftfy="prompt",
    rank_llm_prefix=True,
    shrink="rank_llm",
    count_bos=True,
    position_scores=True,
)
FTFY_PASSAGES = [
    "He said \u201cno\u201d [3] twice.",
    "caf\u00c3\u00a9 au lait  &amp; more",
    "",
    " ".join(f"word{i}" for i in range(700)),
    "plain [12] text with\ttabs\nand lines",
]


def rank_llm_zephyr(tok, query, passages, context=4096):
    "rank_llm 0.21.0 RankListwiseOSLLM.create_prompt (FastChat path, ZephyrReranker's settings), line for line."
    from ftfy import fix_text

    rn = lambda s: re.sub(r"\[(\d+)\]", r"(\1)", s)
    query, num = rn(query), len(passages)
    budget = context - (len(tok.encode(" > ".join(f"[{i + 1}]" for i in range(num)))) - 1)
    max_length = 300 * (20 / num)
    while True:
        ctx = (
            f"I will provide you with {num} passages, each indicated by {' a numerical'} identifier []. Rank the passages "
            f"based on their relevance to the search query: {query}.\n\n"
        )
        for r, p in enumerate(passages, 1):
            ctx += f"[{r}] {rn(rn(' '.join(fix_text(p.strip()).split()[: int(max_length)])))}\n"
        ctx += (
            f"Search Query: {query}.\nRank the {num} passages above based on their relevance to the search query. All the "
            "passages should be included and listed using identifiers, in descending order of relevance. The output format "
            "should be [] > [], e.g., [2] > [1], Only respond with the ranking results, do not say any word or explain."
        )
        prompt = fix_text(f"<|system|>\n{ZEPHYR_SYSTEM}</s>\n<|user|>\n{ctx}</s>\n<|assistant|>\n")
        n = len(tok.encode(prompt))
        if n <= budget:
            return prompt, n, int(max_length)
        max_length -= max(1, (n - budget) // (num * 4))


class _Answers:
    "A transformers model double: records what `generate` is handed, answers one EOS per row."

    def __init__(self, config):
        import torch

        self.config, self.calls, self.device, self.dtype = config, [], torch.device("cpu"), torch.float32

    def generate(self, input_ids, generation_config=None, **kw):
        import torch

        self.calls.append(input_ids.tolist())
        return torch.cat([input_ids, torch.full((len(input_ids), 1), 2)], 1)


def zephyr_backend():
    from transformers import AutoConfig
    from clir_llm.llm_hf import HFBackend

    return HFBackend.create(str(FX / "zephyr"), hf_model=_Answers(AutoConfig.from_pretrained(FX / "zephyr")))


@pytest.mark.parametrize("context", [4096, 900, 600])
def test_rankzephyr_inputs_are_rank_llms_with_the_quirks(context):
    "ftfy over passages and prompt, the two spaces, rank_llm's shrinking cut and its BOS-counted length: the same ids."
    from transformers import AutoTokenizer

    tok, b = AutoTokenizer.from_pretrained(FX / "zephyr"), zephyr_backend()
    query = "wer ist \u201cder\u201d [2] Kandidat?"
    want, n, w = rank_llm_zephyr(tok, query, FTFY_PASSAGES, context)
    rr = get_reranker("listwise", b, context=context, progress=False, **RANK_LLM_QUIRKS)
    prompt, got_n, got_w = rr.build_prompt(query, FTFY_PASSAGES)
    assert b._ids(prompt) == tok(want)["input_ids"] and (got_n, got_w) == (n, w)
    plain, _, _ = get_reranker("listwise", b, context=context, progress=False).build_prompt(query, FTFY_PASSAGES)
    assert b._ids(plain) != b._ids(prompt)  # the method as published differs: without the quirks other ids


def test_rank_llm_shrink_stops_at_the_first_fit():
    "rank_llm shrinks by max(1, overflow // 80) words and stops at the first fit: fewer words than the largest fit."
    b = zephyr_backend()
    long = [" ".join(["zebra"] * 200)] * 20  # 6 tokens a word in the fixture tokenizer: rank_llm's steps overshoot
    cuts = {
        s: get_reranker("listwise", b, context=3000, shrink=s, progress=False).build_prompt("q", long)[2]
        for s in ("search", "rank_llm")
    }
    assert cuts == {"search": 21, "rank_llm": 16}
    with pytest.raises(ClirError, match="has no rank_llm_prefix"):
        get_reranker("listwise-rankgpt", b, rank_llm_prefix=True, progress=False)


def test_position_scores_keep_first_stage_scores_by_rank():
    "rank_llm keeps the first-stage scores by position: tied scores re-sort by docid when the run is read (evaluation)."
    coll, first = make(1, 6)
    ids = first.docids("q0")
    # two ties: ranks 1-2, 3-6
    tied = Run({"q0": {d: (2.0 if i < 2 else 1.0) for i, d in enumerate(ids)}}, name="bm25")
    rev = Fixed(coll, " > ".join(f"[{i}]" for i in range(6, 0, -1)))  # reverses the one window
    plain = get_reranker("listwise-rankgpt", rev, window=6, step=3, progress=False).rerank(coll, tied, k=6)
    quirk = get_reranker("listwise-rankgpt", rev, window=6, step=3, position_scores=True, progress=False).rerank(
        coll, tied, k=6
    )
    order = tied.docids("q0")[::-1]
    assert plain.docids("q0") == order and sorted(quirk["q0"].values(), reverse=True) == [2.0, 2.0, 1.0, 1.0, 1.0, 1.0]
    assert quirk.docids("q0") == sorted(order[:2], reverse=True) + sorted(order[2:], reverse=True) != order
