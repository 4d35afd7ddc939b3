"""`hf:<model>[quantize=int8]`: the fast CPU path of the hf: backend (torch dynamic int8 Linear layers), on a tiny Qwen2:
its own run names and cache entries, generation and scoring through the same cache and accounting, one-line errors."""
import pytest
from clir_llm.cache import Cache
from clir_llm.core import ClirError
import clir_llm.llm as llm
from clir_llm.llm import BackendSpec, HFBackend, LLMError, get_backend
from clir_llm.testing import make_tiny_hf_model

PROMPTS = ["the cat sat", "Passage A: ein Hund", [{"role": "user", "content": "Output Passage A or Passage B:"},
                                                  {"role": "assistant", "content": " Passage:"}]]


@pytest.fixture(scope="module")
def qpath(tmp_path_factory):
    import torch
    torch.set_num_threads(1)
    return make_tiny_hf_model(tmp_path_factory.mktemp("tiny") / "qwen2")


def test_int8_has_its_own_key_and_cache_entries(qpath, tmp_path):
    cache = Cache(tmp_path / "cache")
    fp = get_backend(f"hf:{qpath}", cache)
    q8 = get_backend(f"hf:{qpath}[quantize=int8]", cache)
    assert BackendSpec.parse(f"hf:{qpath}[quantize=int8]").key() == f"hf:{qpath}[quantize=int8]"
    assert BackendSpec.parse(f"hf:{qpath}").key() == f"hf:{qpath}"          # fp32's key is unchanged
    assert q8.identity() == {**fp.identity(), "quantize": "int8"} and "quantize" not in fp.identity()
    a32 = fp.generate(PROMPTS, max_new_tokens=4, progress=False)
    s32 = fp.score(PROMPTS, [" A", " B"], progress=False)
    a8 = q8.generate(PROMPTS, max_new_tokens=4, progress=False)
    s8 = q8.score(PROMPTS, [" A", " B"], progress=False)
    assert q8.usage.calls == 2 * len(PROMPTS) and q8.usage.cache_hits == 0     # nothing served from fp32's entries
    assert len(a8) == 3 and all(isinstance(t, str) for t in a8) and q8.usage.tokens_out > 0
    assert all(abs(x - y) < 0.5 and x < 0 for r8, r in zip(s8, s32) for x, y in zip(r8, r))
    assert all("quantized" in type(m).__module__ for m in (q8.hf_model.lm_head, q8.hf_model.model.layers[0].self_attn.q_proj))
    assert all(type(m).__module__.startswith("torch.nn.modules") for m in (fp.hf_model.lm_head,))
    again = get_backend(f"hf:{qpath}[quantize=int8]", cache)
    assert again.generate(PROMPTS, max_new_tokens=4, progress=False) == a8 and again.usage.cache_hits == 3 and again.usage.calls == 0
    assert fp.generate(PROMPTS, max_new_tokens=4, progress=False) == a32 and fp.usage.cache_hits == 3


@pytest.mark.parametrize("spec, msg", [
    ("[quantize=int4]", "quantize"),
    ("[quantize=int8,dtype=bfloat16]", "quantize=int8 needs float32 weights"),
])
def test_invalid_option_is_one_line(qpath, spec, msg):
    with pytest.raises(ClirError) as e: get_backend(f"hf:{qpath}{spec}").hf_model
    assert msg in str(e.value) and "\n" not in str(e.value).strip()


def test_other_kinds_refuse_quantize():
    with pytest.raises(ClirError, match="openai: does not take option quantize"): BackendSpec.parse("openai:x[quantize=int8]")


def test_missing_engine_is_one_line(qpath, monkeypatch):
    monkeypatch.setattr(llm, "_quant_engine", lambda: None)
    b = get_backend(f"hf:{qpath}[quantize=int8]")
    with pytest.raises(LLMError) as e: b.hf_model
    assert "quantised CPU kernels" in str(e.value) and "\n" not in str(e.value)
