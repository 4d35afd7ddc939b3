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
        def __init__(self, **kw): made.append(kw)
    vllm.LLM = LLM
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    return made


def test_without_the_extra_the_message_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(LLMError, match=r"pip install 'clir-llm\[gpu\]'") as e: get_backend("vllm:some/model")
    assert "\n" not in str(e.value)


def test_options_and_what_reaches_the_engine(fake_vllm, tmp_path):
    q = make_tiny_hf_model(tmp_path / "q", "qwen2")
    assert VLLMOptions().batch_size == 256 and VLLMBackend.throughput_engine == "serving" and VLLMBackend.local_model
    b = get_backend({"spec": f"vllm:{q}", "tensor_parallel_size": 2, "dtype": "float16", "batch_size": 64})
    assert b.batch_size == 64 and b.identity() == {"kind": "vllm", "model": str(q), "revision": None, "dtype": "float16"}
    b.llm
    assert fake_vllm == [{"model": str(q), "revision": None, "dtype": "float16", "tensor_parallel_size": 2}]   # vLLM's defaults for the rest
    hf = get_backend(f"hf:{q}")
    msgs = [{"role": "user", "content": "Output Passage A or Passage B:"}, {"role": "assistant", "content": " Passage:"}]
    assert b._render(msgs) == {"ids": hf._ids(msgs)}
    with pytest.raises(ClirError, match="vllm: does not take option quantize"): BackendSpec.parse("vllm:x[quantize=int8]")
    assert BackendSpec.parse("vllm:x/y[enable_prefix_caching=true,max_model_len=4096]").key() == "vllm:x/y[max_model_len=4096]"
