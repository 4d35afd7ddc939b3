"""Reliability of whole `clir-llm reproduce` runs: SIGKILL at random points of every phase and resume, two processes
on one cache, and no secret written anywhere.

The configuration is the demo pipeline (configs/demo.yaml) at reduced scale (see `_reliability.reduced_config`):
the 4-document 'fixture' collection, pair en-de, BM25-OG / BM25-QT (FreeDict) / mE5-small stand-in / RRF, a listwise
and a pairwise reranker on OG and DT documents, a document-length study with two lengths, all five notebooks.
The LLM is `openai:fake-ranker` answering deterministically from a real HTTP server on 127.0.0.1 started by the
test (`clir_llm.testing.FakeOpenAIServer`), so every model call the pipeline makes is seen, and counted, by the test."""
from __future__ import annotations
import os, random, shutil, signal, subprocess, time
from collections import Counter
from pathlib import Path

import pytest

import _reliability as R
from clir_llm.testing import FakeOpenAIServer

MARKER = "sk-reliability-MARKER-7f3a9c21e5"   # OPENAI_API_KEY for every run here: must end up in no file
LATENCY = 0.12                              # seconds per fake model call: the reranking phases last long enough to be hit


def _assets_or_skip():
    try:
        import clir_llm.assets as A
        A._e5_sources()
    except Exception as e:   # noqa: BLE001
        pytest.skip(f"the mE5-small stand-in is not installable here: {e}")
    if not shutil.which("apt-get") and not os.environ.get("CLIR_LLM_FREEDICT"):
        pytest.skip("FreeDict needs apt-get or CLIR_LLM_FREEDICT")


def _setup(d: Path):
    d.mkdir(parents=True, exist_ok=True)
    R.seed_cache(d / "cache")
    return R.reduced_config(d / "reli.yaml"), d / "cache", d / "results", d / "figures"


def _is_prp(req) -> bool: return "Output Passage A or Passage B" in req["prompt"]


def _call_key(req) -> str:
    "The cache key the backend uses for this request (what identifies a finished call)."
    from clir_llm.cache import Cache
    from clir_llm.llm_openai import OpenAIBackend
    b = OpenAIBackend(req["body"]["model"])
    params = b._params(req["body"]["max_tokens"], {"temperature": req["body"].get("temperature")})
    return Cache(Path("/nonexistent"), mode="off").namespace("llm", op="generate", params=params, **b.identity()).key(
        {"messages": req["body"]["messages"]})


def _cached_keys(cache: Path, reqs, url: str) -> set[str]:
    "Keys of the requests `reqs` to the server at `url` whose answer is stored in the cache (finished calls)."
    from clir_llm.cache import Cache
    from clir_llm.llm_openai import OpenAIBackend
    out, c = set(), Cache(cache, mode="readonly")
    for r in reqs:
        b = OpenAIBackend.create(r["body"]["model"], base_url=url)   # the server is part of the key
        params = b._params(r["body"]["max_tokens"], {"temperature": r["body"].get("temperature")})
        if c.namespace("llm", op="generate", params=params, **b.identity()).get({"messages": r["body"]["messages"]}) is not None:
            out.add(_call_key(r))
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    "One uninterrupted run of the reduced demo (its outputs are what every other run must reproduce byte for byte)."
    _assets_or_skip()
    d = tmp_path_factory.mktemp("reference")
    cfg, cache, results, figures = _setup(d)
    with FakeOpenAIServer(responder=R.slow_answer(LATENCY)) as srv:
        env = R.env_for(cache, srv.url, OPENAI_API_KEY=MARKER)
        with open(d / "reproduce.log", "w") as log:
            p = subprocess.run(R.reproduce_cmd(cfg, results, figures), env=env, stdout=log, stderr=subprocess.STDOUT,
                               cwd=R.ROOT, timeout=600)
        assert p.returncode == 0, (d / "reproduce.log").read_text()[-3000:]
        reqs = list(srv.requests)
    outputs = R.deterministic_outputs(results, figures)
    assert len([k for k in outputs if "/tables/" in k and k.endswith(".csv")]) >= 7, sorted(outputs)
    assert len([k for k in outputs if k.endswith(".trec")]) == 9, sorted(outputs)
    keys = Counter(_call_key(r) for r in reqs)
    assert keys and max(keys.values()) == 1, "an uninterrupted run asked the same model call twice"
    assert any(_is_prp(r) for r in reqs) and any(not _is_prp(r) for r in reqs)
    assert all(r["auth"] for r in reqs)   # the key was really sent on every call
    return dict(dir=d, cache=cache, results=results, figures=figures, outputs=outputs, calls=len(reqs), log=d / "reproduce.log")


