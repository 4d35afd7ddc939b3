"""The screenshot check of issues 16 and 31 (slow: starts JupyterLab and headless Chromium, about 30 s a notebook): an
executed notebook with a table and a figure opens in a local JupyterLab with both rendered, no kernel dialog, its
kernel started, and unmodified; and the check names what Lab changed in a notebook it marks modified."""

import importlib.util, json, shutil, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _screenshot_module():
    spec = importlib.util.spec_from_file_location("screenshot", ROOT / "benchmarks" / "screenshot.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _lab_and_chromium():
    shot = _screenshot_module()
    if shot.find_chromium() is None:
        pytest.skip("no chromium (apt-get install -y chromium)")
    pytest.importorskip("jupyterlab")
    return shot


def _one_cell_notebook(path, metadata):
    import nbformat

    nb = nbformat.v4.new_notebook(metadata=metadata)
    nb.cells = [nbformat.v4.new_markdown_cell("# one cell")]
    nbformat.write(nb, path)
    return path


def test_changed_fields_names_what_differs():
    "The check's detail: the fields Lab changed (nbformat's list-of-lines strings equal the joined string)."
    shot = _screenshot_module()
    saved = {
        "metadata": {"kernelspec": {"display_name": "python3", "name": "python3"}},
        "cells": [{"source": ["a\n", "b"]}],
    }
    current = {
        "metadata": {
            "kernelspec": {"display_name": "Python 3 (ipykernel)", "name": "python3"},
            "language_info": {"name": ""},
        },
        "cells": [{"source": "a\nb"}],
    }
    assert shot.changed_fields(saved, current) == [
        '/metadata/kernelspec/display_name: "python3" -> "Python 3 (ipykernel)"',
        '/metadata/language_info: (none) -> {"name": ""}',
    ]
    assert shot.changed_fields(saved, saved) == []


@pytest.mark.slow
def test_executed_notebook_renders_in_lab(tmp_path):
    "What `clir-llm reproduce` writes (papermill, then tidy_notebook) opens with its table and figure, and unmodified."
    from clir_llm.reproduce import tidy_notebook

    shot = _lab_and_chromium()
    meta = json.loads(sorted((ROOT / "nbs" / "experiments").glob("*.ipynb"))[0].read_text())["metadata"]
    code = lambda src, **md: {
        "cell_type": "code",
        "execution_count": None,
        "metadata": md,
        "outputs": [],
        "source": src,
    }
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": "# Screenshot check"},
        code('config = "demo"', tags=["parameters"]),
        code(
            "import pandas as pd\nfrom IPython.display import Markdown, Image, display\n"
            "display(Markdown(pd.DataFrame({'en-de': [.25, .5]}, index=['BM25-QT', 'mE5-small']).to_markdown()))"
        ),
        code(
            "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt, io\n"
            "fig, ax = plt.subplots(figsize=(4, 3)); ax.plot([16, 32, 48], [.5, .6, .55], '-o'); buf = io.BytesIO()\n"
            "fig.savefig(buf, format='png'); plt.close(fig); Image(data=buf.getvalue())"
        ),
    ]
    src, executed = tmp_path / "tiny.ipynb", tmp_path / "tiny_executed.ipynb"
    src.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": meta, "cells": cells}))
    papermill = shutil.which("papermill") or str(Path(sys.executable).with_name("papermill"))
    r = subprocess.run(
        [papermill, str(src), str(executed), "-p", "config", "demo"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    tidy_notebook(executed, root=tmp_path)
    assert shot.expected_outputs(executed) == {"table": True, "image": True}
    checks = shot.screenshot(executed, tmp_path / "shot.png")
    assert set(checks) == {
        "screenshot",
        "notebook open",
        "no kernel dialog",
        "kernel started",
        "opens unmodified",
        "table rendered",
        "figure rendered",
    }
    assert all(ok for ok, _ in checks.values()), checks


@pytest.mark.slow
def test_a_notebook_opens_unmodified(tmp_path):
    """Issue 31: a one-cell notebook nbformat writes opens unmodified once it stores what Lab writes when the kernel starts:
    the installed kernel's spec (reproduce.kernelspec_of) and the kernel's language_info (ipykernel's)."""
    from ipykernel.ipkernel import IPythonKernel
    from clir_llm.reproduce import kernelspec_of

    shot = _lab_and_chromium()
    nb = _one_cell_notebook(
        tmp_path / "one.ipynb", {"kernelspec": kernelspec_of("python3"), "language_info": IPythonKernel.language_info}
    )
    checks = shot.screenshot(nb, tmp_path / "one.png")
    assert checks["kernel started"][0] and checks["opens unmodified"][0], checks


@pytest.mark.slow
def test_the_check_names_what_lab_changed(tmp_path):
    """The check can fail, and says why: the same notebook without language_info (as nbformat writes it), and with the
    display_name nbdev-clean writes ("python3"), opens modified; the detail names both fields."""
    from clir_llm.reproduce import kernelspec_of

    shot = _lab_and_chromium()
    nb = _one_cell_notebook(
        tmp_path / "one.ipynb", {"kernelspec": {**kernelspec_of("python3"), "display_name": "python3"}}
    )
    checks = shot.screenshot(nb, tmp_path / "one.png")
    ok, detail = checks["opens unmodified"]
    assert checks["kernel started"][0] and not ok, checks
    assert "/metadata/kernelspec/display_name" in detail and "/metadata/language_info" in detail, detail


def _autosave_in_lab(root, rel: str, lab_args=(), autosave_s: int = 5, wait_s: float = 20) -> tuple[bool, str]:
    """Open `root/rel` in a local JupyterLab (server started in `root`, as a user starts it in a clone) with Lab's autosave
    every `autosave_s` seconds, let the kernel start and autosave run; return (whether the server saved it, its text)."""
    import os, secrets, signal, time

    shot = _lab_and_chromium()
    token, port, tmp = secrets.token_hex(16), shot._free_port(), root / ".lab"
    settings = tmp / "settings" / "@jupyterlab"
    for ext, name, value in [
        ("apputils-extension", "notification", {"fetchNews": "false"}),
        ("docmanager-extension", "plugin", {"autosave": True, "autosaveInterval": autosave_s}),
    ]:
        (settings / ext).mkdir(parents=True, exist_ok=True)
        (settings / ext / f"{name}.jupyterlab-settings").write_text(json.dumps(value))
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
    )
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.expose_app_in_browser=True",
        *lab_args,
    ] + (["--allow-root"] if os.geteuid() == 0 else [])
    log = tmp / "lab.log"
    with open(log, "w") as out:
        lab = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=out, start_new_session=True)
    page = None
    try:
        shot._wait_for_lab(port, token, lab)
        page = shot.Chromium(shot.find_chromium(), "1200,900", tmp / "chromium")
        page.call("Page.navigate", url=f"http://127.0.0.1:{port}/lab/tree/{rel}?token={token}")
        deadline = time.time() + 90
        while time.time() < deadline and (page.evaluate(shot._STATE_JS) or {}).get("info") != "answered":
            time.sleep(0.5)
        time.sleep(wait_s)
    finally:
        if page is not None:
            page.close()
        os.killpg(lab.pid, signal.SIGTERM)
        try:
            lab.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(lab.pid, signal.SIGKILL)
    return f"Saving file at /{rel}" in log.read_text(), (root / rel).read_text(encoding="utf-8")


