"""Notebooks open and run without a kernel choice (issue 16 item 5): every notebook (module, index and experiment) names its kernel, so
plain `papermill NB OUT -p config ...` (no -k/-l) and JupyterLab (no "Select Kernel" dialog) work."""

import json, shutil, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted((ROOT / "nbs").glob("experiments/*.ipynb"))
# every notebook (module notebooks, index.ipynb, experiments) names its kernel; checkpoints and the like are skipped
NOTEBOOKS = sorted(
    p
    for p in (ROOT / "nbs").glob("**/*.ipynb")
    if not any(s.startswith((".", "_")) for s in p.relative_to(ROOT / "nbs").parts)
)
# what nbdev-clean writes (display_name = name)
KERNELSPEC = {"display_name": "python3", "language": "python", "name": "python3"}


def test_there_are_experiment_notebooks():
    assert len(EXPERIMENTS) >= 5, EXPERIMENTS
    assert set(EXPERIMENTS) < set(NOTEBOOKS) and (ROOT / "nbs" / "index.ipynb") in NOTEBOOKS and len(NOTEBOOKS) >= 25, (
        NOTEBOOKS
    )


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_names_its_kernel(nb):
    """Every notebook stores the kernelspec as nbdev-clean writes it, and no language_info: JupyterLab writes the running
    kernel's (its Python version is the machine's), and nbs/ notebooks are saved through nbdev's hook, which drops it."""
    meta = json.loads(nb.read_text())["metadata"]
    assert meta.get("kernelspec") == KERNELSPEC, f"{nb.name}: kernelspec {meta.get('kernelspec')}"
    assert "language_info" not in meta, f"{nb.name}: language_info {meta.get('language_info')}"


def _nbdev_cleaned(text: str, path: Path) -> str:
    "The notebook `text` as `nbdev-clean` would write it, with this repository's [tool.nbdev] settings."
    from nbdev.clean import _nbdev_clean, loads, nb2str

    nb = loads(text)
    # path=None: no nbdev-trust side effect; the settings are found from the working folder
    _nbdev_clean(nb, path=None)
    return nb2str(nb)


@pytest.fixture
def in_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_nbdev_clean_changes_no_committed_notebook(in_root):
    "`nbdev-clean` is idempotent on the notebooks as committed (metadata, cell ids, outputs)."
    changed = [
        nb.relative_to(ROOT).as_posix()
        for nb in NOTEBOOKS
        if _nbdev_cleaned(nb.read_text(encoding="utf-8"), nb) != nb.read_text(encoding="utf-8")
    ]
    assert not changed, changed


def _as_lab_saves(text: str) -> dict:
    """The notebook as JupyterLab hands it to the server on autosave once its kernel has started: the installed kernel's
    spec (display_name "Python 3 (ipykernel)") and the kernel's language_info written into the metadata."""
    from ipykernel.ipkernel import IPythonKernel
    from clir_llm.reproduce import kernelspec_of

    nb = json.loads(text)
    nb["metadata"].update(kernelspec=kernelspec_of("python3"), language_info=dict(IPythonKernel.language_info))
    return nb


@pytest.mark.parametrize("rel", ["nbs/guides/interop.ipynb", "nbs/00_core.ipynb", "nbs/experiments/2_listwise.ipynb"])
def test_a_lab_autosave_through_nbdevs_hook_leaves_the_notebook_as_committed(rel, in_root, tmp_path, monkeypatch):
    """Issue 36 item 3: Lab's autosave wrote its kernelspec display_name (and language_info) into tracked notebooks.
    The server's pre-save hook (nbdev.clean.clean_jupyter, as `nbdev-install-hooks` or
    `--ContentsManager.pre_save_hook` sets it) cleans the model with [tool.nbdev] jupyter_hooks on: the saved file is the
    committed one, byte for byte (tests/test_screenshot.py checks it in a real JupyterLab)."""
    from nbdev.clean import clean_jupyter, nb2str

    text = (ROOT / rel).read_text(encoding="utf-8")
    model = {"type": "notebook", "content": _as_lab_saves(text)}
    assert nb2str(model["content"]) != text  # what Lab would save without the hook
    # the hook also trusts the notebook: its signature store, not the user's
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path))
    stamp = (ROOT / rel).parent / ".last_checked"
    had_stamp = stamp.exists()
    clean_jupyter(path=rel, model=model, contents_manager=None)
    if not had_stamp:
        stamp.unlink(missing_ok=True)  # nbdev-trust's stamp (git-ignored)
    assert nb2str(model["content"]) == text


def _papermill() -> str:
    exe = shutil.which("papermill") or str(Path(sys.executable).with_name("papermill"))
    if not Path(exe).exists():
        pytest.skip("papermill is not installed")
    return exe


