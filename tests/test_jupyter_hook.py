"""clir_llm.jupyter_hook: the install turns nbdev's pre-save clean on for every Jupyter server of the environment
(issue 36 item 3), without per-user set-up, and a server without nbdev still starts."""

import json, subprocess, sys
from pathlib import Path
import pytest
from clir_llm.jupyter_hook import pre_save

ROOT = Path(__file__).resolve().parents[1]


def test_the_install_put_the_server_config_fragment_into_the_environment():
    frag = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.d" / "clir-llm.json"
    assert frag.is_file(), f"{frag} missing: install with pip install --no-deps -e . (hatchling installs shared data)"
    assert json.loads(frag.read_text()) == {"ServerApp": {"jpserver_extensions": {"clir_llm.jupyter_hook": True}}}


def test_a_jupyter_server_of_this_environment_cleans_as_it_saves(tmp_path):
    "The contents manager the server ends with (jupytext's, built after the extensions load) runs pre_save."
    code = (
        "from jupyter_server.serverapp import ServerApp\n"
        "app = ServerApp(); app.initialize(argv=['--no-browser', '--port=0', '--allow-root'])\n"
        "cm = app.contents_manager\n"
        "print('HOOKS', [getattr(h, '__module__', h) for h in [cm.pre_save_hook, *cm._pre_save_hooks] if h])"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"),
            "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
            "HOME": str(tmp_path),
            "PATH": "/usr/bin:/bin",
        },
    )
    line = next((l for l in p.stdout.splitlines() if l.startswith("HOOKS")), p.stderr[-2000:])
    assert "clir_llm.jupyter_hook" in line, line


def test_pre_save_cleans_a_lab_saved_notebook_of_the_project_and_leaves_others_alone(tmp_path, monkeypatch):
    rel = "nbs/guides/interop.ipynb"
    nb = json.loads((ROOT / rel).read_text())
    lab = json.loads(json.dumps(nb))
    lab["metadata"]["kernelspec"]["display_name"] = "Python 3 (ipykernel)"
    lab["metadata"]["language_info"] = {"name": "python", "version": "3.11.7"}
    monkeypatch.chdir(ROOT)
    pre_save(model={"type": "notebook", "content": lab}, path=rel)
    assert lab["metadata"] == nb["metadata"]
    other = json.loads(json.dumps(lab))
    other["metadata"]["language_info"] = {"name": "python"}
    (tmp_path / "x.ipynb").write_text(json.dumps(other))
    monkeypatch.chdir(tmp_path)  # not an nbdev project
    before = json.dumps(other)
    pre_save(model={"type": "notebook", "content": other}, path="x.ipynb")
    assert json.dumps(other) == before


def test_pre_save_is_a_no_op_without_nbdev(monkeypatch):
    "A server of an environment without nbdev (a plain `pip install clir-llm`) still saves: the hook does nothing."
    monkeypatch.setitem(sys.modules, "nbdev.clean", None)  # import fails
    model = {"type": "notebook", "content": {"metadata": {"language_info": {}}}}
    assert pre_save(model=model, path="x.ipynb") is None and model["content"]["metadata"] == {"language_info": {}}