def _kill_tree(proc: subprocess.Popen):
    "SIGKILL the run and everything it started (papermill's kernel runs in its own session): freeze first, then kill."
    import psutil
    try: root = psutil.Process(proc.pid)
    except psutil.NoSuchProcess: return
    procs = [root] + root.children(recursive=True)
    for p in procs:
        try: p.send_signal(signal.SIGSTOP)
        except psutil.NoSuchProcess: pass
    procs += [c for c in root.children(recursive=True) if c not in procs]
    for p in procs:
        try: p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess: pass
    psutil.wait_procs(procs, timeout=30)
    proc.wait(timeout=30)


def _stat(*paths: Path):
    out = []
    for p in paths:
        try: s = p.stat(); out.append((p.name, s.st_size, s.st_mtime_ns))
        except FileNotFoundError: out.append((p.name, None))
    return tuple(out)


def _tree(d: Path):
    return tuple(sorted((str(p), p.stat().st_mtime_ns) for p in d.rglob("*") if p.exists())) if d.exists() else ()


@pytest.mark.slow   # whole reproduce runs killed and restarted: minutes; run with -m slow
def test_kill_and_resume(reference, tmp_path):
    """SIGKILL `clir-llm reproduce` (the process and its notebook kernel) at random moments and during BM25
    indexing, dense encoding, listwise and pairwise reranking and table writing; restart until it finishes.
    Outputs are byte-identical to the uninterrupted run, no visible file under results/ or figures/ is ever partial, no finished model call is asked again."""
    seed = int(os.environ.get("CLIR_LLM_KILL_SEED", time.time_ns() % 100_000))
    rng = random.Random(seed)
    cfg, cache, results, figures = _setup(tmp_path)
    tables = results / "reli" / "tables"
    # Phases seen from outside, by what they write. FreeDict translation (QT queries, DT documents) writes nothing
    # and takes milliseconds on this collection: the random-moment kills cover it (NLLB translation stores its
    # sentences through the same committed-batch cache path as encoding, which is targeted).
    sig = {
        "bm25 indexing": lambda s: _tree(cache / "bm25"),
        "dense encoding": lambda s: _stat(cache / "embed.sqlite", cache / "embed.sqlite-wal"),
        "listwise reranking": lambda s: sum(not _is_prp(r) for r in s.requests),
        "pairwise reranking": lambda s: sum(_is_prp(r) for r in s.requests),
        "table writing": lambda s: _tree(tables) + _tree(figures),
    }
    pending, randoms = list(sig), 0
    kills, problems, finished, seen_before = [], [], False, set()
    repeated = []
    with FakeOpenAIServer(responder=R.slow_answer(LATENCY)) as srv:
        srv.httpd.handle_error = lambda *a: None    # a killed client resets its connection: expected here, not news
        env = R.env_for(cache, srv.url, OPENAI_API_KEY=MARKER)
        for attempt in range(len(sig) + 4):
            n0 = len(srv.requests)
            # attempt 0 and the one after the phases are used up: a random moment; else the first phase that moves
            armed = [] if attempt == 0 or not pending else list(pending)
            base = {t: sig[t](srv) for t in armed}
            t_start = time.time()
            fire, why = None, None
            if not armed and randoms < 1: fire, why, randoms = t_start + rng.uniform(2, 15), "random moment", randoms + 1
            with open(tmp_path / f"attempt{attempt}.log", "w") as log:
                proc = subprocess.Popen(R.reproduce_cmd(cfg, results, figures), env=env, stdout=log, stderr=subprocess.STDOUT, cwd=R.ROOT)
                killed = False
                while proc.poll() is None:
                    problems += R.observe(results, figures)
                    if fire is None:
                        moved = [t for t in armed if sig[t](srv) != base[t]]
                        if moved:
                            why = moved[0]; pending.remove(why)
                            fire = time.time() + rng.uniform(0, 0.3)   # a random point shortly after the phase began
                    if fire is not None and time.time() >= fire:
                        _kill_tree(proc); killed = True; break
                    if time.time() - t_start > 400: _kill_tree(proc); pytest.fail(f"attempt {attempt} hangs")
                    time.sleep(0.05)
            problems += R.observe(results, figures)
            new = srv.requests[n0:]
            repeated += [r["prompt"][:60] for r in new if _call_key(r) in seen_before]
            if killed:
                kills.append((why, round(time.time() - t_start, 1)))
                R.STATS["kills"] += 1
                seen_before |= _cached_keys(cache, srv.requests, srv.url)   # calls finished (stored) before the kill
                problems += R.sqlite_integrity(cache)
                continue
            assert proc.returncode == 0, (f"seed {seed}, attempt {attempt} after kills {kills}: exit {proc.returncode}\n"
                                          + (tmp_path / f"attempt{attempt}.log").read_text()[-3000:])
            finished = True
            break
        total_calls = len(srv.requests)
    R.STATS["calls_repeated"] += len(repeated)
    R.STATS["calls_lost"] += len(repeated)
    if kills: R.STATS["resumes_finished"] += 1
    left = [p.name for d in (results, figures) for p in d.rglob(".*") if R.is_temporary(p)]
    print(f"\nkill seed {seed}: kills at {kills}; model calls {total_calls} (uninterrupted run: {reference['calls']}); "
          f"hidden temporaries left by killed writers: {len(left)}")
    assert finished, f"seed {seed}: did not finish after {len(kills)} kills"
    assert len(kills) >= 4, f"seed {seed}: only {len(kills)} kills landed ({kills})"
    assert not problems, f"seed {seed}: " + "\n".join(problems[:20])
    assert not repeated, f"seed {seed}: finished model calls asked again: {repeated[:5]}"
    assert not R.sqlite_integrity(cache)
    out = R.deterministic_outputs(results, figures)
    assert sorted(out) == sorted(reference["outputs"]), f"seed {seed}"
    differ = [k for k in out if out[k] != reference["outputs"][k]]
    assert not differ, f"seed {seed}: differ from the uninterrupted run: {differ}"
    # the resumed run asked each call at most once more than the uninterrupted run for each kill (calls in flight)
    assert reference["calls"] <= total_calls <= reference["calls"] + 4 * len(kills)


