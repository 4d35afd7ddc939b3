"""clir_llm.pairwise: PRP's sorts driven by a judge (allpair, heapsort, bubblesort) against exact, random, intransitive
and constant judges and against llm-rankers 0.0.2's heapsort; the worst-case bound (`max_comparisons`) a run never
exceeds; the reranker with the oracle, a position-biased and a garbage model; heapsort's tie quirk (`HeapsortQuirks`);
the dry run's estimate against a run's prompts; tiny qwen2 and mt5 models through the hf: backend."""

import json, random
import pytest
from clir_llm.core import ClirError, Document, Run
from clir_llm.pairwise import (
    HEAPSORT_TIES,
    SORTS,
    HeapsortOptions,
    HeapsortQuirks,
    PairJudge,
    PairwiseOptions,
    PairwiseReranker,
    heapsort,
    max_comparisons,
    run_sort,
    simulate_comparisons,
    sort_with,
)
from clir_llm.rerank import RerankerSpec, TextStats, get_reranker
from clir_llm.testing import QrelsOracle, tiny_setup
from _rerankers import CatColl, Fixed, Recording, first_run, ideal, make, tiny, top_grades  # noqa: F401  (tiny: a fixture)
import _reliability as R

METHODS = ["pairwise-allpair", "pairwise-heapsort", "pairwise-bubblesort"]


# ---------- the sorts with an exact, a random and a constant judge


@pytest.mark.parametrize("name", list(SORTS))
def test_sorts_find_true_top_k_with_exact_judge(name):
    rng = random.Random(name)
    for n in (1, 2, 3, 10, 37):
        vals = {f"d{i}": rng.randrange(6) for i in range(n)}  # many ties
        docs = list(vals)
        judge = lambda ps: [1.0 if vals[a] > vals[b] else 0.0 if vals[a] < vals[b] else 0.5 for a, b in ps]
        ranked = run_sort(SORTS[name](docs, k=5), judge)
        assert sorted(ranked) == sorted(docs)
        assert [vals[d] for d in ranked[:5]] == sorted(vals.values(), reverse=True)[:5]


@pytest.mark.parametrize("name", list(SORTS))
def test_sorts_return_permutation_with_intransitive_judge(name):
    rng = random.Random(1)
    docs = [f"d{i}" for i in range(30)]
    judge = lambda ps: [rng.choice([0.0, 0.5, 1.0]) for _ in ps]
    for _ in range(5):
        ranked = run_sort(SORTS[name](docs, k=10), judge)
        assert sorted(ranked) == sorted(docs)


def test_bubblesort_945_comparisons_heapsort_fewer():
    docs = [f"d{i}" for i in range(100)]
    counts = {}
    for name in ("bubblesort", "heapsort"):
        n = [0]

        def judge(ps):
            n[0] += len(ps)
            return [1.0 if int(a[1:]) % 17 > int(b[1:]) % 17 else 0.0 for a, b in ps]

        run_sort(SORTS[name](docs, k=10), judge)
        counts[name] = n[0]
    # the best documents (value 16) sit near the bottom, so every pass swaps down there: all 99 + ... + 90 pairs
    assert counts["bubblesort"] == 945 and counts["heapsort"] < 945 / 2


def _bubble(docs, value, k=10):
    asked = []
    ranked = run_sort(SORTS["bubblesort"](docs, k=k), lambda ps: asked.extend(ps) or [value(a, b) for a, b in ps])
    return ranked, asked


def test_bubblesort_skips_pairs_known_not_to_swap_as_llm_rankers():
    "llm-rankers' bubblesort starts each pass below the lowest swap of the last one and stops after a pass without swaps."
    docs = [f"d{i:02d}" for i in range(100)]  # d00 best
    better = lambda a, b: 1.0 if a < b else 0.0
    ranked, asked = _bubble(docs, better)
    assert ranked == docs and len(asked) == 99  # one pass, no swap, done (the textbook sort asks 945)
    ranked, asked = _bubble(docs[1:51] + ["d00"] + docs[51:], better)
    # pass 1: 49 pairs below d00 (no swap) + 50 carrying it to the top; pass 2: from index 51 up, no swap; stop
    assert ranked == docs and len(asked) == 99 + 50
    assert asked[99] == (docs[51], docs[50])  # pass 2 starts just below pass 1's lowest swap


@pytest.mark.parametrize("seed", range(20))
def test_bubblesort_same_ranking_as_textbook_bubblesort(seed):
    rng = random.Random(seed)
    n, k = rng.choice([2, 7, 30, 60]), rng.choice([1, 5, 10])
    docs, verdict = [f"d{i}" for i in range(n)], {}

    def value(a, b):  # deterministic, possibly intransitive, with ties
        if (a, b) not in verdict:
            verdict[a, b] = rng.choice([0.0, 0.5, 1.0])
            verdict[b, a] = 1.0 - verdict[a, b]
        return verdict[a, b]

    ranked, asked = _bubble(docs, value, k)
    r = list(docs)
    for i in range(min(k, n)):
        for j in range(n - 1, i, -1):
            if value(r[j], r[j - 1]) == 1.0:
                r[j - 1], r[j] = r[j], r[j - 1]
    assert ranked == r[:k] + [d for d in docs if d not in r[:k]]
    assert len(asked) <= sum(n - 1 - i for i in range(min(k, n)))


