"""Rerankers with deterministic backends: a qrels oracle, a position-biased model ("always A"), a model that
answers garbage, and a random (intransitive) judge; bad input; OG vs DT on the shipped fixture collection."""
import json, random
from itertools import permutations
import pytest
from clir_llm.core import ClirError, FormatError, Document, Qrels, Query, Run
from clir_llm.listwise import ListwiseReranker, window_starts
from clir_llm.pairwise import PairwiseReranker, SORTS, run_sort
from clir_llm.rerank import QrelsOracle, get_reranker
from clir_llm.retrieve import docs_view
from clir_llm.templates import PromptTemplate, parse_permutation, parse_prp


class Coll:
    "A minimal collection: what rerankers use (queries, get_docs, qrels, doc_lang)."
    def __init__(self, queries, docs, qrels, doc_lang="de"):
        self.queries, self._docs, self.qrels, self.doc_lang, self.name, self.key = queries, docs, qrels, doc_lang, "t", "t"
    def get_docs(self, ids): return [self._docs[d] for d in ids]


def make(n_queries=3, n_docs=40, seed=0, words=30):
    rng = random.Random(seed)
    queries = {f"q{i}": Query(f"q{i}", f"query number {i} on topic {i * 7} and more", "en") for i in range(n_queries)}
    docs, qrels, run = {}, Qrels(), {}
    for i in range(n_queries):
        ids = [f"q{i}-d{j}" for j in range(n_docs)]
        for d in ids:
            docs[d] = Document(d, f"doc {d} " + " ".join(rng.choice("ab cd ef gh".split()) for _ in range(words)), lang="de")
        qrels[f"q{i}"] = {d: rng.choice([0, 0, 0, 1, 2, 3]) for d in ids}
        rng.shuffle(ids)
        run[f"q{i}"] = ids
    return Coll(queries, docs, qrels), Run.from_ranked(run, name="bm25")


class Fixed(QrelsOracle):
    "Answers every prompt with the same text (and scores the first candidate higher)."
    def __init__(self, coll, answer):
        super().__init__(coll, name=f"fixed:{answer}"); self.answer = answer
    def generate(self, prompts, max_new_tokens=64, **kw):
        self.usage.calls += 1; return [self.answer] * len(prompts)
    def score(self, prompts, candidates):
        self.usage.calls += 1; return [[0.0, -1.0] for _ in prompts]


def top_grades(coll, run, q, k): return [coll.qrels[q].get(d, 0) for d in run.docids(q, k)]
def ideal(coll, q, k): return sorted(coll.qrels[q].values(), reverse=True)[:k]


# ---------- prompts

def test_templates_load_and_cite_sources():
    for name, method in (("rankgpt", "listwise"), ("rankzephyr", "listwise"), ("prp", "pairwise")):
        t = PromptTemplate.load(name)
        assert t.method == method and "arXiv" in t.source and "github.com/" in t.source


@pytest.mark.parametrize("field,bad,msg", [
    ("prompt", "Given {query} {a}", "lacks placeholder(s) {b}"),
    ("prompt", "Given {query} {a} {b} {c}", "unknown placeholder(s) {c}"),
    ("prompt", "Given {query {a} {b}", "bad braces"),
])
def test_template_placeholder_errors_name_file_and_line(tmp_path, field, bad, msg):
    src = PromptTemplate.load("prp").path
    lines = open(src).read().splitlines()
    i = next(n for n, l in enumerate(lines) if l.startswith(f"{field}:"))
    lines[i] = f"{field}: {json.dumps(bad)}"
    p = tmp_path / "x.yaml"; p.write_text("\n".join(lines) + "\n")
    with pytest.raises(FormatError) as e: PromptTemplate.load(p)
    assert f"x.yaml:{i + 1}:" in str(e.value) and msg in str(e.value)


