"""Backend options as values (configs, CLI, keys), identical prompts on `hf:` and `openai:` (requests captured by a local
OpenAI-compatible server), and a pool of OpenAI-compatible servers (least outstanding work, failover)."""
import argparse, base64, threading, time
from collections import Counter
from pathlib import Path
import pytest, yaml
from clir_llm.cache import Cache
from clir_llm.core import ClirError
from clir_llm.llm import (BackendSpec, HFBackend, LLMError, OpenAIBackend, add_backend_arguments, backend_spec_from_args,
                          get_backend)
from clir_llm.testing import FakeOpenAIServer, _toy_logprobs, make_tiny_hf_model, tiny_setup


@pytest.fixture(scope="module")
def qpath(tmp_path_factory):
    import torch
    torch.set_num_threads(1)
    return make_tiny_hf_model(tmp_path_factory.mktemp("tiny") / "qwen2")


# ---------------------------------------------------------------- options as values
def test_no_option_keeps_every_key():
    for s in ["hf:qwen2.5-coder-0.5b-offline", "hf:Qwen/Qwen2.5-7B-Instruct@main", "openai:gpt-4.1", "vllm:m/x", "gguf:/m/a@b/x.gguf"]:
        assert BackendSpec.parse(s).key() == s and BackendSpec.parse({"spec": s}).key() == s


def test_speed_options_do_not_name_runs_output_options_do():
    base = BackendSpec.parse("vllm:meta-llama/Llama-3.1-8B-Instruct")
    fast = BackendSpec.parse({"spec": str(base), "tensor_parallel_size": 2, "enable_prefix_caching": True,
                              "gpu_memory_utilization": 0.9, "batch_size": 512})
    assert fast.key() == base.key() and fast.tensor_parallel_size == 2
    other = BackendSpec.parse({"spec": str(base), "dtype": "float16", "max_model_len": 8192, "tokenizer": "t/t"})
    assert other.key() == "vllm:meta-llama/Llama-3.1-8B-Instruct[dtype=float16,tokenizer=t/t,max_model_len=8192]"
    assert BackendSpec.parse(other.key()) == BackendSpec.parse(other.key()).model_copy() and BackendSpec.parse(other.key()).key() == other.key()
    pool = BackendSpec.parse({"spec": "openai:m/x", "base_url": ["http://a/v1", "http://b/v1"], "concurrency": 16,
                              "api_key_env": "MY_KEY", "prefill": True})
    assert pool.key() == "openai:m/x[prefill=true]" and pool.base_url == ["http://a/v1", "http://b/v1"]


@pytest.mark.parametrize("spec, msg", [({"spec": "hf:x", "tensor_parallel_size": 2}, "hf: does not take option tensor_parallel_size"),
                                       ({"spec": "openai:x", "dtype": "bfloat16"}, "openai: does not take option dtype"),
                                       ({"spec": "hf:x", "dtype": "fp8"}, "dtype"), ({"base_url": "x"}, "needs 'spec'"),
                                       ("hf:x[batch_size]", "not key=value"), ({"spec": "vllm:x", "gpu_memory_utilization": 2}, "gpu_memory_utilization")])
def test_bad_options_are_one_clear_error(spec, msg):
    with pytest.raises(ClirError, match=msg): BackendSpec.parse(spec)


def test_identity_gets_output_options_only(qpath, tmp_path):
    plain = get_backend(f"hf:{qpath}").identity()
    assert plain == {"kind": "hf", "model": str(qpath), "revision": plain["revision"]}
    assert get_backend({"spec": f"hf:{qpath}", "batch_size": 2, "device": "cpu"}).identity() == plain
    assert get_backend({"spec": f"hf:{qpath}", "dtype": "bfloat16"}).identity() == {**plain, "dtype": "bfloat16"}


def test_hf_device_map_goes_to_accelerate(qpath, monkeypatch):
    import transformers
    seen, load = [], transformers.AutoModelForCausalLM.from_pretrained
    def spy(*a, **kw):
        seen.append(kw.get("device_map")); return load(*a, **kw)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    a = get_backend(f"hf:{qpath}")
    b = get_backend({"spec": f"hf:{qpath}", "device_map": "auto", "batch_size": 1})
    assert b.batch_size == 1
    assert a.generate(["the cat sat"], max_new_tokens=4) == b.generate(["the cat sat"], max_new_tokens=4)
    assert seen == [None, "auto"]       # accelerate places the layers; without the option, one .to(device)


