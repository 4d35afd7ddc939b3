"""Notebooks open and run without a kernel choice (issue 16 item 5): every notebook (module, index and experiment) names its kernel, so
plain `papermill NB OUT -p config ...` (no -k/-l) and JupyterLab (no "Select Kernel" dialog) work."""
import json, shutil, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted((ROOT / "nbs").glob("experiments/*.ipynb"))
# every notebook (module notebooks, index.ipynb, experiments) names its kernel; checkpoints and the like are skipped
NOTEBOOKS = sorted(p for p in (ROOT / "nbs").glob("**/*.ipynb") if not any(s.startswith((".", "_")) for s in p.relative_to(ROOT / "nbs").parts))
KERNELSPEC = {"language": "python", "name": "python3"}


def test_there_are_experiment_notebooks():
    assert len(EXPERIMENTS) >= 5, EXPERIMENTS
    assert set(EXPERIMENTS) < set(NOTEBOOKS) and (ROOT / "nbs" / "index.ipynb") in NOTEBOOKS and len(NOTEBOOKS) >= 25, NOTEBOOKS


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_names_its_kernel(nb):
    meta = json.loads(nb.read_text())["metadata"]
    ks = meta.get("kernelspec", {})
    assert {k: ks.get(k) for k in KERNELSPEC} == KERNELSPEC, f"{nb.name}: kernelspec {ks}"
    assert meta.get("language_info", {}).get("name") == "python", f"{nb.name}: language_info {meta.get('language_info')}"


def test_nbdev_clean_keeps_the_kernelspec(tmp_path):
    "The metadata survives `nbdev-clean` (pyproject's [tool.nbdev] allowed_metadata_keys keeps language_info)."
    from nbdev.clean import clean_nb
    from nbdev.config import get_config
    nb = json.loads(NOTEBOOKS[0].read_text())   # a module notebook (nbs/00_core.ipynb)
    cfg = get_config(path=ROOT)
    clean_nb(nb, allowed_metadata_keys=cfg.get("allowed_metadata_keys"), allowed_cell_metadata_keys=cfg.get("allowed_cell_metadata_keys"))
    assert nb["metadata"]["kernelspec"]["name"] == "python3" and nb["metadata"]["language_info"]["name"] == "python"


def _papermill() -> str:
    exe = shutil.which("papermill") or str(Path(sys.executable).with_name("papermill"))
    if not Path(exe).exists(): pytest.skip("papermill is not installed")
    return exe


def test_plain_papermill_runs_a_notebook_with_the_repos_metadata(tmp_path):
    "The CLI, no -k: a tiny notebook carrying the metadata of nbs/experiments/1_first_stage.ipynb, with a parameter."
    meta = json.loads(EXPERIMENTS[0].read_text())["metadata"]
    cell = lambda src, **md: {"cell_type": "code", "execution_count": None, "metadata": md, "outputs": [], "source": src}
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": meta,
          "cells": [cell('config = "configs/demo.yaml"', tags=["parameters"]), cell("print('config is', config)")]}
    src, out = tmp_path / "tiny.ipynb", tmp_path / "out.ipynb"
    src.write_text(json.dumps(nb))
    r = subprocess.run([_papermill(), str(src), str(out), "-p", "config", "configs/other.yaml"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    text = json.dumps(json.loads(out.read_text())["cells"])
    assert "config is configs/other.yaml" in text, text[-1000:]


def test_plain_papermill_fails_without_a_kernelspec(tmp_path):
    "The check above can fail: the same notebook without kernelspec is what issue 16 found ('No kernel name found')."
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": "print(1)"}
    src = tmp_path / "bare.ipynb"
    src.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [cell]}))
    r = subprocess.run([_papermill(), str(src), str(tmp_path / "o.ipynb")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode != 0 and "kernel" in (r.stderr + r.stdout).lower()


@pytest.mark.parametrize("nb", EXPERIMENTS, ids=lambda p: p.name)
def test_papermill_help_notebook_works_on_the_repos_notebooks(nb):
    "`papermill --help-notebook` reads the kernel from the notebook (before: 'No kernel name found in notebook')."
    r = subprocess.run([_papermill(), "--help-notebook", str(nb)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0 and "config" in r.stdout, (r.stdout[-500:], r.stderr[-1500:])
