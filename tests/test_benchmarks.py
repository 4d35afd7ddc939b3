"""Benchmarks that cannot rot (issue 36): every `benchmarks/*.py` runs its `--smoke` (seconds on tiny inputs, in a
subprocess) without a traceback, exits 0, and prints a `target NAME...` line for each name of its `TARGETS` (read from
the script's source, without importing it); a ratio measured in a smoke run is marked as no measurement. Not slow: a
script whose smoke run breaks fails here, not on the next measuring day. (benchmarks/peers.py's own units:
tests/test_benchmark_peers.py.)"""

import ast, importlib.util, io, os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))
# seconds a smoke run may take on a loaded 2-core machine (about 10-30 s each there; seconds when idle)
TIMEOUT = 300


def declared_targets(path: Path) -> list[str]:
    "The literal `TARGETS` of a benchmark script (a list of target names), read from its source."
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            names = [
                t.id
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(t, ast.Name)
            ]
            if "TARGETS" in names:
                return ast.literal_eval(node.value)
    raise AssertionError(f"{path.name} declares no TARGETS")


def test_every_script_declares_its_targets_and_a_smoke_flag():
    assert len(SCRIPTS) >= 12
    for p in SCRIPTS:
        t = declared_targets(p)
        assert isinstance(t, list) and all(isinstance(n, str) and n for n in t), p.name
        assert '"--smoke"' in p.read_text() or "_smoke.add_flag(ap)" in p.read_text(), p.name


def test_smoke_marks_ratios_not_the_lines_without_one():
    spec = importlib.util.spec_from_file_location("_smoke", ROOT / "benchmarks" / "_smoke.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    buf = io.StringIO()
    old, sys.stdout = sys.stdout, buf
    try:
        with m.marked():
            print("target a: 2.00x (goal 1.0x) met")
            print("other line")
            m.not_measured("b", "no ray here")
            print("target c: skipped (x cannot be imported)")
            print("target d: 1.0", end="")
            print("0x")
        with m.marked(False):
            print("target e: 3.00x")
    finally:
        sys.stdout = old
    assert buf.getvalue().splitlines() == [
        "target a: 2.00x (goal 1.0x) met" + m.MARK,
        "other line",
        "target b: not measured (no ray here)",
        "target c: skipped (x cannot be imported)",
        "target d: 1.00x" + m.MARK,
        "target e: 3.00x",
    ]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_smoke_run(script, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "TOKENIZERS_PARALLELISM": "false",
    }
    r = subprocess.run(
        [sys.executable, str(script), "--smoke"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{script.name} --smoke exited {r.returncode}:\n{out[-4000:]}"
    assert "Traceback (most recent call last)" not in out, out[-4000:]
    lines = r.stdout.splitlines()
    for name in declared_targets(script):
        assert any(l.startswith(f"target {name}:") or l.startswith(f"target {name} ") for l in lines), (
            f"{script.name} --smoke printed no line for target {name!r}:\n{r.stdout[-3000:]}"
        )
    for l in (l for l in lines if l.startswith("target ")):  # a tiny run's ratio is never passed off as a measurement
        assert "[smoke: tiny inputs, not a measurement]" in l or "not measured (" in l or ": skipped (" in l, l
