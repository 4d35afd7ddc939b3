"LLM backends: hf: on tiny random models built here, openai: against a real local HTTP server with injected faults."
import json, math, os, signal, subprocess, sys, textwrap, time
from pathlib import Path
import pytest

from clir_llm.cache import Cache, CacheMiss
from clir_llm.core import ClirError
from clir_llm.llm import HFBackend, LLMError, OpenAIBackend, get_backend, load_prices, price_of
from clir_llm.testing import FakeOpenAIServer, make_tiny_hf_model

PROMPTS = ["the cat sat", "Passage A: ein Hund lief durch den Park", "Output Passage A or Passage B:",
           [{"role": "system", "content": "be brief"}, {"role": "user", "content": "kissa nukkuu sohvalla"}],
           "Rank the passages based on their relevance", "0 1 2 3 4 5", "il gatto dorme", "кошка спит"]
SECRET = "sk-test-MARKER-5f1e2d3c4b5a69788"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import torch
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny")
    return {"qwen2": make_tiny_hf_model(root / "qwen2", "qwen2"), "mt5": make_tiny_hf_model(root / "mt5", "mt5")}


# ---------------------------------------------------------------- hf:
@pytest.mark.parametrize("arch", ["qwen2", "mt5"])
def test_hf_batched_generation_equals_one_at_a_time(tiny, arch, tmp_path):
    kw = {"decoder_prefix": "Passage"} if arch == "mt5" else {}
    b = get_backend(f"hf:{tiny[arch]}", Cache(tmp_path), batch_size=5, **kw)
    assert b.is_encoder_decoder == (arch == "mt5") and b.is_chat == (arch == "qwen2")
    batched = b.generate(PROMPTS, max_new_tokens=6)
    single = get_backend(f"hf:{tiny[arch]}", batch_size=1, **kw).generate(PROMPTS, max_new_tokens=6)
    assert batched == single
    assert len(set(batched)) > 1                      # the prompts do not all collapse to one answer
    assert b.usage.calls == len(PROMPTS) and b.usage.tokens_in > 0 and 0 < b.usage.tokens_out <= 6 * len(PROMPTS)


@pytest.mark.parametrize("arch", ["qwen2", "mt5"])
def test_hf_score_prefers_the_models_own_greedy_continuation(tiny, arch):
    b = get_backend(f"hf:{tiny[arch]}", batch_size=4)
    tok, checked = b.tokenizer, 0
    for p in PROMPTS:
        greedy_ids = b.tokenizer(b.generate([p], max_new_tokens=3)[0], add_special_tokens=False)["input_ids"]
        first = tok.decode(greedy_ids[:1])
        if not greedy_ids or tok(first, add_special_tokens=False)["input_ids"] != greedy_ids[:1]: continue
        checked += 1
        # a constructed case: the model's first greedy token against ten other single tokens
        others = [tok.decode([t]) for t in range(5, 40) if t != greedy_ids[0]]
        others = [o for o in others if len(tok(o, add_special_tokens=False)["input_ids"]) == 1][:10]
        s = b.score([p], [first] + others)[0]
        assert max(range(len(s)), key=s.__getitem__) == 0, (p, first, s)
        # multi-token: the greedy 3 tokens against the same 2 first tokens and a different last token
        if len(greedy_ids) == 3 and len(tok(tok.decode(greedy_ids), add_special_tokens=False)["input_ids"]) == 3:
            alt = tok.decode(greedy_ids[:2] + [(greedy_ids[2] + 7) % 300 + 3])
            if len(tok(alt, add_special_tokens=False)["input_ids"]) == 3:
                g, a = b.score([p], [tok.decode(greedy_ids), alt])[0]
                assert g > a
    assert checked >= 2


