"""Shared pieces of the reliability suite (tests/test_reliability*.py): the counters behind the summary table
printed by tests/conftest.py, a deterministic fake LLM answering over a real HTTP server, the reduced demo
configuration, and file checks (complete, not temporary, not corrupted)."""
from __future__ import annotations
import hashlib, json, os, re, sqlite3, subprocess, sys, time
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "clir-llm")

# ---------- what the suite observed (printed by tests/conftest.py at the end of the session)
STATS = {"faults": Counter(), "bad_input": set(), "kills": 0, "resumes_finished": 0, "calls_lost": 0,
         "calls_repeated": 0, "files_checked": 0, "files_corrupted": 0, "observations": 0, "partial_visible": 0,
         "sqlite_checked": 0, "secret_files_scanned": 0, "secret_leaks": 0,
         "hostile_tried": 0, "hostile_mishandled": 0, "hypothesis_examples": 0, "table_runs": [], "table_mismatches": 0}
SESSION_START = time.time()


def jvm_crash_files() -> int:
    "hs_err_pid*.log files (JVM crash reports) written since this test session started, wherever the JVM may put them."
    from clir_llm.cache import default_cache_dir
    places = {ROOT, ROOT / "nbs" / "experiments", ROOT / "tests", Path.cwd(), default_cache_dir() / "jvm"}
    return sum(1 for d in places if d.is_dir() for p in d.glob("hs_err_pid*.log") if p.stat().st_mtime >= SESSION_START)


def summary_lines() -> list[str]:
    s = STATS
    if not (s["faults"] or s["bad_input"] or s["kills"] or s["files_checked"] or s["secret_files_scanned"]
            or s["hostile_tried"] or s["hypothesis_examples"] or s["table_runs"]): return []
    faults = ", ".join(f"{k} {v}" for k, v in sorted(s["faults"].items()))
    return [
        f"faults injected          {sum(s['faults'].values()):>6}   ({faults})",
        f"kinds of bad input tried {len(s['bad_input']):>6}   ({', '.join(sorted(s['bad_input']))})",
        f"kills survived (SIGKILL) {s['kills']:>6}   (resumed runs finished: {s['resumes_finished']})",
        f"calls lost               {s['calls_lost']:>6}   (finished model calls asked again: {s['calls_repeated']})",
        f"files corrupted          {s['files_corrupted']:>6}   (of {s['files_checked']} file reads at {s['observations']} observations; "
        f"partial/temporary files visible: {s['partial_visible']}; sqlite files integrity-checked: {s['sqlite_checked']})",
        f"hostile inputs mishandled{s['hostile_mishandled']:>6}   (goal 0; of {s['hostile_tried']} tried for a one-line error)",
        f"hypothesis examples run  {s['hypothesis_examples']:>6}   (generated runs, qrels, scores)",
        f"tables differing         {s['table_mismatches']:>6}   (goal 0; reproduce runs compared byte for byte: {', '.join(s['table_runs']) or 'none'})",
        f"secrets found in output  {s['secret_leaks']:>6}   (goal 0; outputs and files scanned: {s['secret_files_scanned']})",
        f"JVM crash files          {jvm_crash_files():>6}   (goal 0; hs_err_pid*.log written during this session)",
    ]


# ---------- a deterministic fake LLM behind clir_llm.testing.FakeOpenAIServer
def _h(*parts) -> int:
    return int(hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:12], 16)


def fake_answer(msgs, body) -> str:
    """A deterministic 'model': listwise prompts get a permutation of their passage numbers chosen by a hash of the
    prompt, PRP prompts get 'Passage A' or 'Passage B'. Same prompt, same answer, across processes."""
    text = "\n".join(m["content"] for m in msgs)
    if "Output Passage A or Passage B" in text:
        return "Passage " + "AB"[_h(text) % 2]
    n = len(set(re.findall(r"^\[(\d+)\]", text, re.M))) or 2
    ids = sorted(range(1, n + 1), key=lambda i: _h(text, i))
    return " > ".join(f"[{i}]" for i in ids)