def test_pair_judge_asks_both_orders_once_and_counts():
    asked = []
    j = PairJudge(lambda ps: asked.extend(ps) or ["A" if a < b else "B" for a, b in ps])
    assert j([("a", "b"), ("b", "a"), ("c", "a")]) == [1.0, 0.0, 0.0]
    assert j([("a", "b")]) == [1.0] and asked == [("a", "b"), ("b", "a"), ("c", "a"), ("a", "c")]
    assert j.stats == {
        "comparisons": 4,
        "comparisons_asked": 2,
        "comparison_cache_hits": 2,
        "ties": 0,
        "parse_failures": 0,
    }
    assert sort_with("bubblesort", ["x", "y", "z"], lambda q, a, b: "A" if a > b else "B", k=3) == ["z", "y", "x"]
    with pytest.raises(ClirError, match="unknown sort 'quicksort'"):
        sort_with("quicksort", ["x"], lambda q, a, b: "A")


# ---------- (g) the worst case the dry run prints is the sort's


def test_heapsort_worst_case_is_300_for_the_top_10_of_100():
    "The first release's bound was 308 (and the plan printed 300): build 197 + 9 sift-downs after pops (the 10th pop needs none)."
    assert max_comparisons("heapsort", 100, 10) == 300
    assert max_comparisons("bubblesort", 100, 10) == 945 and max_comparisons("allpair", 100, 10) == 4950
    assert [max_comparisons("heapsort", n, 10) for n in (0, 1, 2, 3)] == [0, 0, 1, 3]
    with pytest.raises(ClirError, match="unknown sort 'quicksort'"):
        max_comparisons("quicksort", 10)


@pytest.mark.parametrize("ties", HEAPSORT_TIES)
def test_heapsort_never_asks_more_than_its_worst_case(ties):
    "Random (intransitive, unreadable) judges, 300 seeds, n from 1 to 60: the comparisons requested stay within the bound, which is reached."
    reached = 0
    for seed in range(300):
        rng = random.Random(seed)
        n = 1 + seed % 60
        k = rng.choice([1, 2, 5, 10, 30, n])
        memo = {}
        j = PairJudge(lambda ps: [memo.setdefault((a, b), rng.choice(["A", "B", None])) for a, b in ps], cache=False)
        run_sort(heapsort(list(range(n)), k=k, ties=ties), j)
        bound = max_comparisons("heapsort", n, k)
        assert j.stats["comparisons"] <= bound, (seed, n, k)
        reached += j.stats["comparisons"] == bound
    assert reached > 0


@pytest.mark.parametrize("sort", list(SORTS))
def test_no_sort_exceeds_its_bound_under_random_judges(sort):
    for seed in range(100):
        rng = random.Random(seed)
        n, k = rng.randint(1, 40), rng.choice([1, 3, 10])
        j = PairJudge(lambda ps: [rng.choice(["A", "B", None]) for _ in ps], cache=False)
        run_sort(SORTS[sort](list(range(n)), k=k), j)
        assert j.stats["comparisons"] <= max_comparisons(sort, n, k), (sort, n, k)
    req, asked = simulate_comparisons(sort, 30, 5)
    assert asked <= req <= max_comparisons(sort, 30, 5)


# ---------- the reranker with the oracle, biased and garbage models


def test_prompt_of_another_family_is_refused():
    coll, _ = make(1, 5)
    with pytest.raises(ClirError, match="PairwiseReranker needs a pairwise prompt; 'rankgpt' is a listwise prompt"):
        get_reranker("pairwise-allpair", QrelsOracle(coll), prompt="rankgpt")
    with pytest.raises(ClirError, match="PairwiseReranker needs a pairwise prompt; 'rankgpt' is a listwise prompt"):
        PairwiseReranker(PairwiseOptions(prompt="rankgpt"), QrelsOracle(coll))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("answer", ["Passage A", "[1] > [2] > [3]", "garbage !!"])
def test_biased_or_garbage_model_keeps_first_stage(method, answer):
    coll, run = make()
    rr = get_reranker(method, Fixed(coll, answer), progress=False)
    out = rr.rerank(coll, run, k=40)
    assert all(out.docids(q) == run.docids(q) for q in run)
    d = rr.diagnostics["q0"]
    assert d["ties"] == d["comparisons_asked"] > 0
    assert d["parse_failures"] == (0 if answer == "Passage A" else 2 * d["comparisons_asked"])


def test_likelihood_scoring_with_position_bias_ties():
    coll, run = make(2, 20)
    rr = get_reranker("pairwise-allpair", Fixed(coll, "x"), scoring="likelihood", progress=False)
    out = rr.rerank(coll, run, k=20)
    assert all(out.docids(q) == run.docids(q) for q in run) and rr.diagnostics["q0"]["parse_failures"] == 0


def test_likelihood_needs_logprobs():
    coll, _ = make(1, 5)
    b = QrelsOracle(coll)
    b.supports_logprobs = False
    with pytest.raises(ClirError, match="cannot score continuations"):
        get_reranker("pairwise-allpair", b, scoring="likelihood")
    with pytest.raises(ClirError, match="cannot score continuations"):
        PairwiseReranker(PairwiseOptions(scoring="likelihood"), b)


