"""Screenshot check: an executed notebook as a reader sees it in JupyterLab (issue 16, issue 31).

Starts JupyterLab headless on 127.0.0.1 with a random token, serving a temporary folder that holds a copy of the
notebook, opens it in headless Chromium (Debian's `chromium` package: `apt-get install -y chromium`), driven through
the DevTools protocol over a pipe (`--remote-debugging-pipe`: no port, no extra package), waits until the notebook's
kernel is up (its status `idle`: Lab has then written the kernel's `kernelspec` and `language_info` into the model), and

* saves a PNG screenshot of the page (`--out`, default `<notebook stem>-lab.png` in the current folder);
* reads the rendered page and checks that the notebook's stored output is shown (an HTML table and an image, when
  the notebook's outputs hold them), that Lab did not ask for a kernel ("Select Kernel" dialog: the notebook names
  no kernel), that the kernel started, and that Lab did not mark the notebook modified on opening it (`jp-mod-dirty`);
  when it did, the check names the fields Lab changed (the document model against the file).

Why a notebook opens modified (issue 31, found with this script): once the kernel starts, Lab sets
`metadata.kernelspec` to `{name, display_name, language}` of the kernel spec it started and `metadata.language_info`
to the kernel's reply; a notebook whose stored values differ (`nbdev-clean` writes `display_name` = `name`, "python3",
where ipykernel's spec says "Python 3 (ipykernel)"; a `language_info` with only a name; another Python version) is
modified as soon as it opens, and one without `language_info` gets `{"name": ""}` the first time Lab serialises it.

Prints one line per check and exits 1 when one fails.

    python benchmarks/screenshot.py results/demo/1_first_stage.ipynb --out first_stage.png
    python benchmarks/screenshot.py --smoke     # seconds, no browser, no Lab: the notebook-side checks on a notebook of nbs/

It prints checks, no target line (`TARGETS` is empty).
"""
from __future__ import annotations
import argparse, base64, fcntl, json, os, re, secrets, select, shutil, signal, socket, subprocess, sys, tempfile, time, urllib.request
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


def _high_fd(fd: int) -> int:
    "`fd` moved to a number of 10 or more."
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10); os.close(fd)
    return high


