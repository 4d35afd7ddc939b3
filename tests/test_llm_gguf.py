"""`gguf:` (clir_llm.llm_gguf): its options, the clear message without llama-cpp-python, a missing file, and a backend built
on a stand-in llama_cpp module (n_ctx from max_model_len; the file's fingerprint as its revision)."""

import sys, types
import pytest
from clir_llm.llm import BackendSpec, LLMError, get_backend, local_revision
from clir_llm.llm_gguf import GGUFOptions, LlamaCppBackend


@pytest.fixture
def fake_llama(monkeypatch):
    made = []
    lc = types.ModuleType("llama_cpp")

    class Llama:
        def __init__(self, model_path, **kw):
            self.metadata = {}
            made.append(kw)

    lc.Llama = Llama
    monkeypatch.setitem(sys.modules, "llama_cpp", lc)
    return made


def test_without_the_extra_the_message_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(LLMError, match=r"pip install 'clir-llm\[gguf\]'") as e:
        get_backend(f"gguf:{tmp_path / 'x.gguf'}")
    assert "\n" not in str(e.value)


def test_options_a_missing_file_and_the_identity(fake_llama, tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(LLMError, match="gguf: no such file"):
        get_backend(f"gguf:{tmp_path / 'none.gguf'}")
    assert GGUFOptions().max_model_len == 4096 and LlamaCppBackend.missing(BackendSpec.parse(f"gguf:{f}")) == []
    b = get_backend(f"gguf:{f}[max_model_len=2048]")
    assert fake_llama == [{"n_ctx": 2048, "n_gpu_layers": 0, "verbose": False}] and not b.is_chat
    assert b.identity() == {
        "kind": "gguf",
        "model": str(f),
        "revision": local_revision(tmp_path, "m.gguf"),
        "max_model_len": 2048,
    }
    assert "max_model_len" not in get_backend(f"gguf:{f}").identity() and fake_llama[-1]["n_ctx"] == 4096
    assert BackendSpec.parse(f"gguf:{f}[n_gpu_layers=-1]").key() == f"gguf:{f}"  # a speed option names nothing
