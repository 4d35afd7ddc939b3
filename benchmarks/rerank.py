"""Reranker benchmarks: correctness with a qrels oracle, comparison counts of the PRP sorts, and the speed-ups
of comparison caching + batching (PRP) and of batching windows across queries (listwise).

Both sides of every comparison run in this process on the same inputs and must give the same ranking.
Speed is measured on an `hf:` backend: a tiny randomly initialised Qwen2 (2 layers, hidden 32, byte-level BPE
of 400 tokens, built by `clir_llm.testing.make_tiny_hf_model`) run by transformers on one CPU thread, with the LLM
cache off so every prompt reaches the model. Its per-call cost structure (fixed overhead per call + cost per
token, batching amortising the overhead) is that of a real model; the ratios for a 7B model on a GPU differ.
A random model's PRP answers are nearly all ties (position bias), which would make comparison caching look
better than it is (nothing moves, so every later pass repeats the same pairs); so the PRP benchmark takes its
*answers* from the qrels oracle and its *cost* from running the tiny model on the very same prompts (a real
`score`/`generate` call per batch). The listwise benchmark is the tiny model end to end. Forward passes are
counted by wrapping the model's `forward`.

    python benchmarks/rerank.py --quick
    python benchmarks/rerank.py --smoke     # seconds: the code path and the target lines (tests/test_benchmarks.py)
"""
import argparse, random, sys, tempfile, time
from pathlib import Path
from clir_llm.core import Document, Qrels, Query, Run
from clir_llm.pairwise import SORTS
from clir_llm.rerank import get_reranker
from clir_llm.testing import QrelsOracle
import _smoke

TARGETS = ["prp-forward-passes", "prp-wall-time", "listwise-queries-per-second"]


class Coll:
    def __init__(self, queries, docs, qrels):
        self.queries, self._docs, self.qrels, self.doc_lang, self.name, self.key = queries, docs, qrels, "de", "bench", "bench"
    def get_docs(self, ids): return [self._docs[d] for d in ids]


def make(n_queries, n_docs, words, seed=0):
    rng = random.Random(seed)
    vocab = "the cat sat on mat dog ran park Katze schläft kissa nukkuu gatto dorme passage query relevant".split()
    queries = {f"q{i}": Query(f"q{i}", f"query {i}: " + " ".join(rng.choice(vocab) for _ in range(6)), "en") for i in range(n_queries)}
    docs, qrels, run = {}, Qrels(), {}
    for i in range(n_queries):
        ids = [f"q{i}d{j}" for j in range(n_docs)]
        for d in ids: docs[d] = Document(d, f"doc {d} " + " ".join(rng.choice(vocab) for _ in range(words)), lang="de")
        qrels[f"q{i}"] = {d: rng.choice([0, 0, 0, 1, 2, 3]) for d in ids}
        rng.shuffle(ids); run[f"q{i}"] = ids
    return Coll(queries, docs, qrels), Run.from_ranked(run, name="first")


def target(name, ratio, goal):
    print(f"target {name}: {ratio:.2f}x (goal {goal:.1f}x) {'met' if ratio >= goal else 'short'}")


def oracle_checks(n_queries, n_docs=100):
    coll, run = make(n_queries, n_docs, 12, seed=1)
    print(f"== oracle comparator: {n_queries} queries x {n_docs} documents, top-10")
    ok = True
    for name in SORTS:
        rr = get_reranker(f"pairwise-{name}", QrelsOracle(coll), progress=False, k=10)
        out = rr.rerank(coll, run, k=n_docs)
        ideal = all([coll.qrels[q][d] for d in out.docids(q, 10)] == sorted(coll.qrels[q].values(), reverse=True)[:10] for q in run)
        asked = [d["comparisons"] for d in rr.diagnostics.values()]
        uniq = [d["comparisons_asked"] for d in rr.diagnostics.values()]
        ok &= ideal
        print(f"  {name:<10} ideal top-10: {ideal}   comparisons/query: max {max(asked)} (distinct pairs asked: mean {sum(uniq) / len(uniq):.0f})")
        if name == "bubblesort": assert max(asked) <= sum(n_docs - 1 - i for i in range(10)), max(asked)
        if name == "bubblesort": bub = max(asked)
        if name == "heapsort": heap = max(asked)
    lw = get_reranker("listwise", QrelsOracle(coll), progress=False)
    out = lw.rerank(coll, run, k=n_docs)
    ideal = all([coll.qrels[q][d] for d in out.docids(q, 10)] == sorted(coll.qrels[q].values(), reverse=True)[:10] for q in run)
    print(f"  listwise   ideal top-10: {ideal}   windows/query: {lw.diagnostics['q0']['prompts']}")
    print(f"  bubblesort top-10 over {n_docs}: {bub} comparisons (bound {sum(n_docs - 1 - i for i in range(10))}); heapsort: {heap}")
    assert ok and (heap < bub / 2 or n_docs < 100)
    return ok


class Counted:
    "Counts forward passes of a transformers model."
    def __init__(self, backend):
        self.n, m = 0, backend.hf_model
        fwd = m.forward
        def counting(*a, **kw): self.n += 1; return fwd(*a, **kw)
        m.forward = counting


def tiny_backend(tmp):
    from clir_llm.cache import Cache
    from clir_llm.llm import get_backend
    from clir_llm.testing import make_tiny_hf_model
    path = make_tiny_hf_model(Path(tmp) / "tiny", "qwen2")
    b = get_backend(f"hf:{path}", cache=Cache(Path(tmp) / "cache", mode="off"))
    b.hf_model  # load before timing
    return b