def test_passage_cut_counts_truncation():
    coll, run = make(1, 20, words=200)
    pw = get_reranker("pairwise-heapsort", QrelsOracle(coll), passage_tokens=50, progress=False)
    pw.rerank(coll, run, k=20)
    assert pw.diagnostics["q0"]["truncated_docs"]["de"] == 20 and pw.diagnostics["q0"]["truncated_tokens"][
        "de"
    ] == 20 * (202 - 50)
    # (the oracle needs whole queries)
    pw = get_reranker("pairwise-heapsort", Fixed(coll, "Passage A"), query_tokens=3, progress=False)
    pw.rerank(coll, run, k=20)
    assert pw.diagnostics["q0"]["query_truncated_tokens"] == len(coll.queries["q0"].text.split()) - 3


def test_doc_title_changes_what_the_prompt_shows():
    coll, first = make(n_queries=1, n_docs=12)
    coll._docs = {d: Document(d, x.text, "TITLE" + d, x.lang) for d, x in coll._docs.items()}
    for title in (True, False):
        b = Recording(coll)
        rr = get_reranker("pairwise-heapsort", b, k=2, doc_title=title, progress=False)
        out = rr.rerank(coll, first, k=12)
        text = " ".join(b.seen)
        assert ("TITLEq0-d" in text) is title and "doc q0-d" in text
        assert top_grades(coll, out, "q0", 2) == ideal(coll, "q0", 2)  # the oracle reads passages shown either way
        assert sorted(out.docids("q0")) == sorted(first.docids("q0"))
        assert rr.name.endswith("[no-title]") is (not title) and rr.params["doc_title"] is title


def test_name_and_sort_of_each_method():
    coll, _ = make(1, 5)
    built = {m: get_reranker(m, QrelsOracle(coll), k=3, scoring="likelihood") for m in METHODS}
    assert {m: (r.sort, r.name) for m, r in built.items()} == {
        "pairwise-allpair": ("allpair", "prp-allpair3-lik[oracle:qrels]"),
        "pairwise-heapsort": ("heapsort", "prp-heapsort3-lik[oracle:qrels]"),
        "pairwise-bubblesort": ("bubblesort", "prp-bubblesort3-lik[oracle:qrels]"),
    }
    assert PairwiseReranker.default_prompt("pairwise-allpair") == "prp" and PairwiseReranker.upstream == "llm-rankers"


# ---------- llm-rankers 0.0.2's heapsort and its tie rule (HeapsortQuirks)


