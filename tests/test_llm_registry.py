"LLM backend kinds: one registry that get_backend and the dry run both read; a new kind is one registered class."
import pytest
from clir_llm.core import ClirError
from clir_llm.llm import BACKENDS, Backend, BackendSpec, LLMError, get_backend


def describe_backend(s): return BackendSpec.parse(s).describe()


class EchoBackend(Backend):
    "Answers each prompt with itself."
    kind = "echo"
    def __init__(self, model: str, cache=None, revision=None): self.model, self.revision = model, revision
    def generate(self, prompts, max_new_tokens=128, on_error="raise", **params):
        self.usage.calls += len(prompts)
        return [str(p)[:max_new_tokens] for p in prompts]


@pytest.fixture
def echo():
    BACKENDS.register("echo:", EchoBackend, example="echo:<anything>")
    yield
    BACKENDS._items.pop("echo:", None)


def test_a_new_kind_is_built_described_and_listed(echo):
    b = get_backend("echo:x")
    assert isinstance(b, EchoBackend) and b.name == "echo:x" and b.generate(["hi", "there"]) == ["hi", "there"]
    assert b.usage.calls == 2 and b.count_tokens("a b c") == 3 and b.truncate("a b c", 2) == "a b"
    assert describe_backend("echo:x") == BackendSpec.parse("echo:x").describe() == "EchoBackend model x"
    assert get_backend("echo:x@v2").revision == "v2"
    with pytest.raises(ClirError, match="echo:<anything>"): get_backend("nope:x")   # the error lists the new kind


def test_a_backend_without_scoring_refuses_clearly(echo):
    with pytest.raises(LLMError, match="supports_logprobs is False"): get_backend("echo:x").score(["p"], ["A", "B"])


def test_a_class_without_generate_is_refused_at_registration():
    class Mute(Backend):
        supports_logprobs = True
    with pytest.raises(ClirError, match="Mute does not implement generate"): BACKENDS.register("mute:", Mute)
    with pytest.raises(ClirError, match="must subclass clir_llm.llm.Backend"): BACKENDS.register("mute:", object)
    assert "mute:" not in BACKENDS.names()


def test_spec_parsed_once_keeps_todays_names():
    for s in ["hf:qwen2.5-coder-0.5b-offline", "openai:gpt-4.1", "vllm:meta-llama/Llama-3.1-8B-Instruct", "gguf:/m/q.gguf"]:
        spec = BackendSpec.parse(s)
        assert spec.key() == s and spec.revision is None and BackendSpec.parse(spec) is spec
    spec = BackendSpec.parse("hf:castorini/rank_zephyr_7b_v1_full@abc123")
    assert (spec.kind, spec.model, spec.revision) == ("hf", "castorini/rank_zephyr_7b_v1_full", "abc123")
    for bad in ["llama", "hf:", "bert:x", ""]:
        with pytest.raises(ClirError, match="LLM backend spec must be one of hf:<model>, openai:<model>, vllm:<model>, gguf:<model>"):
            BackendSpec.parse(bad)


def test_builtin_descriptions_unchanged():
    assert describe_backend("hf:qwen2.5-coder-0.5b-offline") == "Qwen2.5-Coder-0.5B (stand-in) via transformers (offline GGUF)"
    assert describe_backend("openai:gpt-4.1") == "OpenAI chat API gpt-4.1 ($2.0/$8.0 per M tokens in/out, prices of 2025-06-01)"
    assert describe_backend("openai:foo") == "OpenAI chat API foo (no price in the table: cost reported as 0)"
    assert describe_backend("hf:castorini/rank_zephyr_7b_v1_full").startswith("transformers model castorini/rank_zephyr_7b_v1_full (float16")
    assert describe_backend("hf:org/other-model") == "transformers model org/other-model"
    assert describe_backend("vllm:x/y") == "vLLM (GPU extra) model x/y" and describe_backend("gguf:/a.gguf") == "llama.cpp model /a.gguf"


def test_flags_are_plain_class_attributes():
    for e in BACKENDS.entries():
        for flag in ("supports_logprobs", "supports_batching", "is_chat", "is_encoder_decoder", "supports_prefill"):
            assert isinstance(getattr(e.obj, flag), bool), (e.name, flag)


def test_a_new_kind_appears_in_the_dry_run_plan(echo, tmp_path):
    "Issue 13: a backend kind registered at run time is described by the dry run (the old plan raised KeyError)."
    import yaml
    from clir_llm.config import load_config
    from clir_llm.plan import plan
    cfg = dict(name="t", collection="fixture", pairs=["en-de"], measure="MAP", experiments=["1_first_stage"],
               first_stage=dict(methods=["bm25-og"]),
               rerankers=[dict(name="Echo", llm="echo:x", method="listwise", first_stages=["bm25-og"])])
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    lines = plan(load_config(tmp_path / "c.yaml"))
    assert any(l.startswith("reranker Echo: listwise with echo:x = EchoBackend model x") for l in lines), lines