def test_plain_papermill_runs_a_notebook_with_the_repos_metadata(tmp_path):
    "The CLI, no -k: a tiny notebook carrying the metadata of nbs/experiments/1_first_stage.ipynb, with a parameter."
    meta = json.loads(EXPERIMENTS[0].read_text())["metadata"]
    cell = lambda src, **md: {
        "cell_type": "code",
        "execution_count": None,
        "metadata": md,
        "outputs": [],
        "source": src,
    }
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": meta,
        "cells": [cell('config = "configs/demo.yaml"', tags=["parameters"]), cell("print('config is', config)")],
    }
    src, out = tmp_path / "tiny.ipynb", tmp_path / "out.ipynb"
    src.write_text(json.dumps(nb))
    r = subprocess.run(
        [_papermill(), str(src), str(out), "-p", "config", "configs/other.yaml"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    text = json.dumps(json.loads(out.read_text())["cells"])
    assert "config is configs/other.yaml" in text, text[-1000:]


def test_plain_papermill_fails_without_a_kernelspec(tmp_path):
    "The check above can fail: the same notebook without kernelspec is what issue 16 found ('No kernel name found')."
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": "print(1)"}
    src = tmp_path / "bare.ipynb"
    src.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [cell]}))
    r = subprocess.run(
        [_papermill(), str(src), str(tmp_path / "o.ipynb")], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert r.returncode != 0 and "kernel" in (r.stderr + r.stdout).lower()


@pytest.mark.parametrize("nb", EXPERIMENTS, ids=lambda p: p.name)
def test_papermill_help_notebook_works_on_the_repos_notebooks(nb):
    "`papermill --help-notebook` reads the kernel from the notebook (before: 'No kernel name found in notebook')."
    r = subprocess.run(
        [_papermill(), "--help-notebook", str(nb)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert r.returncode == 0 and "config" in r.stdout, (r.stdout[-500:], r.stderr[-1500:])


# --- the module notebooks read like fastcore's (issue 25): one definition per export cell, short cells, an example
# with its output after each public definition

import ast, re

MODULE_NBS = sorted(p for p in (ROOT / "nbs").glob("[0-9]*.ipynb"))
_EXPORT = re.compile(r"^#\|\s*export", re.M)


def _source(cell) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def defined(src: str) -> list[str]:
    "Names of the functions and classes a cell defines at its top level (`@patch` methods included), in order."
    code = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def export_cells(nb_path):
    "(index, source, defined names) of every export cell of a notebook."
    cells = json.loads(Path(nb_path).read_text())["cells"]
    return cells, [
        (i, _source(c), defined(_source(c)))
        for i, c in enumerate(cells)
        if c["cell_type"] == "code" and _EXPORT.search(_source(c))
    ]


def _exports():
    return {nb.name: export_cells(nb) for nb in MODULE_NBS}


def test_defined_reads_patched_methods():
    assert defined("#| export\n@patch\ndef a(self: X): pass\nclass B: pass\nC = 1\n") == ["a", "B"]


def test_at_most_one_export_cell_in_ten_defines_several_things():
    multi = [(name, i, d) for name, (_, ex) in _exports().items() for i, _, d in ex if len(d) > 1]
    total = sum(len(ex) for _, ex in _exports().values())
    assert len(multi) * 10 <= total, f"{len(multi)} of {total} export cells define more than one thing: {multi[:20]}"


def test_no_export_cell_over_60_lines():
    long = [
        (name, i, len(src.splitlines()))
        for name, (_, ex) in _exports().items()
        for i, src, _ in ex
        if len(src.splitlines()) > 60
    ]
    assert not long, long


def missing_examples(cells, exports) -> list[str]:
    "The public definitions of a notebook after which no code cell with an output comes before the next public definition."
    out, starts = [], [(i, [n for n in d if not n.startswith("_")]) for i, _, d in exports]
    public = [(i, names) for i, names in starts if names]
    for k, (i, names) in enumerate(public):
        end = public[k + 1][0] if k + 1 < len(public) else len(cells)
        shown = any(
            c["cell_type"] == "code" and c.get("outputs") and not _EXPORT.search(_source(c)) for c in cells[i + 1 : end]
        )
        if not shown:
            out.append(f"cell {i}: {', '.join(names)}")
    return out


def test_missing_examples_can_fail():
    code = lambda src, out=(): {"cell_type": "code", "source": src, "outputs": list(out), "metadata": {}}
    cells = [
        code("#| export\ndef f(): pass"),
        code("f()", [{"output_type": "execute_result"}]),
        code("#| export\ndef g(): pass"),
        code("g()"),
    ]
    assert missing_examples(cells, export_cells_of(cells)) == ["cell 2: g"]


def export_cells_of(cells):
    return [
        (i, _source(c), defined(_source(c)))
        for i, c in enumerate(cells)
        if c["cell_type"] == "code" and _EXPORT.search(_source(c))
    ]


@pytest.mark.parametrize("nb", MODULE_NBS, ids=lambda p: p.name)
def test_each_public_definition_is_followed_by_an_example_with_its_output(nb):
    cells, ex = export_cells(nb)
    assert not missing_examples(cells, ex), missing_examples(cells, ex)


ALL_NBS = sorted(
    p for p in (ROOT / "nbs").glob("**/*.ipynb") if not any(s.startswith((".", "_")) for s in p.relative_to(ROOT).parts)
)
_BAR = re.compile(r"\d+%\|[^|\n]*\|\s*\d+/\d*|\|\s*\d+/\d+ \[\d")


@pytest.mark.parametrize("nb", ALL_NBS, ids=lambda p: p.relative_to(ROOT / "nbs").as_posix())
def test_notebooks_keep_no_tool_metadata_and_no_progress_bars(nb):
    """A notebook's metadata is its kernel only (no jupytext pairing or widget state left by a tool), and
    no output is a progress bar (a stored tqdm widget renders as a bar frozen at 0 %)."""
    d = json.loads(nb.read_text())
    assert set(d["metadata"]) <= {"kernelspec"}, set(d["metadata"])
    bars = [
        (i, o.get("text") or o.get("data", {}).get("text/plain"))
        for i, c in enumerate(d["cells"])
        for o in c.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        or (
            o.get("output_type") == "display_data"
            and set(o.get("data", {})) == {"text/plain"}
            and _BAR.search(o["data"]["text/plain"])
        )
    ]
    assert not bars, bars[:3]
