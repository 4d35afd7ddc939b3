"""`clir-llm serve` under load: requests per second and p50/p95 latency for 1, 4 and 16 concurrent clients, with the
server's batching across callers (up to 16 requests a rerank call) side by side with the same server answering one
request per call (`--max-batch 1`).

The server runs as its own process (`clir-llm serve`, as a user starts it); the clients are threads of this process,
each sending its requests one after another with its own HTTP connection (httpx). Every request is a different query
over 4 short documents (`pairwise-allpair`: 12 prompts of two answer tokens), with the LLM cache off, so every
prompt reaches the model. The model is by default a tiny randomly initialised Qwen2 (2 layers, hidden 32, built by
`clir_llm.testing.make_tiny_hf_model`) through the `hf:` backend on the CPU: its per-call cost structure (a fixed
overhead per call, a cost per token, batching amortising the overhead) is that of a real model, its absolute speed
is not. `--model hf:qwen2.5-coder-0.5b-offline` runs the offline stand-in instead (prepared by `clir-llm models
prepare`; about 6 s a forward pass on 2 cores: use --quick).

    python benchmarks/serve.py --quick
"""
import argparse, os, socket, statistics, subprocess, sys, tempfile, threading, time
from pathlib import Path
import httpx
import _smoke

TARGETS: list = []    # a table of throughput and latency per load level; no target line


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def start(config: Path, port: int, extra: list[str]) -> subprocess.Popen:
    "`clir-llm serve CONFIG --port PORT ...` in its own process, once /health answers."
    cli = str(Path(sys.executable).parent / "clir-llm")
    p = subprocess.Popen([cli, "serve", str(config), "--port", str(port), *extra], stderr=subprocess.PIPE, text=True,
                         env={"OMP_NUM_THREADS": "1", **os.environ, "HF_HUB_OFFLINE": "1"})   # one torch thread: 2 shared cores thrash with more
    for _ in range(1200):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200: return p
        except httpx.HTTPError: pass
        if p.poll() is not None: raise SystemExit(f"the server stopped: {p.stderr.read()[-2000:]}")
        time.sleep(0.1)
    p.terminate(); raise SystemExit("the server did not start within 2 minutes")


def load(url: str, clients: int, per_client: int, start_at: int) -> tuple[float, list[float]]:
    "Wall seconds and per-request latencies of `clients` threads sending `per_client` requests each."
    lat, lock, errors = [], threading.Lock(), []
    def client(c):
        with httpx.Client(base_url=url, timeout=600) as h:
            for i in range(per_client):
                n = start_at + c * per_client + i
                body = {"model": "bench", "query": f"query {n}: where did the cat sit", "top_n": 4,
                        "documents": [f"passage {n}.{j}: the cat sat on the mat {'dog ' * j}" for j in range(4)]}
                t0 = time.perf_counter(); r = h.post("/v1/rerank", json=body); dt = time.perf_counter() - t0
                if r.status_code != 200: errors.append(r.text)
                with lock: lat.append(dt)
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads: t.start()
    for t in threads: t.join()
    if errors: raise SystemExit(f"{len(errors)} requests failed, e.g. {errors[0]}")
    return time.perf_counter() - t0, lat


def pct(xs, p): return sorted(xs)[min(len(xs) - 1, max(0, round(p / 100 * len(xs) + 0.5) - 1))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests per level (4 per client, at least 16 a level)")
    ap.add_argument("--model", help="backend spec (default: a tiny random Qwen2 built here)")
    ap.add_argument("--levels", default="1,4,16", help="concurrent clients, comma-separated")
    _smoke.add_flag(ap)
    a = ap.parse_args(argv)
    if a.smoke: a.levels = "2"
    tmp = Path(tempfile.mkdtemp(prefix="clir-serve-bench-"))
    if a.model: llm = a.model
    else:
        from clir_llm.testing import make_tiny_hf_model
        llm = f"hf:{make_tiny_hf_model(tmp / 'qwen2')}"
    (tmp / "serve.yaml").write_text(f"serve: {{cache_mode: 'off', max_pending: 256}}\nrerankers:\n"
                                    f"  - {{name: bench, method: pairwise-allpair, llm: '{llm}', pair: en-de}}\n")
    levels = [int(x) for x in a.levels.split(",")]
    rows, n = {}, 0
    sides = (("batched", ["--max-batch", "16"]), ("one per call", ["--max-batch", "1"]))
    for label, extra in sides[:1] if a.smoke else sides:    # a smoke run starts one server (most of its time)
        port = free_port(); p = start(tmp / "serve.yaml", port, extra); url = f"http://127.0.0.1:{port}"
        try:
            load(url, 1, 2, 10**6)   # warm-up: the model loaded, the first calls made
            for c in levels:
                per = 2 if a.smoke else max(4 if a.quick else 16, (16 if a.quick else 64) // c)
                before = httpx.get(f"{url}/health").json()["stats"]
                wall, lat = load(url, c, per, n); n += c * per
                after = httpx.get(f"{url}/health").json()["stats"]
                batches = after["batches"] - before["batches"]
                rows[label, c] = (len(lat) / wall, pct(lat, 50) * 1000, pct(lat, 95) * 1000, len(lat) / max(batches, 1), len(lat))
        finally:
            p.terminate(); p.communicate(timeout=60)
    print(f"clir-llm serve, pairwise-allpair over 4 documents a request (12 prompts), {llm if a.model else 'tiny random Qwen2 (hf:, CPU)'}, "
          f"cache off, {os.cpu_count()} CPU cores (load average {os.getloadavg()[0]:.1f} at the end)")
    print(f"{'clients':>7} {'requests':>8} | {'batched: req/s':>14} {'p50 ms':>7} {'p95 ms':>7} {'req/call':>8} | "
          f"{'one per call: req/s':>19} {'p50 ms':>7} {'p95 ms':>7} | {'req/s ratio':>11}")
    for c in levels:
        b, u = rows["batched", c], rows.get(("one per call", c), (float("nan"),) * 5)
        print(f"{c:>7} {b[4]:>8} | {b[0]:>14.1f} {b[1]:>7.0f} {b[2]:>7.0f} {b[3]:>8.1f} | {u[0]:>19.1f} {u[1]:>7.0f} {u[2]:>7.0f} | {b[0] / u[0]:>10.2f}x")


if __name__ == "__main__":
    main()