def llmrankers_heapsort(docids, k, answer):
    """llm-rankers 0.0.2 `PairwiseLlmRanker` heapsort: `ComparableDoc.__gt__` is True only when the two orders answer
    ('Passage A', 'Passage B'); `heapify` compares left then right child against the largest; `heapSort` builds the heap
    from n // 2 down and pops until k are ranked. Every `>` is one `compare` (`total_compare`)."""
    calls = []

    def gt(a, b):
        calls.append((a, b))
        return (answer(a, b), answer(b, a)) == ("A", "B")

    def heapify(arr, n, i):
        largest, l, r = i, 2 * i + 1, 2 * i + 2
        if l < n and gt(arr[l], arr[i]):
            largest = l
        if r < n and gt(arr[r], arr[largest]):
            largest = r
        if largest != i:
            arr[i], arr[largest] = arr[largest], arr[i]
            heapify(arr, n, largest)

    arr, n, ranked = list(docids), len(docids), 0
    for i in range(n // 2, -1, -1):
        heapify(arr, n, i)
    for i in range(n - 1, 0, -1):
        arr[i], arr[0] = arr[0], arr[i]
        ranked += 1
        if ranked == k:
            break
        heapify(arr, i, 0)
    top = list(reversed(arr))[:k]
    return top + [d for d in docids if d not in top], calls


def ours_heapsort(docids, k, answer, ties):
    log, judge = [], PairJudge(lambda ps: [answer(a, b) for a, b in ps], cache=False)
    return run_sort(heapsort(docids, k, ties=ties), lambda ps: log.extend(ps) or judge(ps)), log


ANSWERS = {
    "random": lambda rng: (lambda memo: lambda a, b: memo.setdefault((a, b), rng.choice("AB")))({}),
    "always A": lambda rng: lambda a, b: "A",
    "garbage": lambda rng: lambda a, b: None,
    "graded oracle": lambda rng: (lambda g: lambda a, b: "B" if g[b] > g[a] else "A")(
        {f"d{i}": rng.choice([0, 0, 0, 1, 2]) for i in range(200)}
    ),
    "strict order": lambda rng: (lambda v: lambda a, b: "A" if v[a] > v[b] else "B")(
        {f"d{i}": rng.random() for i in range(200)}
    ),
}


@pytest.mark.parametrize("kind", list(ANSWERS))
def test_heapsort_llm_rankers_ties_is_llm_rankers(kind):
    "Same comparisons in the same order and the same ranking as llm-rankers, for every list length and k."
    for n in (0, 1, 2, 3, 5, 10, 11, 17, 30, 100):
        for k in (1, 2, 10, 50):
            answer = ANSWERS[kind](random.Random(n * 1000 + k))
            docids = [f"d{i}" for i in range(n)]
            assert ours_heapsort(docids, k, answer, "llm-rankers") == llmrankers_heapsort(docids, k, answer), (
                kind,
                n,
                k,
            )


def test_heapsort_default_tie_rule_differs_only_when_answers_tie():
    docids = [f"d{i}" for i in range(100)]
    strict = ANSWERS["strict order"](random.Random(0))
    assert ours_heapsort(docids, 10, strict, "first-stage") == ours_heapsort(docids, 10, strict, "llm-rankers")
    always_a = ANSWERS["always A"](None)
    ranked, calls = ours_heapsort(docids, 10, always_a, "first-stage")
    ref, ref_calls = llmrankers_heapsort(docids, 10, always_a)
    # llm-rankers shuffles an uninformative model's top k
    assert ranked == docids != ref and ref[:3] == ["d0", "d99", "d98"]
    assert (len(calls), len(ref_calls)) == (203, 117)  # +73.5 % comparisons, as the notebook states
    with pytest.raises(ClirError, match="heapsort ties must be one of"):
        next(heapsort(docids, ties="never"))


def test_heapsort_ties_switch_through_spec_and_reranker():
    coll, first = tiny_setup()

    class AlwaysA(QrelsOracle):
        def generate(self, prompts, max_new_tokens=64, **params):
            return ["Passage A"] * len(prompts)

    spec = RerankerSpec.parse("pairwise-heapsort", heapsort_ties="llm-rankers")
    rr = get_reranker(spec, AlwaysA(coll), progress=False)
    out = rr.rerank(coll, first, k=30)
    for q in first:
        expect, calls = llmrankers_heapsort(first.docids(q, 30), 10, lambda a, b: "A")
        assert out.docids(q) == expect + first.docids(q)[30:] and rr.diagnostics[q]["comparisons"] == len(calls)
    assert rr.name.endswith("[ties-llm-rankers]") and rr.params["heapsort_ties"] == "llm-rankers"
    plain = get_reranker("pairwise-heapsort", AlwaysA(coll), progress=False)
    assert all(plain.rerank(coll, first, k=30).docids(q) == first.docids(q) for q in first)
    assert "heapsort_ties" not in plain.params and "ties" not in plain.name


def test_heapsort_quirk_is_refused_by_bubblesort():
    "(d) The tie rule is heapsort's own option: bubblesort and allpair refuse it by name, in the spec, get_reranker and the CLI."
    assert (
        RerankerSpec.parse("pairwise-heapsort").options == HeapsortOptions()
        and HeapsortOptions().quirks == HeapsortQuirks()
    )
    coll, _ = tiny_setup(1, 3)
    for m in ("pairwise-bubblesort", "pairwise-allpair"):
        with pytest.raises(ClirError, match=f"reranker '{m}' has no option 'heapsort_ties'; its options: prompt, "):
            RerankerSpec.parse(m, heapsort_ties="llm-rankers")
        with pytest.raises(ClirError, match=f"reranker '{m}' has no option 'heapsort_ties'"):
            get_reranker(m, QrelsOracle(coll), heapsort_ties="first-stage")
        assert "heapsort_ties" not in PairwiseReranker.options_for(m).flat_fields()
    from clir_llm.cli_stages import _rerank_parser
    from clir_llm.rerank import RERANKERS

    ap = _rerank_parser(RERANKERS.names(), "pairwise-bubblesort", None)
    assert "--heapsort-ties" not in ap.format_help()
    assert "--heapsort-ties" in _rerank_parser(RERANKERS.names(), "pairwise-heapsort", None).format_help()


def test_paper_is_llm_rankers_behaviour():
    P = PairwiseReranker.paper
    authors = {"tsv_round_trip": True, "answers": "exact"}
    assert P("pairwise-heapsort", {}) == authors | {"heapsort_ties": "llm-rankers"}
    assert P("pairwise-bubblesort", {}) == P("pairwise-allpair", {}) == authors
    assert (
        RerankerSpec.parse("pairwise-heapsort", **P("pairwise-heapsort", {})).options.quirks.heapsort_ties
        == "llm-rankers"
    )


def test_at_length_cuts_the_passages_only():
    o = PairwiseReranker.at_length(PairwiseOptions(k=3), 64)
    assert o.flat(defaults=False) == {"k": 3, "passage_tokens": 64} and type(o) is PairwiseOptions
    assert type(PairwiseReranker.at_length(HeapsortOptions(), 8)) is HeapsortOptions


# ---------- (f) the dry run's estimate: the worst case a run never exceeds (allpair: exactly)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "n,options",
    [
        (1, {}),
        (2, {}),
        (9, {}),
        (30, {}),
        (30, dict(k=3)),
        (23, dict(k=30)),
        (20, dict(cache_comparisons=False)),
        (20, dict(scoring="likelihood", batch_orders=False)),
    ],
)
def test_estimate_bounds_the_prompts_a_run_asks(method, n, options):
    spec = RerankerSpec.parse(method, **options)
    stats = TextStats(
        docs=n, query_tokens=10, doc_words=[40, 80], tokens_per_word=1.3, template_tokens=lambda s: len(s.split())
    )
    est = PairwiseReranker.estimate(spec.options, method, stats)
    sort = PairwiseReranker.variants[method]
    assert est.calls == 2 * max_comparisons(sort, n, spec.options.k) and est.comparisons[sort] == est.calls / 2
    # `_ask`: 2 new tokens unless answers: exact
    assert est.output_tokens == (0.0 if spec.options.scoring == "likelihood" else 2.0) and est.prompt_tokens > 0
    asked = []
    for seed in range(4):
        coll, first = tiny_setup(n_queries=3, n_docs=n, seed=seed)
        rr = spec.build(QrelsOracle(coll), progress=False)
        rr.rerank(coll, first, k=n)
        for d in rr.diagnostics.values():
            assert d["prompts"] == 2 * d["comparisons_asked"] and d["comparisons"] <= est.calls / 2
            asked.append(d["prompts"])
    assert max(asked) <= est.calls
    if sort == "allpair":
        assert set(asked) == {est.calls}


