"""Progress and quiet output. `clir-llm reproduce` is quiet by default and shows stage progress; `-q` prints nothing but
errors; `-v` shows the logs and the kernels' output. Executed notebooks keep tables and figures, no log spam.
A tiny configuration (the shipped fixture collection, BM25 through the JVM and the mE5-small stand-in through
transformers: the two sources of the noise) runs through the real command line."""

import json, os, re, subprocess, sys
from pathlib import Path
import pytest, yaml

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "clir-llm")
CONFIG = dict(
    name="tiny-quiet",
    collection="fixture",
    pairs=["en-de"],
    measure="MAP",
    extra_measures=["nDCG@20"],
    experiments=["1_first_stage"],
    first_stage=dict(methods=["bm25-og", "dense:e5-small"]),
)
NOISE = (
    "Kernel is running over TCP",
    "SLF4J",
    "org.apache.lucene",
    "LOAD REPORT",
    "IProgress not found",
    "TqdmWarning",
    "WARNING",
    "Loading weights",
)


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    "One cold run at the default verbosity; the other tests re-execute its notebook with --force (runs read back)."
    tmp = tmp_path_factory.mktemp("quiet")
    return tmp, _run(tmp)


def _fresh_cache(tmp_path) -> Path:
    "A cache of its own (so the dense index is encoded, with its bar, not loaded), sharing the prepared models."
    from clir_llm.cache import Cache

    root, cache = Cache().root, tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    for sub in ("models", "jvm", "freedict"):
        if (root / sub).exists() and not (cache / sub).exists():
            (cache / sub).symlink_to(root / sub)
    return cache


