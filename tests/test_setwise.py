"""clir_llm.setwise: llm-rankers' setwise heapsort and bubblesort (SetwiseLlmRanker, re-implemented here line for line
with the model call replaced by a plain judge) in the sets asked and the rankings; the reranker's prompts, counts and
token budgets; label parsing; the dry run's simulated estimate against runs; an encoder-decoder model through hf:."""

import random, re
import pytest
from clir_llm.core import ClirError, Run
from clir_llm.rerank import RerankerSpec, TextStats, get_reranker
from clir_llm.setwise import (
    LABELS,
    SETWISE_SORTS,
    SetwiseOptions,
    SetwiseReranker,
    parse_label,
    run_setwise,
    setwise_judges,
)
from clir_llm.templates import prompt_text, squash
from clir_llm.testing import QrelsOracle, tiny_setup
from _rerankers import tiny  # noqa: F401  (a fixture)


def llmrankers_setwise(method, docids, k, c, compare):
    "llmrankers/setwise.py SetwiseLlmRanker.rerank: heapSort/heapify or the bubblesort loop; `compare(docs) -> label`."
    CHARACTERS, asked, ranking = LABELS, [], list(docids)

    def cmp(docs):
        asked.append(list(docs))
        return compare(list(docs))

    def heapify(arr, n, i):
        if c * i + 1 < n:
            docs = [arr[i]] + arr[c * i + 1 : min((c * (i + 1) + 1), n)]
            inds = [i] + list(range(c * i + 1, min((c * (i + 1) + 1), n)))
            output = cmp(docs)
            try:
                best_ind = CHARACTERS.index(output)
            except ValueError:
                best_ind = 0
            try:
                largest = inds[best_ind]
            except IndexError:
                largest = i
            if largest != i:
                arr[i], arr[largest] = arr[largest], arr[i]
                heapify(arr, n, largest)

    if method == "heapsort":
        n, ranked = len(ranking), 0
        for i in range(n // c, -1, -1):
            heapify(ranking, n, i)
        for i in range(n - 1, 0, -1):
            ranking[i], ranking[0] = ranking[0], ranking[i]
            ranked += 1
            if ranked == k:
                break
            heapify(ranking, i, 0)
        ranking = list(reversed(ranking))
    else:
        last_start = len(ranking) - (c + 1)
        for i in range(k):
            start_ind, end_ind, is_change = last_start, last_start + (c + 1), False
            while True:
                if start_ind < i:
                    start_ind = i
                output = cmp(ranking[start_ind:end_ind])
                try:
                    best_ind = CHARACTERS.index(output)
                except ValueError:
                    best_ind = 0
                if best_ind != 0:
                    ranking[start_ind], ranking[start_ind + best_ind] = (
                        ranking[start_ind + best_ind],
                        ranking[start_ind],
                    )
                    if not is_change:
                        is_change = True
                        if last_start != len(ranking) - (c + 1) and best_ind == len(ranking[start_ind:end_ind]) - 1:
                            last_start += len(ranking[start_ind:end_ind]) - 1
                if start_ind == i:
                    break
                if not is_change:
                    last_start -= c
                start_ind -= c
                end_ind -= c
    top = ranking[:k]
    return top + [d for d in docids if d not in top], asked


class SetJudge(QrelsOracle):
    "A backend answering setwise prompts with a plain judge of the docids shown (`judge(ids) -> index`)."

    def __init__(self, coll, judge, by_text):
        super().__init__(coll, name="judge")
        self.judge, self.by_text = judge, by_text

    def generate(self, prompts, max_new_tokens=64, **kw):
        self.usage.calls += 1
        out = []
        for p in prompts:
            ids = [
                self.by_text[t]
                for t in re.findall(
                    r'Passage [A-W]: "(.*?)"(?=\n\nPassage [A-W]: "|\n\nOutput only)', prompt_text(p), re.S
                )
            ]
            out.append(LABELS[self.judge(ids)])
        return out


@pytest.fixture(scope="module")
def small():
    coll, first = tiny_setup(n_queries=2, n_docs=30, seed=5)
    by_text = {squash(coll.get_doc(d).full_text): d for q in first for d in first.docids(q)}
    return coll, first, by_text


# ---------- the sorts against llm-rankers


@pytest.mark.parametrize("method", list(SETWISE_SORTS))
@pytest.mark.parametrize("judge_name", ["oracle", "random", "first", "last"])
def test_setwise_generators_equal_llmrankers(method, judge_name):
    for n in list(range(0, 12)) + [20, 37]:
        for k in (1, 3, 10):
            for c in (1, 2, 3, 4):
                docids = [f"d{i}" for i in range(n)]
                grades = {d: random.Random(f"{d}{n}").choice([0, 0, 1, 2, 3]) for d in docids}
                judge = setwise_judges(random.Random(n * 100 + k * 10 + c), grades)[judge_name]
                asked = []
                ours = run_setwise(SETWISE_SORTS[method](docids, k, c), lambda ids: asked.append(ids) or judge(ids))
                ref, ref_asked = llmrankers_setwise(method, docids, k, c, lambda ids: LABELS[judge(ids)] if ids else "")
                assert (ours, asked) == (ref, ref_asked), (n, k, c)


@pytest.mark.parametrize("method", list(SETWISE_SORTS))
def test_num_child_bounds(method):
    with pytest.raises(ClirError, match="num_child must be between 1 and 22"):
        next(SETWISE_SORTS[method](list("abc"), 1, 0))
    with pytest.raises(ClirError, match="num_child must be between 1 and 22"):
        next(SETWISE_SORTS[method](list("abc"), 1, 23))
    with pytest.raises(ClirError, match="num_child: Input should be greater than or equal to 1"):
        RerankerSpec.parse(f"setwise-{method}", num_child=0)


@pytest.mark.parametrize("method", list(SETWISE_SORTS))
@pytest.mark.parametrize("judge_name", ["oracle", "random", "first", "last"])
def test_setwise_reranker_calls_and_ranking_equal_llmrankers(small, method, judge_name):
    coll, first, by_text = small
    for c in (2, 3):
        grades = {d: coll.qrels[q].get(d, 0) for q in first for d in first.docids(q)}
        judge = setwise_judges(random.Random(11), grades)[judge_name]
        b = SetJudge(coll, judge, by_text)
        rr = get_reranker(f"setwise-{method}", b, k=10, num_child=c, progress=False).rerank(coll, first, k=30)
        for q in first:  # the judge answers a set the same each time, so the reference sees the same answers
            ref, ref_asked = llmrankers_setwise(
                method, first.docids(q, 30), 10, c, lambda ids: LABELS[judge(ids)] if ids else ""
            )
            assert rr.docids(q, 30) == ref
    # counts: the reranker's `sets` is llm-rankers' total_compare; prompts are the sets of two or more documents
    rk = get_reranker(f"setwise-{method}", SetJudge(coll, judge, by_text), num_child=3, progress=False)
    rk.rerank(coll, first, k=30)
    for q in first:
        _, ref_asked = llmrankers_setwise(
            method, first.docids(q, 30), 10, 3, lambda ids: LABELS[judge(ids)] if ids else ""
        )
        assert rk.diagnostics[q]["sets"] == len(ref_asked)
        assert rk.diagnostics[q]["prompts"] == sum(len(s) > 1 for s in ref_asked)


@pytest.mark.parametrize(
    "encoder_decoder,chat,prefill,budget", [(False, True, True, 1), (True, False, True, 2), (False, True, False, 4)]
)
def test_setwise_generation_token_budget_follows_llmrankers(small, encoder_decoder, chat, prefill, budget):
    """llm-rankers' SetwiseLlmRanker.compare generates 1 token after the chat prompt + " Passage:" of a decoder-only
    model and 2 for T5; a 2-token budget on a chat model read " B" + "ES" as " BES", which no label matches."""
    coll, first, by_text = small
    seen = []

    class Chat(SetJudge):
        is_encoder_decoder, is_chat, supports_prefill = encoder_decoder, chat, prefill

        def generate(self, prompts, max_new_tokens=64, **kw):
            seen.append(max_new_tokens)
            return super().generate(prompts, max_new_tokens, **kw)

    b = Chat(coll, lambda ids: 0, by_text)
    get_reranker("setwise-heapsort", b, k=1, num_child=3, progress=False).rerank(coll, first, k=8)
    assert seen and set(seen) == {budget}


def test_parse_label():
    assert [parse_label(a, 4) for a in ("C", " Passage b", "Passage: A", "passageD", "E", "Apple", "", "Passage")] == [
        2,
        1,
        0,
        3,
        None,
        None,
        None,
        None,
    ]
    assert parse_label("W", 30) == 22 and parse_label("X", 30) is None  # 23 labels, A..W


def test_likelihood_reads_the_labels_after_the_prefix(small):
    "Likelihood scoring: one score call per set size, candidates ' A', ' B', ... after the ' Passage:' prefill."
    coll, first, _ = small
    cands = []

    class Spy(QrelsOracle):
        def score(self, prompts, candidates, **kw):
            cands.append(tuple(candidates))
            return super().score(prompts, candidates, **kw)

    rr = get_reranker("setwise-bubblesort", Spy(coll), scoring="likelihood", k=2, progress=False)
    out = rr.rerank(coll, first, k=30)
    assert (
        set(cands) <= {tuple(" " + LABELS[i] for i in range(n)) for n in (2, 3, 4)}
        and (" A", " B", " C", " D") in cands
    )
    assert all(sorted(out.docids(q)) == sorted(first.docids(q)) for q in first)
    assert rr.name == "setwise-bubblesort2c3-lik[oracle:qrels]" and rr.diagnostics["q0"]["parse_failures"] == 0


def test_options_and_paper():
    assert list(SetwiseOptions.flat_fields())[4:] == ["k", "num_child", "scoring", "query_tokens", "passage_tokens"]
    assert (
        SetwiseReranker.paper("setwise-heapsort", {}) == {}
        and SetwiseReranker.default_prompt("setwise-bubblesort") == "setwise"
    )
    assert SetwiseReranker.at_length(SetwiseOptions(), 32).flat(defaults=False) == {"passage_tokens": 32}
    coll, _ = tiny_setup(1, 3)
    with pytest.raises(ClirError, match="SetwiseReranker needs a setwise prompt; 'prp' is a pairwise prompt"):
        get_reranker("setwise-heapsort", QrelsOracle(coll), prompt="prp")


# ---------- (f) the dry run's estimate: the simulated mean, within the range of runs


@pytest.mark.parametrize("method", ["setwise-heapsort", "setwise-bubblesort"])
@pytest.mark.parametrize(
    "n,options", [(7, {}), (23, {}), (30, {}), (30, dict(k=3)), (30, dict(num_child=2)), (12, dict(k=1, num_child=5))]
)
def test_estimate_is_within_the_prompts_of_runs(method, n, options):
    spec = RerankerSpec.parse(method, **options)
    o = spec.options
    stats = TextStats(
        docs=n, query_tokens=10, doc_words=[40, 80], tokens_per_word=1.3, template_tokens=lambda s: len(s.split())
    )
    est = SetwiseReranker.estimate(o, method, stats)
    assert (est.calls, None) == (SetwiseReranker.simulate(method, n, o.k, o.num_child)[0], None)
    prompts = []
    for seed in range(6):
        coll, first = tiny_setup(n_queries=3, n_docs=n, seed=seed)
        rr = spec.build(QrelsOracle(coll), progress=False)
        rr.rerank(coll, first, k=n)
        prompts += [d["prompts"] for d in rr.diagnostics.values()]
    assert min(prompts) <= est.calls <= max(prompts), (min(prompts), est.calls, max(prompts))
    assert est.prompt_tokens > 0 and est.output_tokens == 1.0


# ---------- an encoder-decoder model through hf:


@pytest.mark.slow
@pytest.mark.parametrize("method,scoring", [("setwise-heapsort", "likelihood"), ("setwise-bubblesort", "generation")])
def test_encoder_decoder_backend(tiny, small, method, scoring):
    from clir_llm.llm import get_backend

    coll, first, _ = small
    b = get_backend(f"hf:{tiny['mt5']}")
    rr = get_reranker(method, b, scoring=scoring, k=2, progress=False)
    one = Run({q: first[q] for q in list(first)[:1]})
    out = rr.rerank(coll, one, k=5)
    assert all(sorted(out.docids(q)) == sorted(one.docids(q)) for q in one) and b.usage.calls > 0
