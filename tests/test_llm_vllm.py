"""`vllm:` (clir_llm.llm_vllm): its options, the clear message without the GPU extra, and a backend built on a stand-in
vllm module (the engine's settings reach vllm.LLM; prompts are the token ids hf: renders)."""

import sys, types
import pytest
from clir_llm.core import ClirError
from clir_llm.llm import BackendSpec, LLMError, get_backend
from clir_llm.llm_vllm import VLLMBackend, VLLMOptions
from clir_llm.testing import make_tiny_hf_model


@pytest.fixture
def fake_vllm(monkeypatch):
    made = []
    vllm = types.ModuleType("vllm")

    class LLM:
        def __init__(self, **kw):
            made.append(kw)

    vllm.LLM = LLM
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    return made


def test_without_the_extra_the_message_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(LLMError, match=r"pip install 'clir-llm\[gpu\]'") as e:
        get_backend("vllm:some/model")
    assert "\n" not in str(e.value)


def test_options_and_what_reaches_the_engine(fake_vllm, tmp_path):
    q = make_tiny_hf_model(tmp_path / "q", "qwen2")
    assert VLLMOptions().batch_size == 256 and VLLMBackend.throughput_engine == "serving" and VLLMBackend.local_model
    b = get_backend({"spec": f"vllm:{q}", "tensor_parallel_size": 2, "dtype": "float16", "batch_size": 64})
    assert b.batch_size == 64 and b.identity() == {
        "kind": "vllm",
        "model": str(q),
        "revision": None,
        "dtype": "float16",
    }
    b.llm
    # vLLM's defaults for the rest
    assert fake_vllm == [{"model": str(q), "revision": None, "dtype": "float16", "tensor_parallel_size": 2}]
    hf = get_backend(f"hf:{q}")
    msgs = [
        {"role": "user", "content": "Output Passage A or Passage B:"},
        {"role": "assistant", "content": " Passage:"},
    ]
    assert b._render(msgs) == {"ids": hf._ids(msgs)}
    with pytest.raises(ClirError, match="vllm: does not take option quantize"):
        BackendSpec.parse("vllm:x[quantize=int8]")
    assert (
        BackendSpec.parse("vllm:x/y[enable_prefix_caching=true,max_model_len=4096]").key()
        == "vllm:x/y[max_model_len=4096]"
    )


def test_stop_strings_and_the_last_tokens_top_logprobs_reach_vllm(fake_vllm, monkeypatch, tmp_path):
    """Issue 38 item 4 (Rank1's own call): `stop` and `top_logprobs` become vLLM's `stop` and `logprobs`; the record keeps
    vLLM's text (cut before the string), the string met (`stop_reason`) and the last generated token's top logprobs."""
    q = make_tiny_hf_model(tmp_path / "q", "qwen2")
    sent = []
    lp = lambda x, tok: types.SimpleNamespace(logprob=x, decoded_token=tok)
    outs = [
        types.SimpleNamespace(
            text="It is.",
            token_ids=[1, 2, 3, 4],
            stop_reason="</think> true",
            logprobs=[{1: lp(-0.5, "a")}, {7: lp(-2.0, " false"), 9: lp(-0.2, " true"), 3: lp(-4.0, "x")}],
        ),
        types.SimpleNamespace(
            text="Ran out", token_ids=[5, 6], stop_reason=None, logprobs=[{5: lp(-0.1, "R")}, {6: lp(-0.3, "out")}]
        ),
    ]

    class LLM:
        def __init__(self, **kw):
            pass

        def generate(self, prompts, sp, use_tqdm=False):
            sent.append(sp)
            return [types.SimpleNamespace(outputs=[o]) for o in outs[: len(prompts)]]

    monkeypatch.setattr(sys.modules["vllm"], "LLM", LLM)
    monkeypatch.setattr(sys.modules["vllm"], "SamplingParams", lambda **kw: kw, raising=False)
    b = get_backend(f"vllm:{q}")
    assert b.supports_stop
    recs = b.complete(
        ["a", "b"], max_new_tokens=9, stop=["</think> true", "</think> false"], top_logprobs=20, progress=False
    )
    assert (
        sent[0]["stop"] == ["</think> true", "</think> false"]
        and sent[0]["logprobs"] == 20
        and sent[0]["max_tokens"] == 9
    )
    assert recs[0]["stop"] == "</think> true" and recs[0]["text"] == "It is." and recs[0]["tokens_out"] == 4
    assert list(recs[0]["top_logprobs"].items()) == [(" true", -0.2), (" false", -2.0), ("x", -4.0)]
    assert "stop" not in recs[1] and recs[1]["top_logprobs"] == {"out": -0.3}
    b.complete(["c"], max_new_tokens=9, progress=False)
    # nothing asked, nothing sent (other rerankers' calls as before)
    assert "stop" not in sent[1] and "logprobs" not in sent[1]