@pytest.mark.slow   # whole reproduce runs killed and restarted: minutes; run with -m slow
def test_two_processes_share_cache_and_results(reference, tmp_path):
    "Two `clir-llm reproduce` at once on the same cache, results and figures: both succeed, nothing corrupted, same outputs."
    cfg, cache, results, figures = _setup(tmp_path)
    problems = []
    with FakeOpenAIServer(responder=R.slow_answer(LATENCY)) as srv:
        env = R.env_for(cache, srv.url, OPENAI_API_KEY=MARKER)
        logs = [open(tmp_path / f"proc{i}.log", "w") for i in range(2)]
        procs = [subprocess.Popen(R.reproduce_cmd(cfg, results, figures), env=env, stdout=logs[i], stderr=subprocess.STDOUT,
                                  cwd=R.ROOT) for i in range(2)]
        t0 = time.time()
        while any(p.poll() is None for p in procs):
            problems += R.observe(results, figures)
            if time.time() - t0 > 500:
                for p in procs: _kill_tree(p)
                pytest.fail("two concurrent runs hang")
            time.sleep(0.1)
        for f in logs: f.close()
    for i, p in enumerate(procs):
        assert p.returncode == 0, (tmp_path / f"proc{i}.log").read_text()[-3000:]
    problems += R.observe(results, figures)
    assert not problems, "\n".join(problems[:20])
    assert not R.sqlite_integrity(cache)
    out = R.deterministic_outputs(results, figures)
    assert sorted(out) == sorted(reference["outputs"])
    differ = [k for k in out if out[k] != reference["outputs"][k]]
    assert not differ, f"differ from a single run: {differ}"


def test_no_secret_in_any_file(reference):
    """With OPENAI_API_KEY set to a marker, the run (incl. an openai: reranker that sent it to the server on every
    call) leaves it in no file: cache, results (executed notebooks), figures, the run's log."""
    roots = [reference["cache"], reference["results"], reference["figures"], reference["log"]]
    leaks, n = [], 0
    needle = MARKER.encode()
    for root in roots:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
        for f in files:
            n += 1
            if needle in f.read_bytes(): leaks.append(str(f))
    R.STATS["secret_files_scanned"] += n
    R.STATS["secret_leaks"] += len(leaks)
    assert n > 20 and any(p.suffix == ".ipynb" for r in roots[1:2] for p in r.rglob("*.ipynb"))
    assert not leaks, leaks
