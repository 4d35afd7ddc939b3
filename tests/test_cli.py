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
            for doc, g in d.items(): f.write(f"{q} 0 {doc} {g}\n")
    with open(tmp / "run", "w") as f:
        for q, d in run.items():
            for r, (doc, s) in enumerate(sorted(d.items(), key=lambda x: -x[1]), 1): f.write(f"{q} Q0 {doc} {r} {s} sys\n")
    return qrels, run


def parse(out):
    return {l.split("\t")[0]: float(l.split("\t")[1]) for l in out.strip().splitlines()}


@pytest.mark.parametrize("seed", [0, 1])
def test_evaluate_matches_pytrec_eval(tmp_path, seed):
    qrels, run = make_files(tmp_path, seed)
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"map", "ndcg_cut.20", "recall.100", "recip_rank"}).evaluate(
        {q: d for q, d in run.items() if q in qrels})
    # default policy = trec_eval -c: judged topics missing from the run count as 0 (13 judged topics)
    got = parse(run_cli("evaluate", "--qrels", tmp_path / "qrels", "--run", tmp_path / "run",
                        "--measures", "MAP nDCG@20 R@100").stdout)
    n = len(qrels)
    assert got["MAP"] == pytest.approx(round(sum(v["map"] for v in ref.values()) / n, 4), abs=1e-4)
    assert got["nDCG@20"] == pytest.approx(round(sum(v["ndcg_cut_20"] for v in ref.values()) / n, 4), abs=1e-4)
    assert got["R@100"] == pytest.approx(round(sum(v["recall_100"] for v in ref.values()) / n, 4), abs=1e-4)
    # --missing skip = plain trec_eval / pytrec_eval
    got = parse(run_cli("evaluate", "--qrels", tmp_path / "qrels", "--run", tmp_path / "run",
                        "--measures", "MAP", "--missing", "skip").stdout)
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


@pytest.mark.parametrize("args", [("rerank", "--method", "nosuch"), ("evaluate", "--bogus"), ("evaluate", "--run", "r", "--qrels", "q", "--bogus")])
def test_bad_option_is_one_line_not_the_usage_block(args):
    p = run_cli(*args, check=False)
    cmd = f"clir-llm {args[0]}"
    assert p.returncode == 2 and "usage:" not in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith(f"{cmd}: error: ") and p.stderr.endswith(f" (see {cmd} --help)\n"), p.stderr
