"""clir_llm.singletoken: FIRST as rank_llm runs it (each window ranked by its identifiers' first-token logits, one
score call, no generation), against rank_llm's sliding windows and `_evaluate_logits` re-implemented here; the
templates and windows it refuses; the dry run's estimate (the listwise windows) against a run."""

import random, re
import pytest
from clir_llm.core import ClirError, Run
from clir_llm.listwise import ListwiseOptions, window_spans
from clir_llm.rerank import RerankerSpec, TextStats, get_reranker
from clir_llm.singletoken import SingleTokenListwiseReranker, first_token_order
from clir_llm.templates import ALPHA, prompt_text, squash
from clir_llm.testing import QrelsOracle, tiny_setup


def rank_llm_first(docids, logprob, window=20, step=10):
    "rank_llm: ListwiseRankLLM.sliding_windows; per window _evaluate_logits (use_alpha) then receive_permutation."
    order, end, start, windows = list(docids), len(docids), len(docids) - window, []
    while end > 0 and start + step != 0:
        start = max(start, 0)
        ids = order[start:end]
        windows.append(ids)
        evaluations = {}
        for i, d in enumerate(ids):
            idx = ord("A") + i
            if logprob(d) > evaluations.get(idx, float("-inf")):
                evaluations[idx] = logprob(d)
        result = ">".join(f"[{chr(x)}]" for x, _ in sorted(evaluations.items(), key=lambda x: -x[1]))
        resp = list(dict.fromkeys(ord(ch) - ord("A") for ch in re.findall(r"\[([A-Z])\]", result)))
        perm = resp + [i for i in range(len(ids)) if i not in resp]
        order[start:end] = [ids[i] for i in perm]
        end, start = end - step, start - step
    return order, windows


@pytest.fixture(scope="module")
def small():
    coll, first = tiny_setup(n_queries=2, n_docs=30, seed=5)
    by_text = {squash(coll.get_doc(d).full_text): d for q in first for d in first.docids(q)}
    return coll, first, by_text


@pytest.mark.parametrize("scorer", ["random", "constant", "grades"])
@pytest.mark.parametrize("n,window,step", [(30, 20, 10), (25, 20, 10), (17, 5, 3), (9, 4, 2)])
def test_first_equals_rank_llm(small, scorer, n, window, step):
    coll, first, by_text = small
    q = list(first)[0]
    rng = random.Random(n * window)
    value = {
        "random": {d: rng.choice([-1.0, -2.0, rng.uniform(-9, 0)]) for d in first.docids(q)},
        "constant": {d: -1.0 for d in first.docids(q)},
        "grades": {d: float(coll.qrels[q].get(d, 0)) for d in first.docids(q)},
    }[scorer]

    class Logits(QrelsOracle):
        def __init__(self):
            super().__init__(coll, name="logits")
            self.windows = []

        def score(self, prompts, candidates, **kw):
            self.usage.calls += 1
            out = []
            for p in prompts:
                ids = [by_text[t] for t in re.findall(r"(?m)^\[[A-Z]\] (.+)$", prompt_text(p))]
                self.windows.append(ids)
                out.append([value[d] for d in ids])
            assert candidates == ALPHA[: len(out[0])]
            return out

    b = Logits()
    fr = get_reranker(
        RerankerSpec.parse("listwise-first", window=window, step=step, last_window="short"), b, progress=False
    )
    rr = fr.rerank(coll, Run({q: first[q]}), k=n)
    ref, ref_windows = rank_llm_first(first.docids(q, n), value.get, window, step)
    assert rr.docids(q, n) == ref and b.windows == ref_windows
    assert fr.diagnostics[q]["prompts"] == len(ref_windows) and fr.diagnostics[q]["tokens_out"] == 0
    assert first_token_order([-1.0, -0.5, -1.0]) == [1, 0, 2]


def test_first_is_a_listwise_reranker_of_its_own_method(small):
    coll, first, _ = small
    fr = get_reranker("listwise-first", QrelsOracle(coll), window=5, step=5, progress=False)
    assert isinstance(fr.options, ListwiseOptions) and fr.family == "listwise" and fr.template.name == "first"
    assert (
        fr.name == "first-w5s5[oracle:qrels]"
        and fr.params["scoring"] == "first-token"
        and fr.params["method"] == "listwise-first"
    )
    assert SingleTokenListwiseReranker.default_prompt("listwise-first") == "first"
    out = fr.rerank(coll, first, k=30)
    assert all(sorted(out.docids(q)) == sorted(first.docids(q)) for q in first)


def test_refuses_numbered_templates_and_windows_beyond_z(small):
    coll, _, _ = small
    with pytest.raises(ClirError, match="template 'rankzephyr': single-token ranking needs alphabetical identifiers"):
        get_reranker("listwise-first", QrelsOracle(coll), prompt="rankzephyr")
    with pytest.raises(ClirError, match="window 27: single-token ranking has 26 identifiers"):
        get_reranker("listwise-first", QrelsOracle(coll), window=27)

    class NoPrefill(QrelsOracle):
        supports_prefill = False
        scores_sequences = False

    with pytest.raises(
        ClirError, match="reranker 'listwise-first' reads likelihoods, .* cannot continue an assistant turn"
    ):
        get_reranker("listwise-first", NoPrefill(coll))


@pytest.mark.parametrize(
    "n,options", [(9, dict(window=5, step=5)), (30, {}), (25, dict(window=5, step=2, last_window="short"))]
)
def test_estimate_counts_the_windows_a_run_asks(n, options):
    "(f) FIRST's dry run: the listwise family's windows, one prompt (a score call, no answer) each."
    spec = RerankerSpec.parse("listwise-first", **options)
    stats = TextStats(
        docs=n, query_tokens=10, doc_words=[40, 80], tokens_per_word=1.3, template_tokens=lambda s: len(s.split())
    )
    est = SingleTokenListwiseReranker.estimate(spec.options, "listwise-first", stats)
    coll, first = tiny_setup(n_queries=2, n_docs=n)
    rr = spec.build(QrelsOracle(coll), progress=False)
    rr.rerank(coll, first, k=n)
    o = spec.options
    assert est.calls == len(window_spans(n, o.window, o.step, o.quirks.last_window))
    assert all(d["prompts"] == est.calls for d in rr.diagnostics.values())


def test_estimate_counts_no_answer_tokens():
    """BUG (singletoken inherits listwise's `estimate`): FIRST scores the identifiers' first-token logits in one forward
    pass and generates nothing (a run's tokens_out is 0), but the dry run counts RankZephyr's answer, ~3 tokens a passage."""
    stats = TextStats(
        docs=30, query_tokens=10, doc_words=[40, 80], tokens_per_word=1.3, template_tokens=lambda s: len(s.split())
    )
    coll, first = tiny_setup(n_queries=2, n_docs=30)
    rr = get_reranker("listwise-first", QrelsOracle(coll), progress=False)
    rr.rerank(coll, first, k=30)
    assert all(d["tokens_out"] == 0 for d in rr.diagnostics.values())
    est = SingleTokenListwiseReranker.estimate(rr.options, "listwise-first", stats)
    assert est.output_tokens == 0.0