def test_hf_score_single_token_batch_matches_unbatched(tiny):
    b = get_backend(f"hf:{tiny['qwen2']}", batch_size=8)
    batched = b.score(PROMPTS, ["A", "B"])
    single = [get_backend(f"hf:{tiny['qwen2']}", batch_size=1).score([p], ["A", "B"])[0] for p in PROMPTS[:3]]
    for x, y in zip(batched, single): assert all(abs(u - v) < 1e-4 for u, v in zip(x, y))
    assert all(all(v < 0 for v in row) for row in batched)
    assert all(math.exp(a) + math.exp(c) < 1 for a, c in batched)


def test_hf_cache_warm_rerun_and_replay(tiny, tmp_path):
    b = get_backend(f"hf:{tiny['qwen2']}", Cache(tmp_path))
    out = b.generate(PROMPTS, max_new_tokens=4)
    scores = b.score(PROMPTS[:3], ["A", "B"])
    warm = get_backend(f"hf:{tiny['qwen2']}", Cache(tmp_path))
    assert warm.generate(PROMPTS, max_new_tokens=4) == out and warm.score(PROMPTS[:3], ["A", "B"]) == scores
    assert warm.usage.calls == 0 and warm.usage.cache_hits == len(PROMPTS) + 3
    assert warm._model is None                                   # a warm run does not even load the model
    assert warm.usage.tokens_in == 0 and warm.usage.counters["cached_tokens_in"] == b.usage.tokens_in   # hits counted apart
    assert warm.generate(PROMPTS[:2], max_new_tokens=5) and warm.usage.calls == 2   # other params: other keys
    rp = get_backend(f"hf:{tiny['qwen2']}", Cache(tmp_path, mode="replay"))
    assert rp.generate(PROMPTS, max_new_tokens=4) == out
    with pytest.raises(CacheMiss, match="replay mode: 1 of 2"):
        rp.generate([PROMPTS[0], "never asked"], max_new_tokens=4)


def test_hf_local_model_revision_changes_with_content(tiny, tmp_path):
    import shutil
    copy = shutil.copytree(tiny["qwen2"], tmp_path / "m")
    r0 = get_backend(f"hf:{copy}").revision
    make_tiny_hf_model(copy, "qwen2", seed=1, vocab_size=380)
    assert get_backend(f"hf:{copy}").revision != r0


def test_hf_truncate_and_count(tiny):
    for arch in ("qwen2", "mt5"):
        b = get_backend(f"hf:{tiny[arch]}")
        text = "Passage A: the cat sat on the mat. Passage B: ein Hund lief durch den Park."
        n = b.count_tokens(text)
        for k in (1, 3, n - 1):
            cut = b.truncate(text, k)
            assert text.startswith(cut) and b.count_tokens(cut) <= k and len(cut) < len(text)
        assert b.truncate(text, n) == text


def test_bad_specs_and_params(tiny, tmp_path):
    for bad in ["llama", "hf:", "nope:x"]:
        with pytest.raises(ClirError, match="spec must be one of"): get_backend(bad)
    with pytest.raises(LLMError, match="cannot load model config"): get_backend(f"hf:{tmp_path / 'missing'}")
    b = get_backend(f"hf:{tiny['qwen2']}")
    with pytest.raises(ClirError, match="unsupported generation parameters"): b.generate(["x"], stop=["\n"])
    with pytest.raises(ClirError, match="a list of prompts"): b.generate("x")
    with pytest.raises(ClirError, match="must be a str or a list"): b.generate([{"content": "no role"}])
    with pytest.raises(LLMError, match="pip install 'clir-llm\\[gpu\\]'"): get_backend("vllm:some/model")


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
            "errors_http_429": 1, "errors_http_500": 1, "errors_connection": 1, "errors_malformed": 1,
            "errors_empty_choices": 1, "errors_timeout": 1}
        assert len(srv.requests) == len(faults) + 1 and b.usage.calls == 1
        assert b.usage.tokens_in == 1 and b.usage.tokens_out == 2
        assert b.usage.cost_usd == pytest.approx((1 * 2.00 + 2 * 8.00) / 1e6)