class Chromium:
    """Headless Chromium driven through the DevTools protocol over a pipe (`--remote-debugging-pipe`: Chromium reads
    commands on fd 3 and writes replies on fd 4, NUL-separated JSON). `call` sends a command to the page and waits for its reply."""

    def __init__(self, browser: str, size: str, profile: Path):
        to_browser, self._to_w = os.pipe(); self._from_r, from_browser = os.pipe()
        to_browser, from_browser = (_high_fd(fd) for fd in (to_browser, from_browser))   # not 3 or 4 themselves
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars", "--no-first-run",
                f"--window-size={size}", f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"]
        def onto_3_and_4():                 # in the child: the pipe ends where Chromium looks for them (dup2 leaves them inheritable)
            os.dup2(to_browser, 3); os.dup2(from_browser, 4)
        # close_fds=False: Python's own descriptors are not inheritable anyway (PEP 446); 3 and 4 are made so in the child
        self.proc = subprocess.Popen([browser, *args], preexec_fn=onto_3_and_4, close_fds=False, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(to_browser); os.close(from_browser)
        self._buf, self._id, self.session = b"", 0, None
        width, height = (int(v) for v in size.split(","))
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, timeout: float = 60, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params, **({"sessionId": self.session} if self.session else {})}
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            while b"\0" not in self._buf:
                if not select.select([self._from_r], [], [], max(0.0, deadline - time.time()))[0]:
                    raise RuntimeError(f"chromium did not answer {method} within {timeout:.0f} s")
                chunk = os.read(self._from_r, 1 << 20)
                if not chunk: raise RuntimeError(f"chromium exited (status {self.proc.poll()}) before answering {method}")
                self._buf += chunk
            raw, _, self._buf = self._buf.partition(b"\0")
            reply = json.loads(raw)
            if reply.get("id") != self._id: continue          # an event, or a reply to another session
            if "error" in reply: raise RuntimeError(f"chromium: {method}: {reply['error']}")
            return reply.get("result", {})

    def evaluate(self, expression: str, timeout: float = 60):
        "The value of a JavaScript expression in the page (promises awaited)."
        r = self.call("Runtime.evaluate", timeout=timeout, expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r: raise RuntimeError(f"chromium: page script failed: {r['exceptionDetails'].get('text')}")
        return r["result"].get("value")

    def close(self):
        try: self.call("Browser.close", timeout=10)
        except (RuntimeError, OSError): pass
        try: self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired: os.killpg(self.proc.pid, signal.SIGKILL); self.proc.wait()
        os.close(self._to_w); os.close(self._from_r)


# what a reader sees (the notebook panel, a dialog, the "modified" dot) and the notebook's kernel as Lab's session has it
# (page config exposes the app: --LabApp.expose_app_in_browser); `info` once the kernel answered its info request
_STATE_JS = """(() => { const app = window.jupyterapp;
  const w = app ? Array.from(app.shell.widgets('main')).find(w => w.context && w.sessionContext) : null;
  const k = w && w.sessionContext.session ? w.sessionContext.session.kernel : null;
  if (k && !window.__kernelInfo) { window.__kernelInfo = 'waiting'; k.info.then(() => { window.__kernelInfo = 'answered'; }); }
  return {notebook: !!document.querySelector('.jp-Notebook'), dialog: !!document.querySelector('.jp-Dialog'),
          dirty: !!document.querySelector('.jp-mod-dirty'), kernel: k ? k.name : null,
          status: k ? k.status : null, connection: k ? k.connectionStatus : null, info: window.__kernelInfo || null}; })()"""
# the notebook as Lab holds it now (page config exposes the app: --LabApp.expose_app_in_browser)
_MODEL_JS = """(() => { const app = window.jupyterapp; if (!app) return null;
  const w = Array.from(app.shell.widgets('main')).find(w => w.context && w.context.model);
  return w ? JSON.stringify(w.context.model.toJSON()) : null; })()"""


def changed_fields(saved, current, path: str = "") -> list[str]:
    "Where `current` differs from `saved` (two notebook JSON values), as `path: saved -> current` lines."
    short = lambda v: (s if len(s := json.dumps(v, ensure_ascii=False)) <= 80 else s[:77] + "...")
    if isinstance(saved, dict) and isinstance(current, dict):
        return [line for k in sorted(set(saved) | set(current), key=str)
                for line in ([f"{path}/{k}: (none) -> {short(current[k])}"] if k not in saved else
                             [f"{path}/{k}: {short(saved[k])} -> (none)"] if k not in current else
                             changed_fields(saved[k], current[k], f"{path}/{k}"))]
    text = lambda v: "".join(v) if isinstance(v, list) and all(isinstance(x, str) for x in v) else v   # nbformat's multiline strings
    if isinstance(saved, (str, list)) and isinstance(current, (str, list)) and text(saved) == text(current): return []
    if isinstance(saved, list) and isinstance(current, list) and len(saved) == len(current):
        return [line for i, (a, b) in enumerate(zip(saved, current)) for line in changed_fields(a, b, f"{path}[{i}]")]
    return [] if saved == current else [f"{path or '/'}: {short(saved)} -> {short(current)}"]


def expected_outputs(nb_path: Path) -> dict[str, bool]:
    "Which kinds of output the notebook stores: an HTML table, an image."
    nb = json.loads(Path(nb_path).read_text())
    outs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    data = [o.get("data", {}) for o in outs]
    md_table = lambda d: "|---" in "".join(d.get("text/markdown", "")).replace(" ", "").replace("|:-", "|--")
    return {"table": any("<table" in "".join(d.get("text/html", "")) or md_table(d) for d in data),
            "image": any("image/png" in d or "image/svg+xml" in d for d in data)}


def screenshot(nb_path, out_png, size: str = "1400,2400", budget_ms: int = 90000) -> dict:
    """Screenshot `nb_path` in a local headless JupyterLab; returns the checks `{name: (ok, detail)}`.
    `budget_ms`: how long to wait for the notebook's kernel to be up (then two seconds more for Lab's metadata updates)."""
    nb_path, out_png = Path(nb_path).resolve(), Path(out_png).resolve()
    browser = find_chromium()
    if browser is None: raise RuntimeError("no chromium on PATH (apt-get install -y chromium)")
    token, port = secrets.token_hex(16), _free_port()
    with tempfile.TemporaryDirectory(prefix="clir-screenshot-") as root:
        shutil.copy(nb_path, Path(root) / nb_path.name)
        settings = Path(root) / ".settings" / "@jupyterlab"
        for ext, name, value in [("apputils-extension", "notification", {"fetchNews": "false"}),   # no "Jupyter news?" toast
                                 ("docmanager-extension", "plugin", {"autosave": False})]:           # the copy stays as it was
            (settings / ext).mkdir(parents=True)
            (settings / ext / f"{name}.jupyterlab-settings").write_text(json.dumps(value))
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(Path(root) / ".jupyter"), JUPYTER_RUNTIME_DIR=str(Path(root) / ".runtime"),
                   JUPYTERLAB_SETTINGS_DIR=str(settings.parent), JUPYTERLAB_WORKSPACES_DIR=str(Path(root) / ".workspaces"))
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.open_browser=False",
               "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.expose_app_in_browser=True"]
        if hasattr(os, "geteuid") and os.geteuid() == 0: cmd.append("--allow-root")
        lab = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        page = None
        try:
            _wait_for_lab(port, token, lab)
            page = Chromium(browser, size, Path(root) / ".chromium")
            page.call("Page.navigate", url=f"http://127.0.0.1:{port}/doc/tree/{nb_path.name}?token={token}")  # single-document view
            deadline, state = time.time() + budget_ms / 1000, {}
            up = lambda st: st.get("status") == "idle" and st.get("connection") == "connected" and st.get("info") == "answered"
            while time.time() < deadline and not (up(state) or state.get("dialog")):
                time.sleep(0.5); state = page.evaluate(_STATE_JS) or {}
            time.sleep(2)                              # Lab writes the kernel's spec and info into the model, renders the cells
            state = page.evaluate(_STATE_JS) or {}
            out_png.parent.mkdir(parents=True, exist_ok=True)
            out_png.write_bytes(base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"]))
            dom = page.evaluate("document.documentElement.outerHTML") or ""
            model = page.evaluate(_MODEL_JS)           # last: serialising the model may itself fill in metadata
        finally:
            if page is not None: page.close()
            os.killpg(lab.pid, signal.SIGTERM)
            try: lab.wait(timeout=20)
            except subprocess.TimeoutExpired: os.killpg(lab.pid, signal.SIGKILL)
    want = expected_outputs(nb_path)
    changes = ([c for c in changed_fields(json.loads(nb_path.read_text()), json.loads(model))
                if not re.match(r"/cells\[\d+\]/metadata/trusted: ", c)]   # Lab's own, never saved
               if model else ["(the document model could not be read)"])
    dirty = state.get("dirty", False) or re.search(r'class="[^"]*\bjp-mod-dirty\b', dom) is not None
    checks = {"screenshot": (out_png.exists() and out_png.stat().st_size > 10_000,
                             f"{out_png} ({out_png.stat().st_size if out_png.exists() else 0} bytes)"),
              "notebook open": ("jp-Notebook" in dom and nb_path.stem in dom, "the notebook panel is in the page"),
              "no kernel dialog": ("Select Kernel" not in dom, "Lab did not ask which kernel to use"),
              "kernel started": (up(state), f"kernel {state.get('kernel')!r}: {state.get('connection')}, {state.get('status')}, "
                                 f"info {state.get('info')} (then Lab has written what the kernel reports into the notebook)"),
              "opens unmodified": (not dirty, "Lab did not mark the notebook modified on opening it (no jp-mod-dirty)" if not dirty else
                                   "Lab marked it modified; it changed " + ("; ".join(changes[:6]) or "nothing visible in the model"))}
    if want["table"]: checks["table rendered"] = ("<table" in dom, "a stored HTML table is shown")
    if want["image"]: checks["figure rendered"] = ('src="data:image/png' in dom or "<svg" in dom, "a stored figure is shown")
    return checks


TARGETS: list = []    # checks, not ratios


def smoke(nb_path: Path) -> int:
    """The script's own side without a browser or Lab (CI has neither): what a notebook's stored outputs hold, and the
    comparison of a document model with the file (a copy with Lab's usual changes must show them, the file itself none)."""
    nb = json.loads(nb_path.read_text())
    want = expected_outputs(nb_path)
    lab = json.loads(json.dumps(nb))
    lab["metadata"]["kernelspec"] = {**lab["metadata"].get("kernelspec", {}), "display_name": "Python 3 (ipykernel)"}
    same, changed = changed_fields(nb, nb), changed_fields(nb, lab)
    print(f"smoke: {nb_path.name}: stored outputs {want}; the file against itself: {len(same)} changes; against Lab's "
          f"kernelspec: {changed[:2]}")
    print(f"smoke: screenshot not taken ({'chromium found at ' + find_chromium() if find_chromium() else 'no chromium here'}; "
          "a smoke run starts neither Lab nor a browser)")
    return 0 if not same and changed else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebook", nargs="?", default="results/demo/1_first_stage.ipynb", help="an executed notebook")
    ap.add_argument("--out", help="PNG to write (default: <notebook stem>-lab.png)")
    ap.add_argument("--size", default="1400,2400", help="browser window, WIDTH,HEIGHT (default 1400,2400)")
    ap.add_argument("--budget-ms", type=int, default=90000, help="how long to wait for the notebook's kernel to start")
    ap.add_argument("--smoke", action="store_true", help="seconds, no browser: the notebook-side checks (tests/test_benchmarks.py)")
    a = ap.parse_args(argv)
    if a.smoke: return smoke(Path(__file__).resolve().parents[1] / "nbs" / "00_core.ipynb")
    if not Path(a.notebook).exists():
        print(f"screenshot: {a.notebook}: no such notebook (run `clir-llm reproduce configs/demo.yaml` first)", file=sys.stderr); return 2
    try: checks = screenshot(a.notebook, a.out or f"{Path(a.notebook).stem}-lab.png", a.size, a.budget_ms)
    except RuntimeError as e: print(f"screenshot: {e}", file=sys.stderr); return 2
    for name, (ok, detail) in checks.items(): print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    return 0 if all(ok for ok, _ in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
