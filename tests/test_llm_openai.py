"""`openai:` (clir_llm.llm_openai) against real local HTTP servers (clir_llm.testing.FakeOpenAIServer) with injected faults:
retries counted by kind, the key never stored, kill -9 and resume, a pool of replicas with failover, and for open models
the very prompts (token ids) `hf:` renders; tiktoken counting; what the dry run asks of the kind."""

import base64, hashlib, json, math, os, signal, subprocess, sys, textwrap, threading, time
from collections import Counter
from pathlib import Path
import pytest
from clir_llm.cache import Cache, CacheMiss
from clir_llm.core import ClirError
from clir_llm.llm import BackendSpec, LLMError, get_backend
from clir_llm.llm_hf import HFBackend
from clir_llm.llm_openai import OpenAIBackend, OpenAIOptions, _ServerPool, endpoint
from clir_llm.testing import FakeOpenAIServer, _toy_logprobs, make_tiny_hf_model, tiny_setup
import re
import yaml
import _reliability as R
from clir_llm.collections import load_collection
from clir_llm.core import Run, usage_path
from clir_llm.rerank import get_reranker

PROMPTS = [
    "the cat sat",
    "Passage A: ein Hund lief durch den Park",
    "Output Passage A or Passage B:",
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "kissa nukkuu sohvalla"}],
    "Rank the passages based on their relevance",
    "0 1 2 3 4 5",
    "il gatto dorme",
    "кошка спит",
]
SECRET = "sk-test-MARKER-5f1e2d3c4b5a69788"