def _run(tmp_path, *flags, pre=()):
    cfg = tmp_path / "tiny-quiet.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    env = {
        **os.environ,
        "MPLBACKEND": "Agg",
        "CLIR_LLM_PROGRESS_INTERVAL": "0",
        "CLIR_LLM_CACHE": str(_fresh_cache(tmp_path)),
    }
    env.pop("TQDM_DISABLE", None)
    return subprocess.run(
        [
            CLI,
            *pre,
            "reproduce",
            str(cfg),
            "--results",
            str(tmp_path / "res"),
            "--figures",
            str(tmp_path / "fig"),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
    )


def test_default_is_quiet_with_stage_progress_and_clean_notebook(cold):
    tmp_path, p = cold
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout + p.stderr
    assert not [n for n in NOISE if n in out], out[-3000:]
    assert "[1/1] 1_first_stage: running" in p.stderr and "[1/1] 1_first_stage: done in" in p.stderr
    # a progress line from inside the kernel: stage, pair, step and n of N with tqdm's meter
    assert re.search(r"\[1/1\] 1_first_stage en-de dense:e5-small \| .*\d+/\d+ \[", p.stderr), p.stderr
    assert "1 notebooks ran, 0 up to date" in p.stdout
    nb = json.loads((tmp_path / "res" / "tiny-quiet" / "1_first_stage.ipynb").read_text())
    outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
    assert outputs and not [o for o in outputs if o.get("name") == "stderr"]
    assert any("text/markdown" in o.get("data", {}) for o in outputs)  # the table is kept
    text = json.dumps(nb)
    assert not [n for n in NOISE if n in text] and "duration" not in text  # no log spam, no timings
    log = (tmp_path / "res" / "tiny-quiet" / "logs" / "1_first_stage.log").read_text()
    assert "Kernel is running over TCP" in log  # kept, out of the terminal


def test_quiet_prints_nothing_but_errors(cold):
    tmp_path = cold[0]
    p = _run(tmp_path, "-q", "--force")
    assert p.returncode == 0 and p.stdout == "" and p.stderr == "", (p.stdout, p.stderr)
    p = _run(tmp_path, "-q", "--only", "9_nothing")
    assert (
        p.returncode == 1
        and p.stdout == ""
        and p.stderr.strip().splitlines()
        == ["clir-llm reproduce: error: --only 9_nothing: not an experiment of 'tiny-quiet' (1_first_stage)"]
    )


def test_verbose_shows_logs_and_kernel_output(cold):
    tmp_path = cold[0]
    p = _run(tmp_path, "--force", pre=["-v"])  # before the command, as `clir-llm -v reproduce`
    assert p.returncode == 0, p.stderr[-3000:]
    assert "INFO clir_llm.reproduce: [1/1] 1_first_stage: running" in p.stderr
    assert "Kernel is running over TCP" in p.stderr and "INFO papermill:" in p.stderr
    assert "mE5-small: beats BM25-OG" in p.stderr  # the cells' output, logged as they run


def test_cli_flags_and_help():
    p = subprocess.run([CLI, "reproduce", "--help"], capture_output=True, text=True, timeout=120)
    for opt in ("--force", "--results", "--figures", "--replay", "--only", "--dry-run", "--verbose", "--quiet"):
        assert opt in p.stdout
    docs = (ROOT / "README.md").read_text() + "".join(
        p.read_text() for p in sorted((ROOT / "nbs" / "guides").glob("*.ipynb"))
    )
    undocumented = [
        o for o in sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", p.stdout)) - {"--help"}) if f"`{o}" not in docs
    ]
    assert not undocumented, f"reproduce options missing from the README and the guides: {undocumented}"
    p = subprocess.run([CLI, "-v", "-q", "methods"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "choose one" in p.stderr


def test_progress_is_live_when_results_path_is_relative(tmp_path, monkeypatch):
    """A bar opened in the kernel reaches the terminal WHILE the notebook runs, with `results/` given relative to the
    working folder (the default): papermill changes the working folder during a run, and the progress channel was
    looked up relative to it, so every line came at once after the notebook ended."""
    from clir_llm.reproduce import _execute

    marker = tmp_path / "line-seen"

    class Term:
        def write(self, s):
            if "live-bar" in s:
                marker.write_text(s)

        def flush(self):
            pass

        def isatty(self):
            return False

    code = lambda src, **md: {
        "cell_type": "code",
        "execution_count": None,
        "metadata": md,
        "outputs": [],
        "source": src,
    }
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "cells": [
            code("marker = ''", tags=["parameters"]),
            code(
                "import time\nfrom pathlib import Path\nfrom clir_llm.progress import progress_bar\n"
                "bar = progress_bar(total=3, desc='live-bar'); bar.update(1)\n"
                "t0 = time.time()\nwhile not Path(marker).exists() and time.time() - t0 < 60: time.sleep(0.2)\n"
                "bar.close()\nassert Path(marker).exists(), 'no progress line reached the terminal while the notebook ran'"
            ),
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    }
    (tmp_path / "nbs").mkdir()
    src = tmp_path / "nbs" / "live.ipynb"
    src.write_text(json.dumps(nb))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stderr", Term())
    monkeypatch.setenv("CLIR_LLM_PROGRESS_INTERVAL", "0")
    _execute(src, Path("out.ipynb"), {"marker": str(marker)}, Path("res") / "logs", "[1/1] live", True, False)
    assert "[1/1] live" in marker.read_text()


def test_papermill_output_holds_no_widget(tmp_path):
    "The README's plain route (papermill on an experiment notebook) stored tqdm widgets that render as bars frozen at 0 %."
    import nbformat, papermill

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "from clir_llm.progress import progress_bar\nfor _ in progress_bar(range(3), desc='three'): pass"
        )
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "in.ipynb")
    with pytest.MonkeyPatch.context() as mp:
        for k in ("CLIR_LLM_PROGRESS", "CLIR_LLM_WIDGETS"):
            mp.delenv(k, raising=False)
        papermill.execute_notebook(
            str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"), progress_bar=False, kernel_name="python3"
        )
    out = (tmp_path / "out.ipynb").read_text()
    # no widget, and (issue 36) no bar at all: a headless run's stored redraws were progress leftovers
    assert "application/vnd.jupyter.widget-view+json" not in out and "three:" not in out


def test_plain_papermill_stores_no_progress_leftovers(tmp_path):
    """Issue 36 item 3: a plain `papermill` run (no `clir-llm reproduce`, so no progress channel) stored each text-bar
    redraw of `progress_bar` as a stderr output of its own (`\\r...` lines; a cleared `leave=False` bar an empty red box
    in JupyterLab), about a dozen in nbs/experiments/2_listwise.ipynb. A tiny notebook draws through the same code:
    nothing is stored on stderr, the bars still count, and the cell's own output is kept."""
    papermill, nbformat = pytest.importorskip("papermill"), pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"display_name": "python3", "language": "python", "name": "python3"}}
    )
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import time\nfrom clir_llm.progress import progress_bar\n"
            "kept = progress_bar(range(4), desc='kept', mininterval=0)\nfor _ in kept: time.sleep(0.3)\n"
            "gone = progress_bar(total=4, desc='gone', leave=False, mininterval=0)\n"
            "for _ in range(4): time.sleep(0.3); gone.update()\ngone.close()\nprint('counted', kept.n, gone.n)"
        )
    ]
    nbformat.write(nb, tmp_path / "bars.ipynb")
    env = {k: os.environ.pop(k) for k in ("CLIR_LLM_PROGRESS", "TQDM_DISABLE") if k in os.environ}
    try:
        papermill.execute_notebook(
            str(tmp_path / "bars.ipynb"), str(tmp_path / "out.ipynb"), cwd=str(tmp_path), progress_bar=False
        )
    finally:
        os.environ.update(env)
    outputs = [o for c in json.loads((tmp_path / "out.ipynb").read_text())["cells"] for o in c.get("outputs", [])]
    stderr = ["".join(o["text"]) for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stderr"]
    assert not stderr, stderr[:4]
    assert any("counted 4 4" in "".join(o.get("text", "")) for o in outputs), outputs
