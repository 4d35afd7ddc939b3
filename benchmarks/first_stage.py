"""First-stage benchmarks: length-sorted vs fixed-order dense encoding, and threaded batch BM25 search vs one query at a time.

Each comparison runs both sides in this process on the same inputs and checks they give the same result:

* dense-length-sorted: `Encoder.encode_docs(sort=True)` (batches of similar length, the default) against
  `sort=False` (batches in corpus order) on the same passages and model: ratio of the process CPU times on one torch
  thread (a loaded shared machine inflates the wall time, and two torch threads on two busy cores spin), the two
  sides alternated, best of 3 (`--quick`) or 4; every embedding equal at cosine >= 0.9999. Beside it: the tokens the
  two batchings compute (padding included), from the encoder's tokenizer: what sorting can save on these passages.
  Model: the offline stand-in multilingual-e5-small (`clir_llm.assets.e5_small_path()`), or with `--tiny` (automatic
  when the stand-in is missing) a tiny randomly initialised BertModel; the report names it.
  Passages: the demo collection's German manual pages cut into pieces of 5-250 words (seeded), a corpus of mixed
  lengths like CIRAL's passages.
* dense-memory-flat: `Dense.index` over a generated stream of N and 4N documents (tiny model, nothing cached):
  the Python heap's working peak (tracemalloc peak minus what the returned result still holds: texts, batches,
  temporary lists) must not grow with the corpus; ratio peak(4N) / peak(N), goal <= 1.2x. What an exact index must
  keep (the FAISS vectors, outside the Python heap, and the list of docids, printed as "kept") is not counted.
* dense-index-memory-flat: the persisted, sharded index (`clir_llm.dense_index`: shards encoded chunk by chunk into
  .npy files, merged into a FAISS index saved beside the cache) over a generated corpus of the demo's size
  (909 documents, the demo's largest document set) and 10x that, in 4 shards, nothing cached: the Python heap's working
  peak (as above) must not grow with the corpus, ratio peak(10N) / peak(N), goal <= 1.2x; the run of the sharded index
  must equal the in-memory index's run, and a second run must load the index (index_loads = 1, nothing encoded).
  dense-index-rss-flat: the same two sizes, each in a fresh process (after the model is loaded and a warm-up index
  of 2,048 other documents built through the same cache: torch's and FAISS's one-time allocations and the SQLite page
  cache, which is bounded): the growth of the peak resident set (VmHWM, restarted after the warm-up through
  /proc/self/clear_refs, minus VmRSS then; torch and FAISS included) less what the result holds (the FAISS index and
  the docid list) and less the growth of SQLite's page cache (`sqlite3_memory_used()`, bounded by its cache_size per
  connection, about 2 MiB: a fixed allocation the small size does not fill, printed beside) must not grow with the
  corpus, ratio <= 1.2x. Three processes per size, alternated, the median of each (one process's resident memory moves
  by about a MiB from start to start), with the spread printed beside a short ratio.
* bm25-batch-threads: `BM25.retrieve(batch=True)` (Anserini's `SearchCollection`, 2 Java threads) against
  `batch=False` (one `LuceneSearcher.search` call per query), on a Lucene index of the demo's German pages with the
  German analyzer; queries are the pages' first lines (`--quick`: the first 300). The three ways alternate (after
  two warm-up rounds: the JIT), best of 5 (`--quick`) or 7 each; runs must be identical. The ratio is of wall times
  (the threads are the point); beside it: the batch's own gain on one thread in CPU time, what the second thread
  added, and the cores' ceiling measured in the same run, before and after, the higher (two plain processes against
  one on a matmul loop, as benchmarks/scale.py does). A short ratio whose goal is above (one-thread gain x ceiling)
  is marked as the machine's limit at that moment.

    python benchmarks/first_stage.py --quick
    python benchmarks/first_stage.py
"""
import argparse, os, random, sys, tempfile, time, tracemalloc
from pathlib import Path
import numpy as np
from clir_llm.cache import Cache
from clir_llm.core import ClirError, Document, Query
from clir_llm import dense as D
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _smoke