# ---------- tiny models through hf:


@pytest.mark.parametrize("scoring", ["generation", "likelihood"])
def test_prp_on_tiny_qwen2_and_warm_rerun_makes_no_call(tiny, tmp_path, scoring):
    from clir_llm.cache import Cache
    from clir_llm.llm import get_backend

    coll = CatColl()
    run = first_run(coll)
    outs = []
    for attempt in range(2):
        b = get_backend(f"hf:{tiny['qwen2']}", cache=Cache(tmp_path / "cache"))
        rr = get_reranker("pairwise-bubblesort", b, k=3, scoring=scoring, progress=False)
        outs.append(rr.rerank(coll, run, k=8))
        if attempt == 0:
            assert b.usage.calls > 0
        else:
            assert b.usage.calls == 0 and b.usage.cache_hits > 0
        for q in run:
            assert sorted(outs[-1].docids(q)) == sorted(run.docids(q))
    assert outs[0] == outs[1]
    d = rr.diagnostics["q1"]
    assert d["prompts"] == 2 * d["comparisons_asked"] and d["tokens_in"] > 0


def test_prp_prompt_prefill_through_chat_template(tiny):
    from clir_llm.llm import get_backend

    b = get_backend(f"hf:{tiny['qwen2']}")
    rr = get_reranker("pairwise-bubblesort", b, progress=False)
    prompt, prefilled = rr._prompt("q", "x", "y")
    assert prefilled and b.render_text(prompt).endswith(
        "Output Passage A or Passage B:<|im_end|>\n<|im_start|>assistant\n Passage:"
    )


def test_prp_on_tiny_mt5_decoder_prefix(tiny):
    from clir_llm.llm import get_backend

    coll = CatColl(5)
    run = first_run(coll)
    b = get_backend(f"hf:{tiny['mt5']}")
    rr = get_reranker("pairwise-allpair", b, scoring="likelihood", progress=False)
    prompt, prefilled = rr._prompt("q", "x", "y")
    assert prefilled and prompt[-1] == {"role": "assistant", "content": "Passage"}
    out = rr.rerank(coll, run, k=5)
    assert all(sorted(out.docids(q)) == sorted(run.docids(q)) for q in run)


def test_prp_prompts_reuse_passage_a_in_the_sorts_own_order():
    "Issue 30 items 2-3: the prompt stream a PRP sort submits (recorded) lets a block-hash prefix cache skip about half of the prompt; the plan's simulation of it (prp_reuse) says as much."
    from clir_llm.pairwise import prp_reuse, prp_schedule
    from clir_llm.prefix_cache import prefix_hit_share

    coll, first = make(n_queries=1, n_docs=20, words=120)
    share = {}
    for method in ("pairwise-bubblesort", "pairwise-heapsort"):
        b = Recording(coll)
        get_reranker(method, b, k=5, progress=False).rerank(coll, first, k=20)
        stream = [[ord(c) for c in p] for p in b.seen]  # characters as tokens
        share[method] = prefix_hit_share(stream, 1e9, block=4)
        head = len(b.seen[0].split("Passage A")[0])
        # more than the instruction and query
        assert share[method] > 2 * head / (sum(map(len, stream)) / len(stream)), method
        # a cache of one prompt holds less
        assert prefix_hit_share(stream, len(stream[0]), block=4) < share[method]
    assert share["pairwise-bubblesort"] > 0.4
    sched = prp_schedule("bubblesort", 20, 5)
    # both orders, adjacent
    assert sched[1::2] == tuple((y, x) for x, y in sched[::2]) and len(sched) <= 2 * max_comparisons(
        "bubblesort", 20, 5
    )
    s, reach = prp_reuse("bubblesort", 100, 10, 50, 305, 320)
    assert 0.45 < s < 0.55 and reach > 0  # the paper's setting: about 2x fewer prefill tokens
    assert prp_reuse("heapsort", 100, 10, 50, 305, 320)[0] > 50 / 675


def test_estimate_counts_the_reuse_of_the_simulated_schedule():
    st = TextStats(
        docs=100, query_tokens=30, doc_words=[250], tokens_per_word=1.4, template_tokens=lambda t: len(t) / 4
    )
    est = PairwiseReranker.estimate(PairwiseOptions(), "pairwise-bubblesort", st)
    assert (
        est.reused() > 5 * est.prefix_tokens and 0.4 < est.reused() / est.prompt_tokens < 0.6 and est.cache_tokens > 0
    )


