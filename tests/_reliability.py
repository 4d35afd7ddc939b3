"""Shared pieces of the reliability tests (spread over tests/test_<module>.py, issue 25): the counters behind the summary
table printed by tests/conftest.py (hostile inputs tried and mishandled, by class), the CLI run as a subprocess or in
this process, a deterministic fake LLM answering over a real HTTP server, a server that echoes the credential it was
sent, the reduced demo configuration, and file checks (complete, not temporary, not corrupted). Not a test file."""

from __future__ import annotations
import contextlib, hashlib, http.server, io, json, os, re, socketserver, sqlite3, subprocess, sys, threading, time
from collections import Counter, defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "clir-llm")

# ---------- what the suite observed (printed by tests/conftest.py at the end of the session)
STATS = {
    "faults": Counter(),
    "bad_input": set(),
    "kills": 0,
    "resumes_finished": 0,
    "calls_lost": 0,
    "calls_repeated": 0,
    "files_checked": 0,
    "files_corrupted": 0,
    "observations": 0,
    "partial_visible": 0,
    "sqlite_checked": 0,
    "secret_files_scanned": 0,
    "secret_leaks": 0,
    "hostile_tried": 0,
    "hostile_mishandled": 0,
    "hypothesis_examples": 0,
    "table_runs": [],
    "table_mismatches": 0,
    "classes": defaultdict(lambda: [0, 0]),
}  # class of hostile input -> [tried, mishandled]
CLASSES = {  # the classes of hostile input the summary counts (issue 14's and issue 26's findings)
    "input files": "malformed runs, qrels, topics, corpora, encodings",
    "outputs": "links, FIFOs, devices, folders, inputs, unwritable or too long names as outputs",
    "secrets": "keys in variables, custom key variables, URL user info and query strings, server echoes",
    "configs": "unknown keys, wrong types, duplicate keys, alias bombs, nesting, paths outside their folder",
    "identifiers": "query and document ids with whitespace, empty, or a newline",
    "numbers": "NaN/inf scores and log-probabilities, out-of-range k, depth, batch sizes, limits, tolerances",
    "servers": "slow, dead, lying or oversized servers; unreachable hubs and datasets",
    "arguments": "bad plugins, experiment names, huge arguments, bad measures, bad options",
}


def hostile(cls: str, kind: str, ok: bool) -> bool:
    "Count one hostile input of class `cls` (a key of `CLASSES`) and whether it was handled (`ok`); returns `ok`."
    assert cls in CLASSES, cls
    STATS["hostile_tried"] += 1
    STATS["bad_input"].add(kind)
    STATS["classes"][cls][0] += 1
    if not ok:
        STATS["hostile_mishandled"] += 1
        STATS["classes"][cls][1] += 1
    return ok


SESSION_START = time.time()


def jvm_crash_files() -> int:
    "hs_err_pid*.log files (JVM crash reports) written since this test session started, wherever the JVM may put them."
    from clir_llm.cache import default_cache_dir

    places = {ROOT, ROOT / "nbs" / "experiments", ROOT / "tests", Path.cwd(), default_cache_dir() / "jvm"}
    return sum(1 for d in places if d.is_dir() for p in d.glob("hs_err_pid*.log") if p.stat().st_mtime >= SESSION_START)