def test_template_missing_field_and_bad_yaml(tmp_path):
    (tmp_path / "a.yaml").write_text("method: listwise\nsource: me\nprefix: '{query}'\n")
    with pytest.raises(FormatError, match="missing field 'system'"): PromptTemplate.load(tmp_path / "a.yaml")
    (tmp_path / "b.yaml").write_text("method: [unclosed\n")
    with pytest.raises(FormatError, match="b.yaml:.*not valid YAML"): PromptTemplate.load(tmp_path / "b.yaml")
    (tmp_path / "c.yaml").write_text("method: cardwise\nsource: me\n")
    with pytest.raises(FormatError, match="method must be one of"): PromptTemplate.load(tmp_path / "c.yaml")


def test_pairwise_template_refused_for_listwise():
    coll, _ = make(1, 5)
    with pytest.raises(ClirError, match="not a listwise prompt"): ListwiseReranker(QrelsOracle(coll), template="prp")
    with pytest.raises(ClirError, match="not a pairwise prompt"): PairwiseReranker(QrelsOracle(coll), template="rankgpt")


# ---------- parsers

def test_parse_permutation_always_yields_a_permutation():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 25)
        ans = " > ".join(f"[{rng.randint(-3, n + 5)}]" for _ in range(rng.randint(0, 30))) + rng.choice(["", "junk", "[]"])
        perm, rep = parse_permutation(ans, n)
        assert sorted(perm) == list(range(n))
        assert rep["missing"] == n - len({int(x) for x in __import__("re").findall(r"\d+", ans) if 1 <= int(x) <= n})


def test_parse_permutation_keeps_order_and_appends_missing_in_input_order():
    assert parse_permutation("[5] > [2] > [2] > [9]", 5)[0] == [4, 1, 0, 2, 3]


def test_parse_prp():
    assert parse_prp("Passage B") == "B" and parse_prp(" a") == "A" and parse_prp("Passage C") is None and parse_prp("Apple") is None


# ---------- sorts with an exact, a random and a constant judge

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
        def judge(ps): n[0] += len(ps); return [1.0 if int(a[1:]) % 17 > int(b[1:]) % 17 else 0.0 for a, b in ps]
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
    docs = [f"d{i:02d}" for i in range(100)]           # d00 best
    better = lambda a, b: 1.0 if a < b else 0.0
    ranked, asked = _bubble(docs, better)
    assert ranked == docs and len(asked) == 99           # one pass, no swap, done (the textbook sort asks 945)
    ranked, asked = _bubble(docs[1:51] + ["d00"] + docs[51:], better)
    # pass 1: 49 pairs below d00 (no swap) + 50 carrying it to the top; pass 2: from index 51 up, no swap; stop
    assert ranked == docs and len(asked) == 99 + 50
    assert asked[99] == (docs[51], docs[50])             # pass 2 starts just below pass 1's lowest swap


@pytest.mark.parametrize("seed", range(20))
def test_bubblesort_same_ranking_as_textbook_bubblesort(seed):
    rng = random.Random(seed)
    n, k = rng.choice([2, 7, 30, 60]), rng.choice([1, 5, 10])
    docs, verdict = [f"d{i}" for i in range(n)], {}
    def value(a, b):  # deterministic, possibly intransitive, with ties
        if (a, b) not in verdict: verdict[a, b] = rng.choice([0.0, 0.5, 1.0]); verdict[b, a] = 1.0 - verdict[a, b]
        return verdict[a, b]
    ranked, asked = _bubble(docs, value, k)
    r = list(docs)
    for i in range(min(k, n)):
        for j in range(n - 1, i, -1):
            if value(r[j], r[j - 1]) == 1.0: r[j - 1], r[j] = r[j], r[j - 1]
    assert ranked == r[:k] + [d for d in docs if d not in r[:k]]
    assert len(asked) <= sum(n - 1 - i for i in range(min(k, n)))


# ---------- whole rerankers: oracle, position bias, garbage

METHODS = ["listwise", "listwise-rankgpt", "pairwise-allpair", "pairwise-heapsort", "pairwise-bubblesort"]