# ---------- issue 27 B, F: the authors' TSV round trip and llm-rankers' exact answers (PairwiseQuirks)
def authors_tsv_rankings(tmp_path, run: Run, coll, hits: int = 100) -> dict[str, list[tuple[str, str]]]:
    "mainlp/llm-clir processing_pairwise.py's generate_tsv (pandas) and pairwise.py's reading loop, as written: qid -> [(docid, text)]."
    import pandas as pd

    sanitize = lambda s: " ".join((s or "").replace("\t", " ").replace("\r", " ").replace("\n", " ").split()).strip()
    rows = [[q, d, s, sanitize(sanitize(coll.get_docs([d])[0].text))] for q in sorted(run) for d, s in run.ranking(q)]
    pd.DataFrame(rows, columns=["query_id", "doc_id", "score", "doc_content"]).to_csv(
        tmp_path / "c.tsv", sep="\t", index=False, lineterminator="\n"
    )
    out = {}
    with open(tmp_path / "c.tsv", encoding="utf-8") as f:
        for line in f:
            parts = line.strip().split("\t")
            if len(parts) < 4:
                continue
            try:
                float(parts[2])
            except ValueError:
                continue
            if len(out.setdefault(parts[0], [])) < hits:
                out[parts[0]].append((parts[1], parts[3]))
    return out


class Seen(Recording):
    "The oracle, remembering every (passage A, passage B) it was shown."

    def generate(self, prompts, max_new_tokens=64, **params):
        import re
        from clir_llm.templates import prompt_text

        pat = re.compile(r'Passage A: "(.*)"\n\nPassage B: "(.*)"\n\nOutput', re.S)
        self.pairs = getattr(self, "pairs", []) + [pat.search(prompt_text(p)).groups() for p in prompts]
        return super().generate(prompts, max_new_tokens, **params)


def test_tsv_round_trip_gives_the_authors_passages_and_drops_empty_documents(tmp_path):
    from clir_llm.core import Query, Qrels
    from _rerankers import Coll

    texts = {
        "d1": 'He said "no" twice.',
        "d2": "",
        "d3": "plain\ttext\nhere",
        "d4": '"quoted" start',
        "d5": "   ",
        "d6": "last one",
    }
    coll = Coll(
        {"q": Query("q", "a query", "en")},
        {d: Document(d, t, lang="de") for d, t in texts.items()},
        Qrels({"q": {d: i % 2 for i, d in enumerate(texts)}}),
    )
    run = Run.from_ranked({"q": list(texts)}, name="bm25")
    want = dict(authors_tsv_rankings(tmp_path, run, coll)["q"])
    assert want["d1"] == '"He said ""no"" twice."' and "d2" not in want and "d5" not in want
    b = Seen(coll)
    rr = get_reranker("pairwise-allpair", b, tsv_round_trip=True, progress=False)
    out = rr.rerank(coll, run, k=100)
    shown = {t for pair in b.pairs for t in pair}
    assert (
        shown == set(want.values()) and sorted(out["q"]) == sorted(want) and rr.diagnostics["q"]["dropped_empty"] == 2
    )
    assert rr.name.endswith("[tsv]") and "[tsv]" not in get_reranker("pairwise-allpair", b, progress=False).name
    plain = Seen(coll)
    get_reranker("pairwise-allpair", plain, progress=False).rerank(coll, run, k=100)
    assert 'He said "no" twice.' in {t for pair in plain.pairs for t in pair}


def test_exact_answers_as_llm_rankers():
    "llm-rankers compares 'Passage ' + the one stripped, upper-cased token with 'Passage A': 'A.' is a tie, not A."
    coll, run = make(1, 4)
    for answer, parsed, exact in ((" A", 1, 1), (" a.", 1, 0), ("Passage B", 0, 0), (" b", 0, 0)):
        got = {}
        for mode in ("parse", "exact"):
            b = Fixed(coll, answer)
            rr = get_reranker("pairwise-allpair", b, answers=mode, progress=False)
            rr.rerank(coll, run, k=4)
            got[mode] = rr.diagnostics["q0"]["parse_failures"] == 0
        assert got == {
            "parse": bool(parsed) or answer.strip().upper().endswith("B"),
            "exact": bool(exact) or answer == " b",
        }


