"""The `clir-llm` entry point as a user runs it: a real subprocess on real files."""

import random, subprocess, sys
from pathlib import Path
import pytest
import pytrec_eval

CLI = [str(Path(sys.executable).parent / "clir-llm")]  # the installed entry point


def run_cli(*args, check=True):
    p = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def make_files(tmp: Path, seed=0):
    """A qrels/run pair with ties, unjudged documents, a judged topic missing from the run,
    a judged topic without relevant documents and a run topic without judgements."""
    rng = random.Random(seed)
    qrels = {f"q{i}": {f"d{j}": rng.choice([0, 0, 1, 2]) for j in rng.sample(range(60), 25)} for i in range(12)}
    qrels["q_norel"] = {"d1": 0, "d2": 0}
    run = {}
    for i in range(11):  # q11 is judged but missing from the run
        docs = rng.sample(range(80), 40)  # d60..d79 are never judged
        run[f"q{i}"] = {f"d{j}": float(rng.choice([1, 2, 3, 3.5, 4])) for j in docs}  # many ties
    run["q_norel"] = {"d1": 1.0, "d3": 0.5}
    run["q_unjudged"] = {"d1": 1.0}
    with open(tmp / "qrels", "w") as f:
        for q, d in qrels.items():
            for doc, g in d.items():
                f.write(f"{q} 0 {doc} {g}\n")
    with open(tmp / "run", "w") as f:
        for q, d in run.items():
            for r, (doc, s) in enumerate(sorted(d.items(), key=lambda x: -x[1]), 1):
                f.write(f"{q} Q0 {doc} {r} {s} sys\n")
    return qrels, run


def parse(out):
    return {l.split("\t")[0]: float(l.split("\t")[1]) for l in out.strip().splitlines()}


@pytest.mark.parametrize("seed", [0, 1])
def test_evaluate_matches_pytrec_eval(tmp_path, seed):
    qrels, run = make_files(tmp_path, seed)
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"map", "ndcg_cut.20", "recall.100", "recip_rank"}).evaluate(
        {q: d for q, d in run.items() if q in qrels}
    )
    # default policy = trec_eval -c: judged topics missing from the run count as 0 (13 judged topics)
    got = parse(
        run_cli(
            "evaluate", "--qrels", tmp_path / "qrels", "--run", tmp_path / "run", "--measures", "MAP nDCG@20 R@100"
        ).stdout
    )
    n = len(qrels)
    assert got["MAP"] == pytest.approx(round(sum(v["map"] for v in ref.values()) / n, 4), abs=1e-4)
    assert got["nDCG@20"] == pytest.approx(round(sum(v["ndcg_cut_20"] for v in ref.values()) / n, 4), abs=1e-4)
    assert got["R@100"] == pytest.approx(round(sum(v["recall_100"] for v in ref.values()) / n, 4), abs=1e-4)
    # --missing skip = plain trec_eval / pytrec_eval
    got = parse(
        run_cli(
            "evaluate",
            "--qrels",
            tmp_path / "qrels",
            "--run",
            tmp_path / "run",
            "--measures",
            "MAP",
            "--missing",
            "skip",
        ).stdout
    )
    assert got["MAP"] == pytest.approx(sum(v["map"] for v in ref.values()) / len(ref), abs=1e-4)


def test_evaluate_output_format(tmp_path):
    make_files(tmp_path)
    out = run_cli("evaluate", "--qrels", tmp_path / "qrels", "--run", tmp_path / "run").stdout
    lines = out.strip().splitlines()
    assert [l.split("\t")[0] for l in lines] == ["MAP", "nDCG@20"]
    assert all(len(l.split("\t")) == 2 and len(l.split("\t")[1].split(".")[1]) == 4 for l in lines)


def test_evaluate_bad_run_names_file_and_line(tmp_path):
    make_files(tmp_path)
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 d1 1 2.0 sys\nq1 Q0 d2 2 two sys\n")
    p = run_cli("evaluate", "--qrels", tmp_path / "qrels", "--run", bad, check=False)
    assert p.returncode == 1
    assert f"{bad}:2: score must be a number, got 'two'" in p.stderr and "Traceback" not in p.stderr


def test_evaluate_unknown_measure(tmp_path):
    make_files(tmp_path)
    p = run_cli("evaluate", "--qrels", tmp_path / "qrels", "--run", tmp_path / "run", "--measures", "MAPP", check=False)
    assert p.returncode == 1 and "unknown measure 'MAPP'" in p.stderr