def _repo_copy(tmp_path, rel: str):
    "The repository's nbdev settings and one of its notebooks, at their places."
    (tmp_path / rel).parent.mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


@pytest.mark.slow
def test_lab_autosave_changes_no_notebook(tmp_path):
    """Issue 36 item 3: a guide opened in a plain `jupyter lab` of this environment, its kernel started and autosave run,
    is saved exactly as committed: the install's server extension (clir_llm.jupyter_hook) runs nbdev's clean as the
    server saves (pyproject's jupyter_hooks = true); no flag and no per-user set-up."""
    rel = "nbs/guides/interop.ipynb"
    saved, text = _autosave_in_lab(_repo_copy(tmp_path, rel), rel)
    assert saved, "Lab did not autosave (the check would prove nothing)"
    assert text == (ROOT / rel).read_text(encoding="utf-8"), shot_diff(rel, text)


@pytest.mark.slow
def test_lab_autosave_without_the_hook_writes_the_kernels_spec(tmp_path):
    "The check above can fail: with the hook's cleaning off (jupyter_hooks = false), autosave writes the kernel's display_name and language_info."
    rel = "nbs/guides/interop.ipynb"
    root = _repo_copy(tmp_path, rel)
    cfg = (root / "pyproject.toml").read_text()
    assert "jupyter_hooks = true" in cfg
    (root / "pyproject.toml").write_text(cfg.replace("jupyter_hooks = true", "jupyter_hooks = false"))
    saved, text = _autosave_in_lab(root, rel)
    meta = json.loads(text)["metadata"]
    assert saved and meta["kernelspec"]["display_name"] != "python3" and "language_info" in meta, meta


def shot_diff(rel, text):
    return _screenshot_module().changed_fields(json.loads((ROOT / rel).read_text()), json.loads(text))[:6]