TARGETS = ["dense-length-sorted", "dense-memory-flat", "dense-index-memory-flat", "dense-index-rss-flat", "bm25-batch-threads"]


def target(name, ratio, goal, higher=True, why=""):
    "The target line; `why`: the measured explanation printed beside a short one."
    ok = ratio >= goal if higher else ratio <= goal
    print(f"target {name}: {ratio:.2f}x (goal {'' if higher else '<='}{goal:.1f}x) {'met' if ok else 'short'}"
          + (f"  [{why}]" if why and not ok else ""), flush=True)


def ceiling() -> float:
    "Two plain processes against one on a matmul loop, now (benchmarks/scale_ray.py): what the two cores can give."
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from scale_ray import cores_ceiling
    return cores_ceiling()


def german_docs():
    from clir_llm.collections import load_collection
    return list(load_collection("demo", "en-de").iter_docs())


def passages(n, seed=0):
    "n passages of 5-250 words cut from the demo's German pages (seeded)."
    rng = random.Random(seed)
    words = [w for d in german_docs()[:200] for w in d.text.split()]
    out, i = [], 0
    for k in range(n):
        m = rng.randint(5, 250)
        if i + m > len(words): i = 0
        out.append(Document(f"p{k}", " ".join(words[i:i + m]))); i += m
    return out


def bench_dense_sorting(args, tmp):
    if args.tiny or args.smoke: spec, label = D.get_encoder_spec("e5-small", model=str(D.tiny_random_model("bert", tmp / "bert")), doc_max_length=60), "tiny random BertModel"
    else:
        try:
            from clir_llm.assets import e5_small_path
            e5_small_path(); spec, label = D.get_encoder_spec("e5-small"), D.get_encoder_spec("e5-small").label
        except ClirError as e:
            print(f"# {e}; using a tiny random model"); spec, label = D.get_encoder_spec("e5-small", model=str(D.tiny_random_model("bert", tmp / "bert")), doc_max_length=60), "tiny random BertModel"
    n = 32 if args.smoke else 96 if args.quick else 512
    docs = passages(n)
    enc = D.Encoder.create(spec, cache=Cache(tmp, mode="off"), batch_size=16, progress=False)
    import torch
    threads = torch.get_num_threads(); torch.set_num_threads(1)    # single-threaded work: CPU time is its measure
    try:
        enc.encode_docs(docs[:16])                                      # load + warm up
        secs, out = {False: [], True: []}, {}
        for r in range(1 if args.smoke else 3 if args.quick else 4):                        # alternated: fixed, sorted, sorted, fixed, ...
            for srt in ((False, True) if r % 2 == 0 else (True, False)):
                t0 = time.process_time(); out[srt] = enc.encode_docs(docs, sort=srt); secs[srt].append(time.process_time() - t0)
    finally: torch.set_num_threads(threads)
    t_fixed, t_sorted = min(secs[False]), min(secs[True])
    cos = float((out[False] * out[True]).sum(1).min())
    runs = lambda ts: ", ".join(f"{t:.1f}" for t in ts)
    print(f"dense encoding, {label}, {n} passages (5-250 words), batch 16, {enc.device} {enc.dtype}, 1 torch thread, process CPU "
          f"time, best of {len(secs[True])} alternated: fixed order {n / t_fixed:.1f} docs/s ({runs(secs[False])} s), "
          f"length-sorted {n / t_sorted:.1f} docs/s ({runs(secs[True])} s), min cosine {cos:.6f}")
    if cos < 0.9999: print(f"ERROR: embeddings differ (min cosine {cos:.6f})"); return False
    # what sorting can save here: the padded tokens (the linear layers' work) and padded attention pairs (L^2) of the
    # two batchings, from the encoder's own tokenizer; the package sorts by characters (no tokenizer pass before batching)
    inputs = [D.doc_input(enc.spec, d) for d in docs]
    lens = [len(x) for x in enc.load()[1](inputs, truncation=True, max_length=enc.spec.doc_max_length)["input_ids"]]
    def padded(order, power=1):
        order = list(order)
        return sum(max(lens[i] for i in order[b:b + 16]) ** power * len(order[b:b + 16]) for b in range(0, n, 16))
    by_chars, by_tokens = sorted(range(n), key=lambda i: len(inputs[i])), sorted(range(n), key=lens.__getitem__)
    lin, att, tok_lin = padded(range(n)) / padded(by_chars), padded(range(n), 2) / padded(by_chars, 2), padded(range(n)) / padded(by_tokens)
    print(f"  tokens computed, padding included: corpus order {padded(range(n))}, sorted by characters {padded(by_chars)} "
          f"({lin:.2f}x fewer; attention pairs {att:.2f}x fewer), real tokens {sum(lens)}; sorted by token count it would be "
          f"{padded(by_tokens)} ({tok_lin:.2f}x fewer, at the price of a tokenizer pass before batching)")
    r = t_fixed / t_sorted
    jitter = max((max(ts) - min(ts)) / min(ts) for ts in secs.values())   # how far one side's repeats are apart
    where = ("between the two" if lin <= r <= att else
             f"{1 - r / lin:.0%} under the token ratio, while one side's repeats are {jitter:.0%} apart" if r < lin else "above both")
    target("dense-length-sorted", r, 1.5,
           why=f"the padding of these passages bounds the gain: sorting by characters computes {lin:.2f}x fewer tokens in the "
               f"linear layers and {att:.2f}x fewer attention pairs, and the measured {r:.2f}x is {where}; "
               f"sorting by token count would compute {tok_lin:.2f}x fewer tokens")
    return True


