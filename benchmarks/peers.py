"""Speed against the reference libraries: the package and llm-rankers, rank_llm, pyserini, sentence-transformers and
FAISS side by side, in one script run, on the same inputs and the same model objects.

Inputs: the demo collection (`clir_llm.collections.load_collection("demo", pair)`), the package's BM25 first-stage
run of it, the first N queries (sorted ids) that have hits. Models: the offline stand-ins, the Qwen2.5-Coder-0.5B
GGUF dequantised by transformers (`hf:qwen2.5-coder-0.5b-offline`; the package's backend loads it and the SAME
transformers model and tokenizer objects are handed to the peer) and multilingual-e5-small (`dense:e5-small`; the
same folder loaded by sentence-transformers). Every comparison warms both sides up outside the timing, checks the
outputs (identical rankings / runs, or every difference listed with its reason) and prints one line:

    target peer-<name>: <ratio>x (goal <G>x) met|short

(ratio = the peer's time / ours on the same work, i.e. our queries or documents per second over the peer's; for the
single-threaded model comparisons the time is the process's CPU time with `--device cpu`, which other jobs on a shared
machine do not inflate as they do the wall time, and the wall time with `--device cuda` (`--clock` chooses); the
encoders run batch by batch, the two sides alternated on each batch, best of 3 (`--quick`) or 5 per batch; BM25 (2
Java threads a side) and FAISS search (on the OpenMP threads torch leaves: its one thread with `--device cpu`, set
before FAISS loads, carries over to FAISS, as the line prints) are timed by the wall clock, the two sides alternated, best of 5 / 7, with
their CPU times and the cores' ceiling measured in the same run beside them (two plain processes against one on a
matmul loop, as benchmarks/scale.py does), and a measured explanation beside a target still short),
or `target peer-<name>: skipped (<why>)` where a peer cannot run here. The LLM comparisons run each side `--repeats` times
(2), the order reversed each round, and take the least time (a shared machine's load drifts within minutes); PRP
generation reads the answer on both sides as llm-rankers does (one new token, exactly 'A' or 'B'). The peers are NOT dependencies of the
package: install them in a separate environment (benchmarks/peers-requirements.txt says how); this script
installs nothing.

    python benchmarks/peers.py --quick               # a few minutes on 2 CPU cores
    python benchmarks/peers.py --device cuda         # the same comparisons on a GPU
    python benchmarks/peers.py --smoke               # seconds: dense encoding and search on 8 documents, both sides; BM25
                                                     # and the LLM lines skipped or not measured (tests/test_benchmarks.py)
"""
import argparse, importlib, importlib.util, inspect, os, re, sys, tempfile, time
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _smoke

GOALS = {"prp-bubblesort": 1.6, "prp-bubblesort-likelihood": 2.0, "prp-heapsort": 1.6, "prp-allpair": 2.0,
         "setwise-heapsort": 1.3, "listwise-rankzephyr": 2.0, "bm25-en-de": 1.3, "bm25-de-ru": 1.3,
         "dense-encode": 1.0, "dense-search": 1.0}
# issue 30: the LLM comparisons run twice, prefix reuse on (the target) and off (`<name>-no-reuse`, the same line without
# a goal), each on a fresh backend (an empty prefix store) sharing one model object
SECTIONS = ("prp", "setwise", "listwise", "bm25", "dense")
TARGETS = ["peer-prp-bubblesort", "peer-prp-heapsort", "peer-prp-bubblesort-likelihood", "peer-prp-allpair", "peer-setwise-heapsort",
           "peer-listwise-rankzephyr", "peer-bm25-en-de", "peer-bm25-de-ru", "peer-dense-encode", "peer-dense-search"]
LLM_TARGETS = {"prp": ("llmrankers.pairwise", ["prp-bubblesort", "prp-heapsort", "prp-bubblesort-likelihood", "prp-allpair"]),
               "setwise": ("llmrankers.setwise", ["setwise-heapsort"]), "listwise": ("rank_llm", ["listwise-rankzephyr"])}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 queries x 5 documents, top-2, 32-token passages, 64 documents encoded (minutes on 2 loaded cores)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where both sides run the models")
    ap.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="run these comparisons only")
    ap.add_argument("--queries", type=int, default=None, help="queries for the LLM comparisons (default 2 quick, 20 full)")
    ap.add_argument("--depth", type=int, default=None, help="first-stage documents reranked (default 5 quick, 100 full)")
    ap.add_argument("--top", type=int, default=None, help="the k of the sorts (default 2 quick, 10 full)")
    ap.add_argument("--passage-tokens", type=int, default=None, help="passage cut, tokens (default 32 quick, 300 full)")
    ap.add_argument("--repeats", type=int, default=2,
                    help="LLM comparisons: each side this many times, the order reversed each round; the least time counts "
                         "(a shared machine's load drifts within minutes; CPU time rises with it too)")
    ap.add_argument("--clock", choices=["cpu", "wall"], default=None,
                    help="what is timed: the process's CPU time (default with --device cpu: a loaded shared machine does "
                         "not inflate it) or the wall time (default with --device cuda)")
    ap.add_argument("--smoke", action="store_true", help="seconds: dense encoding and search (8 documents) on both sides, one "
                    "repeat; BM25 (a JVM) and the LLM comparisons (the 0.5B stand-in loads in minutes) skipped or not measured")
    a = ap.parse_args(argv)
    if a.smoke: a.quick, a.queries, a.repeats = True, a.queries or 1, 1
    a.clock = a.clock or ("cpu" if a.device == "cpu" else "wall")
    CLOCK[0] = time.process_time if a.clock == "cpu" else time.perf_counter
    a.queries = a.queries or (2 if a.quick else 20)
    a.depth = a.depth or (5 if a.quick else 100)
    a.top = a.top or (2 if a.quick else 10)
    a.passage_tokens = a.passage_tokens or (32 if a.quick else 300)
    return a


