"""Screenshot check: an executed notebook as a reader sees it in JupyterLab (issue 16).

Starts JupyterLab headless on 127.0.0.1 with a random token, serving a temporary folder that holds a copy of the
notebook, opens it in headless Chromium (Debian's `chromium` package: `apt-get install -y chromium`), and

* saves a PNG screenshot of the page (`--out`, default `<notebook stem>-lab.png` in the current folder);
* reads the rendered page (Chromium's `--dump-dom` after the scripts ran) and checks that the notebook's stored
  output is shown (an HTML table and an image, when the notebook's outputs hold them), that Lab did not ask
  for a kernel ("Select Kernel" dialog: the notebook names no kernel) and that it did not mark the notebook
  modified on opening it (`jp-mod-dirty`: Lab rewrote something while loading it).

Prints one line per check and exits 1 when one fails.

    python benchmarks/screenshot.py results/demo/1_first_stage.ipynb --out first_stage.png
"""
from __future__ import annotations
import argparse, json, os, re, secrets, shutil, signal, socket, subprocess, sys, tempfile, time, urllib.request
from pathlib import Path

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    "The headless browser on PATH, or None."
    return next((p for p in map(shutil.which, CHROMIUM) if p), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def _wait_for_lab(port: int, token: str, proc, timeout: float = 120) -> None:
    "Poll the server's status API until it answers (or the process died / time ran out)."
    url, t0 = f"http://127.0.0.1:{port}/api/status?token={token}", time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None: raise RuntimeError(f"jupyter lab exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200: return
        except OSError: time.sleep(0.5)
    raise RuntimeError(f"jupyter lab did not answer on port {port} within {timeout:.0f} s")


def _chromium(browser: str, url: str, *args: str, budget_ms: int, size: str) -> subprocess.CompletedProcess:
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
           f"--window-size={size}", f"--virtual-time-budget={budget_ms}", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=budget_ms / 1000 + 120)


def expected_outputs(nb_path: Path) -> dict[str, bool]:
    "Which kinds of output the notebook stores: an HTML table, an image."
    nb = json.loads(Path(nb_path).read_text())
    outs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    data = [o.get("data", {}) for o in outs]
    md_table = lambda d: "|---" in "".join(d.get("text/markdown", "")).replace(" ", "").replace("|:-", "|--")
    return {"table": any("<table" in "".join(d.get("text/html", "")) or md_table(d) for d in data),
            "image": any("image/png" in d or "image/svg+xml" in d for d in data)}


def screenshot(nb_path, out_png, size: str = "1400,2400", budget_ms: int = 30000) -> dict:
    "Screenshot `nb_path` in a local headless JupyterLab; returns the checks `{name: (ok, detail)}`."
    nb_path, out_png = Path(nb_path).resolve(), Path(out_png).resolve()
    browser = find_chromium()
    if browser is None: raise RuntimeError("no chromium on PATH (apt-get install -y chromium)")
    token, port = secrets.token_hex(16), _free_port()
    with tempfile.TemporaryDirectory(prefix="clir-screenshot-") as root:
        shutil.copy(nb_path, Path(root) / nb_path.name)
        settings = Path(root) / ".settings"
        (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True)   # no "notified about Jupyter news?" toast
        (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(Path(root) / ".jupyter"), JUPYTER_RUNTIME_DIR=str(Path(root) / ".runtime"),
                   JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(Path(root) / ".workspaces"))
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.open_browser=False",
               "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        if hasattr(os, "geteuid") and os.geteuid() == 0: cmd.append("--allow-root")
        lab = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            _wait_for_lab(port, token, lab)
            url = f"http://127.0.0.1:{port}/doc/tree/{nb_path.name}?token={token}"   # single-document view, as a reader opens it
            dom = _chromium(browser, url, "--dump-dom", budget_ms=budget_ms, size=size).stdout
            out_png.parent.mkdir(parents=True, exist_ok=True)
            shot = _chromium(browser, url, f"--screenshot={out_png}", budget_ms=budget_ms, size=size)
        finally:
            os.killpg(lab.pid, signal.SIGTERM)
            try: lab.wait(timeout=20)
            except subprocess.TimeoutExpired: os.killpg(lab.pid, signal.SIGKILL)
    want = expected_outputs(nb_path)
    checks = {"screenshot": (out_png.exists() and out_png.stat().st_size > 10_000,
                             f"{out_png} ({out_png.stat().st_size if out_png.exists() else 0} bytes){'' if out_png.exists() else ': ' + shot.stderr[-300:]}"),
              "notebook open": ("jp-Notebook" in dom and nb_path.stem in dom, "the notebook panel is in the page"),
              "no kernel dialog": ("Select Kernel" not in dom, "Lab did not ask which kernel to use"),
              "opens unmodified": (re.search(r'class="[^"]*\bjp-mod-dirty\b', dom) is None,
                                   "Lab did not mark the notebook modified on opening it (no element of class jp-mod-dirty)")}
    if want["table"]: checks["table rendered"] = ("<table" in dom, "a stored HTML table is shown")
    if want["image"]: checks["figure rendered"] = ('src="data:image/png' in dom or "<svg" in dom, "a stored figure is shown")
    return checks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebook", nargs="?", default="results/demo/1_first_stage.ipynb", help="an executed notebook")
    ap.add_argument("--out", help="PNG to write (default: <notebook stem>-lab.png)")
    ap.add_argument("--size", default="1400,2400", help="browser window, WIDTH,HEIGHT (default 1400,2400)")
    ap.add_argument("--budget-ms", type=int, default=30000, help="virtual time Chromium gives the page's scripts")
    a = ap.parse_args(argv)
    if not Path(a.notebook).exists():
        print(f"screenshot: {a.notebook}: no such notebook (run `clir-llm reproduce configs/demo.yaml` first)", file=sys.stderr); return 2
    try: checks = screenshot(a.notebook, a.out or f"{Path(a.notebook).stem}-lab.png", a.size, a.budget_ms)
    except RuntimeError as e: print(f"screenshot: {e}", file=sys.stderr); return 2
    for name, (ok, detail) in checks.items(): print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    return 0 if all(ok for ok, _ in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