def test_help_lists_commands():
    out = run_cli("--help").stdout
    for cmd in ("evaluate", "datasets", "retrieve", "rerank", "reproduce"):
        assert f"  {cmd}" in out
    p = run_cli("nonsense", check=False)
    assert p.returncode == 2 and "unknown command" in p.stderr


@pytest.mark.parametrize(
    "args",
    [("rerank", "--method", "nosuch"), ("evaluate", "--bogus"), ("evaluate", "--run", "r", "--qrels", "q", "--bogus")],
)
def test_bad_option_is_one_line_not_the_usage_block(args):
    p = run_cli(*args, check=False)
    cmd = f"clir-llm {args[0]}"
    assert p.returncode == 2 and "usage:" not in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith(f"{cmd}: error: ") and p.stderr.endswith(f" (see {cmd} --help)\n"), p.stderr


# ---------- issue 26 items 1 and 2: no command replaces what it should not; every output is checked before any work
import os, stat  # noqa: E402
import _reliability as R  # noqa: E402
from clir_llm.testing import FakeOpenAIServer  # noqa: E402


def _unsafe(d: Path) -> dict:
    "Paths inside `d` that must never be written over: a link to a file, a link to /dev/null, a FIFO, a folder, a device (root)."
    d.mkdir(parents=True, exist_ok=True)
    (d / "precious.txt").write_text("keep")
    os.symlink(d / "precious.txt", d / "link")
    os.symlink(os.devnull, d / "devnull")
    os.mkfifo(d / "fifo")
    (d / "folder").mkdir()
    out = {k: d / k for k in ("link", "devnull", "fifo", "folder")}
    # as /dev/null, made here
    try:
        os.mknod(d / "chardev", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        out["chardev"] = d / "chardev"
    except OSError:
        pass
    return out


def _unchanged(d: Path):
    assert (
        (d / "precious.txt").read_text() == "keep"
        and os.path.islink(d / "link")
        and os.readlink(d / "devnull") == os.devnull
    )
    assert stat.S_ISFIFO(os.lstat(d / "fifo").st_mode) and (d / "folder").is_dir() and not any((d / "folder").iterdir())
    if (d / "chardev").exists():
        assert stat.S_ISCHR(os.lstat(d / "chardev").st_mode)
    assert not list(d.glob(".*.tmp")) and not list(d.glob("*.usage.json")) and not list(d.glob("*.rerank.json"))


def _refused(kind, p, says="an output is written only as a regular file"):
    "One line on stderr, exit 1, saying `says`: counted under 'outputs'."
    return R.expect_one_line_error(kind, p, "outputs", says)


def test_retrieve_refuses_unsafe_outputs(tmp_path):
    "retrieve --out (and its .usage.json) never a link, FIFO, device or folder: one line, before BM25 runs."
    targets = _unsafe(tmp_path / "t")
    for kind, p in targets.items():
        _refused(
            f"retrieve --out {kind}",
            R.run_main("retrieve", "--collection", "fixture", "--pair", "en-de", "--method", "bm25-og", "--out", p),
        )
    os.mkfifo(tmp_path / "r.trec.usage.json")
    _refused(
        "retrieve usage sidecar fifo",
        R.run_main(
            "retrieve",
            "--collection",
            "fixture",
            "--pair",
            "en-de",
            "--method",
            "bm25-og",
            "--out",
            tmp_path / "r.trec",
        ),
    )
    _unchanged(tmp_path / "t")
    assert not (tmp_path / "r.trec").exists()


def _rerank(run, out, srv, *extra):
    return R.run_main(
        "rerank",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        run,
        "--method",
        "listwise",
        "--llm",
        "openai:fake-ranker",
        "--llm-base-url",
        srv.url,
        "--top-k",
        "2",
        "--window",
        "2",
        "--step",
        "1",
        "--out",
        out,
        *extra,
    )


def test_rerank_refuses_unsafe_outputs_before_any_model_call(tmp_path):
    "rerank --out, .rerank.json and .usage.json: never a link, FIFO, device or folder; no model call is made."
    run = R.good_run(tmp_path)
    targets = _unsafe(tmp_path / "t")
    with FakeOpenAIServer(responder=R.fake_answer) as srv:
        for kind, p in targets.items():
            _refused(f"rerank --out {kind}", _rerank(run, p, srv))
        os.symlink(tmp_path / "t" / "precious.txt", tmp_path / "o.trec.rerank.json")
        _refused("rerank .rerank.json a link", _rerank(run, tmp_path / "o.trec", srv))
        os.mkfifo(tmp_path / "p.trec.usage.json")
        _refused("rerank .usage.json a FIFO", _rerank(run, tmp_path / "p.trec", srv))
        assert not srv.requests, "no model call before the outputs are known to be writable"
    _unchanged(tmp_path / "t")


def test_rerank_never_writes_over_its_run(tmp_path):
    "--out equal to --run (the same path, another spelling, a hard link): one line, the run untouched, no model call."
    run = R.good_run(tmp_path)
    os.link(run, tmp_path / "hard.trec")
    with FakeOpenAIServer(responder=R.fake_answer) as srv:
        for out in (run, tmp_path / "." / run.name, tmp_path / "hard.trec"):
            _refused("rerank --out equal to --run", _rerank(run, out, srv), "is also an input of this command")
        assert not srv.requests
    assert run.read_text() == R.GOOD_RUN and not list(tmp_path.glob("*.json"))


def test_outputs_in_a_read_only_folder_fail_before_any_model_call(tmp_path):
    "A read-only file system as rerank's --out folder: one line naming it, no model call (a private mount namespace)."
    if not R.unshare_ok():
        pytest.skip("needs a private mount namespace (root) for a read-only mount")
    run = R.good_run(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    with FakeOpenAIServer(responder=R.fake_answer) as srv:
        args = [
            "rerank",
            "--collection",
            "fixture",
            "--pair",
            "en-de",
            "--run",
            str(run),
            "--method",
            "listwise",
            "--llm",
            "openai:fake-ranker",
            "--llm-base-url",
            srv.url,
            "--top-k",
            "2",
            "--out",
            str(ro / "out.trec"),
        ]
        p = subprocess.run(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                'mount -t tmpfs -o ro,size=64k tmpfs "$1" && shift && exec "$@"',
                "sh",
                str(ro),
                R.CLI,
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=R.env_for(tmp_path / "cache"),
        )
        _refused("rerank --out in a read-only folder", p, "Read-only file system")
        assert not srv.requests


def test_a_file_name_too_long_fails_before_any_work(tmp_path):
    "A 250-character --out (too long once atomic_write's temporary suffix is added): one line, cut, before any work."
    with FakeOpenAIServer(responder=R.fake_answer) as srv:
        err = _refused(
            "rerank --out name too long",
            _rerank(R.good_run(tmp_path), tmp_path / ("r" * 250), srv),
            "file name too long",
        )
        assert not srv.requests and len(err) < 400
    err = _refused(
        "retrieve --out name too long",
        R.run_main(
            "retrieve",
            "--collection",
            "fixture",
            "--pair",
            "en-de",
            "--method",
            "bm25-og",
            "--out",
            tmp_path / ("r" * 300),
        ),
        "File name too long",
    )
    assert len(err) < 400


def test_translate_refuses_unsafe_outputs(tmp_path):
    "translate --out (a folder): not a file or a FIFO; the files it writes there never links; before the translator is built."
    targets = _unsafe(tmp_path / "t")
    args = [
        "translate",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--what",
        "queries",
        "--translator",
        "dict:freedict",
    ]
    for kind in ("fifo", "chardev"):
        if kind in targets:
            _refused(f"translate --out {kind}", R.run_main(*args, "--out", targets[kind]), "not a folder")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(tmp_path / "t" / "precious.txt", out / "queries.de.tsv")
    _refused("translate output file a link", R.run_main(*args, "--out", out))
    os.mkfifo(out / "documents.translation.json")
    _refused(
        "translate accounting file a FIFO",
        R.run_main(*args[:-4], "--what", "documents", "--translator", "dict:freedict", "--out", out),
    )
    _unchanged(tmp_path / "t")
    p = R.run_main(*args, "--out", tmp_path / "o", "--limit", "0")
    R.expect_one_line_error("translate --limit 0", p, "numbers", "--limit must be at least 1")


def test_build_demo_never_replaces_what_is_not_a_demo_folder(tmp_path):
    "build-demo replaces its --out folder as a whole: never through a link, never a file, never a folder that holds no collection."
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("keep")
    os.symlink(tmp_path / "home", tmp_path / "link")
    (tmp_path / "file").write_text("keep")
    for kind, out, says in (
        ("a folder of other files", tmp_path / "home", "no collection (no MANIFEST.json)"),
        ("a link to a folder", tmp_path / "link", "is a link"),
        ("a file", tmp_path / "file", "not a folder"),
    ):
        _refused(
            f"build-demo --out {kind}", R.run_main("build-demo", "--out", out, "--debs", tmp_path / "no-debs"), says
        )
    assert (tmp_path / "home" / "notes.txt").read_text() == "keep" and (tmp_path / "file").read_text() == "keep"


def test_reproduce_refuses_unsafe_result_folders(tmp_path):
    "reproduce --results / --figures that are files, FIFOs or devices: one line before any notebook runs."
    targets = _unsafe(tmp_path / "t")
    cfg = R.near_config(tmp_path)
    for kind in ("fifo", "link", "chardev"):
        if kind not in targets:
            continue
        _refused(
            f"reproduce --results {kind}",
            R.run_main("reproduce", cfg, "--results", targets[kind], "--figures", tmp_path / "f"),
            "is a link" if kind == "link" else "not a folder",
        )
        _refused(
            f"reproduce --figures {kind}",
            R.run_main("reproduce", cfg, "--results", tmp_path / "r", "--figures", targets[kind]),
            "is a link" if kind == "link" else "not a folder",
        )
    _unchanged(tmp_path / "t")
    assert not (tmp_path / "r").exists()


# ---------- issue 26 item 4 (the command line's part): every error printed is redacted, a bug's traceback too
def boom(argv):
    "A command with a bug whose message holds a credential (tests/test_cli.py::test_errors_and_tracebacks_are_redacted)."
    raise RuntimeError(f"failed at http://u:{os.environ['CANARY_SECRET']}@h/v1 with {os.environ['CANARY_SECRET']}")


def test_errors_and_tracebacks_are_redacted(monkeypatch):
    from clir_llm import cli

    monkeypatch.setenv("CANARY_SECRET", "cnry-0123456789abcdef")
    monkeypatch.setitem(cli.COMMANDS, "boom", ("test_cli:boom", "a command with a bug"))
    p = R.run_main("boom")
    assert p.returncode == 1 and "RuntimeError" in p.stderr and "cnry-0123456789abcdef" not in p.stderr, p.stderr
    p = R.run_main(
        "evaluate", "--qrels", "http://u:cnry-0123456789abcdef@h/v1?api-key=cnry-query-42", "--run", "r.trec"
    )
    ok = p.returncode == 1 and "cnry-" not in p.stderr
    R.hostile("secrets", "a key in an argument echoed by an error", ok)
    assert ok, p.stderr


# ---------- issue 26 item 13: -q prints nothing but errors (no bar, no summary)
def test_quiet_prints_only_errors(tmp_path):
    run = R.good_run(tmp_path)
    with FakeOpenAIServer(responder=R.slow_answer(0.2)) as srv:
        args = [
            "rerank",
            "--collection",
            "fixture",
            "--pair",
            "en-de",
            "--run",
            run,
            "--method",
            "listwise",
            "--llm",
            "openai:fake-ranker",
            "--llm-base-url",
            srv.url,
            "--top-k",
            "3",
            "--window",
            "2",
            "--step",
            "1",
        ]
        env = {**R.env_for(tmp_path / "cache"), "TQDM_MININTERVAL": "0"}
        env.pop("TQDM_DISABLE")
        loud = R.run_cli(*args, "--out", tmp_path / "a.trec", env=env)
        quiet = R.run_cli(
            "-q", *args, "--out", tmp_path / "b.trec", env={**env, "CLIR_LLM_CACHE": str(tmp_path / "cache2")}
        )
    assert loud.returncode == 0 and "a.trec" in loud.stdout and loud.stderr, (loud.stdout, loud.stderr[-500:])
    ok = quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""
    R.hostile("arguments", "-q prints progress or a summary", ok)
    assert ok, (quiet.stdout, quiet.stderr[-1000:])
    assert (tmp_path / "b.trec").read_text() == (tmp_path / "a.trec").read_text()


@pytest.mark.parametrize("bad", ["../evil", "a/b", "os; rm -rf x"])
def test_plugin_names_must_be_module_names(tmp_path, bad):
    "issue 26 item 10: a --plugin that is a path or not a name was a traceback of importlib; now one line before any work."
    p = R.run_main(
        "retrieve",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--method",
        "bm25-og",
        "--plugin",
        bad,
        "--out",
        tmp_path / "r.trec",
    )
    R.expect_one_line_error(f"--plugin {bad!r}", p, "arguments", "is not a module name")
    assert not (tmp_path / "r.trec").exists()


# ---------- Issue 16 item 7: the README's command-line examples finish in minutes on 2 cores and print the demo table's
# numbers: `retrieve --doc-max-length` (the demo table's 256 tokens), `rerank --max-queries` with a progress bar that
# knows its total (n of N and an estimate), and the strings `clir-llm models list` prints are the ones `--llm` and
# `--method` accept.
import json, os, subprocess, sys, textwrap
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
CLI_EXE = str(Path(sys.executable).parent / "clir-llm")


def test_retrieve_doc_max_length_reaches_the_encoder(monkeypatch, tmp_path):
    import clir_llm.cli_stages as R  # the command and the names it calls
    from clir_llm.core import ClirError

    seen = {}

    class Stop(Exception):
        pass

    def fake(method, **kw):
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(R, "get_retriever", fake)
    with pytest.raises(Stop):
        R.cli_retrieve(
            [
                "--collection",
                "fixture",
                "--pair",
                "en-de",
                "--method",
                "dense:e5-small",
                "--doc-max-length",
                "256",
                "--out",
                str(tmp_path / "r.trec"),
            ]
        )
    assert seen["doc_max_length"] == 256
    with pytest.raises(ClirError, match="--doc-max-length must be at least 1, got 0"):
        R.cli_retrieve(
            [
                "--collection",
                "fixture",
                "--pair",
                "en-de",
                "--method",
                "dense:e5-small",
                "--doc-max-length",
                "0",
                "--out",
                str(tmp_path / "r.trec"),
            ]
        )
    monkeypatch.undo()  # and the Dense retriever gets it (the cut the demo table used)
    d = R.get_retriever("dense:e5-small", doc_max_length=256)
    assert d.encoder.spec.doc_max_length == 256 and R.get_retriever("dense:e5-small").encoder.spec.doc_max_length == 512


PLUGIN = """
from clir_llm.rerank import RERANKERS, Reranker

@RERANKERS.register("reverse-mq")
class ReverseReranker(Reranker):
    "The top k in reverse first-stage order (a test reranker without a model)."
    needs_backend = False
    def rerank(self, collection, run, k=100):
        self._start(collection, run, k)
        return self._finish(run, {q: run.docids(q, k)[::-1] for q in self.diagnostics}, k)
"""


def test_rerank_max_queries(tmp_path):
    from clir_llm.collections import load_collection
    from clir_llm.core import Run

    (tmp_path / "mq_plugin.py").write_text(PLUGIN)
    fx = load_collection("fixture", "en-de")
    first = Run.from_ranked({q: [d.docid for d in fx.iter_docs()] for q in fx.queries}, name="order")
    first.write(tmp_path / "first.trec")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    args = [
        CLI_EXE,
        "rerank",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        str(tmp_path / "first.trec"),
        "--method",
        "reverse-mq",
        "--plugin",
        "mq_plugin",
        "--top-k",
        "3",
        "--out",
        str(tmp_path / "out.trec"),
    ]
    p = subprocess.run([*args, "--max-queries", "2"], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    assert sorted(Run.read(tmp_path / "out.trec")) == sorted(first)[:2] and len(first) > 2
    p = subprocess.run([*args, "--max-queries", "0"], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 1 and "--max-queries must be at least 1, got 0" in p.stderr


def test_pairwise_progress_has_a_total(tmp_path, monkeypatch):
    "PRP's bar counts comparisons against their upper bound (n of N and an estimate), and ends at 100 %."
    from clir_llm.pairwise import PairwiseReranker, max_comparisons
    from clir_llm.progress import CHANNEL
    from clir_llm.rerank import get_reranker
    from clir_llm.testing import QrelsOracle
    from clir_llm.testing import tiny_setup

    coll, run = tiny_setup(n_queries=3, n_docs=8)
    ch = tmp_path / "p.jsonl"
    monkeypatch.setenv(CHANNEL, str(ch))
    rr = get_reranker("pairwise-bubblesort", QrelsOracle(coll))
    assert isinstance(rr, PairwiseReranker)
    rr.rerank(coll, run, k=8)
    evs = [json.loads(l) for l in ch.read_text().splitlines() if "prp" in l]
    assert evs[0]["total"] == 3 * max_comparisons("bubblesort", 8, rr.options.k) and evs[0]["n"] == 0
    assert evs[-1]["closed"] and evs[-1]["n"] == evs[-1]["total"] > 0


def test_models_list_names_are_accepted():
    from clir_llm.assets import OFFLINE_MODELS
    from clir_llm.llm import BackendSpec
    from clir_llm.retrieve import parse_method

    p = subprocess.run([CLI_EXE, "models", "list"], capture_output=True, text=True, timeout=120)
    names = [l.split(": ")[0] for l in p.stdout.splitlines() if l and not l.startswith(" ")]
    assert names == list(OFFLINE_MODELS)
    for n in names:
        if n.startswith("dense:"):
            assert str(parse_method(n)) == n  # retrieve --method
        else:
            assert f"{BackendSpec.parse(n).kind}:{BackendSpec.parse(n).model}" == n  # rerank --llm


@pytest.mark.slow
def test_readme_cli_example_prints_the_demo_table_number(tmp_path):
    "The README's `retrieve` + `evaluate` example on the demo gives the first-stage table's mE5-small en-de cell."
    import pandas as pd

    out = tmp_path / "e5.trec"
    p = subprocess.run(
        [
            CLI_EXE,
            "retrieve",
            "--collection",
            "demo",
            "--pair",
            "en-de",
            "--method",
            "dense:e5-small",
            "--doc-max-length",
            "256",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert p.returncode == 0, p.stderr
    p = subprocess.run(
        [CLI_EXE, "evaluate", "--collection", "demo", "--pair", "en-de", "--run", str(out), "--measures", "MAP"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    got = float(p.stdout.split()[1])
    table = pd.read_csv(ROOT / "results" / "demo" / "tables" / "first_stage.csv", index_col=0)
    assert f"{got:.3f}" == f"{table.loc['mE5-small', 'en-de']:.3f}"


# ---------- issue 39 item 1: an output never replaces the cache's state
@pytest.mark.parametrize("cmd", ["rerank", "retrieve"])
def test_a_cache_database_as_output_is_refused_before_any_work(tmp_path, cmd):
    "`rerank ... --cache C --out C/llm.sqlite` exited 0 and replaced the cache database with a TREC run."
    cache = tmp_path / "cache"
    cache.mkdir()
    db = cache / "llm.sqlite"
    db.write_bytes(b"SQLite format 3\x00" + bytes(100))
    before = db.read_bytes()
    args = (
        [
            "rerank",
            "--run",
            R.good_run(tmp_path),
            "--method",
            "pairwise-allpair",
            "--llm",
            "hf:nothing-loaded",
            "--top-k",
            "2",
        ]
        if cmd == "rerank"
        else ["retrieve", "--method", "bm25-og"]
    )
    p = R.run_cli(
        *args[:1],
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        *args[1:],
        "--cache",
        cache,
        "--out",
        db,
        env=R.env_for(tmp_path / "other-cache"),
        timeout=300,
    )
    R.expect_one_line_error(f"{cmd} --out inside --cache", p, "outputs", "is a database of the cache folder")
    assert db.read_bytes() == before
    p = R.run_cli(
        *args[:1],
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        *args[1:],
        "--out",
        tmp_path / "c" / "embed.sqlite-wal",
        # the default cache ($CLIR_LLM_CACHE) too, and a database's journal
        env=R.env_for(tmp_path / "c"),
        timeout=300,
    )
    R.expect_one_line_error(f"{cmd} --out inside $CLIR_LLM_CACHE", p, "outputs", "is a database of the cache folder")


HUGE = "a b " * 25_000  # a 100 KB argument with spaces in it: no word over LONG_WORD, so only the line's cut holds it


@pytest.mark.parametrize(
    "kind,args",
    [
        (
            "a 100 KB --method",
            ["retrieve", "--collection", "fixture", "--pair", "en-de", "--method", HUGE, "--out", "x.trec"],
        ),
        (
            "a 100 KB --collection",
            ["retrieve", "--collection", HUGE, "--pair", "en-de", "--method", "bm25-og", "--out", "x.trec"],
        ),
        (
            "a 100 KB --llm",
            [
                "rerank",
                "--collection",
                "fixture",
                "--pair",
                "en-de",
                "--run",
                "r.trec",
                "--method",
                "listwise",
                "--llm",
                HUGE,
                "--out",
                "x.trec",
            ],
        ),
    ],
)
def test_huge_arguments_are_not_echoed_in_full(tmp_path, kind, args):
    "A 90-100 KB argument came back whole in the error line (issue 39 item 6): the line is cut, with its length."
    p = R.run_main(*args)
    line = p.stderr.strip()
    ok = (
        p.returncode == 1
        and len(line.splitlines()) == 1
        and len(line) < 1200
        and "characters)" in line
        and "Traceback" not in line
    )
    R.hostile("arguments", kind, ok)
    assert ok, (p.returncode, len(p.stderr), p.stderr[:300])


def test_rerank_top_k_is_bounded(tmp_path):
    "`rerank --top-k 100000000000` was accepted (issue 39 item 6): bounded as retrieve's --k, before any input is read."
    p = R.run_main(
        "rerank",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        tmp_path / "none.trec",
        "--method",
        "listwise",
        "--llm",
        "openai:x",
        "--top-k",
        "100000000000",
        "--out",
        tmp_path / "x.trec",
    )
    R.expect_rc("rerank --top-k 1e11", p.returncode, p.stderr, "--top-k must be between 1 and 10,000", cls="numbers")


@pytest.mark.parametrize("flag", ["--window", "--step", "--max-words", "--context"])
def test_listwise_counts_are_bounded(tmp_path, flag):
    "`rerank --window 100000000000` ran out of memory (the process was killed) building its answer budget (issue 39 item 6)."
    p = R.run_main(
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
        "openai:x",
        flag,
        "100000000000",
        "--out",
        tmp_path / "x.trec",
    )
    R.expect_rc(f"rerank {flag} 1e11", p.returncode, p.stderr, flag.lstrip("-").replace("-", "_"), cls="numbers")


def test_a_95_kb_model_name_is_refused_before_any_call(tmp_path):
    """Sweep of issue 39 item 6 (this session): `--llm openai:<95 KB>` was accepted, echoed whole in the 'no tokenizer'
    warning (95 KB on stderr) and sent to the server 7 times; a model id is at most 4,096 characters (PATH_MAX, the
    longest local folder): one short line, no call."""
    run = R.good_run(tmp_path)
    p = R.run_main(
        "rerank",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        run,
        "--method",
        "listwise",
        "--top-k",
        "2",
        "--llm",
        "openai:" + "A" * 95_000,
        "--llm-base-url",
        "http://127.0.0.1:9/v1",
        "--llm-max-retries",
        "0",
        "--out",
        tmp_path / "x.trec",
    )
    ok = (
        p.returncode == 1
        and len(p.stderr) < 1200
        and len(p.stderr.strip().splitlines()) == 1
        and "model: String should have at most 4096 characters" in p.stderr
    )
    R.hostile("arguments", "a 95 KB model name (--llm openai:...)", ok)
    assert ok, (p.returncode, len(p.stderr), p.stderr[:400])
    from clir_llm.llm import BackendSpec

    assert BackendSpec.parse("openai:gpt-4o-mini").model == "gpt-4o-mini"  # a normal name as before


@pytest.mark.parametrize(
    "args,says",
    [
        (["fixture", "--pair", "xx-yy"], "--pair 'xx-yy': no collection shown has this pair"),
        (["--pair", "zz-qq"], "--pair 'zz-qq': no collection has this pair"),
    ],
)
def test_datasets_pair_that_no_collection_has_is_an_error(args, says):
    """Sweep of issue 39 item 6 (this session): `datasets fixture --pair xx-yy` listed every pair of the fixture and
    exited 0 (--pair was read only for files:). --pair now shows that pair of each collection; a pair none has is one line."""
    p = R.run_main("datasets", *args)
    R.expect_one_line_error(f"datasets {' '.join(args)}", p, "arguments", says)
    ok = R.run_main("datasets", "fixture", "--pair", "en-de")
    rows = [l for l in ok.stdout.splitlines() if l.startswith("fixture")]
    assert ok.returncode == 0 and len(rows) == 1 and rows[0].split()[1] == "en-de", ok.stdout[:600]