def llmrankers_bubblesort_calls(model, tok, query: str, ranking: list[tuple[str, str]], k: int = 10):
    """llm-rankers 0.0.2 `PairwiseLlmRanker` (llama path) as written: its prompt, `apply_chat_template(...) + " Passage:"`,
    `tokenizer([prompt0, prompt1])` (no padding, no mask: the two orders of one comparison in one call), `generate(input_ids,
    do_sample=False, max_new_tokens=1)`, the answer `'Passage ' + decode(new).strip().upper()`, and its bubblesort. Returns
    the calls (rows of ids) and the ranking."""
    import torch

    prompt = (
        'Given a query "{query}", which of the following two passages is more relevant to the query?\n\n'
        'Passage A: "{doc1}"\n\nPassage B: "{doc2}"\n\nOutput Passage A or Passage B:'
    )
    calls = []

    def compare(doc1, doc2):
        texts = [prompt.format(query=query, doc1=doc1, doc2=doc2), prompt.format(query=query, doc1=doc2, doc2=doc1)]
        chats = [
            tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
            + " Passage:"
            for t in texts
        ]
        input_ids = tok(chats, return_tensors="pt").input_ids  # raises on unequal lengths, as upstream
        calls.append(input_ids.tolist())
        with torch.inference_mode():
            out = model.generate(input_ids, do_sample=False, max_new_tokens=1, pad_token_id=tok.eos_token_id)
        return [f"Passage {tok.decode(o[input_ids.shape[1] :], skip_special_tokens=True).strip().upper()}" for o in out]

    ranking = list(ranking)
    k, last_end = min(k, len(ranking)), len(ranking) - 1
    for i in range(k):
        current_ind, is_change = last_end, False
        while current_ind > i:
            output = compare(ranking[current_ind][1], ranking[current_ind - 1][1])
            if output[0] == "Passage A" and output[1] == "Passage B":
                ranking[current_ind - 1], ranking[current_ind] = ranking[current_ind], ranking[current_ind - 1]
                if not is_change:
                    is_change = True
                    if last_end != len(ranking) - 1:
                        last_end += 1
            if not is_change:
                last_end -= 1
            current_ind -= 1
    return calls, [d for d, _ in ranking]