@pytest.fixture(scope="module")
def qpath(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    return make_tiny_hf_model(tmp_path_factory.mktemp("tiny") / "qwen2")


# ---------------------------------------------------------------- openai:
@pytest.fixture
def secret(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return SECRET


def _api(srv, cache=None, **kw):
    return get_backend("openai:gpt-4.1", cache, base_url=srv.url, **{"backoff": 0.01, "concurrency": 1, **kw})


def test_openai_retries_every_fault_kind(secret, tmp_path):
    faults = ["429", "500", "drop", "malformed", "empty", "slow:3"]
    with FakeOpenAIServer(faults=faults) as srv:
        b = _api(srv, Cache(tmp_path), timeout=0.5)
        assert b.generate(["hello"], max_new_tokens=4) == ["echo: hello"]
        c = b.usage.counters
        assert {k: c[k] for k in c if k.startswith("errors_")} == {
            "errors_http_429": 1,
            "errors_http_500": 1,
            "errors_connection": 1,
            "errors_malformed": 1,
            "errors_empty_choices": 1,
            "errors_timeout": 1,
        }
        assert len(srv.requests) == len(faults) + 1 and b.usage.calls == 1
        assert b.usage.tokens_in == 1 and b.usage.tokens_out == 2
        assert b.usage.cost_usd == pytest.approx((1 * 2.00 + 2 * 8.00) / 1e6)


def test_openai_honours_retry_after(secret):
    with FakeOpenAIServer(faults=["429:1"]) as srv:
        b = _api(srv)
        assert b.generate(["x"]) == ["echo: x"]
        t = [r["time"] for r in srv.requests]
        assert len(t) == 2 and t[1] - t[0] >= 0.95  # waited the server's Retry-After, not the 10 ms backoff


def test_openai_gives_up_clearly_and_on_error_empty(secret, tmp_path):
    with FakeOpenAIServer(faults=["500"] * 10) as srv:
        b = _api(srv, Cache(tmp_path), max_retries=2)
        with pytest.raises(LLMError, match=r"failed after 3 attempts \(http_500, http_500, http_500\)"):
            b.generate(["x"])
        assert b.generate(["y"], on_error="empty") == [""]
        assert b.score(["z"], ["A", "B"], on_error="empty")[0] == [pytest.approx(float("nan"), nan_ok=True)] * 2
        assert b.usage.counters["failed_calls"] == 3 and b.usage.calls == 0
        srv.faults = []
        assert b.generate(["y"], on_error="empty") == ["echo: y"]  # a failed call was not cached


def test_openai_not_retried_4xx_never_shows_the_key(secret, tmp_path):
    with FakeOpenAIServer(faults=["401"]) as srv:
        b = _api(srv, Cache(tmp_path))
        with pytest.raises(LLMError, match="HTTP 401") as e:
            b.generate(["x"])
        assert SECRET not in str(e.value) and "***" in str(e.value) and len(srv.requests) == 1
        assert SECRET not in repr(b) + b.name + json.dumps(b.identity())


def test_openai_failure_with_concurrency_raises_llmerror_and_keeps_finished_calls(secret, tmp_path):
    with FakeOpenAIServer(faults=[None, None] + ["500"] * 40) as srv:
        b = _api(srv, Cache(tmp_path), concurrency=2, max_retries=1)
        with pytest.raises(LLMError, match="failed after 2 attempts"):
            b.generate([f"p{i}" for i in range(20)])
        stored = Cache(tmp_path).stats()["llm"]
        asked = {r["prompt"] for r in srv.requests}
        # the rest was cancelled (a few more may have started); finished calls kept
        assert stored == 2 and len(asked) <= 8


def test_openai_prefill_for_compatible_servers(secret):
    msgs = [{"role": "user", "content": "Output Passage A or Passage B:"}, {"role": "assistant", "content": "Passage"}]
    with FakeOpenAIServer() as srv:
        plain, pre = _api(srv), _api(srv, prefill=True)
        assert not plain.supports_prefill and pre.supports_prefill
        plain.generate([msgs])
        assert "continue_final_message" not in srv.requests[-1]["body"]
        pre.generate([msgs])
        body = srv.requests[-1]["body"]
        assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
        assert body["messages"][-1] == {"role": "assistant", "content": "Passage"}


def test_openai_concurrency_limit(secret):
    with FakeOpenAIServer(faults=["slow:0.3"] * 12) as srv:
        b = _api(srv, concurrency=3)
        prompts = [f"p{i}" for i in range(12)]
        assert b.generate(prompts) == [f"echo: {p}" for p in prompts]
        assert srv.max_inflight == 3


def test_openai_score_with_logprobs(secret):
    top = lambda msgs: {"B": -0.2, " A": -1.7, "Passage": -3.0}
    with FakeOpenAIServer(top=top) as srv:
        b = _api(srv)
        assert b.supports_logprobs
        assert b.score(["Output Passage A or Passage B:"], ["A", "B", "C"]) == [[-1.7, -0.2, -3.0]]
        assert srv.requests[-1]["body"]["logprobs"] is True and srv.requests[-1]["body"]["max_tokens"] == 1
        no = _api(srv, logprobs=False)
        with pytest.raises(LLMError, match="cannot score"):
            no.score(["x"], ["A"])


def test_openai_replay_needs_no_key_nor_server(secret, tmp_path, monkeypatch):
    with FakeOpenAIServer() as srv:
        out = _api(srv, Cache(tmp_path)).generate(PROMPTS, max_new_tokens=8)
        url = srv.url
    monkeypatch.delenv("OPENAI_API_KEY")
    rp = get_backend("openai:gpt-4.1", Cache(tmp_path, mode="replay"), base_url=url)
    assert rp.generate(PROMPTS, max_new_tokens=8) == out and rp._client is None
    with pytest.raises(CacheMiss):
        rp.generate(["new"], max_new_tokens=8)
    with pytest.raises(LLMError, match="set OPENAI_API_KEY"):
        get_backend("openai:gpt-4.1", Cache(tmp_path)).generate(["new"])


def test_secret_never_in_the_cache_file(secret, tmp_path):
    with FakeOpenAIServer(responder=lambda m, b: "fine") as srv:
        b = _api(srv, Cache(tmp_path))
        b.generate(["a", "b"])
        b.score(["c"], ["A", "B"])
    files = list(tmp_path.rglob("*"))
    assert any(f.name == "llm.sqlite" for f in files)
    for f in files:
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes()
    # a response leaking the key is refused
    with FakeOpenAIServer(responder=lambda m, b: f"the key is {SECRET}") as srv:
        with pytest.raises(ClirError, match="secret"):
            _api(srv, Cache(tmp_path)).generate(["leak"])


# ---------------------------------------------------------------- kill -9 and resume
CHILD = textwrap.dedent("""
    import sys, json
    from clir_llm.cache import Cache
    from clir_llm.llm import get_backend
    url, root, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    b = get_backend("openai:gpt-4.1", Cache(root), base_url=url, concurrency=int(sys.argv[4]), backoff=0.01)
    out = b.generate([f"prompt {i}" for i in range(n)], max_new_tokens=4, progress=False)
    print(json.dumps({"out": out, "calls": b.usage.calls, "hits": b.usage.cache_hits}))
""")


@pytest.mark.parametrize("concurrency", [1, 3])
def test_kill9_mid_run_resumes_without_lost_or_repeated_calls(tmp_path, monkeypatch, concurrency):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    n, held = 12, 6
    with FakeOpenAIServer(faults=[None] * held + ["hold"]) as srv:
        args = [sys.executable, "-c", CHILD, srv.url, str(tmp_path), str(n), str(concurrency)]
        child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert srv.holding.wait(60), child.stderr.read().decode()[-2000:]
        while srv.inflight < min(concurrency, n - held):  # the other workers are in flight too, or done
            if len(srv.requests) >= n:
                break
            time.sleep(0.01)
        time.sleep(0.2)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        first = [r["prompt"] for r in srv.requests]
        stored = Cache(tmp_path).stats().get("llm", 0)
        srv.release.set()
        assert 0 < stored < n
        res = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        out = json.loads(res.stdout)
        assert out["out"] == [f"echo: prompt {i}" for i in range(n)]  # nothing lost
        assert out["hits"] == stored and out["calls"] == n - stored
        asked_twice = [p for p in set(first) if srv.count(p) > 1]
        # only calls that were in flight at the kill (no answer received) are asked again
        assert len(asked_twice) == len(first) - stored <= concurrency
        assert all(srv.count(f"prompt {i}") >= 1 for i in range(n))


def test_two_processes_share_one_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    n = 30
    with FakeOpenAIServer(faults=["slow:0.05"] * 200) as srv:
        args = [sys.executable, "-c", CHILD, srv.url, str(tmp_path), str(n), "3"]
        procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert json.loads(out)["out"] == [f"echo: prompt {i}" for i in range(n)]
    assert Cache(tmp_path).stats()["llm"] == n
    assert n <= len(srv.requests) <= 2 * n


def test_api_key_env_names_the_variable(monkeypatch):
    monkeypatch.delenv("MY_SERVER_KEY", raising=False)
    with FakeOpenAIServer() as srv:
        b = get_backend({"spec": "openai:gpt-4.1", "base_url": srv.url, "api_key_env": "MY_SERVER_KEY"})
        with pytest.raises(LLMError, match="MY_SERVER_KEY"):
            b.generate(["hi"], progress=False)
        monkeypatch.setenv("MY_SERVER_KEY", "sk-local-1")
        b = get_backend({"spec": "openai:gpt-4.1", "base_url": srv.url, "api_key_env": "MY_SERVER_KEY"})
        assert b.generate(["hi"], progress=False) == ["echo: hi"] and srv.requests[-1]["auth"]


# ---------------------------------------------------------------- identical prompts on hf: and openai:
def _answer(ids, max_new: int) -> str:
    "A deterministic answer from the token ids alone: equal prompts get equal answers on both paths."
    s = sum(ids) * 31 + len(ids)
    return (" A", " B", "Passage A", "Passage B")[s % 4] if max_new <= 2 else f"[{1 + s % 4}] > [{1 + s % 3}] > [2]"


def _spy_hf(hf: HFBackend, log: dict):
    "Record what the hf: path renders (text and ids) and answer it like the server does, without running the model."
    render = hf.render_text

    def render_text(p):
        t = render(p)
        log["text"].append(t)
        return t

    def gen(items, params):
        log["gen"] += [tuple(it["ids"]) for it in items]
        return [
            {
                "text": _answer(it["ids"], params["max_new_tokens"]),
                "tokens_in": len(it["ids"]),
                "tokens_out": 1,
                "seconds": 0.0,
                "time": 0.0,
            }
            for it in items
        ]

    def score(items, params):
        out = []
        for it in items:
            n = len(it["ids"])
            log["score"] += [tuple(it["ids"] + c) for c in it["cands"]]
            out.append(
                {
                    "scores": [float(sum(_toy_logprobs(it["ids"] + c)[n:])) for c in it["cands"]],
                    "tokens_in": n,
                    "tokens_out": 0,
                    "seconds": 0.0,
                    "time": 0.0,
                }
            )
        return out

    hf.render_text, hf._generate_batch, hf._score_batch = render_text, gen, score


def _served(srv) -> dict:
    got = {"gen": [], "score": []}
    for r in srv.requests:
        # open models: never the chat API (the server would render its own way)
        assert r["endpoint"] == "completions", r
        p = r["body"]["prompt"]
        if r["body"].get("echo"):
            got["score"] += [tuple(x) for x in p]
        else:
            got["gen"].append(tuple(p))
    return got


@pytest.mark.parametrize(
    "method, opts",
    [
        ("listwise", dict(window=4, step=2, max_words=12)),  # listwise
        # document-length cut (listwise)
        ("listwise", dict(window=4, step=2, cut="tokens", passage_tokens=9)),
        ("pairwise-bubblesort", dict(k=2, scoring="generation")),  # PRP, generated answers
        # PRP likelihood + cut
        ("pairwise-bubblesort", dict(k=2, scoring="likelihood", passage_tokens=7, query_tokens=5)),
    ],
)
def test_openai_sends_the_prompts_hf_renders(qpath, tmp_path, method, opts):
    from clir_llm.rerank import RerankerSpec, get_reranker

    coll, first = tiny_setup(n_queries=2, n_docs=6)
    spec = RerankerSpec.parse(method, **opts)
    hf = get_backend(f"hf:{qpath}", cache=Cache(tmp_path / "hf"))
    log = {"text": [], "gen": [], "score": []}
    _spy_hf(hf, log)
    ran_hf = get_reranker(spec, hf, progress=False).rerank(coll, first, k=6)
    with FakeOpenAIServer(completer=lambda p, body: (_answer(p, body["max_tokens"]), [])) as srv:
        oa = get_backend(
            {"spec": "openai:tiny-qwen", "base_url": srv.url, "tokenizer": str(qpath), "concurrency": 3},
            cache=Cache(tmp_path / "oa"),
        )
        ran_oa = get_reranker(spec, oa, progress=False).rerank(coll, first, k=6)
    got = _served(srv)
    assert got["gen"] or got["score"]
    assert Counter(got["gen"]) == Counter(log["gen"]) and Counter(got["score"]) == Counter(log["score"])  # token ids
    tok = hf.tokenizer
    sent_text = Counter(
        tok.decode(list(ids), skip_special_tokens=False) for ids in set(got["gen"]) | {s for s in got["score"]}
    )
    # text
    if got["gen"]:
        assert {tok.decode(list(i), skip_special_tokens=False) for i in got["gen"]} == set(log["text"])
    if method.startswith("pairwise"):
        # the PRP answer prefix is sent
        assert all(t.endswith("<|im_start|>assistant\n Passage:") for t in log["text"])
    assert ran_oa == ran_hf and sent_text
    if "passage_tokens" in opts and method.startswith("pairwise"):
        assert all(oa.count_tokens(d.text) == hf.count_tokens(d.text) for d in coll.get_docs(first.docids("q0")))


def test_openai_completions_match_hf_outputs(qpath):
    "Against a server running the same tiny model, generation and continuation scores equal hf:'s."
    prompts = [
        "Rank the passages",
        [{"role": "user", "content": "Output Passage A or Passage B:"}, {"role": "assistant", "content": " Passage:"}],
    ]
    hf = get_backend(f"hf:{qpath}")
    with FakeOpenAIServer(model=qpath) as srv:
        oa = get_backend({"spec": "openai:tiny", "base_url": srv.url, "tokenizer": str(qpath)})
        assert oa.supports_prefill and oa.supports_logprobs
        assert oa.generate(prompts, max_new_tokens=5, progress=False) == hf.generate(
            prompts, max_new_tokens=5, progress=False
        )
        for a, b in zip(oa.score(prompts, ["A", " B"], progress=False), hf.score(prompts, ["A", " B"], progress=False)):
            assert a == pytest.approx(b, abs=1e-4)
        assert all(r["body"].get("echo") for r in srv.requests[-2:])


def test_openai_score_without_prompt_logprobs_is_a_clear_error(qpath):
    with FakeOpenAIServer(prompt_logprobs=lambda seq: [None] * len(seq)) as srv:
        oa = get_backend({"spec": "openai:tiny", "base_url": srv.url, "tokenizer": str(qpath)}, max_retries=0)
        with pytest.raises(LLMError, match="no prompt logprobs"):
            oa.score(["x"], ["A", "B"], progress=False)


def test_api_chat_leaves_rendering_to_the_server(qpath):
    with FakeOpenAIServer() as srv:
        b = get_backend({"spec": "openai:org/model", "base_url": srv.url, "tokenizer": str(qpath), "api": "chat"})
        assert b.renderer is None and not b.supports_prefill and b.generate(["hi"], progress=False) == ["echo: hi"]
        assert srv.requests[-1]["endpoint"] == "chat" and b.count_tokens("the cat sat") == get_backend(
            f"hf:{qpath}"
        ).count_tokens("the cat sat")
    assert BackendSpec.parse({"spec": "openai:org/model", "api": "chat"}).key() == "openai:org/model[api=chat]"


def test_max_model_len_refuses_long_prompts(qpath):
    with FakeOpenAIServer() as srv:
        oa = get_backend({"spec": "openai:tiny", "base_url": srv.url, "tokenizer": str(qpath), "max_model_len": 12})
        with pytest.raises(LLMError, match="exceeds max_model_len 12"):
            oa.generate(["the cat sat on the mat " * 3], progress=False)
        assert not srv.requests


def test_tiktoken_counts_with_a_local_bpe_file(tmp_path):
    "OpenAI's own models count with tiktoken; its BPE files come from the internet, so the test brings a small one."
    ranks = [bytes([i]) for i in range(256)] + [b"th", b"the", b"ca", b"cat", b" cat"]
    f = tmp_path / "tiny.tiktoken"
    f.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(ranks)))
    b = OpenAIBackend.create("gpt-4.1", tokenizer=f"tiktoken:{f}")
    assert b.count_tokens("the cat") == 2 and b.count_tokens("xyzxyz the") == 8  # ~4 chars/token would say 2 and 3
    assert b.truncate("xyzxyz the cat", 7) == "xyzxyz " and b.renderer is None