def test_openai_honours_retry_after(secret):
    with FakeOpenAIServer(faults=["429:1"]) as srv:
        b = _api(srv)
        assert b.generate(["x"]) == ["echo: x"]
        t = [r["time"] for r in srv.requests]
        assert len(t) == 2 and t[1] - t[0] >= 0.95          # waited the server's Retry-After, not the 10 ms backoff


def test_openai_gives_up_clearly_and_on_error_empty(secret, tmp_path):
    with FakeOpenAIServer(faults=["500"] * 10) as srv:
        b = _api(srv, Cache(tmp_path), max_retries=2)
        with pytest.raises(LLMError, match=r"failed after 3 attempts \(http_500, http_500, http_500\)"):
            b.generate(["x"])
        assert b.generate(["y"], on_error="empty") == [""]
        assert b.score(["z"], ["A", "B"], on_error="empty")[0] == [pytest.approx(float("nan"), nan_ok=True)] * 2
        assert b.usage.counters["failed_calls"] == 3 and b.usage.calls == 0
        srv.faults = []
        assert b.generate(["y"], on_error="empty") == ["echo: y"]     # a failed call was not cached


def test_openai_not_retried_4xx_never_shows_the_key(secret, tmp_path):
    with FakeOpenAIServer(faults=["401"]) as srv:
        b = _api(srv, Cache(tmp_path))
        with pytest.raises(LLMError, match="HTTP 401") as e: b.generate(["x"])
        assert SECRET not in str(e.value) and "***" in str(e.value) and len(srv.requests) == 1
        assert SECRET not in repr(b) + b.name + json.dumps(b.identity())


def test_openai_failure_with_concurrency_raises_llmerror_and_keeps_finished_calls(secret, tmp_path):
    with FakeOpenAIServer(faults=[None, None] + ["500"] * 40) as srv:
        b = _api(srv, Cache(tmp_path), concurrency=2, max_retries=1)
        with pytest.raises(LLMError, match="failed after 2 attempts"):
            b.generate([f"p{i}" for i in range(20)])
        stored = Cache(tmp_path).stats()["llm"]
        asked = {r["prompt"] for r in srv.requests}
        assert stored == 2 and len(asked) <= 8          # the rest was cancelled (a few more may have started); finished calls kept


def test_openai_prefill_for_compatible_servers(secret):
    msgs = [{"role": "user", "content": "Output Passage A or Passage B:"}, {"role": "assistant", "content": "Passage"}]
    with FakeOpenAIServer() as srv:
        plain, pre = _api(srv), _api(srv, prefill=True)
        assert not plain.supports_prefill and pre.supports_prefill
        plain.generate([msgs]); assert "continue_final_message" not in srv.requests[-1]["body"]
        pre.generate([msgs]); body = srv.requests[-1]["body"]
        assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
        assert body["messages"][-1] == {"role": "assistant", "content": "Passage"}


def test_hf_chat_prefill_continues_the_assistant_turn(tiny):
    b = get_backend(f"hf:{tiny['qwen2']}")
    msgs = [{"role": "user", "content": "Output Passage A or Passage B:"}, {"role": "assistant", "content": "Passage"}]
    assert b.supports_prefill and b.render_text(msgs).endswith("<|im_start|>assistant\nPassage")
    ids = b._ids(msgs)
    assert ids[-len(b.tokenizer("Passage", add_special_tokens=False)["input_ids"]):] == \
        b.tokenizer("Passage", add_special_tokens=False)["input_ids"]


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
        with pytest.raises(LLMError, match="cannot score"): no.score(["x"], ["A"])