def test_config_llm_with_options_keeps_the_demo_run_names(tmp_path):
    from clir_llm.config import load_config
    from clir_llm.pipeline import rerank_params
    root = Path(__file__).resolve().parent.parent
    data = yaml.safe_load((root / "configs/demo.yaml").read_text())
    before = [rerank_params(r) for r in load_config(root / "configs/demo.yaml").rerankers]
    for r in data["rerankers"]: r["llm"] = {"spec": r["llm"], "batch_size": 2, "device": "cpu"}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data)); (tmp_path / "regression").mkdir()
    cfg = load_config(tmp_path / "c.yaml")
    assert [rerank_params(r) for r in cfg.rerankers] == before and cfg.rerankers[0].llm.batch_size == 2
    data["rerankers"][0]["llm"]["dtype"] = "bfloat16"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    assert rerank_params(load_config(tmp_path / "c.yaml").rerankers[0]) != before[0]     # an output option names new runs
    data["rerankers"][0]["llm"]["concurrency"] = 4
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ClirError, match="hf: does not take option concurrency"): load_config(tmp_path / "c.yaml")


def test_cli_llm_options():
    ap = add_backend_arguments(argparse.ArgumentParser())
    ns = ap.parse_args(["--llm-option", "concurrency=8", "--llm-base-url", "http://a/v1,http://b/v1", "--llm-tokenizer", "t/t"])
    s = backend_spec_from_args(ns, "openai:m/x")
    assert (s.concurrency, s.base_url, s.tokenizer, s.key()) == (8, ["http://a/v1", "http://b/v1"], "t/t", "openai:m/x[tokenizer=t/t]")
    with pytest.raises(ClirError, match="need --llm"): backend_spec_from_args(ns, None)
    with pytest.raises(ClirError, match="KEY=VALUE"): backend_spec_from_args(ap.parse_args(["--llm-option", "x"]), "hf:x")
    from clir_llm.rerank import cli_rerank
    with pytest.raises(ClirError, match="hf: does not take option concurrency"):
        cli_rerank(["--collection", "fixture", "--pair", "en-de", "--run", "none.trec", "--method", "listwise",
                    "--llm", "hf:x", "--llm-concurrency", "3", "--out", "o.trec"])


def test_api_key_env_names_the_variable(monkeypatch):
    monkeypatch.delenv("MY_SERVER_KEY", raising=False)
    with FakeOpenAIServer() as srv:
        b = get_backend({"spec": "openai:gpt-4.1", "base_url": srv.url, "api_key_env": "MY_SERVER_KEY"})
        with pytest.raises(LLMError, match="MY_SERVER_KEY"): b.generate(["hi"], progress=False)
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
        t = render(p); log["text"].append(t); return t
    def gen(items, params):
        log["gen"] += [tuple(it["ids"]) for it in items]
        return [{"text": _answer(it["ids"], params["max_new_tokens"]), "tokens_in": len(it["ids"]), "tokens_out": 1,
                 "seconds": 0.0, "time": 0.0} for it in items]
    def score(items, params):
        out = []
        for it in items:
            n = len(it["ids"]); log["score"] += [tuple(it["ids"] + c) for c in it["cands"]]
            out.append({"scores": [float(sum(_toy_logprobs(it["ids"] + c)[n:])) for c in it["cands"]], "tokens_in": n,
                        "tokens_out": 0, "seconds": 0.0, "time": 0.0})
        return out
    hf.render_text, hf._generate_batch, hf._score_batch = render_text, gen, score


def _served(srv) -> dict:
    got = {"gen": [], "score": []}
    for r in srv.requests:
        assert r["endpoint"] == "completions", r      # open models: never the chat API (the server would render its own way)
        p = r["body"]["prompt"]
        if r["body"].get("echo"): got["score"] += [tuple(x) for x in p]
        else: got["gen"].append(tuple(p))
    return got


@pytest.mark.parametrize("method, opts", [
    ("listwise", dict(window=4, step=2, max_words=12)),                                  # listwise
    ("listwise", dict(window=4, step=2, cut="tokens", passage_tokens=9)),                # document-length cut (listwise)
    ("pairwise-bubblesort", dict(k=2, scoring="generation")),                             # PRP, generated answers
    ("pairwise-bubblesort", dict(k=2, scoring="likelihood", passage_tokens=7, query_tokens=5))])   # PRP likelihood + cut