class OracleAnswersModelCost:
    "The qrels oracle's answers, paid for with a real model call on the same prompts."
    def __init__(self, oracle, hf):
        self.oracle, self.hf, self.usage, self.name = oracle, hf, hf.usage, f"oracle-answers[{hf.name}]"
        for f in ("supports_logprobs", "supports_batching", "is_chat", "is_encoder_decoder", "supports_prefill"):
            setattr(self, f, getattr(hf, f))
        self.count_tokens, self.truncate, self.render_text = hf.count_tokens, hf.truncate, hf.render_text
    def generate(self, prompts, max_new_tokens=128, **kw):
        self.hf.generate(prompts, max_new_tokens=max_new_tokens, **kw); return self.oracle.generate(prompts)
    def score(self, prompts, candidates, **kw):
        self.hf.score(prompts, candidates, **kw); return self.oracle.score(prompts, candidates)


def prp_speed(hf, n_queries, n_docs, sort_k, scoring):
    coll, run = make(n_queries, n_docs, 12, seed=2)
    b = OracleAnswersModelCost(QrelsOracle(coll), hf)
    hf.score(["warm-up"], ["A", "B"], progress=False)        # first-call costs, outside every timing
    counter = Counted(hf)
    res = {}
    for label, kw in (("sequential", dict(cache_comparisons=False, batch_orders=False, batch_queries=False)),
                      ("cached+batched orders", dict(batch_queries=False)),
                      ("+ batched queries", dict())):
        rr = get_reranker("pairwise-bubblesort", b, progress=False, k=sort_k, scoring=scoring, **kw)
        n0, t0 = counter.n, time.perf_counter()
        out = rr.rerank(coll, run, k=n_docs)
        res[label] = (out, counter.n - n0, time.perf_counter() - t0, sum(d["prompts"] for d in rr.diagnostics.values()),
                      sum(d["ties"] for d in rr.diagnostics.values()), sum(d["comparisons_asked"] for d in rr.diagnostics.values()))
    print(f"== PRP bubblesort top-{sort_k}, {scoring} scoring; answers: qrels oracle, cost: hf tiny Qwen2 on the same prompts "
          f"(CPU, 1 thread, LLM cache off): {n_queries} queries x {n_docs} docs")
    for label, (out, fw, sec, prompts, ties, asked) in res.items():
        print(f"  {label:<22} forward passes {fw:5d}  prompts {prompts:5d}  wall {sec:6.2f}s  (decided comparisons {asked - ties}/{asked})")
    same = all(v[0] == res["sequential"][0] for v in res.values())
    print(f"  same final ranking: {same}")
    assert same, "caching/batching changed the PRP ranking"
    s, c = res["sequential"], res["cached+batched orders"]
    return s[1] / c[1], s[2] / c[2]


def listwise_speed(b, n_queries, n_docs, window, step):
    coll, run = make(n_queries, n_docs, 8, seed=3)
    b.generate(["warm-up"], max_new_tokens=2, progress=False)  # first-call costs, outside every timing
    counter = Counted(b)
    res = {}
    for label, batch in (("one query at a time", False), ("batched across queries", True)):
        rr = get_reranker("listwise", b, progress=False, window=window, step=step, batch_queries=batch)
        n0, t0 = counter.n, time.perf_counter()
        out = rr.rerank(coll, run, k=n_docs)
        res[label] = (out, counter.n - n0, time.perf_counter() - t0)
    print(f"== listwise (RankZephyr prompt, window {window}, step {step}, answer budget {rr.max_new_tokens} tokens), "
          f"hf tiny Qwen2 end to end (CPU, 1 thread, LLM cache off): {n_queries} queries x {n_docs} docs")
    for label, (out, fw, sec) in res.items():
        print(f"  {label:<24} forward passes {fw:5d}  wall {sec:6.2f}s  {n_queries / sec:6.2f} queries/s")
    same = res["one query at a time"][0] == res["batched across queries"][0]
    print(f"  same rankings: {same}")
    assert same, "batching changed the listwise rankings"
    return res["one query at a time"][2] / res["batched across queries"][2]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (< 1 minute on 2 cores)")
    _smoke.add_flag(ap)
    a = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)  # 2 threads on a shared 2-core machine thrash (30x slower per call here)
    #           oracle queries, docs | PRP queries, docs, k | listwise queries, docs, window, step
    sizes = ((1, 30), (1, 8, 2), (2, 6, 4, 2)) if a.smoke else ((2, 100), (1, 30, 5), (8, 20, 10, 5)) if a.quick else \
            ((20, 100), (3, 100, 10), (16, 100, 20, 10))
    with _smoke.marked(a.smoke):
        oracle_checks(*sizes[0])
        with tempfile.TemporaryDirectory() as tmp:
            b = tiny_backend(tmp)
            fw, wall = prp_speed(b, *sizes[1], "likelihood")
            if not (a.quick or a.smoke): prp_speed(b, 1, 30, 10, "generation")
            lq = listwise_speed(b, *sizes[2])
        target("prp-forward-passes", fw, 2.0)
        target("prp-wall-time", wall, 1.5)
        target("listwise-queries-per-second", lq, 2.0)

if __name__ == "__main__":
    sys.exit(main())