def slow_answer(delay: float):
    def answer(msgs, body):
        time.sleep(delay)
        return fake_answer(msgs, body)
    return answer


# ---------- the reduced demo configuration
def reduced_config(path: Path, name: str = "reli", llm: str = "openai:fake-ranker", extra_pairs=()) -> Path:
    """The demo pipeline (configs/demo.yaml) at reduced scale: the 'fixture' collection (4 documents, 3 queries),
    one pair, the same kinds of first stages (BM25-OG, BM25-QT with FreeDict, mE5-small stand-in, RRF), a listwise and
    a pairwise reranker on OG and DT documents, a document-length study with two lengths and all five notebooks."""
    cfg = dict(
        name=name, description="Reliability test: the demo pipeline at reduced scale", collection="fixture",
        pairs=["en-de", *extra_pairs], measure="MAP", extra_measures=["nDCG@20"],
        first_stage=dict(translator="dict:freedict", depth=4,
                         methods=["bm25-og", "bm25-qt", "dense:e5-small", "rrf:bm25-qt+dense:e5-small"]),
        rerankers=[
            dict(name="Fake listwise", llm=llm, method="listwise", prompt="rankzephyr", first_stages=["bm25-og"],
                 docs=["og", "dt"], top_k=4, window=3, step=2, max_words=30),
            dict(name="Fake PRP", llm=llm, method="pairwise-bubblesort", k=2, scoring="generation",
                 first_stages=["dense:e5-small"], docs=["og"], top_k=4, passage_tokens=40),
        ],
        doc_length=dict(tokens=[8, 16], rerankers=["Fake PRP"], first_stages=["dense:e5-small"], docs=["og"]),
        experiments=["1_first_stage", "2_listwise", "3_pairwise", "4_doc_length", "5_cost"],
        stand_in_note="Reliability test with a scripted fake LLM: numbers test the machinery only.",
    )
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def seed_cache(cache: Path):
    """A fresh cache that shares the prepared offline assets (mE5-small folder, FreeDict en-de/de-en) with the user's
    cache by symbolic links, so the test does not rebuild a model or download a dictionary per run."""
    from clir_llm.assets import e5_small_path
    from clir_llm.cache import Cache
    from clir_llm.translate_dict import ensure_freedict
    warm = Cache()
    e5 = e5_small_path()
    idx = [ensure_freedict(p, warm)[0] for p in ("en-de", "de-en")]
    (cache / "models").mkdir(parents=True, exist_ok=True)
    (cache / "models" / e5.name).symlink_to(e5)
    for i in idx:
        pkg = next((p for p in i.parents if p.name.startswith("dict-freedict-")), None)
        if pkg is not None and pkg.parent.name == "freedict":
            (cache / "freedict").mkdir(exist_ok=True)
            if not (cache / "freedict" / pkg.name).exists(): (cache / "freedict" / pkg.name).symlink_to(pkg)
    return cache


def env_for(cache: Path, server_url: str | None = None, **extra) -> dict:
    env = {**os.environ, "CLIR_LLM_CACHE": str(cache), "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1",
           "TQDM_DISABLE": "1", "TOKENIZERS_PARALLELISM": "false", **extra}
    if server_url: env["OPENAI_BASE_URL"] = server_url
    return env


def reproduce_cmd(config: Path, results: Path, figures: Path) -> list[str]:
    return [CLI, "reproduce", str(config), "--results", str(results), "--figures", str(figures)]


# ---------- outputs and their checks
DETERMINISTIC = ("tables", "runs")


def deterministic_outputs(results: Path, figures: Path, name: str = "reli") -> dict[str, bytes]:
    """The outputs that must be byte-identical across runs: tables (CSV/MD/TeX), run files (TREC) and their
    diagnostics, figures (PNG/PDF written without timestamps). Excluded by design: timing/ (seconds),
    reproduce.json, executed notebooks (timing metadata), usage.json (seconds, cache hits)."""
    out = {}
    base = results / name
    for sub in DETERMINISTIC:
        for p in sorted((base / sub).rglob("*")):
            if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".usage.json") and not p.name.endswith(".rerank.json"):
                out[str(p.relative_to(results))] = p.read_bytes()
    for p in sorted(figures.glob("*")):
        if p.is_file() and not p.name.startswith("."): out["figures/" + p.name] = p.read_bytes()
    return out


