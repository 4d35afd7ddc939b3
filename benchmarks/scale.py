"""Scale-out benchmarks: the same work on one engine and on several, with identical outputs.

`server-pool-4`: N local OpenAI-compatible test servers (`clir_llm.testing.FakeOpenAIServer`), each answering
`--capacity` requests at a time with a fixed `--latency` per request (a stand-in for a GPU server's batch slots),
against one such server. The client is one `openai:` backend: `concurrency` per server, requests spread by least
outstanding work (`base_url` = the list of servers). Both sides answer the same prompts (chat generation and
completions with prompt-logprob scoring); the outputs must be identical. Goal: 4 servers at least 3.2x one.

`ray-2-workers`: two Ray actors against one on CPU-bound dense encoding (`benchmarks/scale_ray.py`, a local 2-CPU
cluster unless `RAY_ADDRESS` is set); the vectors must be the same bytes. Goal: 1.6x (it needs two idle cores).

Targets are registered in `REGISTRY` (name -> function(args) -> (ratio, same_outputs, detail), goal); `TARGETS` names them.
`--smoke` (seconds): the server pool with 8 requests and no latency, and Ray's side marked not measured (tests/test_benchmarks.py).

    python benchmarks/scale.py --quick
    python benchmarks/scale.py --target server-pool-4 --servers 8 --latency 0.2
"""
import argparse, importlib.util, sys, tempfile, time
from contextlib import ExitStack
from pathlib import Path
from clir_llm.llm import get_backend
from clir_llm.testing import FakeOpenAIServer, make_tiny_hf_model
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _smoke

TARGETS = ["server-pool-4", "ray-2-workers"]
REGISTRY: dict = {}


def register(name: str, goal: float):
    "Add a target: `fn(args) -> (ratio, same_outputs, detail)`."
    def add(fn): REGISTRY[name] = (fn, goal); return fn
    return add


def _reply(msgs, body): return "answer: " + msgs[-1]["content"][::-1][:24]


def _run(urls, prompts, tokenizer, concurrency):
    """Chat generation of `prompts`, and continuation scores of the same prompts rendered with `tokenizer`'s chat
    template and sent as token ids (completions with prompt logprobs), through one backend; (outputs, seconds)."""
    chat = get_backend({"spec": "openai:bench-model", "base_url": urls, "concurrency": concurrency})
    comp = get_backend({"spec": "openai:bench-model", "base_url": urls, "concurrency": concurrency, "tokenizer": str(tokenizer)})
    half = len(prompts) // 2
    for b in (chat, comp):   # clients built before the clock starts: the benchmark measures throughput, not start-up
        for i in range(len(b.base_urls)): b.client_for(i)
    t0 = time.perf_counter()
    out = chat.generate(prompts[:half], max_new_tokens=8, progress=False)
    scores = comp.score(prompts[half:], ["A", "B"], progress=False)
    return (out, scores), time.perf_counter() - t0


@register("server-pool-4", goal=3.2)
def server_pool(args):
    n_req = args.requests or (8 if args.smoke else 64 if args.quick else 256)
    prompts = [f"query {i}: which passage answers it best, A or B?" for i in range(n_req)]
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as st:
        tok = make_tiny_hf_model(Path(tmp) / "tok")          # a small chat tokenizer: prompts rendered here, as for open models
        servers = [st.enter_context(FakeOpenAIServer(responder=_reply, latency=args.latency, capacity=args.capacity))
                   for _ in range(args.servers)]
        one, t1 = _run(servers[0].url, prompts, tok, args.capacity)
        pool, tn = _run([s.url for s in servers], prompts, tok, args.capacity)
        spread = [len(s.requests) for s in servers]
    detail = (f"{n_req} requests, {args.latency * 1000:.0f} ms each, {args.capacity} at a time per server: one server "
              f"{t1:.2f} s, {args.servers} servers {tn:.2f} s; requests per server {spread} (the first also served the one-server run)")
    return t1 / tn, one == pool, detail


@register("ray-2-workers", goal=1.6)
def ray_workers(args):
    "Two Ray actors against one on CPU-bound mE5-small encoding (`benchmarks/scale_ray.py`); the vectors must be the same bytes."
    from scale_ray import ray_target, smoke_target
    if args.smoke: return None, True, smoke_target()["why"]
    if importlib.util.find_spec("ray") is None:
        _smoke.not_measured("ray-2-workers", "ray is not installed here: pip install -e '.[ray]'"); return None, True, ""
    res = ray_target(96 if args.quick else 192, log=lambda line: None)
    s = res["seconds"]
    return res["ratio"], res["identical"], (f"Ray, best of {res['repeats']} alternating runs: 1 worker {s[1]:.1f} s ({res['runs'][1]}), "
                                            f"2 workers {s[2]:.1f} s ({res['runs'][2]}) (vectors compared byte for byte); "
                                            f"two plain processes got {res['ceiling']:.2f}x of one in this run (the cores' ceiling now)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests (CI)")
    ap.add_argument("--target", action="append", choices=sorted(REGISTRY), help="run only these targets (default: all)")
    ap.add_argument("--servers", type=int, default=4, help="server-pool: replicas (default 4)")
    ap.add_argument("--latency", type=float, default=0.25, help="server-pool: seconds per request (default 0.25)")
    ap.add_argument("--capacity", type=int, default=4, help="server-pool: requests a server answers at a time (default 4)")
    ap.add_argument("--requests", type=int, default=None, help="server-pool: requests per run (default 64 quick, 256)")
    _smoke.add_flag(ap)
    args = ap.parse_args(argv)
    if args.smoke and args.latency == ap.get_default("latency"): args.latency = 0.01
    ok = True
    with _smoke.marked(args.smoke):
        for name in args.target or TARGETS:
            fn, goal = REGISTRY[name]
            if name == "server-pool-4" and args.servers != 4: name = f"server-pool-{args.servers}"
            ratio, same, detail = fn(args)
            if ratio is None: continue          # not measured: the side printed its own line
            print(f"  {detail}; outputs {'identical' if same else 'DIFFERENT'}")
            met = ratio >= goal and same
            ok &= met or args.smoke              # a smoke run checks the path and the outputs, not the speed
            ok &= same
            print(f"target {name}: {ratio:.2f}x (goal {goal:.1f}x) {'met' if met else 'short'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