@pytest.mark.parametrize("method", METHODS)
def test_oracle_gives_ideal_top10(method):
    coll, run = make()
    rr = get_reranker(method, QrelsOracle(coll), progress=False)
    out = rr.rerank(coll, run, k=40)
    for q in run:
        assert sorted(out.docids(q)) == sorted(run.docids(q))
        assert top_grades(coll, out, q, 10) == ideal(coll, q, 10)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("answer", ["Passage A", "[1] > [2] > [3]", "garbage !!"])
def test_biased_or_garbage_model_keeps_first_stage(method, answer):
    coll, run = make()
    rr = get_reranker(method, Fixed(coll, answer), progress=False)
    out = rr.rerank(coll, run, k=40)
    if method.startswith("pairwise") or answer != "[1] > [2] > [3]":
        assert all(out.docids(q) == run.docids(q) for q in run)
    else:  # a listwise model that always puts [1] > [2] > [3] first still yields a permutation
        assert all(sorted(out.docids(q)) == sorted(run.docids(q)) for q in run)
    d = rr.diagnostics["q0"]
    if method.startswith("pairwise"):
        assert d["ties"] == d["comparisons_asked"] > 0
        assert d["parse_failures"] == (0 if answer == "Passage A" else 2 * d["comparisons_asked"])
    else:
        assert d["parse_failures"] == (0 if answer.startswith("[1]") else d["prompts"])
        assert d["repair_missing"] > 0


def test_likelihood_scoring_with_position_bias_ties():
    coll, run = make(2, 20)
    rr = PairwiseReranker(Fixed(coll, "x"), method="allpair", scoring="likelihood", progress=False)
    out = rr.rerank(coll, run, k=20)
    assert all(out.docids(q) == run.docids(q) for q in run) and rr.diagnostics["q0"]["parse_failures"] == 0


def test_likelihood_needs_logprobs():
    coll, _ = make(1, 5)
    b = QrelsOracle(coll); b.supports_logprobs = False
    with pytest.raises(ClirError, match="cannot score continuations"): PairwiseReranker(b, scoring="likelihood")


def test_only_top_k_is_touched():
    coll, run = make(2, 40)
    for method in METHODS:
        out = get_reranker(method, QrelsOracle(coll), progress=False).rerank(coll, run, k=15)
        for q in run:
            assert out.docids(q)[15:] == run.docids(q)[15:]
            assert sorted(out.docids(q, 15)) == sorted(run.docids(q, 15))


def test_listwise_nine_windows_over_100():
    coll, run = make(2, 100)
    rr = ListwiseReranker(QrelsOracle(coll), progress=False)
    rr.rerank(coll, run, k=100)
    assert all(d["prompts"] == 9 for d in rr.diagnostics.values()) and window_starts(100) == [80, 70, 60, 50, 40, 30, 20, 10, 0]


def test_batching_and_caching_do_not_change_results():
    coll, run = make(3, 30)
    for method in METHODS:
        a = get_reranker(method, QrelsOracle(coll), progress=False).rerank(coll, run, k=30)
        kw = dict(batch_queries=False) if method.startswith("listwise") else dict(batch_queries=False, batch_orders=False, cache_comparisons=False)
        b = get_reranker(method, QrelsOracle(coll), progress=False, **kw).rerank(coll, run, k=30)
        assert a == b, method


def test_context_shrinks_passage_cut_and_counts_truncation():
    coll, run = make(1, 20, words=200)
    rr = ListwiseReranker(QrelsOracle(coll), context=2000, progress=False)
    rr.rerank(coll, run, k=20)
    d = rr.diagnostics["q0"]
    assert d["words_cut_to"] < 200 and d["truncated_tokens"]["de"] > 0 and d["truncated_docs"]["de"] == 20
    pw = PairwiseReranker(QrelsOracle(coll), passage_tokens=50, progress=False)
    pw.rerank(coll, run, k=20)
    assert pw.diagnostics["q0"]["truncated_docs"]["de"] == 20 and pw.diagnostics["q0"]["truncated_tokens"]["de"] == 20 * (202 - 50)