# ---------------------------------------------------------------- a pool of servers
def _reply(msgs, body):
    return "re: " + msgs[-1]["content"][::-1]


def test_pool_spreads_work_and_equals_one_server(tmp_path):
    prompts = [f"prompt {i}" for i in range(24)]
    with FakeOpenAIServer(responder=_reply, latency=0.02) as one:
        single = get_backend({"spec": "openai:m", "base_url": one.url, "concurrency": 2}).generate(
            prompts, progress=False
        )
    with (
        FakeOpenAIServer(responder=_reply, latency=0.02) as a,
        FakeOpenAIServer(responder=_reply, latency=0.02) as b,
        FakeOpenAIServer(responder=_reply, latency=0.02) as c,
    ):
        pool = get_backend(
            {"spec": "openai:m", "base_url": [a.url, b.url, c.url], "concurrency": 2}, cache=Cache(tmp_path)
        )
        assert pool.generate(prompts, progress=False) == single
        n = [len(s.requests) for s in (a, b, c)]
        # all serve, two at a time each
        assert sum(n) == 24 and min(n) >= 1 and max(s.max_inflight for s in (a, b, c)) <= 2, n
        # the pool names its first server in cache keys: the same run through a one-server backend is all hits
        again = get_backend({"spec": "openai:m", "base_url": a.url}, cache=Cache(tmp_path))
        assert again.generate(prompts, progress=False) == single and again.usage.calls == 0


def test_pool_routes_to_least_outstanding_and_skips_dead_servers():
    p = _ServerPool(["a", "b", "c"], per_server=2)
    assert [p.acquire() for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    p.release(2)
    p.release(2)
    assert p.acquire() == 2  # the least busy, not the first
    p.mark_down(1)
    p.release(1)
    p.release(1)
    p.release(0)
    assert p.acquire() == 0 and 1 not in p.live()  # a dead server is skipped while others live
    assert p.acquire() == 2 and p.outstanding == [2, 0, 2]
    got = []
    t = threading.Thread(target=lambda: got.append(p.acquire()))
    t.start()
    time.sleep(0.2)
    assert not got  # every live server full: wait
    p.release(0)
    t.join(2)
    assert got == [0]


def test_pool_fails_over_when_a_server_dies(tmp_path):
    prompts = [f"p{i}" for i in range(30)]
    with (
        FakeOpenAIServer(responder=_reply, latency=0.03) as a,
        FakeOpenAIServer(responder=_reply, latency=0.03) as b,
        FakeOpenAIServer(responder=_reply, latency=0.03) as c,
    ):
        pool = get_backend({"spec": "openai:m", "base_url": [a.url, b.url, c.url], "concurrency": 2}, backoff=0.01)
        threading.Timer(0.1, b.kill).start()
        out = pool.generate(prompts, progress=False)
    assert out == [_reply([{"content": p}], {}) for p in prompts]
    assert pool.usage.counters.get("errors_connection", 0) >= 1 and pool.usage.counters.get("failovers", 0) >= 1
    assert len(a.requests) + len(c.requests) > 20


def test_pool_all_down_is_one_clear_error():
    with FakeOpenAIServer() as a, FakeOpenAIServer() as b:
        a.kill()
        b.kill()
        pool = get_backend({"spec": "openai:m", "base_url": [a.url, b.url]}, max_retries=1, backoff=0.01)
        with pytest.raises(LLMError, match="all 2 servers are down"):
            pool.generate(["x"], progress=False)


@pytest.mark.slow
def test_scale_benchmark_quick_meets_the_pool_target(capsys):
    import importlib.util

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("scale", root / "benchmarks/scale.py")
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)
    assert scale.main(["--quick", "--target", "server-pool-4"]) == 0
    assert "target server-pool-4:" in capsys.readouterr().out