def test_openai_sends_the_prompts_hf_renders(qpath, tmp_path, method, opts):
    from clir_llm.rerank import RerankerSpec, get_reranker
    coll, first = tiny_setup(n_queries=2, n_docs=6)
    spec = RerankerSpec.parse(method, **opts)
    hf = get_backend(f"hf:{qpath}", cache=Cache(tmp_path / "hf"))
    log = {"text": [], "gen": [], "score": []}
    _spy_hf(hf, log)
    ran_hf = get_reranker(spec, hf, progress=False).rerank(coll, first, k=6)
    with FakeOpenAIServer(completer=lambda p, body: (_answer(p, body["max_tokens"]), [])) as srv:
        oa = get_backend({"spec": "openai:tiny-qwen", "base_url": srv.url, "tokenizer": str(qpath), "concurrency": 3},
                         cache=Cache(tmp_path / "oa"))
        ran_oa = get_reranker(spec, oa, progress=False).rerank(coll, first, k=6)
    got = _served(srv)
    assert got["gen"] or got["score"]
    assert Counter(got["gen"]) == Counter(log["gen"]) and Counter(got["score"]) == Counter(log["score"])   # token ids
    tok = hf.tokenizer
    sent_text = Counter(tok.decode(list(ids), skip_special_tokens=False) for ids in set(got["gen"]) | {s for s in got["score"]})
    if got["gen"]: assert {tok.decode(list(i), skip_special_tokens=False) for i in got["gen"]} == set(log["text"])   # text
    if method.startswith("pairwise"):
        assert all(t.endswith("<|im_start|>assistant\n Passage:") for t in log["text"])     # the PRP answer prefix is sent
    assert ran_oa == ran_hf and sent_text
    if "passage_tokens" in opts and method.startswith("pairwise"):
        assert all(oa.count_tokens(d.text) == hf.count_tokens(d.text) for d in coll.get_docs(first.docids("q0")))


def test_openai_completions_match_hf_outputs(qpath):
    "Against a server running the same tiny model, generation and continuation scores equal hf:'s."
    prompts = ["Rank the passages", [{"role": "user", "content": "Output Passage A or Passage B:"},
                                     {"role": "assistant", "content": " Passage:"}]]
    hf = get_backend(f"hf:{qpath}")
    with FakeOpenAIServer(model=qpath) as srv:
        oa = get_backend({"spec": "openai:tiny", "base_url": srv.url, "tokenizer": str(qpath)})
        assert oa.supports_prefill and oa.supports_logprobs
        assert oa.generate(prompts, max_new_tokens=5, progress=False) == hf.generate(prompts, max_new_tokens=5, progress=False)
        for a, b in zip(oa.score(prompts, ["A", " B"], progress=False), hf.score(prompts, ["A", " B"], progress=False)):
            assert a == pytest.approx(b, abs=1e-4)
        assert all(r["body"].get("echo") for r in srv.requests[-2:])


def test_openai_score_without_prompt_logprobs_is_a_clear_error(qpath):
    with FakeOpenAIServer(prompt_logprobs=lambda seq: [None] * len(seq)) as srv:
        oa = get_backend({"spec": "openai:tiny", "base_url": srv.url, "tokenizer": str(qpath)}, max_retries=0)
        with pytest.raises(LLMError, match="no prompt logprobs"): oa.score(["x"], ["A", "B"], progress=False)


def test_api_chat_leaves_rendering_to_the_server(qpath):
    with FakeOpenAIServer() as srv:
        b = get_backend({"spec": "openai:org/model", "base_url": srv.url, "tokenizer": str(qpath), "api": "chat"})
        assert b.renderer is None and not b.supports_prefill and b.generate(["hi"], progress=False) == ["echo: hi"]
        assert srv.requests[-1]["endpoint"] == "chat" and b.count_tokens("the cat sat") == get_backend(f"hf:{qpath}").count_tokens("the cat sat")
    assert BackendSpec.parse({"spec": "openai:org/model", "api": "chat"}).key() == "openai:org/model[api=chat]"


def test_max_model_len_refuses_long_prompts(qpath):
    with FakeOpenAIServer() as srv:
        oa = get_backend({"spec": "openai:tiny", "base_url": srv.url, "tokenizer": str(qpath), "max_model_len": 12})
        with pytest.raises(LLMError, match="exceeds max_model_len 12"): oa.generate(["the cat sat on the mat " * 3], progress=False)
        assert not srv.requests