def test_unknown_query_and_bad_k():
    coll, run = make(1, 5)
    run["zz"] = {"x": 1.0}
    with pytest.raises(ClirError, match="does not know: zz"): ListwiseReranker(QrelsOracle(coll), progress=False).rerank(coll, run)
    with pytest.raises(ClirError, match="k must be positive"): ListwiseReranker(QrelsOracle(coll), progress=False).rerank(coll, Run(), k=0)
    with pytest.raises(ClirError, match="unknown pairwise method"): PairwiseReranker(QrelsOracle(coll), method="quicksort")


def test_diagnostics_and_usage_saved(tmp_path):
    coll, run = make(2, 20)
    rr = PairwiseReranker(QrelsOracle(coll), method="bubblesort", progress=False)
    out = rr.rerank(coll, run, k=20)
    out.write(tmp_path / "r.trec"); rr.save(tmp_path / "r.trec")
    diag = json.loads((tmp_path / "r.trec.rerank.json").read_text())
    usage = json.loads((tmp_path / "r.trec.usage.json").read_text())
    assert set(diag["per_query"]) == {"q0", "q1"} and diag["params"]["method"] == "bubblesort"
    assert usage["counters"]["comparisons"] == sum(d["comparisons"] for d in diag["per_query"].values()) > 0
    assert usage["calls"] == sum(d["calls"] for d in diag["per_query"].values()) or usage["calls"] > 0


# ---------- titles: shown by default, dropped with doc_title=False (the authors' rerankers read `text` only)

@pytest.mark.parametrize("kind", ["listwise", "pairwise"])
def test_doc_title_changes_what_the_prompt_shows(kind):
    coll, first = make(n_queries=1, n_docs=12)
    coll._docs = {d: Document(d, x.text, "TITLE" + d, x.lang) for d, x in coll._docs.items()}
    for title in (True, False):
        seen = []
        class Spy(QrelsOracle):
            def generate(self, prompts, max_new_tokens=64, **kw):
                seen.extend(json.dumps(p) for p in prompts); return super().generate(prompts, max_new_tokens)
        rr = (ListwiseReranker(Spy(coll), window=6, step=3, doc_title=title, progress=False) if kind == "listwise"
              else PairwiseReranker(Spy(coll), sort_k=2, doc_title=title, progress=False))
        out = rr.rerank(coll, first, k=12)
        text = " ".join(seen)
        assert ("TITLEq0-d" in text) is title and "doc q0-d" in text
        assert top_grades(coll, out, "q0", 2) == ideal(coll, "q0", 2)   # the oracle reads passages shown either way
        assert sorted(out.docids("q0")) == sorted(first.docids("q0"))
        assert rr.name.endswith("[no-title]") is (not title) and ("doc_title" in rr.params) is (not title)


# ---------- OG vs DT on the shipped fixture collection (a real Collection)

def test_og_and_dt_views_on_fixture():
    from clir_llm.collections import load_collection
    og = load_collection("fixture", "en-sw")
    dt = docs_view(og, "dt")
    assert dt.doc_lang == "en" and docs_view(og, "og") is og
    run = Run.from_ranked({q: [d.docid for d in og.iter_docs()] for q in og.queries})
    seen = {}
    class Spy(QrelsOracle):
        def generate(self, prompts, max_new_tokens=64, **kw):
            seen.setdefault(self.name, []).extend(prompts); return super().generate(prompts, max_new_tokens)
    for name, c in (("og", og), ("dt", dt)):
        out = ListwiseReranker(Spy(c, name=name), progress=False).rerank(c, run, k=10)
        assert all(sorted(out.docids(q)) == sorted(run.docids(q)) for q in run)
    og_text, dt_text = json.dumps(seen["og"]), json.dumps(seen["dt"])
    d0 = next(iter(og.iter_docs())).docid
    og_words, dt_words = og.get_doc(d0).text.split()[:5], dt.get_doc(d0).text.split()[:5]
    assert og_words != dt_words
    assert " ".join(og_words) in og_text and " ".join(og_words) not in dt_text
    assert " ".join(dt_words) in dt_text and " ".join(dt_words) not in og_text
    with pytest.raises(ClirError, match="ships no document translations"):
        docs_view(load_collection("fixture", "en-de"), "dt")