# ---------------------------------------------------------------- options, identity and the dry run
def test_options_and_identity(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    o = OpenAIOptions()
    # issue 26: timeouts in seconds
    assert (o.concurrency, o.max_retries, o.timeout, o.api, o.prefill, o.logprobs) == (4, 6, 30.0, "auto", False, True)
    # the default API: no endpoint
    assert OpenAIBackend("gpt-4.1").identity() == {"kind": "openai", "model": "gpt-4.1", "revision": None}
    b = OpenAIBackend.create("gpt-4.1", base_url="http://user:sk-URLKEY-1@Host:8000/v1/", concurrency=2)
    assert b.identity() == {"kind": "openai", "model": "gpt-4.1", "revision": None, "endpoint": "http://host:8000/v1"}
    assert b.concurrency == 2 and b._workers() == 2 and "URLKEY" not in repr(b)
    # laid: as constructor keywords
    assert OpenAIBackend.create("m", prefill=True).identity() == OpenAIBackend("m").identity()
    assert endpoint("HTTPS://u:p@Api.Example.org/v1/?x=1") == "https://api.example.org:443/v1"
    assert BackendSpec.parse("openai:m[top_logprobs=5]").key() == "openai:m[top_logprobs=5]"  # a newer output option


def test_price_is_the_kinds_answer():
    assert OpenAIBackend.is_api and not OpenAIBackend.local_model and OpenAIBackend.throughput_engine is None
    assert (
        OpenAIBackend.price("gpt-4.1-2025-04-14") == {"input": 2.00, "output": 8.00}
        and OpenAIBackend.price("llama") is None
    )
    d = BackendSpec.parse({"spec": "openai:m", "base_url": ["http://u:sk-1@a:1/v1", "http://b:1/v1"]}).describe()
    assert d.startswith("OpenAI-compatible servers http://***@a:1/v1, http://b:1/v1 model m") and "sk-1" not in d


# ---------- reliability (issue 14; moved from the test_reliability_* files)
# every transport fault once, each followed by a healthy answer (the retry); requests are sequential (concurrency=1)
TRANSPORT = ["429", "429:0.4", "500", "slow:2", "drop", "malformed", "empty"]


COUNTER_OF = {
    "429": "errors_http_429",
    "429:0.4": "errors_http_429",
    "500": "errors_http_500",
    "slow:2": "errors_timeout",
    "drop": "errors_connection",
    "malformed": "errors_malformed",
    "empty": "errors_empty_choices",
}


LISTWISE_KINDS = ["ok", "duplicate", "out_of_range", "missing", "wrong_language", "zero"]


PRP_KINDS = ["A", "B", "wrong_language", "B", "unknown_letter", "A"]


class BadRanker:
    """A scripted model whose answers cycle through bad kinds; it records, per prompt, what its answer should cost
    the parser (a prompt asked twice, e.g. after a client timeout, gets the same answer)."""

    def __init__(self):
        self.n, self.answers = 0, {}

    @property
    def expect(self) -> Counter:
        return sum((c for _, c, _ in self.answers.values()), Counter())

    def count_faults(self):
        for kind, *_ in self.answers.values():
            if kind not in ("ok", "A", "B"):
                R.STATS["faults"]["bad answer: " + kind.replace("_", " ")] += 1

    def __call__(self, msgs, body):
        text = "\n".join(m["content"] for m in msgs)
        if text in self.answers:
            k = self.answers[text][2]  # asked again (the client timed out): the same answer
        else:
            k = self.n
            self.n += 1
        exp = Counter()
        if "Output Passage A or Passage B" in text:
            kind = PRP_KINDS[k % len(PRP_KINDS)]
            exp["parse_failures"] += kind not in "AB"
            self.answers[text] = (kind, exp, k)
            return {
                "A": "Passage A",
                "B": "Passage B",
                "wrong_language": "Durchgang A ist relevanter",
                "unknown_letter": "Passage C",
            }[kind]
        n = int(re.search(r"provide you with (\d+) passages", text).group(1))
        kind = LISTWISE_KINDS[k % len(LISTWISE_KINDS)]
        self.answers[text] = (kind, exp, k)
        ids = list(range(1, n + 1))[::-1]
        if kind == "duplicate":
            ids = [ids[0]] + ids
            exp["repair_duplicates"] += 1
        if kind == "out_of_range":
            ids = [n + 7] + ids
            exp["repair_out_of_range"] += 1
        if kind == "zero":
            ids = [0] + ids
            exp["repair_out_of_range"] += 1
        if kind == "missing":
            ids = ids[:1]
            exp["repair_missing"] += n - 1
        if kind == "wrong_language":
            exp["repair_missing"] += n
            exp["repair_unparsed"] += 1
            exp["parse_failures"] += 1
            return "Die erste Passage ist die relevanteste, dann die anderen."
        return " > ".join(f"[{i}]" for i in ids)


def _faults():
    return [x for f in TRANSPORT for x in (f, None)]


def _first_stage(coll) -> Run:
    docs = sorted(d.docid for d in coll.iter_docs())
    return Run.from_ranked({q: docs[i:] + docs[:i] for i, q in enumerate(sorted(coll.queries))}, name="first")


def _backend(srv, cache):
    # endpoint=: every test server gets a new port; the recovered server of a resume test is "the same server"
    return get_backend(
        "openai:fake-ranker",
        cache=cache,
        base_url=srv.url,
        endpoint="fake-server",
        concurrency=1,
        timeout=0.5,
        backoff=0.01,
        max_wait=1.0,
        max_retries=4,
    )


@pytest.mark.parametrize("method", ["listwise-rankzephyr", "pairwise-bubblesort"])
def test_faulty_server_run_completes_and_counts_every_fault(method, tmp_path):
    coll = load_collection("fixture", "en-de")
    run = _first_stage(coll)
    bot = BadRanker()
    with FakeOpenAIServer(responder=bot, faults=_faults()) as srv:
        backend = _backend(srv, Cache(tmp_path / "cache"))
        kw = dict(window=2, step=1) if method.startswith("listwise") else dict(k=3, passage_tokens=60)
        rr = get_reranker(method, backend, progress=False, **kw)
        out = rr.rerank(coll, run, k=4)
        reqs = list(srv.requests)
    path = tmp_path / "run.trec"
    out.write(path)
    rr.save(path)
    served = [r["fault"] for r in reqs if r["fault"]]
    assert served == TRANSPORT, "every scripted fault was served once"
    for f in served:
        R.STATS["faults"]["server: " + {"429:0.4": "429 Retry-After", "slow:2": "timeout"}.get(f, f)] += 1
    # every fault counted, in the files written beside the run
    usage = json.loads(usage_path(path).read_text())
    diag = json.loads(Path(str(path) + ".rerank.json").read_text())
    want = Counter(COUNTER_OF[f] for f in TRANSPORT)
    assert {k: v for k, v in usage["counters"].items() if k.startswith("errors_")} == dict(want)
    assert diag["usage"]["counters"] == usage["counters"]
    assert usage["calls"] == len(reqs) - len(TRANSPORT) == len(bot.answers)  # one answered call per prompt, none lost
    bot.count_faults()
    assert {k for k, *_ in bot.answers.values()} == set(LISTWISE_KINDS if method.startswith("listwise") else PRP_KINDS)
    totals = Counter()
    for d in diag["per_query"].values():
        for k, v in d.items():
            if isinstance(v, int):
                totals[k] += v
    for k, v in bot.expect.items():
        assert totals[k] == v, (k, totals[k], v)
        assert usage["counters"].get(k, 0) == v
    assert bot.expect["parse_failures"] > 0
    # the Retry-After header is honoured (0.4 s), the plain 429 and the other faults back off briefly
    i = next(j for j, r in enumerate(reqs) if r["fault"] == "429:0.4")
    assert reqs[i + 1]["time"] - reqs[i]["time"] >= 0.39
    # the output is a permutation of the input, query by query
    assert sorted(out) == sorted(run)
    for q in run:
        assert sorted(out.docids(q)) == sorted(run.docids(q)) and len(set(out.docids(q))) == len(run.docids(q))


def test_call_failing_for_good_stops_loudly_and_resumes(tmp_path):
    """A call that still fails after all retries raises LLMError naming the attempts (no half-made run), and a re-run
    after the server recovers asks only the calls that never got an answer."""
    coll = load_collection("fixture", "en-de")
    run = _first_stage(coll)
    cache = Cache(tmp_path / "cache")
    faults = [None, None, None] + ["500"] * 5  # three answers, then one call fails on all 5 attempts
    with FakeOpenAIServer(responder=R.fake_answer, faults=faults) as srv:
        rr = get_reranker("listwise-rankzephyr", _backend(srv, cache), window=2, step=1, progress=False)
        with pytest.raises(LLMError, match=r"after 5 attempts \(http_500, http_500, http_500, http_500, http_500\)"):
            rr.rerank(coll, run, k=4)
        R.STATS["faults"]["server: 500 (for good)"] += 5
        assert rr.backend.usage.counters["failed_calls"] == 1
        first = [r["prompt"] for r in srv.requests if r["fault"] is None]
    with FakeOpenAIServer(responder=R.fake_answer) as srv:
        rr = get_reranker("listwise-rankzephyr", _backend(srv, cache), window=2, step=1, progress=False)
        out = rr.rerank(coll, run, k=4)
        again = [r["prompt"] for r in srv.requests]
    assert len(first) == 3 and not set(first) & set(again), "an answered call was asked again"
    assert rr.usage.cache_hits == 3 and rr.usage.calls == len(again)
    for q in run:
        assert sorted(out.docids(q)) == sorted(run.docids(q))


# ---------- finding 2: the LLM cache key names the server (openai:), and hf: keys stay as recorded
def test_cache_key_names_the_server(tmp_path, monkeypatch):
    from clir_llm.cache import Cache
    from clir_llm.llm import get_backend

    cache = Cache(tmp_path / "cache")
    with (
        FakeOpenAIServer(responder=lambda m, b: "first") as s1,
        FakeOpenAIServer(responder=lambda m, b: "second") as s2,
    ):
        monkeypatch.setenv("OPENAI_BASE_URL", s1.url)
        assert get_backend("openai:same-model", cache=cache).generate(["q"], progress=False) == ["first"]
        monkeypatch.setenv("OPENAI_BASE_URL", s2.url)
        b2 = get_backend("openai:same-model", cache=cache)
        assert b2.generate(["q"], progress=False) == ["second"] and len(s2.requests) == 1 and b2.usage.cache_hits == 0
        monkeypatch.setenv("OPENAI_BASE_URL", s1.url + "/")  # the same server written differently: a hit
        b3 = get_backend("openai:same-model", cache=cache)
        assert b3.generate(["q"], progress=False) == ["first"] and len(s1.requests) == 1


# ---------- finding 3: credentials in URLs never reach a message, a log or a file
KEY, URLKEY = "sk-envkey-" + "7" * 20, "sk-urlkey-" + "9" * 20


def test_key_in_url_and_env_never_leaks(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "out"
    out.mkdir()
    args = [
        "rerank",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        R.good_run(tmp_path, "in.trec"),
        "--method",
        "listwise",
        "--llm",
        "openai:fake-ranker",
        "--top-k",
        "2",
    ]
    with FakeOpenAIServer(responder=R.fake_answer, faults=["500"] * 40) as srv:
        env = R.env_for(cache, srv.url.replace("http://", f"http://user:{URLKEY}@"), OPENAI_API_KEY=KEY)
        bad = R.run_cli(*args, "--out", out / "bad.trec", env=env, timeout=300)
        srv.faults.clear()
        good = R.run_cli(*args, "--out", out / "good.trec", env=env, timeout=300)
    assert bad.returncode == 1 and "call failed after" in bad.stderr and "***@127.0.0.1" in bad.stderr, bad.stderr[
        -2000:
    ]
    assert good.returncode == 0, good.stderr[-2000:]
    for p in (bad, good):
        R.STATS["secret_files_scanned"] += 1
        if KEY in p.stdout + p.stderr or URLKEY in p.stdout + p.stderr:
            R.STATS["secret_leaks"] += 1
        assert KEY not in p.stdout + p.stderr and URLKEY not in p.stdout + p.stderr
    assert not R.scan_for((KEY, URLKEY), out, cache)


def test_default_api_identity_is_unchanged():
    "Recorded demo calls must still hit: the default API's identity carries no endpoint (issue 14 finding 2; hf: in test_llm_hf)."
    os.environ.pop("OPENAI_BASE_URL", None)
    assert OpenAIBackend("gpt-4.1").identity() == {"kind": "openai", "model": "gpt-4.1", "revision": None}


# ---------- issue 26 item 4: a canary key, however it is given, never appears in terminal output, logs or the cache
CANARY = {
    "env": "cnry-openai-7f3a9c21e5d4b6a8",
    "custom": "cnry-custom-1b2c3d4e5f60718293",
    "user": "cnry-userinfo-a1b2c3d4e5f6",
    "query": "cnry-query-0f9e8d7c6b5a4321",
}


def test_canary_keys_never_leak(tmp_path):
    """OPENAI_API_KEY, a custom `api_key_env` variable, a URL's user info and its `?api-key=` query string: a server that
    echoes the key (without 'Bearer'), a server failing for good, and a good run, all with -v (debug logs): no canary in
    stdout, stderr, the run's files or the cache."""
    run, out, cache = R.good_run(tmp_path), tmp_path / "out", tmp_path / "cache"
    out.mkdir()
    env = {**R.env_for(cache), "OPENAI_API_KEY": CANARY["env"], "RERANK_CREDS_VALUE": CANARY["custom"]}
    env.pop("OPENAI_BASE_URL", None)
    args = [
        "-v",
        "rerank",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        run,
        "--method",
        "listwise",
        "--llm",
        "openai:fake-ranker",
        "--top-k",
        "2",
        "--window",
        "2",
        "--step",
        "1",
        "--llm-max-retries",
        "1",
        "--llm-backoff",
        "0.01",
    ]
    results = []
    with R.EchoKeyServer() as echo:
        results.append(
            (
                "echo of the custom key",
                R.run_cli(
                    *args,
                    "--llm-base-url",
                    echo.url,
                    "--llm-api-key-env",
                    "RERANK_CREDS_VALUE",
                    "--out",
                    out / "a.trec",
                    env=env,
                    timeout=300,
                ),
            )
        )
        results.append(
            (
                "echo of OPENAI_API_KEY",
                R.run_cli(*args, "--llm-base-url", echo.url, "--out", out / "b.trec", env=env, timeout=300),
            )
        )
    with FakeOpenAIServer(responder=R.fake_answer, faults=["500"] * 10) as srv:
        host = srv.url.replace("http://", "")
        bad = f"http://user:{CANARY['user']}@{host}?api-key={CANARY['query']}"
        results.append(
            (
                "URL user info and query key, failing",
                R.run_cli(*args, "--llm-base-url", bad, "--out", out / "c.trec", env=env, timeout=300),
            )
        )
        # a good run (this test server reads no query string: the key in the user info, and in the variables)
        srv.faults.clear()
        results.append(
            (
                "a good run",
                R.run_cli(
                    *args,
                    "--llm-base-url",
                    f"http://user:{CANARY['user']}@{host}",
                    "--llm-api-key-env",
                    "RERANK_CREDS_VALUE",
                    "--out",
                    out / "d.trec",
                    env=env,
                    timeout=300,
                ),
            )
        )
    for kind, p in results:
        text = p.stdout + p.stderr
        leaked = [k for k, v in CANARY.items() if v in text]
        R.STATS["secret_files_scanned"] += 1
        R.STATS["secret_leaks"] += bool(leaked)
        R.hostile("secrets", f"canary key: {kind}", not leaked)
        assert not leaked, (kind, leaked, text[-3000:])
    assert [p.returncode for _, p in results] == [1, 1, 1, 0], [(k, p.returncode, p.stderr[-800:]) for k, p in results]
    assert "HTTP 401" in results[0][1].stderr and "***" in results[0][1].stderr  # the echo was there, redacted
    assert not R.scan_for(CANARY.values(), out, cache)


# ---------- issue 26 item 8: NaN or infinite log-probabilities are a failed call (counted, retried), never a ranking
NAN_TOP = lambda msgs: {"A": float("nan"), "B": -1.0, "Yes": float("nan"), "No": -1.0}


def test_nonfinite_logprobs_are_failed_calls(secret, tmp_path):
    "Chat API scoring (top logprobs) and completions scoring (prompt logprobs) with NaN or inf: retried, counted, then one LLMError."
    with FakeOpenAIServer(top=NAN_TOP) as srv:
        b = _api(srv, Cache(tmp_path / "a"), max_retries=2, api="chat")
        with pytest.raises(
            LLMError, match=r"after 3 attempts \(nonfinite_logprobs, nonfinite_logprobs, nonfinite_logprobs\)"
        ):
            b.score(["Output Passage A or Passage B:"], ["A", "B"], progress=False)
        assert b.usage.counters["errors_nonfinite_logprobs"] == 3 and len(srv.requests) == 3
    R.hostile("numbers", "NaN top logprobs from a server", True)
    flaky = iter([float("inf")] + [-0.5] * 100)
    with FakeOpenAIServer(top=lambda msgs: {"A": next(flaky), "B": -1.5}) as srv:  # one bad answer, then good ones
        b = _api(srv, Cache(tmp_path / "b"), api="chat")
        assert b.score(["Output Passage A or Passage B:"], ["A", "B"], progress=False) == [[-0.5, -1.5]]
        assert b.usage.counters["errors_nonfinite_logprobs"] == 1
    R.hostile("numbers", "an infinite logprob once, then good answers", True)
    assert not any(
        b"NaN" in f.read_bytes() or b"Infinity" in f.read_bytes() for f in (tmp_path / "b").glob("*.sqlite*")
    )


def test_a_stored_nonfinite_score_is_asked_again(secret, tmp_path):
    "A NaN score an older version stored is never served: the call is made again (and its answer stored)."
    with FakeOpenAIServer() as srv:
        b = _api(srv, Cache(tmp_path), api="chat")
        item = b._render_score("Output Passage A or Passage B:", ["A", "B"])
        ns = b.cache.namespace("llm", op="score", params={}, **b.identity())
        ns.put(item, {"scores": [float("nan"), -1.0], "tokens_in": 1, "seconds": 0.0})
        assert (
            b.score(["Output Passage A or Passage B:"], ["A", "B"], progress=False) == [[-0.5, -1.5]]
            and len(srv.requests) == 1
        )


@pytest.mark.parametrize(
    "method, opts", [("pointwise-yes-no", []), ("pairwise-bubblesort", ["--scoring", "likelihood", "--sort-k", "2"])]
)
def test_nan_logprobs_never_give_a_silent_first_stage_order(tmp_path, method, opts):
    "Pointwise and PRP likelihood on a server answering NaN log-probabilities: exit 1 naming the failure, never exit 0 with '0 failures'."
    with FakeOpenAIServer(top=NAN_TOP, prompt_logprobs=lambda seq: [None] + [float("nan")] * (len(seq) - 1)) as srv:
        p = R.run_cli(
            "-q",
            "rerank",
            "--collection",
            "fixture",
            "--pair",
            "en-de",
            "--run",
            R.good_run(tmp_path),
            "--method",
            method,
            *opts,
            "--llm",
            "openai:fake-scorer",
            "--llm-base-url",
            srv.url,
            "--llm-api",
            "chat",
            "--llm-max-retries",
            "1",
            "--llm-backoff",
            "0.01",
            "--top-k",
            "2",
            "--out",
            tmp_path / "o.trec",
            env=R.env_for(tmp_path / "cache"),
            timeout=300,
        )
    R.expect_one_line_error(f"{method}: NaN log-probabilities", p, "numbers", "nonfinite_logprobs")
    assert not (tmp_path / "o.trec").exists()


# ---------- issue 26 item 9: timeouts are options; a call's retries are bounded in time
def test_timeouts_are_options_that_bound_the_call(secret):
    "timeout, connect_timeout, read_timeout and total_timeout are openai: options; a server that never answers fails within total_timeout."
    import time

    o = BackendSpec.parse("openai:x[timeout=5,connect_timeout=1,read_timeout=2,total_timeout=3]").options
    assert (o.timeout, o.connect_timeout, o.read_timeout, o.total_timeout) == (5, 1, 2, 3)
    d = OpenAIOptions()
    # defaults that fail in seconds, not minutes
    assert d.connect_timeout <= 5 and d.total_timeout <= 60 and d.timeout <= 30
    with FakeOpenAIServer(faults=["slow:30"] * 10) as srv:
        b = _api(srv, timeout=0.5, total_timeout=2, max_retries=10, backoff=0.2)
        t0 = time.time()
        with pytest.raises(LLMError, match=r"call failed after \d+ attempts \(timeout.*\(total_timeout 2 s\)"):
            b.generate(["x"], progress=False)
        took = time.time() - t0
        srv.release.set()
    R.hostile("servers", "a server that never answers", took < 6)
    assert took < 6, took


def test_all_servers_down_says_so(secret):
    "A pool whose every server refused during the call says 'all N servers are down', however long its retries waited."
    with FakeOpenAIServer() as a, FakeOpenAIServer() as b:
        a.kill()
        b.kill()
        pool = get_backend({"spec": "openai:m", "base_url": [a.url, b.url]}, max_retries=2, backoff=0.6, cooldown=0.1)
        with pytest.raises(LLMError) as e:
            pool.generate(["x"], progress=False)
    R.hostile("servers", "every server of a pool down", "all 2 servers are down" in str(e.value))
    assert "all 2 servers are down" in str(e.value), str(e.value)


# ---------- issue 26 item 13: a huge answer is stored as what was asked
def test_an_oversized_answer_is_cut_to_what_was_asked(secret, tmp_path):
    "A server answering 5 MB to a call that allowed 6 tokens: the record (returned and cached) holds no more than 6 tokens' worth."
    huge = "[1] > [2] " * 500_000
    with FakeOpenAIServer(responder=lambda m, b: huge) as srv:
        b = _api(srv, Cache(tmp_path))
        (text,) = b.generate(["rank"], max_new_tokens=6, progress=False)
        assert len(text) <= 6 * 32 and text.startswith("[1] > [2]") and b.usage.counters["answers_cut"] == 1
    size = sum(f.stat().st_size for f in tmp_path.glob("*.sqlite*"))
    R.hostile("servers", "a 5 MB answer to a 6-token call", size < 1_000_000)
    assert size < 1_000_000, size


def test_no_tokenizer_warning_goes_through_logging(caplog, monkeypatch):
    "issue 31 item 3: the warning was a warnings.warn that printed its own source line under the message."
    import warnings
    from clir_llm.llm import get_backend

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    b = get_backend("openai:no-such-org/model[api=chat]", base_url="http://127.0.0.1:9/v1", api_key="x")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warnings.warn would raise here
        with caplog.at_level("WARNING", logger="clir_llm.llm_openai"):
            n = b.count_tokens("a" * 40)
    assert n == 10 and [r.getMessage() for r in caplog.records if "no tokenizer available" in r.getMessage()]


# ---------- issue 36 item 2: the client builds with whichever openai the ranges allow (1.x and 2.x on httpx, 3.x on httpx2)
def test_the_client_builds_and_answers_with_the_installed_openai(secret):
    "The timeouts are the installed openai's own type (an httpx.Timeout made every client creation fail on openai 3)."
    import openai

    with FakeOpenAIServer() as srv:
        b = _api(srv, timeout=5, connect_timeout=1, read_timeout=2)
        t = b._timeout()
        assert isinstance(t, openai.Timeout) and (t.connect, t.read) == (1, 2)
        assert isinstance(b.client, openai.OpenAI)
        assert b.generate(["hello"], max_new_tokens=4, progress=False) == ["echo: hello"]
        assert b._timeout(left=0.5).read == 0.5  # none beyond what the call has left


# ---------- issue 39 items 5 and 6: numbers from a server and from options validated where they enter
@pytest.mark.parametrize("header", ["-5", "nan", "inf", "-1e9"])
def test_a_negative_or_nan_retry_after_is_ignored_not_a_traceback(secret, header):
    "Retry-After: -5 (or nan) made time.sleep raise ValueError; such a wait is ignored and the backoff applies."
    with FakeOpenAIServer(faults=[f"429:{header}"]) as srv:
        b = _api(srv, max_retries=2)
        ok = b.generate(["hello"], max_new_tokens=4, progress=False) == ["echo: hello"]
    R.hostile("servers", f"Retry-After: {header}", ok)
    assert ok


def test_retry_after_ms_negative_is_ignored():
    from types import SimpleNamespace as NS
    from clir_llm.llm_openai import _retry_after

    e = lambda h: NS(response=NS(headers=h))
    assert _retry_after(e({"retry-after-ms": "-1000"})) is None and _retry_after(e({"retry-after-ms": "nan"})) is None
    assert _retry_after(e({"retry-after-ms": "1500"})) == 1.5 and _retry_after(e({"retry-after": "2"})) == 2.0


def _raw_server(payload: dict):
    "A one-answer-fits-all OpenAI-compatible server on the loopback (what a broken server sends), as a context manager."
    import contextlib, http.server, threading

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    @contextlib.contextmanager
    def run():
        s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        t = threading.Thread(target=s.serve_forever, daemon=True)
        t.start()
        try:
            yield f"http://127.0.0.1:{s.server_address[1]}/v1"
        finally:
            s.shutdown()
            s.server_close()

    return run()


def test_absurd_token_counts_never_become_tokens_or_dollars(secret):
    "prompt_tokens -5 and completion_tokens 1e30 gave tokens_in -10 and a cost of 1.2e24 dollars; now the usage is dropped and counted."
    answer = {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4.1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": -5, "completion_tokens": 1e30, "total_tokens": 0},
    }
    with _raw_server(answer) as url:
        b = get_backend("openai:gpt-4.1", None, base_url=url, backoff=0.01, concurrency=1)
        assert b.generate(["a", "b"], max_new_tokens=4, progress=False) == ["hi", "hi"]
    u = b.usage
    ok = u.tokens_in >= 0 and u.tokens_out >= 0 and u.cost_usd < 1 and u.counters["bad_usage"] == 2
    R.hostile("numbers", "a server reporting -5 and 1e30 tokens", ok)
    assert ok, (u.tokens_in, u.tokens_out, u.cost_usd, dict(u.counters))


def test_a_log_probability_above_zero_is_a_failed_call(secret):
    "A top logprob of +50 (a probability above 1) was read as a score; now it is a failed attempt, retried, then one clear error."
    with FakeOpenAIServer(top=lambda msgs: {"A": 50.0, "B": -1.0}) as srv:
        b = _api(srv, max_retries=1)
        with pytest.raises(LLMError, match="positive_logprobs") as e:
            b.score(["which?"], ["A", "B"], progress=False)
    R.hostile("numbers", "a log-probability of +50", "positive_logprobs" in str(e.value))


@pytest.mark.parametrize(
    "bad",
    [
        "timeout=inf",
        "timeout=nan",
        "total_timeout=inf",
        "max_retries=1000000000000",
        "concurrency=10000000",
        "backoff=inf",
        "max_wait=nan",
        "top_logprobs=500",
    ],
)
def test_unbounded_or_infinite_options_are_refused(bad):
    "timeout=inf was accepted and then every call failed as a 'connection' error; counts without a bound ran away."
    with pytest.raises((ClirError, LLMError, ValueError)) as e:
        BackendSpec.parse(f"openai:m[{bad}]").options
    R.hostile("arguments", f"openai:m[{bad}]", bool(str(e.value)))


@pytest.mark.parametrize("url", [[], " , ", "", "http://[::1/v1", "http://h:99999/v1"])
def test_an_empty_or_broken_base_url_is_an_error_not_openais_api(secret, url):
    "base_url: [] or ' , ' fell back to OpenAI's public API with OPENAI_API_KEY; 'http://[::1/v1' was a traceback later."
    with pytest.raises((ClirError, LLMError, ValueError)) as e:
        get_backend({"spec": "openai:m", "base_url": url})
    R.hostile("arguments", f"base_url={url!r}", "URL" in str(e.value) or "url" in str(e.value))
    assert "Traceback" not in str(e.value)


# ---------- issue 39 item 2: a canary key, given in any supported way, in no output in any encoding; query keys sent as parameters
QUERY_NAMES = ["subscription-key", "code", "access_key", "x-api-key", "client_secret", "private_token", "zq"]


def _encodings(key: str) -> dict:
    "The forms of `key` a server may echo: literal, percent-encoded (every byte, either case), base64 (std, URL-safe unpadded), its first 10 characters."
    import base64 as b64

    return {
        "literal": key,
        "percent": "".join(f"%{b:02X}" for b in key.encode()),
        "percent-lower": "".join(f"%{b:02x}" for b in key.encode()),
        "base64": b64.b64encode(key.encode()).decode(),
        "base64url": b64.urlsafe_b64encode(key.encode()).decode().rstrip("="),
        "first 10": key[:10],
        "first 10 percent": "".join(f"%{b:02X}" for b in key[:10].encode()),
        "first 10 base64": b64.b64encode(key[:10].encode()).decode()[:12],
    }


def _leaks(text: str, key: str) -> list[str]:
    "The encodings of `key` (`_encodings`) that `text` holds; also base64 of the key at the three byte alignments a longer text gives."
    import base64 as b64

    found = [k for k, v in _encodings(key).items() if v in text]
    for j in (1, 2):
        t = key.encode()[j:]
        t = t[: len(t) // 3 * 3]
        if b64.b64encode(t).decode()[:12] in text:
            found.append(f"base64 at offset {j}")
    return found


class EchoEverythingServer:
    """An HTTP server on 127.0.0.1 that answers every POST with 401 and every credential it received (the bearer token,
    the user and password of Basic auth, every query value) echoed back literally, percent-encoded, in base64 and as its
    first 10 characters; it records each request's path and query."""

    def __init__(self):
        import http.server, socketserver, urllib.parse as up, base64 as b64

        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                path, _, query = self.path.partition("?")
                q = dict(up.parse_qsl(query, keep_blank_values=True))
                seen.append({"path": path, "query": q, "authorization": self.headers.get("Authorization", "")})
                auth = (self.headers.get("Authorization") or "").split()
                creds = list(q.values())
                if len(auth) == 2 and auth[0].lower() == "bearer":
                    creds.append(auth[1])
                if len(auth) == 2 and auth[0].lower() == "basic":
                    creds += b64.b64decode(auth[1]).decode().split(":", 1)
                echo = "; ".join(
                    f"{c} {up.quote(c)} {''.join(f'%{b:02X}' for b in c.encode())} {b64.b64encode(c.encode()).decode()} "
                    f"{b64.urlsafe_b64encode(c.encode()).decode().rstrip('=')} starts {c[:10]}"
                    for c in creds
                )
                body = json.dumps({"error": {"message": f"keys not valid here: {echo}", "type": "auth"}}).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()


def _canary(way: str) -> str:
    return hashlib.md5(way.encode()).hexdigest()  # 32 hex characters, one canary per way


def _canary_ways(url: str) -> list[tuple[str, str, dict, list]]:
    "(way, base URL, extra environment, extra arguments) for each supported way of giving the key (`_canary(way)`)."
    return [
        ("OPENAI_API_KEY", url, {"OPENAI_API_KEY": _canary("OPENAI_API_KEY")}, []),
        (
            "api_key_env",
            url,
            {"RERANK_GATEWAY_AUTH": _canary("api_key_env")},
            ["--llm-api-key-env", "RERANK_GATEWAY_AUTH"],
        ),
        ("userinfo", url.replace("http://", f"http://gateway:{_canary('userinfo')}@"), {}, []),
    ] + [(f"?{n}=", f"{url}?{n}={_canary(f'?{n}=')}", {}, []) for n in QUERY_NAMES]


def test_canary_in_any_way_and_any_encoding_never_leaks_and_query_keys_are_parameters(tmp_path):
    """A 32-hex canary as OPENAI_API_KEY, an `api_key_env` variable of an odd name, the password of the URL's user info, or
    the value of a query parameter of any name, against a server that echoes every credential it got literally,
    percent-encoded, in base64 and its first 10 characters: no encoding of it in the stdout and stderr of `clir-llm -v
    rerank` (the failure line and the HTTP log) nor in the dry-run plan of a config naming those URLs; the server got a
    query key as a parameter of `/v1/chat/completions` (it was pasted into the path: `/v1?subscription-key=.../chat/completions`)."""
    run, out = R.good_run(tmp_path), tmp_path / "out"
    out.mkdir()
    args = [
        "-v",
        "rerank",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        run,
        "--method",
        "listwise",
        "--llm",
        "openai:fake-ranker[api=chat]",
        "--top-k",
        "2",
        "--window",
        "2",
        "--step",
        "1",
        "--llm-max-retries",
        "0",
        "--llm-concurrency",
        "1",
    ]
    bad, base = (
        [],
        {k: v for k, v in R.env_for(tmp_path / "cache").items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")},
    )
    with EchoEverythingServer() as echo:
        ways = _canary_ways(echo.url)
        for k, (way, url, extra, more) in enumerate(ways):
            n, key = len(echo.seen), _canary(way)
            p = R.run_cli(
                *args, "--llm-base-url", url, *more, "--out", out / f"{k}.trec", env={**base, **extra}, timeout=300
            )
            got, leaked = echo.seen[n:], _leaks(p.stdout + p.stderr, key)
            received = bool(got) and all(g["path"] == "/v1/chat/completions" for g in got)
            if way.startswith("?"):
                received = received and all(g["query"].get(way[1:-1]) == key for g in got)
            ok = p.returncode == 1 and "HTTP 401" in p.stderr and not leaked and received
            R.STATS["secret_files_scanned"] += 1
            R.STATS["secret_leaks"] += bool(leaked)
            R.hostile("secrets", f"canary key by {way}, echoed in four encodings", ok)
            if not ok:
                bad.append((way, p.returncode, leaked, [(g["path"], g["query"]) for g in got], p.stderr[-1000:]))
        # the dry run of a config whose rerankers name those URLs (one canary each): one process, no canary held another way
        plan = R.reduced_config(tmp_path / "plan.yaml", name="plan")
        cfg = yaml.safe_load(plan.read_text())
        one = cfg["rerankers"][0]
        urls = [(way, url) for way, url, extra, _ in ways if not extra]
        cfg["rerankers"] = [
            {**one, "name": f"Fake listwise {i}", "llm": {"spec": "openai:fake-ranker[api=chat]", "base_url": url}}
            for i, (way, url) in enumerate(urls)
        ]
        cfg["doc_length"]["rerankers"] = [cfg["rerankers"][0]["name"]]
        plan.write_text(yaml.safe_dump(cfg, sort_keys=False))
        d = subprocess.run(
            [R.CLI, "reproduce", str(plan), "--dry-run"], capture_output=True, text=True, env=base, timeout=300
        )
        assert d.returncode == 0 and "OpenAI-compatible server http://" in d.stdout + d.stderr, d.stderr[-2000:]
        for way, url in urls:
            leaked = _leaks(d.stdout + d.stderr, _canary(way))
            R.STATS["secret_files_scanned"] += 1
            R.STATS["secret_leaks"] += bool(leaked)
            R.hostile("secrets", f"canary key by {way} in the dry-run plan", not leaked)
            if leaked:
                bad.append((f"dry run: {way}", leaked))
    assert not bad, bad
    assert not R.scan_for([_canary(w)[:10] for w, *_ in ways], out)


# ---------- issue 39 item 3: a total deadline that holds while bytes arrive
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


class DripServer:
    """A server on 127.0.0.1 that reads a request and then sends its answer one piece every `every` seconds, for up to
    `limit` seconds: 'body' (headers, then a 100 kB body byte by byte), 'chunked' (endless chunks of whitespace) or
    'headers' (the headers themselves byte by byte)."""

    def __init__(self, mode: str, every: float = 1.0, limit: float = 30.0):
        import socket

        self.mode, self.every, self.limit, self.stop = mode, every, limit, threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self, conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            n = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))
            while len(body) < n:
                body += conn.recv(65536)
            pieces = {
                "body": [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"],
                "chunked": [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"],
                "headers": [b"HTTP/1.1 200 OK\r\n"],
            }[self.mode]
            drip = {"body": b" ", "chunked": b"1\r\n \r\n", "headers": b"x"}[self.mode]
            if self.mode == "headers":
                conn.sendall(pieces[0] + b"X-Slow: ")
            else:
                conn.sendall(pieces[0])
            t0 = time.monotonic()
            try:
                while not self.stop.wait(self.every) and time.monotonic() - t0 < self.limit:
                    conn.sendall(drip)
            except OSError:
                pass  # the client gave up and closed the connection

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def __enter__(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *a):
        self.stop.set()
        self.sock.close()


@pytest.mark.parametrize("mode", ["body", "chunked", "headers"])
def test_total_timeout_holds_while_bytes_arrive(secret, mode, monkeypatch):
    """A server sending one byte a second (after its headers, as endless chunked whitespace, or within its headers) kept a
    call with timeout=5, total_timeout=15 running past 150 s (httpx's read timeout is per read); with total_timeout=3 the
    call now fails with one line within 3 s and a little."""
    # with proxies configured the deadline holds between reads only
    for v in PROXY_VARS:
        monkeypatch.delenv(v, raising=False)
    with DripServer(mode, every=1.0, limit=20) as srv:
        b = get_backend(
            "openai:gpt-4.1",
            None,
            base_url=srv.url,
            timeout=5,
            total_timeout=3,
            max_retries=3,
            backoff=0.01,
            concurrency=1,
        )
        result = {}

        def call():
            try:
                result["out"] = b.generate(["hello"], max_new_tokens=4, progress=False)
            except Exception as e:
                result["error"] = e

        t0 = time.monotonic()
        th = threading.Thread(target=call, daemon=True)
        th.start()
        th.join(3 + 5)
        took = time.monotonic() - t0
        srv.stop.set()
        th.join(30)  # on a call that does not hold its deadline: the server stops, the call ends
    ok = took < 3 + 5 and isinstance(result.get("error"), LLMError) and "total_timeout 3 s" in str(result["error"])
    R.hostile("servers", f"a server dripping its answer ({mode}), total_timeout=3", ok)
    assert ok, (took, result)
    assert "\n" not in str(result["error"]) and "timeout" in str(result["error"])


def test_rerank_with_a_dripping_server_ends_by_its_total_timeout(tmp_path):
    "`clir-llm rerank` with [timeout=5,total_timeout=3] against a server dripping its answer: one line, exit 1, in seconds."
    with DripServer("body", every=1.0, limit=60) as srv:
        t0 = time.monotonic()
        p = R.run_cli(
            "-q",
            "rerank",
            "--collection",
            "fixture",
            "--pair",
            "en-de",
            "--run",
            R.good_run(tmp_path),
            "--method",
            "listwise",
            "--llm",
            "openai:fake-ranker[api=chat,timeout=5,total_timeout=3,max_retries=2,concurrency=1]",
            "--llm-base-url",
            srv.url,
            "--top-k",
            "2",
            "--window",
            "2",
            "--step",
            "1",
            "--out",
            tmp_path / "o.trec",
            env={k: v for k, v in R.env_for(tmp_path / "cache").items() if k not in PROXY_VARS},
            timeout=120,
        )
        took = time.monotonic() - t0
    R.expect_one_line_error("a server dripping its answer (rerank, total_timeout=3)", p, "servers", "total_timeout 3 s")
    assert took < 30, took


def test_a_password_holding_a_slash_is_one_line_without_the_password(tmp_path):
    "issue 39 item 2: `user:pa/ss@` gave a traceback (or an error) showing the start of the password; now one line naming the fix."
    url = "http://gateway:pa/ss-s3cret-77@127.0.0.1:9/v1"
    from clir_llm.core import redact

    with pytest.raises((ClirError, LLMError, ValueError)) as e:
        get_backend({"spec": "openai:m", "base_url": url})
    # as the command line, a log or serve prints it (the error's own text echoes the value given)
    shown = redact(e.value)
    assert "s3cret" not in shown and "pa/ss" not in shown and "percent-encoded" in shown, shown
    p = R.run_cli(
        "rerank",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        R.good_run(tmp_path),
        "--method",
        "listwise",
        "--llm",
        "openai:m[api=chat]",
        "--llm-base-url",
        url,
        "--out",
        tmp_path / "o.trec",
        env=R.env_for(tmp_path / "cache"),
        timeout=120,
    )
    line = R.expect_one_line_error("a URL password holding '/'", p, "secrets", "percent-encoded")
    assert "s3cret" not in p.stdout + p.stderr and "pa/ss" not in line, line


def test_an_answer_echoing_the_key_encoded_is_never_stored_in_the_cache(tmp_path, monkeypatch):
    "issue 39 item 2 (cache rows): an answer holding the key in base64 and its first 10 characters was stored (only the literal key was refused)."
    key = _canary("cache row")
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeOpenAIServer(
        responder=lambda m, b: f"the key was {base64.b64encode(key.encode()).decode()} and starts {key[:10]}"
    ) as srv:
        b = get_backend("openai:gpt-4.1", Cache(tmp_path), base_url=srv.url, backoff=0.01, concurrency=1)
        with pytest.raises(ClirError, match="refusing to store"):
            b.generate(["hi"], max_new_tokens=40, progress=False)
    leaks = R.scan_for([key[:10], base64.b64encode(key.encode()).decode()[:12]], tmp_path)
    R.hostile("secrets", "an answer echoing the key in base64 and its first 10 characters (cache)", not leaks)
    assert not leaks, leaks


def test_a_deeply_nested_answer_is_a_failed_attempt(secret, tmp_path):
    """Issue 39 item 5: a server answering valid JSON nested 100,000 deep made the client's JSON parser raise
    RecursionError, a traceback; it is a malformed answer now, retried like any other."""
    with FakeOpenAIServer(faults=["deep"]) as srv:
        b = _api(srv, Cache(tmp_path))
        assert b.generate(["hello"], max_new_tokens=4) == ["echo: hello"]
        assert b.usage.counters["errors_malformed"] == 1
    with FakeOpenAIServer(faults=["deep"] * 5) as srv:
        with pytest.raises(LLMError, match=r"failed after 3 attempts \(malformed, malformed, malformed\)"):
            _api(srv, max_retries=2).generate(["x"])


def test_an_at_sign_in_a_query_value_is_no_user_info():
    "Review of issue 39 item 2: `?user=me@example.com` was refused as an unencoded '@' in a password; a password with '/' or '?' still is."
    assert OpenAIOptions(base_url="http://localhost:8000/v1?user=me@example.com").base_url.endswith("me@example.com")
    for u in ("http://gw:pa/ss@h:1/v1", "http://gw:pa?ss@h:1/v1"):
        with pytest.raises(Exception, match="must be percent-encoded"):
            OpenAIOptions(base_url=u)


def test_stop_strings_and_the_last_tokens_top_logprobs_reach_the_server(monkeypatch):
    """Issue 38 item 4 (Rank1's call): `stop` goes to the server as given, `top_logprobs` k as each endpoint asks it (chat:
    logprobs=True, top_logprobs=k; completions: logprobs=k); the record keeps the last generated token's top k (likeliest
    first, not every token's list) and the stop string a vLLM server says it met (`stop_reason`)."""
    with FakeOpenAIServer(top=lambda msgs: {" false": -2.0, " true": -0.2, "x": -3.0}) as srv:
        b = _api(srv, api="chat")
        assert b.supports_stop
        (rec,) = b.complete(
            ["Passage: x\n<think>"],
            max_new_tokens=9,
            stop=["</think> true", "</think> false"],
            top_logprobs=20,
            progress=False,
        )
        body = srv.requests[-1]["body"]
        assert (
            body["stop"] == ["</think> true", "</think> false"]
            and body["logprobs"] is True
            and body["top_logprobs"] == 20
        )
        assert (
            list(rec["top_logprobs"].items()) == [(" true", -0.2), (" false", -2.0), ("x", -3.0)]
            and "logprobs" not in rec
        )
        assert "stop" not in rec  # this server does not say which string it met
    sent = []

    def call(endpoint="chat", **kw):
        sent.append(kw)
        lp = type("LP", (), {"content": None, "top_logprobs": [{"a": -0.1}, {" false": -1.5, " true": -0.3}]})()
        ch = type(
            "Ch", (), {"text": "It is.", "finish_reason": "stop", "stop_reason": "</think> true", "logprobs": lp}
        )()
        return [ch], None, "m", 0.1

    b = OpenAIBackend("m", OpenAIOptions(base_url="http://127.0.0.1:9/v1"))
    monkeypatch.setattr(b, "_call", call)
    rec = b._generate_one({"ids": [1, 2, 3]}, {"max_new_tokens": 9, "stop": ["</think> true"], "top_logprobs": 20})
    assert sent[0]["logprobs"] == 20 and "top_logprobs" not in sent[0] and sent[0]["stop"] == ["</think> true"]
    assert (
        rec["stop"] == "</think> true" and list(rec["top_logprobs"]) == [" true", " false"] and rec["text"] == "It is."
    )