class Stream:
    "A generated collection: documents are made as they are read, never stored."
    name, pair, doc_lang, query_lang, queries = "stream", "en-en", "en", "en", {}
    def __init__(self, n): self.num_docs, self.key = n, f"stream-{n}"
    def iter_docs(self):
        rng = random.Random(self.num_docs)
        for i in range(self.num_docs):
            yield Document(f"s{i}", " ".join(rng.choice(D._WORDS) for _ in range(rng.randint(5, 60))))


def bench_memory(args, tmp):
    model = D.tiny_random_model("bert", tmp / "bert-mem")
    n = 40 if args.smoke else 300 if args.quick else 2000
    peaks, kept = {}, {}
    for m in (n // 2, n, 4 * n):   # the first, smaller run warms up one-time allocations (tokenizer caches, FAISS)
        d = D.Dense.create(D.get_encoder_spec("e5-small", model=str(model)), cache=Cache(tmp, mode="off"), chunk_size=256,
                    batch_size=32, progress=False)
        d.encoder.load()
        tracemalloc.start(); tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        index, docids = d.index(Stream(m))
        held, peak = tracemalloc.get_traced_memory()
        peaks[m], kept[m] = peak - held, held - base  # working memory above what the result keeps (its docid list)
        tracemalloc.stop()
        assert index.ntotal == m and len(docids) == m
    print(f"dense streaming, tiny random BertModel, chunks of 256: Python heap working peak {peaks[n] / 2**20:.2f} MiB "
          f"for {n} docs, {peaks[4 * n] / 2**20:.2f} MiB for {4 * n} docs; kept in the result (the docid list) "
          f"{kept[n] / 2**20:.2f} / {kept[4 * n] / 2**20:.2f} MiB; FAISS vectors not counted ({4 * n} x 32 x 4 bytes)")
    target("dense-memory-flat", peaks[4 * n] / peaks[n], 1.2, higher=False)
    return True


def bench_index_memory(args, tmp):
    model = D.tiny_random_model("bert", tmp / "bert-index")
    n = 24 if args.smoke else 909
    peaks, kept = {}, {}
    for m in (n // 2, n, 10 * n):   # the first, smaller run warms up one-time allocations
        cache = Cache(tmp / f"index-{m}")
        d = D.Dense.create(D.get_encoder_spec("e5-small", model=str(model)), cache=cache, chunk_size=256, batch_size=32,
                    progress=False, shards=4)
        d.encoder.load()
        coll = Stream(m); coll.queries = {f"q{i}": Query(f"q{i}", " ".join(D._WORDS[i:i + 3])) for i in range(5)}
        tracemalloc.start(); tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        index, docids = d.index(coll)
        held, peak = tracemalloc.get_traced_memory()
        peaks[m], kept[m] = peak - held, held - base
        tracemalloc.stop()
        assert index.ntotal == m and len(docids) == m and d.usage.counters["shards_encoded"] == 4
        if m == n:   # same run as the in-memory index; the second run loads the saved index
            mem = D.Dense.create(D.get_encoder_spec("e5-small", model=str(model)), cache=Cache(tmp / "off", mode="off"), chunk_size=256,
                          batch_size=32, progress=False).retrieve(coll, k=10)
            again = D.Dense.create(D.get_encoder_spec("e5-small", model=str(model)), cache=cache, chunk_size=256, batch_size=32, progress=False)
            same = again.retrieve(coll, k=10) == mem
            loaded = again.usage.counters.get("index_loads") == 1 and not again.usage.counters.get("docs_encoded")
            if not (same and loaded): print(f"ERROR: sharded run equal to in-memory: {same}; index loaded, not rebuilt: {loaded}"); return False
    print(f"dense sharded index, tiny random BertModel, 4 shards, chunks of 256: Python heap working peak {peaks[n] / 2**20:.2f} MiB "
          f"for {n} docs, {peaks[10 * n] / 2**20:.2f} MiB for {10 * n} docs; kept (the docid list) {kept[n] / 2**20:.2f} / "
          f"{kept[10 * n] / 2**20:.2f} MiB; FAISS vectors not counted; run identical to the in-memory index, reloaded without encoding")
    target("dense-index-memory-flat", peaks[10 * n] / peaks[n], 1.2, higher=False)
    # a process's resident memory moves by about a MiB from one start to the next (malloc arenas of torch's and the
    # tokenizer's threads): three fresh processes per size, alternated, and the median of each size counts
    net_of = lambda r: r["working"] - r["sqlite"]
    tries = {n: [], 10 * n: []}
    for k in range(1 if args.smoke else 3):   # a smoke run: one try per size, in this process (a child imports torch again)
        for m in (n, 10 * n): tries[m].append(rss_child(m, str(model), str(tmp / f"rss-{m}-{k}"), warm=64) if args.smoke else
                                              _rss_in_child(m, model, tmp / f"rss-{m}-{k}"))
    rss = {m: sorted(ts, key=net_of)[len(ts) // 2] for m, ts in tries.items()}
    print(f"dense sharded index, whole process (a fresh one per size, after loading the model and a 2,048-document warm-up index; "
          f"the median of 3 processes): "
          f"peak RSS above the start {rss[n]['grew'] / 2**20:.1f} MiB for {n} docs, {rss[10 * n]['grew'] / 2**20:.1f} MiB for "
          f"{10 * n} docs, of which the result (FAISS index and docid list) {rss[n]['kept'] / 2**20:.2f} / {rss[10 * n]['kept'] / 2**20:.2f} MiB, "
          f"working {rss[n]['working'] / 2**20:.2f} / {rss[10 * n]['working'] / 2**20:.2f} MiB (of which SQLite's page cache, "
          f"bounded by its cache_size, {rss[n]['sqlite'] / 2**20:.2f} / {rss[10 * n]['sqlite'] / 2**20:.2f} MiB); "
          f"process peak {rss[n]['peak'] / 2**20:.0f} / {rss[10 * n]['peak'] / 2**20:.0f} MiB")
    bound = _sqlite_bound()
    net = {m: net_of(r) for m, r in rss.items()}
    each = {m: ", ".join(f"{net_of(r) / 2**20:.2f}" for r in ts) for m, ts in tries.items()}
    print(f"  working memory less SQLite's page cache (bounded: cache_size {bound / 2**20:.2f} MiB per connection; "
          f"{rss[10 * n]['sqlite'] / 2**20:.2f} MiB reached at {10 * n} docs): {net[n] / 2**20:.2f} / {net[10 * n] / 2**20:.2f} MiB "
          f"(the three processes: {each[n]} / {each[10 * n]} MiB)")
    if max(r["sqlite"] for r in tries[10 * n]) > 1.25 * bound: print("ERROR: SQLite's memory grew past its page cache bound"); return False
    spread = max(max(map(net_of, ts)) - min(map(net_of, ts)) for ts in tries.values())
    why = (f"{(net[10 * n] - net[n]) / 2**20:.2f} MiB more at {10 * n} docs, while three processes of one size are up to "
           f"{spread / 2**20:.2f} MiB apart" + (": within the noise of a process's resident memory" if net[10 * n] - net[n] <= spread else ""))
    target("dense-index-rss-flat", net[10 * n] / net[n], 1.2, higher=False, why=why)
    return True


def _status_bytes(field: str) -> int:
    "VmRSS (resident now) or VmHWM (the peak resident so far) of this process, from /proc (Linux)."
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"): return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _sqlite_bytes() -> int:
    "The memory SQLite holds now (its page caches): `sqlite3_memory_used()` of the system library Python's sqlite3 uses."
    import ctypes, ctypes.util
    lib = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
    lib.sqlite3_memory_used.restype = ctypes.c_int64
    return lib.sqlite3_memory_used()


def _sqlite_bound() -> int:
    "The page cache SQLite keeps per connection at most (PRAGMA cache_size: negative = KiB, positive = pages)."
    import sqlite3
    con = sqlite3.connect(":memory:")
    size, page = con.execute("PRAGMA cache_size").fetchone()[0], con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    return -size * 1024 if size < 0 else size * page


def rss_child(m: int, model: str, folder: str, warm: int = 2048) -> dict:
    "In a fresh process: the resident memory a sharded index of `m` generated documents adds (see bench_index_memory)."
    mk = lambda cache: D.Dense.create(D.get_encoder_spec("e5-small", model=model), cache=cache, chunk_size=256, batch_size=32,
                               progress=False, shards=4)
    cache = Cache(Path(folder) / "index")
    # one-time allocations first: torch's and FAISS's at full chunks, and the cache's SQLite page cache (bounded, about
    # 2 MiB per connection), by an index of 2,048 other generated documents through the same cache
    d = mk(cache); d.encoder.load(); d.index(Stream(warm))
    Path("/proc/self/clear_refs").write_text("5")   # VmHWM restarts from the resident set now: the warm-up's peak is not ours
    start, sql0 = _status_bytes("VmRSS"), _sqlite_bytes()
    index, docids = mk(cache).index(Stream(m))
    peak, sql = _status_bytes("VmHWM"), _sqlite_bytes() - sql0
    kept = index.ntotal * index.d * 4 + sys.getsizeof(docids) + sum(map(sys.getsizeof, docids))   # what the result holds
    return dict(grew=peak - start, peak=peak, index=index.ntotal * index.d * 4, kept=kept, working=peak - start - kept, sqlite=sql)


def _rss_in_child(m: int, model, folder: Path) -> dict:
    import json, subprocess
    out = subprocess.run([sys.executable, __file__, "--rss-child", str(m), str(model), str(folder)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def bench_bm25(args, tmp):
    from clir_llm.bm25 import BM25
    docs = german_docs()[:40 if args.smoke else None]
    class C:
        name, pair, doc_lang, query_lang, key = "demo-de-pages", "de-de", "de", "de", f"bench-demo-de-{len(docs)}"
        num_docs = len(docs)
        def iter_docs(self): return iter(docs)
    c = C()
    n = 10 if args.smoke else 300 if args.quick else len(docs)
    c.queries = {d.docid: Query(d.docid, d.text.split("\n", 1)[0], "de") for d in docs[:n]}
    b = BM25.create(cache=Cache(tmp), threads=2, progress=False)
    b.retrieve(c, k=100)                                                  # build the index, start the JVM
    ways = {"one at a time": (False, 1), "batch 1 thread": (True, 1), "batch 2 threads": (True, 2)}
    wall, cpu, runs = {w: [] for w in ways}, {w: [] for w in ways}, {}
    reps = 1 if args.smoke else 5 if args.quick else 7
    smoke_nan = [float("nan")] if args.smoke else None                    # a smoke run: no ceiling (two processes importing torch)
    cores = smoke_nan or [ceiling()]                                      # before and after the timed rounds: the higher counts
    for r in range((0 if args.smoke else 2) + reps):                                             # 2 warm-up rounds (the JIT), then timed ones
        order = list(ways)[r % 3:] + list(ways)[:r % 3]                   # each way first, middle and last in turn
        for w in order:
            b.threads = ways[w][1]
            t0, c0 = time.perf_counter(), time.process_time()
            runs[w] = b.retrieve(c, k=100, batch=ways[w][0])
            if r >= (0 if args.smoke else 2): wall[w].append(time.perf_counter() - t0); cpu[w].append(time.process_time() - c0)
    b.threads = 2
    cores = cores[0] if args.smoke else max(cores + [ceiling()])
    t, p = {w: min(v) for w, v in wall.items()}, {w: min(v) for w, v in cpu.items()}
    same = runs["one at a time"] == runs["batch 1 thread"] == runs["batch 2 threads"]
    print(f"BM25 (pyserini, German analyzer), {len(docs)} pages, {n} queries, top 100, best of {reps} alternated: one at a time "
          f"{n / t['one at a time']:.0f} q/s, batch (SearchCollection) 1 thread {n / t['batch 1 thread']:.0f} q/s, "
          f"2 threads {n / t['batch 2 threads']:.0f} q/s (wall); CPU time " + ", ".join(f"{w} {p[w]:.2f} s" for w in ways)
          + f"; identical runs: {same}; load {os.getloadavg()[0]:.1f}; two plain processes got {cores:.2f}x of one in this run")
    if not same: print("ERROR: runs differ"); return False
    gain1 = p["one at a time"] / p["batch 1 thread"]                     # the batch's own gain, on one thread (CPU time)
    gain2 = t["batch 1 thread"] / t["batch 2 threads"]                   # what the second thread added (wall)
    why = (f"batch gain on one thread {gain1:.2f}x (CPU time) x second thread {gain2:.2f}x (wall); the cores' ceiling in "
           f"this run is {cores:.2f}x (two plain processes against one)"
           + (": no second core was free in this run, so a second thread could only cost" if cores < 1.1 else
              f": at most {gain1 * cores:.2f}x was reachable now, the machine's limit at this moment" if gain1 * cores < 1.5 else
              f", {gain1 * cores:.2f}x reachable: the threads fell short of it"))
    target("bm25-batch-threads", t["one at a time"] / t["batch 2 threads"], 1.5, why=why)
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small inputs (< 1 minute on 2 idle cores)")
    ap.add_argument("--tiny", action="store_true", help="tiny random encoder instead of the e5-small stand-in")
    ap.add_argument("--only", choices=["dense", "memory", "index", "bm25"], help="run one benchmark")
    ap.add_argument("--rss-child", nargs=3, metavar=("DOCS", "MODEL", "FOLDER"), help=argparse.SUPPRESS)
    _smoke.add_flag(ap)
    args = ap.parse_args(argv)
    if args.rss_child:
        import json
        print(json.dumps(rss_child(int(args.rss_child[0]), args.rss_child[1], args.rss_child[2]))); return 0
    ok = True
    with tempfile.TemporaryDirectory() as t, _smoke.marked(args.smoke):
        tmp = Path(t)
        for name, fn in (("dense", bench_dense_sorting), ("memory", bench_memory), ("index", bench_index_memory), ("bm25", bench_bm25)):
            if args.only in (None, name): ok &= fn(args, tmp)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