def is_temporary(p: Path) -> bool:
    "Names the pipeline uses while writing: hidden temporaries (`.<name>.*.tmp`, `.<nb>.running.ipynb`)."
    return p.name.startswith(".") and (p.name.endswith(".tmp") or ".running." in p.name)


def check_complete(p: Path) -> str | None:
    "None if the file at a final (visible) name is complete and well-formed, else what is wrong."
    try: data = p.read_bytes()
    except FileNotFoundError: return None    # replaced between listing and reading: fine
    name = p.name
    try:
        if name.endswith(".trec"):
            from clir_llm.core import Run
            Run.read(p)
            if not data.endswith(b"\n"): return "run file without final newline"
        elif name.endswith(".json") or name.endswith(".ipynb"): json.loads(data)
        elif name.endswith(".csv"):
            import pandas as pd, io
            pd.read_csv(io.BytesIO(data), index_col=0)
            if not data.endswith(b"\n"): return "csv without final newline"
        elif name.endswith(".md"):
            if not data.strip(): return "empty markdown"
        elif name.endswith(".tex"):
            if b"\\end{tabular}" not in data: return "LaTeX table without \\end{tabular}"
        elif name.endswith(".png"):
            if not (data.startswith(b"\x89PNG") and b"IEND" in data[-16:]): return "truncated PNG"
        elif name.endswith(".pdf"):
            if not (data.startswith(b"%PDF") and b"%%EOF" in data[-32:]): return "truncated PDF"
        elif name.endswith(".stamp"):
            if not re.fullmatch(rb"[0-9a-f]+\n", data): return "bad stamp"
    except Exception as e:   # noqa: BLE001 - any parse failure is a corrupted file
        return f"{type(e).__name__}: {e}"
    return None


def observe(*dirs: Path) -> list[str]:
    """One observation of the output folders: problems found (temporary files are allowed only as hidden
    temporaries of atomic writes; every visible file must be complete)."""
    problems = []
    STATS["observations"] += 1
    for d in dirs:
        if not d.exists(): continue
        for p in d.rglob("*"):
            if not p.is_file(): continue
            if p.name.startswith("."):
                if not (is_temporary(p) or p.name.endswith(".stamp")):
                    problems.append(f"{p}: unexpected hidden file"); STATS["partial_visible"] += 1
                continue
            if p.suffix in (".tmp", ".part", ".partial") or "running" in p.name:
                problems.append(f"{p}: temporary file under a visible name"); STATS["partial_visible"] += 1
                continue
            STATS["files_checked"] += 1
            err = check_complete(p)
            if err:
                STATS["files_corrupted"] += 1; problems.append(f"{p}: {err}")
    return problems


def sqlite_integrity(cache: Path) -> list[str]:
    "`PRAGMA integrity_check` on every SQLite file of a cache; returns the failures."
    bad = []
    for p in sorted(cache.rglob("*.sqlite")):
        if p.is_symlink(): continue
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True, timeout=30)
        try: r = con.execute("PRAGMA integrity_check").fetchall()
        finally: con.close()
        STATS["sqlite_checked"] += 1
        if r != [("ok",)]:
            bad.append(f"{p}: {r[:3]}"); STATS["files_corrupted"] += 1
    return bad


def expect_one_line_error(kind: str, p) -> str:
    "A CLI result `p` for hostile input `kind`: exit 1 and one line on stderr, no traceback (counted in the summary)."
    STATS["hostile_tried"] += 1; STATS["bad_input"].add(kind)
    ok = p.returncode == 1 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    if not ok: STATS["hostile_mishandled"] += 1
    assert ok, (kind, p.returncode, p.stdout[-500:], p.stderr[-2000:])
    return p.stderr.strip()


def run_cli(*args, env=None, timeout=600, cwd=ROOT):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
