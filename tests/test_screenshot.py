"""The screenshot check of issue 16 (slow: starts JupyterLab and headless Chromium, about a minute): an executed
notebook with a table and a figure opens in a local JupyterLab with both rendered and no kernel dialog."""
import importlib.util, json, shutil, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _screenshot_module():
    spec = importlib.util.spec_from_file_location("screenshot", ROOT / "benchmarks" / "screenshot.py")
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


def test_executed_notebook_renders_in_lab(tmp_path):
    shot = _screenshot_module()
    if shot.find_chromium() is None: pytest.skip("no chromium (apt-get install -y chromium)")
    pytest.importorskip("jupyterlab")
    meta = json.loads(sorted((ROOT / "nbs" / "experiments").glob("*.ipynb"))[0].read_text())["metadata"]
    code = lambda src, **md: {"cell_type": "code", "execution_count": None, "metadata": md, "outputs": [], "source": src}
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# Screenshot check"},
             code('config = "demo"', tags=["parameters"]),
             code("import pandas as pd\nfrom IPython.display import Markdown, Image, display\n"
                  "display(Markdown(pd.DataFrame({'en-de': [.25, .5]}, index=['BM25-QT', 'mE5-small']).to_markdown()))"),
             code("import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt, io\n"
                  "fig, ax = plt.subplots(figsize=(4, 3)); ax.plot([16, 32, 48], [.5, .6, .55], '-o'); buf = io.BytesIO()\n"
                  "fig.savefig(buf, format='png'); plt.close(fig); Image(data=buf.getvalue())")]
    src, executed = tmp_path / "tiny.ipynb", tmp_path / "tiny_executed.ipynb"
    src.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": meta, "cells": cells}))
    papermill = shutil.which("papermill") or str(Path(sys.executable).with_name("papermill"))
    r = subprocess.run([papermill, str(src), str(executed), "-p", "config", "demo"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert shot.expected_outputs(executed) == {"table": True, "image": True}
    checks = shot.screenshot(executed, tmp_path / "shot.png")
    assert set(checks) == {"screenshot", "notebook open", "no kernel dialog", "opens unmodified", "table rendered", "figure rendered"}
    assert all(ok for name, (ok, _) in checks.items() if name != "opens unmodified"), checks


@pytest.mark.xfail(strict=True, reason="JupyterLab 4 marks every notebook modified once its kernel session starts, even a "
                   "one-cell notebook nbformat just wrote (seen with the screenshot script; cause not found yet)")
def test_a_notebook_opens_unmodified(tmp_path):
    import nbformat
    shot = _screenshot_module()
    if shot.find_chromium() is None: pytest.skip("no chromium (apt-get install -y chromium)")
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}})
    nb.cells = [nbformat.v4.new_markdown_cell("# one cell")]
    nbformat.write(nb, tmp_path / "one.ipynb")
    ok, detail = shot.screenshot(tmp_path / "one.ipynb", tmp_path / "one.png")["opens unmodified"]
    assert ok, detail