def test_tiktoken_counts_with_a_local_bpe_file(tmp_path):
    "OpenAI's own models count with tiktoken; its BPE files come from the internet, so the test brings a small one."
    ranks = [bytes([i]) for i in range(256)] + [b"th", b"the", b"ca", b"cat", b" cat"]
    f = tmp_path / "tiny.tiktoken"
    f.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(ranks)))
    b = OpenAIBackend("gpt-4.1", tokenizer=f"tiktoken:{f}")
    assert b.count_tokens("the cat") == 2 and b.count_tokens("xyzxyz the") == 8      # ~4 chars/token would say 2 and 3
    assert b.truncate("xyzxyz the cat", 7) == "xyzxyz " and b.renderer is None


# ---------------------------------------------------------------- a pool of servers
def _reply(msgs, body): return "re: " + msgs[-1]["content"][::-1]


def test_pool_spreads_work_and_equals_one_server(tmp_path):
    prompts = [f"prompt {i}" for i in range(24)]
    with FakeOpenAIServer(responder=_reply, latency=0.02) as one:
        single = get_backend({"spec": "openai:m", "base_url": one.url, "concurrency": 2}).generate(prompts, progress=False)
    with FakeOpenAIServer(responder=_reply, latency=0.02) as a, FakeOpenAIServer(responder=_reply, latency=0.02) as b, \
         FakeOpenAIServer(responder=_reply, latency=0.02) as c:
        pool = get_backend({"spec": "openai:m", "base_url": [a.url, b.url, c.url], "concurrency": 2}, cache=Cache(tmp_path))
        assert pool.generate(prompts, progress=False) == single
        n = [len(s.requests) for s in (a, b, c)]
        assert sum(n) == 24 and min(n) >= 1 and max(s.max_inflight for s in (a, b, c)) <= 2, n   # all serve, two at a time each
        # the pool names its first server in cache keys: the same run through a one-server backend is all hits
        again = get_backend({"spec": "openai:m", "base_url": a.url}, cache=Cache(tmp_path))
        assert again.generate(prompts, progress=False) == single and again.usage.calls == 0


def test_pool_routes_to_least_outstanding_and_skips_dead_servers():
    from clir_llm.llm import _ServerPool
    p = _ServerPool(["a", "b", "c"], per_server=2)
    assert [p.acquire() for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    p.release(2); p.release(2); assert p.acquire() == 2            # the least busy, not the first
    p.mark_down(1); p.release(1); p.release(1); p.release(0)
    assert p.acquire() == 0 and 1 not in p.live()                  # a dead server is skipped while others live
    assert p.acquire() == 2 and p.outstanding == [2, 0, 2]
    got = []
    t = threading.Thread(target=lambda: got.append(p.acquire())); t.start(); time.sleep(0.2)
    assert not got                                                  # every live server full: wait
    p.release(0); t.join(2); assert got == [0]


def test_pool_fails_over_when_a_server_dies(tmp_path):
    prompts = [f"p{i}" for i in range(30)]
    with FakeOpenAIServer(responder=_reply, latency=0.03) as a, FakeOpenAIServer(responder=_reply, latency=0.03) as b, \
         FakeOpenAIServer(responder=_reply, latency=0.03) as c:
        pool = get_backend({"spec": "openai:m", "base_url": [a.url, b.url, c.url], "concurrency": 2}, backoff=0.01)
        threading.Timer(0.1, b.kill).start()
        out = pool.generate(prompts, progress=False)
    assert out == [_reply([{"content": p}], {}) for p in prompts]
    assert pool.usage.counters.get("errors_connection", 0) >= 1 and pool.usage.counters.get("failovers", 0) >= 1
    assert len(a.requests) + len(c.requests) > 20


def test_pool_all_down_is_one_clear_error():
    with FakeOpenAIServer() as a, FakeOpenAIServer() as b:
        a.kill(); b.kill()
        pool = get_backend({"spec": "openai:m", "base_url": [a.url, b.url]}, max_retries=1, backoff=0.01)
        with pytest.raises(LLMError, match="all 2 servers are down"): pool.generate(["x"], progress=False)


@pytest.mark.slow
def test_scale_benchmark_quick_meets_the_pool_target(capsys):
    import importlib.util
    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("scale", root / "benchmarks/scale.py")
    scale = importlib.util.module_from_spec(spec); spec.loader.exec_module(scale)
    assert scale.main(["--quick", "--target", "server-pool-4"]) == 0
    assert "target server-pool-4:" in capsys.readouterr().out