def summary_lines() -> list[str]:
    s = STATS
    if not (
        s["faults"]
        or s["bad_input"]
        or s["kills"]
        or s["files_checked"]
        or s["secret_files_scanned"]
        or s["hostile_tried"]
        or s["hypothesis_examples"]
        or s["table_runs"]
    ):
        return []
    faults = ", ".join(f"{k} {v}" for k, v in sorted(s["faults"].items()))
    return [
        f"faults injected          {sum(s['faults'].values()):>6}   ({faults})",
        f"kinds of bad input tried {len(s['bad_input']):>6}   ({', '.join(sorted(s['bad_input']))})",
        f"kills survived (SIGKILL) {s['kills']:>6}   (resumed runs finished: {s['resumes_finished']})",
        f"calls lost               {s['calls_lost']:>6}   (finished model calls asked again: {s['calls_repeated']})",
        f"files corrupted          {s['files_corrupted']:>6}   (of {s['files_checked']} file reads at {s['observations']} observations; "
        f"partial/temporary files visible: {s['partial_visible']}; sqlite files integrity-checked: {s['sqlite_checked']})",
        f"hostile inputs mishandled{s['hostile_mishandled']:>6}   (goal 0; of {s['hostile_tried']} tried for a one-line error)",
        *(
            f"  {c:<23}{s['classes'][c][1]:>6}   (of {s['classes'][c][0]} tried: {CLASSES[c]})"
            for c in CLASSES
            if s["classes"][c][0]
        ),
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
        name=name,
        description="Reliability test: the demo pipeline at reduced scale",
        collection="fixture",
        pairs=["en-de", *extra_pairs],
        measure="MAP",
        extra_measures=["nDCG@20"],
        first_stage=dict(
            translator="dict:freedict",
            depth=4,
            methods=["bm25-og", "bm25-qt", "dense:e5-small", "rrf:bm25-qt+dense:e5-small"],
        ),
        rerankers=[
            dict(
                name="Fake listwise",
                llm=llm,
                method="listwise",
                prompt="rankzephyr",
                first_stages=["bm25-og"],
                docs=["og", "dt"],
                top_k=4,
                window=3,
                step=2,
                max_words=30,
            ),
            dict(
                name="Fake PRP",
                llm=llm,
                method="pairwise-bubblesort",
                k=2,
                scoring="generation",
                first_stages=["dense:e5-small"],
                docs=["og"],
                top_k=4,
                passage_tokens=40,
            ),
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
            if not (cache / "freedict" / pkg.name).exists():
                (cache / "freedict" / pkg.name).symlink_to(pkg)
    return cache


def env_for(cache: Path, server_url: str | None = None, **extra) -> dict:
    env = {
        **os.environ,
        "CLIR_LLM_CACHE": str(cache),
        "MPLBACKEND": "Agg",
        "PYTHONUNBUFFERED": "1",
        "TQDM_DISABLE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **extra,
    }
    if server_url:
        env["OPENAI_BASE_URL"] = server_url
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
            if (
                p.is_file()
                and not p.name.startswith(".")
                and not p.name.endswith(".usage.json")
                and not p.name.endswith(".rerank.json")
            ):
                out[str(p.relative_to(results))] = p.read_bytes()
    for p in sorted(figures.glob("*")):
        if p.is_file() and not p.name.startswith("."):
            out["figures/" + p.name] = p.read_bytes()
    return out


def is_temporary(p: Path) -> bool:
    "Names the pipeline uses while writing: hidden temporaries (`.<name>.*.tmp`, `.<nb>.running.ipynb`)."
    return p.name.startswith(".") and (p.name.endswith(".tmp") or ".running." in p.name)


def check_complete(p: Path) -> str | None:
    "None if the file at a final (visible) name is complete and well-formed, else what is wrong."
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        return None  # replaced between listing and reading: fine
    name = p.name
    try:
        if name.endswith(".trec"):
            from clir_llm.core import Run

            Run.read(p)
            if not data.endswith(b"\n"):
                return "run file without final newline"
        elif name.endswith(".json") or name.endswith(".ipynb"):
            json.loads(data)
        elif name.endswith(".csv"):
            import pandas as pd, io

            pd.read_csv(io.BytesIO(data), index_col=0)
            if not data.endswith(b"\n"):
                return "csv without final newline"
        elif name.endswith(".md"):
            if not data.strip():
                return "empty markdown"
        elif name.endswith(".tex"):
            if b"\\end{tabular}" not in data:
                return "LaTeX table without \\end{tabular}"
        elif name.endswith(".png"):
            if not (data.startswith(b"\x89PNG") and b"IEND" in data[-16:]):
                return "truncated PNG"
        elif name.endswith(".pdf"):
            if not (data.startswith(b"%PDF") and b"%%EOF" in data[-32:]):
                return "truncated PDF"
        elif name.endswith(".stamp"):
            if not re.fullmatch(rb"[0-9a-f]+\n", data):
                return "bad stamp"
    except Exception as e:  # noqa: BLE001 - any parse failure is a corrupted file
        return f"{type(e).__name__}: {e}"
    return None


def observe(*dirs: Path) -> list[str]:
    """One observation of the output folders: problems found (temporary files are allowed only as hidden
    temporaries of atomic writes; every visible file must be complete)."""
    problems = []
    STATS["observations"] += 1
    for d in dirs:
        if not d.exists():
            continue
        for p in d.rglob("*"):
            if not p.is_file():
                continue
            if p.name.startswith("."):
                if not (is_temporary(p) or p.name.endswith(".stamp")):
                    problems.append(f"{p}: unexpected hidden file")
                    STATS["partial_visible"] += 1
                continue
            if p.suffix in (".tmp", ".part", ".partial") or "running" in p.name:
                problems.append(f"{p}: temporary file under a visible name")
                STATS["partial_visible"] += 1
                continue
            STATS["files_checked"] += 1
            err = check_complete(p)
            if err:
                STATS["files_corrupted"] += 1
                problems.append(f"{p}: {err}")
    return problems


def sqlite_integrity(cache: Path) -> list[str]:
    "`PRAGMA integrity_check` on every SQLite file of a cache; returns the failures."
    bad = []
    for p in sorted(cache.rglob("*.sqlite")):
        if p.is_symlink():
            continue
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True, timeout=30)
        try:
            r = con.execute("PRAGMA integrity_check").fetchall()
        finally:
            con.close()
        STATS["sqlite_checked"] += 1
        if r != [("ok",)]:
            bad.append(f"{p}: {r[:3]}")
            STATS["files_corrupted"] += 1
    return bad


def expect_one_line_error(kind: str, p, cls: str = "input files", says: str | None = None) -> str:
    """A CLI result `p` for hostile input `kind` of class `cls`: exit 1 and one line on stderr (saying `says`), no
    traceback (counted in the summary). Returns that line."""
    ok = (
        p.returncode == 1
        and "Traceback" not in p.stderr
        and len(p.stderr.strip().splitlines()) == 1
        and (says is None or says in p.stderr)
    )
    hostile(cls, kind, ok)
    assert ok, (kind, p.returncode, p.stdout[-500:], p.stderr[-2000:])
    return p.stderr.strip()


def run_cli(*args, env=None, timeout=600, cwd=ROOT):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)