def target(name, ratio, note=""):
    if name.endswith("-no-reuse"):    # the same comparison with prefix reuse off: shown beside the target, no goal of its own
        print(f"target peer-{name}: {ratio:.2f}x (prefix reuse off; the goal is {name[:-9]}'s)" + (f"  [{note}]" if note else ""), flush=True)
        return True
    goal = GOALS[name]
    print(f"target peer-{name}: {ratio:.2f}x (goal {goal:.1f}x) {'met' if ratio >= goal else 'short'}" + (f"  [{note}]" if note else ""),
          flush=True)
    return ratio >= goal


def skipped(name, why):
    print(f"target peer-{name}: skipped ({why})", flush=True)


def peer(module, name):
    "The peer module, or None after printing why it cannot run."
    try: return importlib.import_module(module)
    except Exception as e:  # ImportError, or the peer's own import-time failure
        skipped(name, f"{module} cannot be imported here: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                      " (install the peers: benchmarks/peers-requirements.txt)")
        return None


CLOCK = [time.process_time]   # set by parse_args (--clock)

def timed(fn, *a, _clock=None, **kw):
    "`fn`'s result and its time on `_clock`, else the chosen clock (CPU seconds of this process, or wall seconds)."
    clock = _clock or CLOCK[0]
    t0 = clock(); out = fn(*a, **kw); return out, clock() - t0

def alternating(reps: int, runs: dict) -> dict:
    """Each of `runs` (name -> a call returning (result, seconds, ...)) `reps` times, the order reversed every round
    (a, b, c, then c, b, a ...): name -> the first round's return value with the least seconds of all rounds."""
    names, out = list(runs), {}
    for r in range(max(1, reps)):
        for n in (names if r % 2 == 0 else names[::-1]):
            got = runs[n]()
            out[n] = got if n not in out else (out[n][0], min(out[n][1], got[1]), *out[n][2:])
    return out


def alternated(sides: dict, reps: int, warm: int = 0, clock=None, keep: bool = False):
    """Run each side `warm` + `reps` times, the sides alternating (which goes first swaps each round); returns the timed
    rounds' times per side: (wall, CPU) lists, or with `clock` (one clock) and `keep`: (times, the last outputs)."""
    names, times, cpus, out = list(sides), {k: [] for k in sides}, {k: [] for k in sides}, {}
    for r in range(warm + reps):
        for k in (names if r % 2 == 0 else names[::-1]):
            w, c = (clock or time.perf_counter)(), time.process_time()
            out[k] = sides[k]()
            if r >= warm: times[k].append((clock or time.perf_counter)() - w); cpus[k].append(time.process_time() - c)
    if clock is not None: return (times, out) if keep else times
    return times, cpus


def jitter(times: dict) -> float:
    "How far a side's repeats scatter: the larger (median - best) / best of the sides."
    return max((sorted(ts)[len(ts) // 2] - min(ts)) / min(ts) for ts in times.values())


def runs_ms(ts) -> str: return ", ".join(f"{t * 1000:.0f}" for t in ts) + " ms"


def spread(secs: dict) -> float:
    """The repeats' own spread: for the side whose repeats scatter most, (sum of the per-batch medians - sum of the
    per-batch bests) / sum of the bests; a ratio closer to 1.0 than this is not resolved by the run."""
    med = lambda ts: sorted(ts)[len(ts) // 2]
    return max((sum(map(med, groups)) - sum(map(min, groups))) / sum(map(min, groups)) for groups in secs.values())


WALL = time.perf_counter   # the multi-threaded comparisons (BM25 on 2 Java threads a side, FAISS's OpenMP search) use
                           # wall time: their parallelism is part of the speed, and CPU time would not show it


def diff_rankings(ours: dict, theirs: dict, k: int) -> list[str]:
    "One line per query whose top-`k` differs."
    return [f"    {q}: ours {ours[q][:k]} / peer {theirs[q][:k]}" for q in ours if ours[q][:k] != theirs[q][:k]]


# ---------------------------------------------------------------- inputs
class Inputs:
    "The demo collection, its BM25 run, the chosen queries and the LLM backend (loaded once)."
    def __init__(self, a, tmp):
        from clir_llm.cache import Cache
        from clir_llm.collections import load_collection
        self.a, self.tmp, self.cache = a, tmp, Cache()
        self.coll = load_collection("demo", "en-de")
        self._run, self._backend, self._ceiling = None, None, None

    @property
    def ceiling(self) -> float:
        "What the two cores can give now: two plain processes against one on a matmul loop (benchmarks/scale_ray.py), once."
        if self._ceiling is None:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from scale_ray import cores_ceiling
            self._ceiling = cores_ceiling()
        return self._ceiling

    @property
    def run(self):
        "The BM25 run (package default BM25, cached index) cut to the first `queries` queries with `depth` hits."
        if self._run is None:
            from clir_llm.bm25 import BM25
            from clir_llm.core import Run
            full = BM25(cache=self.cache, progress=False).retrieve(self.coll, k=self.a.depth)
            qids = [q for q in sorted(full) if len(full.docids(q)) >= self.a.depth][:self.a.queries]
            self._run = Run.from_ranked({q: full.docids(q, self.a.depth) for q in qids}, name="bm25")
        return self._run

    @property
    def backend(self):
        if self._backend is None:
            from clir_llm.cache import Cache
            from clir_llm.llm import get_backend
            self._backend = get_backend("hf:qwen2.5-coder-0.5b-offline", cache=Cache(Path(self.tmp) / "llm", mode="off"),
                                        device=self.a.device)
            self._backend.hf_model  # load outside every timing
        return self._backend

    def fresh(self, reuse: bool = True):
        "A backend on the same model and tokenizer objects with an empty prefix store (`reuse`: prefix reuse on or off)."
        from clir_llm.cache import Cache
        from clir_llm.llm import get_backend
        b = self.backend
        return get_backend("hf:qwen2.5-coder-0.5b-offline", cache=Cache(Path(self.tmp) / "llm", mode="off"), device=self.a.device,
                           prefix_cache=reuse, hf_model=b.hf_model, hf_tokenizer=b.tokenizer)

    def texts(self, q):
        "The query and the passages of query `q` as both sides see them: text only, cut to the backend's tokens."
        from clir_llm.templates import squash
        b, ids = self.backend, self.run.docids(q)
        docs = {d.docid: b.truncate(squash(d.text), self.a.passage_tokens) for d in self.coll.get_docs(ids)}
        return b.truncate(self.coll.queries[q].text, 128), [(d, docs[d]) for d in ids]


# ---------------------------------------------------------------- PRP: llm-rankers PairwiseLlmRanker
def llm_rankers_pairwise(P, inp, method, k):
    """llm-rankers' PairwiseLlmRanker on our backend's model and tokenizer objects. Its constructor accepts only T5 and
    Llama configs and loads its own copy; the object is built without it, with the attributes its decoder-only
    ("llama") path reads, and the prompt text taken from its own source."""
    r = P.PairwiseLlmRanker.__new__(P.PairwiseLlmRanker)
    src = inspect.getsource(P.PairwiseLlmRanker.__init__)
    r.prompt = re.search(r'self\.prompt = """(.*?)"""', src, re.S).group(1)
    r.device, r.method, r.batch_size, r.k = inp.a.device, method, 2, k
    r.config = SimpleNamespace(model_type="llama")   # its decoder-only code path (chat template + " Passage:", 1 new token)
    r.tokenizer, r.llm = inp.backend.tokenizer, inp.backend.hf_model
    r.total_compare = r.total_completion_tokens = r.total_prompt_tokens = 0
    return r


def peer_rerank(ranker, inp, SearchResult):
    "The peer's rankings of every query, one query after another (its API takes one query)."
    out = {}
    for q in inp.run:
        query, docs = inp.texts(q)
        out[q] = [h.docid for h in ranker.rerank(query, [SearchResult(d, 0.0, t) for d, t in docs])]
    return out


def ours_prp(inp, method, scoring, ties=None, reuse=True):
    """Our PRP with the peer's settings; generation reads the answer as llm-rankers does (`answers="exact"`: one new
    token, exactly 'A' or 'B'; the default reading generates a second token to check that the letter stands alone)."""
    from clir_llm.rerank import get_reranker
    rr = get_reranker(f"pairwise-{method}", inp.fresh(reuse), progress=False, k=inp.a.top, scoring=scoring,
                      passage_tokens=inp.a.passage_tokens, doc_title=False, **({"heapsort_ties": ties} if ties else {}),
                      **({"answers": "exact"} if scoring == "generation" else {}))
    run, sec = timed(rr.rerank, inp.coll, inp.run, k=inp.a.depth)
    return {q: run.docids(q) for q in inp.run}, sec, rr


def reuse_note(rr) -> str:
    "The prefix store's work in a reranker's usage: prompt tokens computed of those a plain batch computes, prompts that reused a prefix."
    c = rr.usage.counters
    if not c.get("prefill_tokens_without_reuse"): return "no prefix reuse"
    return (f"computed {c['prefill_tokens'] / c['prefill_tokens_without_reuse']:.0%} of the prompt tokens "
            f"(+{c.get('prefill_padding_tokens', 0) / c['prefill_tokens_without_reuse']:.0%} padding), "
            f"{c.get('prefix_cache_hits', 0)} prompts reused a prefix")


def compare_prp(inp):
    P = peer("llmrankers.pairwise", "prp-bubblesort")
    if P is None:
        for n in ("prp-heapsort", "prp-bubblesort-likelihood", "prp-allpair"): skipped(n, "llm-rankers missing (see above)")
        return
    from llmrankers.rankers import SearchResult
    a, b = inp.a, inp.backend
    nq = len(inp.run)
    print(f"== PRP, {b.name} ({a.device}), {nq} queries x top-{a.depth} BM25 demo en-de, sort k={a.top}, passages cut to "
          f"{a.passage_tokens} tokens, LLM cache off; both sides generate one token and read it as llm-rankers does; "
          f"{'the least ' + a.clock.upper() + ' time of ' + str(a.repeats) + ' alternating runs' if a.repeats > 1 else a.clock.upper() + ' time'}", flush=True)
    # warm-up, outside the timing: one comparison each way on the first query
    query, docs = inp.texts(next(iter(inp.run)))
    llm_rankers_pairwise(P, inp, "bubblesort", 1).compare(query, [docs[0][1], docs[1][1]])
    b.generate(["warm-up"], max_new_tokens=2, progress=False)
    for method, ties in (("bubblesort", None), ("heapsort", "llm-rankers")):
        name = f"prp-{method}"
        peer_r = llm_rankers_pairwise(P, inp, method, a.top)
        got = alternating(a.repeats, {"peer": lambda: timed(peer_rerank, peer_r, inp, SearchResult),
                                      True: lambda: ours_prp(inp, method, "generation", ties, True),
                                      False: lambda: ours_prp(inp, method, "generation", ties, False)})
        theirs, t_peer = got["peer"]
        for reuse in (True, False):
            ours, t_ours, rr = got[reuse]
            diffs = diff_rankings(ours, theirs, a.depth)
            prompts = sum(d["prompts"] for d in rr.diagnostics.values())
            print(f"  {method}, prefix reuse {'on' if reuse else 'off'}: llm-rankers {t_peer:.1f}s ({nq / t_peer:.3f} q/s, "
                  f"{2 * peer_r.total_compare} prompts in the last query), ours {t_ours:.1f}s ({nq / t_ours:.3f} q/s, {prompts} "
                  f"prompts in all; {reuse_note(rr)}); same rankings: {not diffs}", flush=True)
            for line in diffs: print(line)
            if diffs: print("    (differences: batched prompts are padded, so a near-tie logit can fall the other way; see the README)")
            target(name + ("" if reuse else "-no-reuse"), t_peer / t_ours, "same rankings" if not diffs else f"{len(diffs)} queries differ")
    skipped("prp-bubblesort-likelihood", "llm-rankers 0.0.2 PairwiseLlmRanker scores by generation only; nothing to compare with")
    skipped("prp-allpair", "llm-rankers 0.0.2 allpair is written for T5 (decoder_input_ids); it cannot run a decoder-only model")


# ---------------------------------------------------------------- setwise: llm-rankers SetwiseLlmRanker
def compare_setwise(inp):
    from clir_llm.rerank import RERANKERS
    if RERANKERS.find("setwise-heapsort") is None:
        return skipped("setwise-heapsort", "setwise reranker not on this branch")
    S = peer("llmrankers.setwise", "setwise-heapsort")
    if S is None: return
    from llmrankers.rankers import SearchResult
    from clir_llm.rerank import get_reranker
    a, b = inp.a, inp.backend
    r = S.SetwiseLlmRanker.__new__(S.SetwiseLlmRanker)
    r.device, r.num_child, r.k, r.scoring, r.method, r.num_permutation = a.device, 3, a.top, "generation", "heapsort", 1
    r.config = SimpleNamespace(model_type="llama")
    r.tokenizer, r.llm = b.tokenizer, b.hf_model
    r.CHARACTERS = [chr(ord("A") + i) for i in range(20)]
    r.total_compare = r.total_completion_tokens = r.total_prompt_tokens = 0
    # ours with the peer's settings: sort k, 3 children, generation, passages as inp.texts cuts them (no title)
    ours_rr = lambda reuse: get_reranker("setwise-heapsort", inp.fresh(reuse), progress=False, k=a.top, num_child=3,
                                         scoring="generation", query_tokens=128, passage_tokens=a.passage_tokens, doc_title=False)
    query, docs = inp.texts(next(iter(inp.run)))
    r.compare(query, [SearchResult(d, 0.0, t) for d, t in docs[:4]]); r.total_compare = 0   # warm-up, outside the timing
    b.generate(["warm-up"], max_new_tokens=2, progress=False)
    nq = len(inp.run)
    print(f"== setwise heapsort, {b.name} ({a.device}), {nq} queries x top-{a.depth}, sort k={a.top}, 3 children, passages cut "
          f"to {a.passage_tokens} tokens, LLM cache off; the least {a.clock.upper()} time of {a.repeats} alternating runs", flush=True)
    def ours_run(reuse):
        rr = ours_rr(reuse)
        run, sec = timed(rr.rerank, inp.coll, inp.run, k=a.depth)
        return {q: run.docids(q) for q in inp.run}, sec, rr
    got = alternating(a.repeats, {"peer": lambda: timed(peer_rerank, r, inp, SearchResult),
                                  True: lambda: ours_run(True), False: lambda: ours_run(False)})
    theirs, t_peer = got["peer"]
    for reuse in (True, False):
        ours, t_ours, rr = got[reuse]
        diffs = diff_rankings(ours, theirs, a.depth)
        sets = sum(d["sets"] - d["trivial_sets"] for d in rr.diagnostics.values())
        print(f"  setwise heapsort, prefix reuse {'on' if reuse else 'off'}: llm-rankers {t_peer:.1f}s ({nq / t_peer:.3f} q/s, "
              f"{r.total_compare} prompts in the last query), ours {t_ours:.1f}s ({nq / t_ours:.3f} q/s, {sets} prompts in all; "
              f"{reuse_note(rr)}); same rankings: {not diffs}", flush=True)
        for line in diffs: print(line)
        target("setwise-heapsort" + ("" if reuse else "-no-reuse"), t_peer / t_ours,
               "same rankings" if not diffs else f"{len(diffs)} queries differ")


# ---------------------------------------------------------------- listwise: rank_llm's window loop
def import_rank_llm():
    """rank_llm 0.21.0's RankListwiseOSLLM and data classes, from the installed wheel. Its package __init__ files import
    the LiT5 model (which no longer imports under transformers 5) and its module imports fastchat (whose wheel is not
    installable here); the HF path used below needs neither (the chat template comes from the tokenizer), so the
    package __init__ files are skipped and fastchat.model is an empty stand-in module."""
    import importlib.util, os, types
    spec = importlib.util.find_spec("rank_llm")
    if spec is None: raise ImportError("No module named 'rank_llm'")
    root = os.path.dirname(spec.origin)
    if "fastchat.model" not in sys.modules:
        fm = types.ModuleType("fastchat.model"); fm.get_conversation_template = fm.load_model = None
        sys.modules.setdefault("fastchat", types.ModuleType("fastchat")); sys.modules["fastchat.model"] = fm
    for name, sub in (("rank_llm.rerank", "rerank"), ("rank_llm.rerank.listwise", "rerank/listwise")):
        if name not in sys.modules:
            pkg = types.ModuleType(name); pkg.__path__ = [os.path.join(root, sub)]; sys.modules[name] = pkg
    rk = importlib.import_module("rank_llm.rerank.rankllm")
    sys.modules["rank_llm.rerank"].PromptMode, sys.modules["rank_llm.rerank"].RankLLM = rk.PromptMode, rk.RankLLM
    os_llm = importlib.import_module("rank_llm.rerank.listwise.rank_listwise_os_llm")
    return SimpleNamespace(OS=os_llm.RankListwiseOSLLM, PromptMode=rk.PromptMode, data=importlib.import_module("rank_llm.data"))


def rank_llm_reranker(RL, inp, window):
    "ZephyrReranker's settings on our model/tokenizer objects (its constructor loads its own copy through fastchat or vLLM)."
    r = RL.OS.__new__(RL.OS)
    r._model, r._name, r._context_size, r._prompt_mode = "castorini/rank_zephyr_7b_v1_full", "peer", 4096, RL.PromptMode.RANK_GPT
    r._num_few_shot_examples, r._window_size, r._use_alpha, r._device = 0, window, False, inp.a.device
    r._vllm_batched = True    # create_prompt's chat-template branch (tokenizer.apply_chat_template); run_llm still uses HF generate
    r._sglang_batched = r._tensorrt_batched = r._use_logits = False
    r._variable_passages, r._output_token_estimate = True, None
    r._system_message = "You are RankLLM, an intelligent assistant that can rank passages based on their relevancy to the query"
    r._llm, r._tokenizer = inp.backend.hf_model, inp.backend.tokenizer
    return r


def compare_listwise(inp):
    try: RL = import_rank_llm()
    except Exception as e:
        return skipped("listwise-rankzephyr", f"rank_llm cannot be imported here: {type(e).__name__}: {str(e).splitlines()[0]}")
    from clir_llm.rerank import get_reranker
    a = inp.a
    window, step = (4, 2) if a.quick else (20, 10)
    r = rank_llm_reranker(RL, inp, window)
    D = RL.data
    def peer_all():
        out = {}
        for q in inp.run:
            query, docs = inp.texts(q)
            req = D.Request(D.Query(query, q), [D.Candidate(d, 0.0, {"text": t}) for d, t in docs])
            res = r.sliding_windows(req, rank_start=0, rank_end=len(docs), window_size=window, step=step)
            out[q] = [c.docid for c in res.candidates]
        return out
    ours_rr = get_reranker("listwise-rankzephyr", inp.fresh(True), progress=False, window=window, step=step,
                           max_words=int(300 * 20 / window), last_window="short", doc_title=False, cut="tokens",
                           passage_tokens=a.passage_tokens)
    inp.backend.generate(["warm-up"], max_new_tokens=2, progress=False)
    theirs, t_peer = timed(peer_all)
    run, t_ours = timed(ours_rr.rerank, inp.coll, inp.run, k=a.depth)
    ours = {q: run.docids(q) for q in inp.run}
    diffs = diff_rankings(ours, theirs, a.depth)
    nq = len(inp.run)
    print(f"== listwise RankZephyr prompt, window {window} step {step} (rank_llm's short last window), {nq} queries x {a.depth}: "
          f"rank_llm {t_peer:.1f}s ({nq / t_peer:.3f} q/s), ours {t_ours:.1f}s ({nq / t_ours:.3f} q/s); same rankings: {not diffs}")
    for line in diffs: print(line)
    if diffs: print("    (known prompt differences: rank_llm 0.21.0 writes 'by  a numerical' with two spaces and runs ftfy over the prompt; "
                    "it forces exactly its estimated answer length (min_new_tokens), ours stops at end of answer; see the README)")
    target("listwise-rankzephyr", t_peer / t_ours, "same rankings" if not diffs else f"{len(diffs)} queries differ")


# ---------------------------------------------------------------- BM25: pyserini LuceneSearcher.batch_search
def compare_bm25(inp, pair):
    from clir_llm.bm25 import BM25, build_index, lucene
    from clir_llm.collections import load_collection
    from clir_llm.languages import language
    name = f"bm25-{pair}"
    coll = load_collection("demo", pair)
    ours_bm25 = BM25(cache=inp.cache, progress=False)
    try: L = lucene(inp.cache)
    except Exception as e: return skipped(name, f"pyserini/Java cannot start here: {e}")
    s = L.LuceneSearcher(str(build_index(coll, inp.cache, progress=False)))  # the same index, pyserini's own searcher
    s.set_bm25(0.9, 0.4)
    s.set_language(language(coll.doc_lang).lucene)
    qids = sorted(coll.queries)
    texts = [ours_bm25.query_text(coll, coll.queries[q].text) for q in qids]
    def peer_search():
        hits = s.batch_search(texts, qids, k=100, threads=2)
        return {q: [(h.docid, round(float(h.score), 4)) for h in hits.get(q, [])] for q in qids}
    reps, sides = (1 if inp.a.smoke else 5), {"peer": peer_search, "ours": lambda: ours_bm25.retrieve(coll, k=100)}
    wall, cpu = alternated(sides, reps, warm=0 if inp.a.smoke else 2)                  # 2 warm-up rounds each (JIT, page cache)
    t_peer, t_ours = min(wall["peer"]), min(wall["ours"])
    theirs, run = peer_search(), ours_bm25.retrieve(coll, k=100)
    ours = {q: [(d, round(float(x), 4)) for d, x in sorted(run.get(q, {}).items(), key=lambda kv: (-kv[1], kv[0]))] for q in qids}
    differ = [q for q in qids if [d for d, _ in ours[q]] != [d for d, _ in theirs[q]]]
    same_sets = [q for q in differ if sorted(ours[q]) == sorted(theirs[q])]
    c_ratio = min(cpu["peer"]) / min(cpu["ours"])
    print(f"== BM25 demo {pair}, {len(qids)} queries, 100 hits, 2 threads each, wall time, best of {reps} alternated: pyserini "
          f"batch_search {t_peer * 1000:.0f} ms ({runs_ms(wall['peer'])}), ours (Anserini SearchCollection) {t_ours * 1000:.0f} ms "
          f"({runs_ms(wall['ours'])}); CPU time (both threads) {min(cpu['peer']) * 1000:.0f} / {min(cpu['ours']) * 1000:.0f} ms "
          f"= {c_ratio:.2f}x; load {os.getloadavg()[0]:.1f}, two plain processes got {inp.ceiling:.2f}x of one in this run; "
          f"runs identical: {not differ}"
          + (f" ({len(differ)} queries differ, {len(same_sets)} of them only in the order of equal scores)" if differ else ""))
    for q in differ[:5]: print(f"    {q}: ours {ours[q][:5]} / pyserini {theirs[q][:5]}")
    note = "identical runs" if not differ else f"{len(differ)} queries differ"
    if t_peer / t_ours < GOALS[name]:
        note += (f"; CPU time {c_ratio:.2f}x (the work of each side, both threads); a side's wall repeats are up to "
                 f"{jitter(wall):.0%} apart (median over best) and the cores gave two processes {inp.ceiling:.2f}x of one in "
                 f"this run, load {os.getloadavg()[0]:.1f}")
    target(name, t_peer / t_ours, note)


# ---------------------------------------------------------------- dense: sentence-transformers, FAISS
def compare_dense(inp):
    import numpy as np
    from clir_llm.assets import e5_small_path
    from clir_llm.cache import Cache
    from clir_llm import dense as D
    ST = peer("sentence_transformers", "dense-encode")
    a = inp.a
    spec = D.get_encoder_spec("e5-small", **({"doc_max_length": 32, "max_length": 16} if a.smoke else {}))   # smoke: short inputs
    docs = list(inp.coll.iter_docs())[:8 if a.smoke else 64 if a.quick else None]
    texts = [D.doc_input(spec, d) for d in docs]
    enc = D.Encoder.create(spec, device=a.device, batch_size=32, cache=Cache(Path(inp.tmp) / "enc", mode="off"), progress=False)
    enc.encode_docs(docs[:8])
    if ST is not None:
        m = ST.SentenceTransformer(str(e5_small_path()), device=a.device)
        m.max_seq_length = spec.doc_max_length
        m.encode(texts[:8], batch_size=32)                                           # warm-up
        # the same batches on both sides (32 texts of similar length, as both sort), each batch encoded by the two
        # alternately: a loaded machine slows both sides of a pair alike; best of `reps` per batch and side
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        groups, reps = [order[i:i + 32] for i in range(0, len(order), 32)], 1 if a.smoke else 3 if a.quick else 5
        best, allsecs, theirs, ours = {"peer": [], "ours": []}, {"peer": [], "ours": []}, None, None
        for g in groups:
            sides = {"peer": lambda: m.encode([texts[i] for i in g], batch_size=32, normalize_embeddings=True, convert_to_numpy=True),
                     "ours": lambda: enc.encode_docs([docs[i] for i in g])}
            secs, out = alternated(sides, reps, clock=CLOCK[0], keep=True)
            for side in best: best[side].append(min(secs[side])); allsecs[side].append(secs[side])
            if ours is None: ours = np.zeros((len(texts), out["ours"].shape[1]), np.float32); theirs = ours.copy()
            ours[g], theirs[g] = out["ours"], out["peer"]
        t_peer, t_ours = sum(best["peer"]), sum(best["ours"])
        err = float(np.abs(ours - theirs).max())
        print(f"== dense encoding, {spec.label if hasattr(spec, 'label') else spec.name}, {len(docs)} demo documents, max length "
              f"{spec.doc_max_length}, prefix {spec.doc_prefix!r}, {len(groups)} batches of 32, {a.device}, "
              f"{'process CPU' if CLOCK[0] is time.process_time else 'wall'} time, best of {reps} per batch, sides alternated: "
              f"sentence-transformers {len(docs) / t_peer:.1f} docs/s ({', '.join(f'{t:.2f}' for t in best['peer'])} s a batch), "
              f"ours {len(docs) / t_ours:.1f} docs/s ({', '.join(f'{t:.2f}' for t in best['ours'])} s); max |difference| {err:.2e} "
              f"(equal to 1e-5: {err <= 1e-5}); the same model forward on the same batches: parity is the limit")
        target("dense-encode", t_peer / t_ours, f"max |diff| {err:.1e}" + ("" if t_peer / t_ours >= GOALS["dense-encode"] else
               f"; the same forward on the same batches: ours {t_ours / t_peer - 1:.1%} slower, while one side's repeats "
               f"spread {spread(allsecs):.1%} in this run"))
    # exact search top-100: our Dense.retrieve (vectors already in its cache) against a plain FAISS flat index on the same vectors
    try: import faiss
    except ImportError as e: return skipped("dense-search", f"faiss cannot be imported: {e}")
    sub = SimpleNamespace(name=inp.coll.name, pair=inp.coll.pair, doc_lang=inp.coll.doc_lang, key=inp.coll.key + "-peers",
                          queries=inp.coll.queries, num_docs=len(docs), iter_docs=lambda: iter(docs))
    dn = D.Dense.create(spec, device=a.device, cache=Cache(Path(inp.tmp) / "dense"), progress=False)
    dn.retrieve(sub, k=100)                                                          # encodes and caches every vector
    qids = sorted(inp.coll.queries)[:4 if a.smoke else None]
    if a.smoke: sub.queries = {q: inp.coll.queries[q] for q in qids}
    Q = dn.encoder.encode_queries([inp.coll.queries[q].text for q in qids])
    V = dn.encoder.encode_docs(docs)
    idx, ids = faiss.IndexFlatIP(V.shape[1]), [d.docid for d in docs]
    idx.add(V)                                          # built once, as ours keeps its index from the first call
    def peer_search():
        S, I = idx.search(Q, min(100, len(docs)))
        return {q: [(ids[i], x) for x, i in zip(ss, ii) if i >= 0] for q, ss, ii in zip(qids, S.tolist(), I.tolist())}
    reps = 1 if a.smoke else 7
    wall, cpu = alternated({"peer": peer_search, "ours": lambda: dn.retrieve(sub, k=100)}, reps, warm=1)
    t_peer, t_ours = min(wall["peer"]), min(wall["ours"])
    theirs, run = peer_search(), dn.retrieve(sub, k=100)
    fresh = D.Dense.create(spec, device=a.device, cache=Cache(Path(inp.tmp) / "dense"), progress=False)
    first, t_first = timed(fresh.retrieve, sub, k=100, _clock=WALL)    # a new object: the persisted index loaded, query vectors read
    assert first == run, "a second retrieve (kept index) must give the run of a first one"
    from clir_llm.core import Run
    tied = Run.from_ranked(theirs)  # FAISS keeps equal scores in index order; a Run orders them by docid (trec_eval's rule)
    raw = [q for q in qids if run.docids(q) != [d for d, _ in theirs[q]]]
    differ = [q for q in qids if run.docids(q) != tied.docids(q)]
    if raw: print(f"    {len(raw)} queries order equal scores differently (FAISS: index order; Run: docid), "
                  f"{len(raw) - len(differ)} of them only that way")
    for q in differ[:5]: print(f"    {q}: ours {run.ranking(q, 5)} / FAISS {theirs[q][:5]}")
    c_ratio = min(cpu["peer"]) / min(cpu["ours"])
    print(f"== exact dense search top-100, {len(qids)} queries x {len(docs)} documents, FAISS on {faiss.omp_get_max_threads()} "
          f"OpenMP threads, wall time, best of {reps} alternated: plain FAISS IndexFlatIP "
          f"{t_peer * 1000:.1f} ms ({runs_ms(wall['peer'])}; index built once, vectors in memory, hits as lists), ours Dense.retrieve "
          f"{t_ours * 1000:.1f} ms ({runs_ms(wall['ours'])}; index and query vectors kept from its first call, hits as a Run; a "
          f"first call on a new object, index loaded and query vectors read from the cache: {t_first * 1000:.1f} ms, the same run); "
          f"CPU time {min(cpu['peer']) * 1000:.1f} / {min(cpu['ours']) * 1000:.1f} ms = {c_ratio:.2f}x; load {os.getloadavg()[0]:.1f}, "
          f"two plain processes got {inp.ceiling:.2f}x of one in this run; runs identical: {not differ}")
    note = "identical runs" if not differ else f"{len(differ)} queries differ"
    if t_peer / t_ours < GOALS["dense-search"]:
        note += (f"; CPU time {c_ratio:.2f}x; the same FAISS call on both sides; a side's wall repeats are up to "
                 f"{jitter(wall):.0%} apart (median over best), the cores' ceiling {inp.ceiling:.2f}x in this run")
    target("dense-search", t_peer / t_ours, note)


def main(argv=None):
    a = parse_args(argv)
    import torch
    if a.device == "cuda" and not torch.cuda.is_available(): print("--device cuda: no CUDA device here"); return 2
    if a.device == "cpu": torch.set_num_threads(1)  # both sides alike; 2 threads on a shared 2-core machine thrash
    print(f"# peers.py{' --quick' if a.quick else ''} --device {a.device}: {a.queries} queries, depth {a.depth}, top {a.top}, "
          f"passages {a.passage_tokens} tokens; torch threads {torch.get_num_threads()}; clock: "
          f"{'process CPU time' if a.clock == 'cpu' else 'wall time'}", flush=True)
    with tempfile.TemporaryDirectory(prefix="clir-llm-peers-") as tmp, _smoke.marked(a.smoke):
        inp = Inputs(a, tmp)
        if a.smoke: inp._ceiling = float("nan")   # no ceiling: two processes importing torch outlast a smoke run
        if "bm25" in a.only and a.smoke:
            for pair in ("en-de", "de-ru"):
                print(f"target peer-bm25-{pair}: not measured (smoke run: the JVM and the demo's Lucene index outlast a smoke run)")
        elif "bm25" in a.only:
            from clir_llm.bm25 import lucene
            try: lucene(inp.cache)   # the JVM, started by the package (its Java: Anserini 1.x needs Java 21) for both sides
            except Exception as e: print(f"# the package could not start Lucene: {str(e).splitlines()[0]}")
            if peer("pyserini.search.lucene", "bm25-en-de") is not None:
                for pair in ("en-de", "de-ru"): compare_bm25(inp, pair)
        if "dense" in a.only: compare_dense(inp)
        for sec, compare in (("prp", compare_prp), ("setwise", compare_setwise), ("listwise", compare_listwise)):
            if sec not in a.only: continue
            if not a.smoke: compare(inp); continue
            module, names = LLM_TARGETS[sec]
            if sec == "listwise" and importlib.util.find_spec("rank_llm") is None: compare(inp); continue   # its skipped line
            if sec != "listwise" and peer(module, names[0]) is None:
                for n in names[1:]: skipped(n, f"{module.split('.')[0]} missing (see above)")
                continue
            for n in names: print(f"target peer-{n}: not measured (smoke run: the 0.5B stand-in both sides share loads in minutes)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