def test_openai_replay_needs_no_key_nor_server(secret, tmp_path, monkeypatch):
    with FakeOpenAIServer() as srv:
        out = _api(srv, Cache(tmp_path)).generate(PROMPTS, max_new_tokens=8)
        url = srv.url
    monkeypatch.delenv("OPENAI_API_KEY")
    rp = get_backend("openai:gpt-4.1", Cache(tmp_path, mode="replay"), base_url=url)
    assert rp.generate(PROMPTS, max_new_tokens=8) == out and rp._client is None
    with pytest.raises(CacheMiss): rp.generate(["new"], max_new_tokens=8)
    with pytest.raises(LLMError, match="set OPENAI_API_KEY"):
        get_backend("openai:gpt-4.1", Cache(tmp_path)).generate(["new"])


def test_secret_never_in_the_cache_file(secret, tmp_path):
    with FakeOpenAIServer(responder=lambda m, b: "fine") as srv:
        b = _api(srv, Cache(tmp_path))
        b.generate(["a", "b"]); b.score(["c"], ["A", "B"])
    files = list(tmp_path.rglob("*"))
    assert any(f.name == "llm.sqlite" for f in files)
    for f in files:
        if f.is_file(): assert SECRET.encode() not in f.read_bytes()
    with FakeOpenAIServer(responder=lambda m, b: f"the key is {SECRET}") as srv:   # a response leaking the key is refused
        with pytest.raises(ClirError, match="secret"): _api(srv, Cache(tmp_path)).generate(["leak"])


def test_prices_are_data(tmp_path, monkeypatch):
    assert price_of("gpt-4.1-2025-04-14") == {"input": 2.00, "output": 8.00}
    assert price_of("gpt-4.1-mini") == {"input": 0.40, "output": 1.60} and price_of("llama") is None
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"as_of": "2030-01-01", "usd_per_million_tokens": {"llama": {"input": 1, "output": 2}}}))
    monkeypatch.setenv("CLIR_LLM_PRICES", str(f))
    assert price_of("llama") == {"input": 1, "output": 2} and load_prices()["as_of"] == "2030-01-01"
    f.write_text("{}")
    with pytest.raises(ClirError, match="usd_per_million_tokens"): load_prices()


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
        while srv.inflight < min(concurrency, n - held):   # the other workers are in flight too, or done
            if len(srv.requests) >= n: break
            time.sleep(0.01)
        time.sleep(0.2)
        os.kill(child.pid, signal.SIGKILL); child.wait()
        first = [r["prompt"] for r in srv.requests]
        stored = Cache(tmp_path).stats().get("llm", 0)
        srv.release.set()
        assert 0 < stored < n
        res = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        out = json.loads(res.stdout)
        assert out["out"] == [f"echo: prompt {i}" for i in range(n)]        # nothing lost
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


# ---------------------------------------------------------------- the offline model
@pytest.mark.slow
def test_offline_qwen_generates(tmp_path):
    b = get_backend("hf:qwen2.5-coder-0.5b-offline", Cache(tmp_path))
    assert b.label == "Qwen2.5-Coder-0.5B (stand-in)" and b.name == "hf:qwen2.5-coder-0.5b-offline" and b.is_chat
    prompts = ["Translate to English: Guten Morgen", "What is 2 + 3? Answer with one number."]
    out = b.generate(prompts, max_new_tokens=8)
    assert "morning" in out[0].lower() and "5" in out[1], out
    s = b.score([[{"role": "user", "content": "Answer with one letter, A or B: which letter comes first in the alphabet?"}]],
                ["A", "B"])[0]
    assert s[0] > s[1]
    # the dequantised model was saved as a plain HF folder: a second backend loads that and answers the same
    again = get_backend("hf:qwen2.5-coder-0.5b-offline", Cache(tmp_path))
    assert again._source != b._source and (Path(again._source) / "model.safetensors").is_file()
    assert again.generate(prompts, max_new_tokens=8) == out and again.usage.calls == 0 and again._model is None
    fresh = get_backend("hf:qwen2.5-coder-0.5b-offline", Cache(tmp_path, mode="off"))
    assert fresh.generate(prompts, max_new_tokens=8) == out and fresh.usage.calls == 2