def run_main(*args):
    """`clir-llm ARGS` in this process (`cli.main`, no interpreter start): a CompletedProcess-like result. A bug that
    escapes `main` ends up in stderr as a traceback, as in the real command."""
    from clir_llm.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as e:
            rc = e.code
        except BaseException as e:  # noqa: BLE001 - what the real command would print
            import traceback

            err.write("Traceback (most recent call last):\n" + "".join(traceback.format_exception(e)))
            rc = 1
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


# ---------- a server that answers 401 and echoes the credential it was sent, without "Bearer" (as some gateways do)
class EchoKeyServer:
    "An HTTP server on 127.0.0.1 that answers every request with 401 and the raw key of its Authorization header in the body."

    def __init__(self):
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                key = (self.headers.get("Authorization") or "").split()[-1]
                body = json.dumps({"error": {"message": f"key {key} is not valid here", "type": "auth"}}).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()


def scan_for(needles, *roots) -> list[str]:
    "Files under `roots` (files or folders) that hold any of `needles` (counted in the summary's secret line)."
    leaks = []
    for root in map(Path, roots):
        files = (
            [root]
            if root.is_file()
            else [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
            if root.exists()
            else []
        )
        for f in files:
            STATS["secret_files_scanned"] += 1
            data = f.read_bytes()
            if any(n.encode() in data for n in needles):
                leaks.append(str(f))
    STATS["secret_leaks"] += len(leaks)
    return leaks


# ---------- small TREC files and the CLI's one-line errors, shared by the tests of several modules
FIX = ROOT / "clir_llm" / "data" / "fixture"
FIX_QRELS = "t1 0 de-1 1\nt1 0 de-2 0\nt2 0 de-3 1\n"
FIX_RUN = "t1 Q0 de-2 1 3.0 x\nt1 Q0 de-1 2 2.0 x\nt2 Q0 de-3 1 1.5 x\nt2 Q0 de-1 2 1.0 x\n"
GOOD_RUN = "t1 Q0 de-1 1 3.0 x\nt1 Q0 de-2 2 2.0 x\nt2 Q0 de-2 1 1.5 x\nt2 Q0 de-3 2 1.0 x\n"


def trec_files(tmp_path, qrels=FIX_QRELS, run=FIX_RUN, bom=False, crlf=False):
    "A qrels and a run file of the fixture collection under `tmp_path` (optionally with a byte-order mark and CRLF ends)."

    def enc(text):
        if crlf:
            text = text.replace("\n", "\r\n")
        return (b"\xef\xbb\xbf" if bom else b"") + text.encode()

    q, r = tmp_path / f"qrels{bom}{crlf}.txt", tmp_path / f"run{bom}{crlf}.trec"
    q.write_bytes(enc(qrels))
    r.write_bytes(enc(run))
    return q, r


def good_run(tmp_path, name: str = "good.trec") -> Path:
    "A well-formed run of the fixture collection (en-de) to rerank or evaluate."
    p = tmp_path / name
    p.write_text(GOOD_RUN)
    return p


def fail_cli(kind, *args, env=None, cls: str = "input files", says: str | None = None):
    "The CLI (a subprocess) fails with exit 1 and one line on stderr, no traceback. Returns that line."
    return expect_one_line_error(kind, run_cli(*args, env=env, timeout=300), cls, says)


def err_cli(kind: str, *args, env=None, cls: str = "input files"):
    "Run the real CLI; it must fail with exit 1 and no traceback (one clear error). Returns stderr."
    p = run_cli(*args, env=env, timeout=300)
    hostile(cls, kind, p.returncode == 1 and "Traceback" not in p.stderr)
    assert p.returncode == 1, (p.returncode, p.stdout[-500:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    return p.stderr


def expect_rc(kind, rc, err, what, cls: str = "configs"):
    "Exit 1 and one line on stderr holding `what`, no traceback (counted in the summary)."
    ok = rc == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1 and what in err
    hostile(cls, kind, ok)
    assert ok, (kind, rc, err[-2000:])


def dry_run(path) -> tuple[int, str]:
    "`clir-llm reproduce PATH --dry-run` in this process: (exit status, stderr)."
    p = run_main("reproduce", path, "--dry-run")
    return p.returncode, p.stderr


def unshare_ok() -> bool:
    "Whether a private mount namespace may be made here (root): read-only and tiny file systems for the tests."
    import shutil

    if not shutil.which("unshare"):
        return False
    return (
        subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
            capture_output=True,
        ).returncode
        == 0
    )


# ---------- a first stage whose scores differ below the precision of a run file (the canonical-run tests)
def _register_nearties():
    from clir_llm.core import Retriever, Run, Usage
    from clir_llm.retrieve import FIRST_STAGES, FirstStage

    if "nearties:" in FIRST_STAGES.names():
        return

    class _NearTies(Retriever):
        "Every document of every query within 1e-6 of 0.5: the raw order (docid ascending) is the opposite of the file's."

        def __init__(self, seed: int):
            self.seed, self.name, self.usage = seed, f"nearties:{seed}", Usage()

        def retrieve(self, collection, k=100):
            ids = sorted(d.docid for d in collection.iter_docs())
            step = 1e-7 * self.seed
            return Run(
                {q: {d: 0.5 + 4e-7 - i * step for i, d in enumerate(ids)} for q in collection.queries}, name=self.name
            )

    @FIRST_STAGES.register("nearties:", example="nearties:<n>")
    class NearTiesMethod(FirstStage):
        "Test first stage: scores that differ below the precision of a run file."

        seed: int

        @classmethod
        def parse(cls, name, arg):
            return cls(seed=int(arg))

        def __str__(self):
            return f"nearties:{self.seed}"

        def label(self):
            return str(self)

        def describe(self, translator=None, dense_title=None):
            return "near ties"

        def build(self, translator=None, cache=None, dense_title=None, dt_source="auto", executor=None, **kw):
            return _NearTies(self.seed)

    NEARTIES.append(_NearTies)


NEARTIES: list = []  # the retriever class, once registered


def near_ties(seed: int):
    "A retriever of the `nearties:<seed>` first stage."
    _register_nearties()
    return NEARTIES[0](seed)


def near_config(tmp_path) -> Path:
    "A configuration of two near-tie first stages and their fusion on the fixture collection (the nearties: stage registered)."
    import yaml

    _register_nearties()
    cfg = dict(
        name="near",
        collection="fixture",
        pairs=["en-de"],
        measure="MAP",
        extra_measures=["nDCG@20"],
        first_stage=dict(methods=["nearties:1", "nearties:3", "rrf:nearties:1+nearties:3"], depth=4),
        experiments=["1_first_stage"],
    )
    p = tmp_path / "near.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p