def test_paper_quirks_make_llm_rankers_calls_with_the_shipped_defaults(tmp_path, monkeypatch):
    """Issue 38 item 2: with the package's defaults as they ship (prefix reuse on), the quirks path (`with_paper_quirks`,
    `PairwiseReranker.paper`) makes llm-rankers' generate calls one by one: the same ids (two BOS), no attention mask, the
    two orders of one comparison per call, and the same top k. Before the fix reuse took the calls: masks on every call,
    held prefixes cut off the rows."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.generation.utils import GenerationMixin
    from clir_llm.llm import BackendSpec
    from clir_llm.llm_hf import HFOptions
    from clir_llm.prefix_cache import kv_arg
    from pathlib import Path

    # the shipped default: reuse on (float32 here)
    assert HFOptions().prefix_cache is not False
    fx = Path(__file__).parent / "fixtures" / "tokenizers" / "llama31"
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(fx)).save_pretrained(tmp_path / "m")
    AutoTokenizer.from_pretrained(fx).save_pretrained(tmp_path / "m")
    seen, real = [], GenerationMixin.generate

    def generate(self, *a, **kw):
        seen.append((kw["input_ids"].tolist(), kw.get("attention_mask"), kw.get(kv_arg(self))))
        return real(self, *a, **kw)

    coll, run = make(2, 12, words=5)
    words = [f"{a} {b}" for a in "cat dog bird fish".split() for b in "tree house river".split()]
    for q in run:  # distinct passages of two words: both orders of a comparison have one length, as llm-rankers needs
        for d, w in zip(run.docids(q), random.Random(q).sample(words, 12)):
            coll._docs[d] = Document(d, w, lang="de")
    b = BackendSpec.parse(f"hf:{tmp_path / 'm'}", dtype="float32").with_paper_quirks("llm-rankers").build()
    rr = get_reranker(
        "pairwise-bubblesort",
        b,
        k=4,
        batch_size=2,
        doc_title=False,
        progress=False,
        **PairwiseReranker.paper("pairwise-bubblesort", {}),
    )
    monkeypatch.setattr(GenerationMixin, "generate", generate)
    out = rr.rerank(coll, run, k=12)
    monkeypatch.setattr(GenerationMixin, "generate", real)
    model, tok = (
        AutoModelForCausalLM.from_pretrained(tmp_path / "m").eval(),
        AutoTokenizer.from_pretrained(tmp_path / "m"),
    )
    want, ranked = [], {}
    for q in sorted(run):
        calls, ranked[q] = llmrankers_bubblesort_calls(
            model, tok, coll.queries[q].text, [(d, coll._docs[d].text) for d in run.docids(q)], k=4
        )
        want += calls
    assert all(mask is None and past is None for _, mask, past in seen)  # no mask, no held states: whole prompts
    # same calls, same rows per call
    assert sorted(ids for ids, _, _ in seen) == sorted(want) and len(seen) == len(want) > 10
    assert all(r[:2] == [tok.bos_token_id] * 2 for c in want for r in c)  # the quirk llm-rankers had: two BOS
    assert all(out.docids(q)[:4] == ranked[q][:4] for q in run)


# ---------- reliability (issue 14; moved from the test_reliability_* files)
@pytest.mark.parametrize("k", ["0", "-3"])
def test_sort_k_must_be_positive(tmp_path, k):
    p = R.run_cli(
        "rerank",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        R.good_run(tmp_path, "in.trec"),
        "--method",
        "pairwise-bubblesort",
        "--llm",
        "openai:x",
        "--sort-k",
        k,
        "--out",
        tmp_path / "o.trec",
        env=R.env_for(tmp_path / "cache"),
    )
    R.expect_rc(f"--sort-k {k}", p.returncode, p.stderr, "greater than 0", cls="numbers")


def test_the_progress_line_shows_the_prefix_cache_hits(tiny, tmp_path, monkeypatch):
    "issue 30 item 1: the prompts that reused a held prefix are counted in the usage and shown on the run's progress line."
    from clir_llm.llm import get_backend
    from clir_llm.progress import CHANNEL, format_event

    coll = CatColl()
    run = first_run(coll)
    ch = tmp_path / "p.jsonl"
    monkeypatch.setenv(CHANNEL, str(ch))
    rr = get_reranker("pairwise-bubblesort", get_backend(f"hf:{tiny['qwen2']}"), k=3)
    rr.rerank(coll, run, k=8)
    hits = rr.usage.counters["prefix_cache_hits"]
    last = [json.loads(l) for l in ch.read_text().splitlines() if "rerank prp" in l][-1]
    assert hits > 0 and last["closed"] and last["postfix"] == f"prefix hits {hits}"
    assert format_event(last).endswith(f"prefix hits {hits}]")
    ch.unlink()
    # a backend without a prefix cache: no postfix
    get_reranker("pairwise-bubblesort", QrelsOracle(coll), k=3).rerank(coll, run, k=8)
    assert all("postfix" not in json.loads(l) for l in ch.read_text().splitlines())


# ---------- soft both-orders decision (Qin et al. 2024, sec. 3.1, scoring mode): P(x > y) = ½ P_A(x, y) + ½ (1 - P_A(y, x))


class BiasedLikelihood(QrelsOracle):
    "Log-likelihoods of a position-biased model with a weak relevance signal: log P(A) - log P(B) = 2 + 0.3 (grade A - grade B) > 0."

    def score(self, prompts, candidates, **kw):
        from clir_llm.templates import prompt_text, squash

        self.usage.calls += 1
        out = []
        for p in prompts:
            text = prompt_text(p)
            qid = self._query(squash(text))
            m = self._match("pairwise", text)[1]
            out.append([0.0, -2.0 - 0.3 * (self._grade(qid, m["a"]) - self._grade(qid, m["b"]))])
        return out


@pytest.mark.parametrize("method", METHODS)
def test_soft_decision_ranks_where_hard_rule_ties(method):
    coll, run = make(2, 12)
    hard = get_reranker(method, BiasedLikelihood(coll), k=3, scoring="likelihood", progress=False)
    out = hard.rerank(coll, run, k=12)
    assert all(out.docids(q) == run.docids(q) for q in run)  # 'A' in every prompt: every comparison a tie
    assert hard.diagnostics["q0"]["ties"] == hard.diagnostics["q0"]["comparisons_asked"] > 0
    soft = get_reranker(method, BiasedLikelihood(coll), k=3, scoring="likelihood", decision="soft", progress=False)
    out = soft.rerank(coll, run, k=12)
    for q in run:
        assert top_grades(coll, out, q, 3) == ideal(coll, q, 3), (method, q)
        assert sorted(out.docids(q)) == sorted(run.docids(q))
    d = soft.diagnostics["q0"]
    # the bias stays visible in the diagnostics
    assert d["ties"] < d["comparisons_asked"] and d["answers_a"] == d["prompts"]


def test_soft_judge_values_are_the_averaged_probabilities():
    j = PairJudge(soft=True)
    _, todo = j.plan([("x", "y")])
    j.record(todo, [0.9, 0.7])  # P_A(x, y) = 0.9, P_A(y, x) = 0.7
    assert j.memo["x", "y"] == pytest.approx(0.6) and j.memo["y", "x"] == pytest.approx(0.4)
    assert j.stats["ties"] == 0 and j.stats["answers_a"] == 2
    _, todo = j.plan([("u", "v")])
    j.record(todo, [None, 0.2])  # an unreadable order counts as ½
    assert j.memo["u", "v"] == pytest.approx(0.65) and j.stats["parse_failures"] == 1


def test_soft_decision_identity_only_when_set():
    hard, soft = (
        RerankerSpec.parse("pairwise-bubblesort", scoring="likelihood"),
        RerankerSpec.parse("pairwise-bubblesort", scoring="likelihood", decision="soft"),
    )
    assert (
        "decision" not in hard.key() and "decision" not in hard.options.identity() and "decision" not in hard.describe()
    )
    assert "decision=soft" in soft.key() and soft.options.identity()["decision"] == "soft"
    assert hard.key() == RerankerSpec.parse("pairwise-bubblesort", scoring="likelihood", decision="hard").key()
    coll, _ = make(1, 5)
    assert (
        get_reranker(soft, QrelsOracle(coll)).name.endswith("[soft]")
        and "soft" not in get_reranker(hard, QrelsOracle(coll)).name
    )
    with pytest.raises(ClirError, match="likelihood"):
        get_reranker("pairwise-allpair", QrelsOracle(coll), decision="soft")


def test_soft_decision_from_a_config_row():
    from clir_llm.config import RerankerConfig

    row = dict(name="P", llm="hf:x", method="pairwise-bubblesort", first_stages=["bm25-qt"], scoring="likelihood", k=1)
    soft = RerankerConfig(**row, decision="soft")
    assert (
        soft.options.decision == "soft"
        and soft.run_identity()["decision"] == "soft"
        and soft.model_dump()["decision"] == "soft"
    )
    assert (
        "decision" not in RerankerConfig(**row).run_identity() and "decision" not in RerankerConfig(**row).model_dump()
    )
    assert RerankerConfig(**row, decision="hard").run_identity() == RerankerConfig(**row).run_identity()
    with pytest.raises(ValueError, match="needs scoring 'likelihood'"):
        RerankerConfig(**{**row, "scoring": "generation"}, decision="soft")
