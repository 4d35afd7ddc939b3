"""Any Hugging Face translation model (`mt:hf:`: Marian, M2M-100, NLLB) and LLM translation (`mt:llm:<backend>`) on
tiny local models with real-format tokenizers: the CLI, the sentence cache, QT retrieval, and the LLM calls' cache and
accounting."""

import json
import pytest
from clir_llm.cache import Cache
from clir_llm.cli import main
from clir_llm.core import ClirError, Run
from clir_llm.testing import make_tiny_hf_model, make_tiny_mt_model
from clir_llm.translate import TranslatorSpec, get_translator, tiny_nllb


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("mt")
    return {
        "marian": make_tiny_mt_model(root / "marian", "marian"),
        "m2m100": make_tiny_mt_model(root / "m2m", "m2m100"),
        "nllb": tiny_nllb(root / "nllb"),
        "qwen": make_tiny_hf_model(root / "qwen"),
    }


@pytest.mark.parametrize("arch", ["marian", "m2m100", "nllb"])
def test_cli_translate_queries(models, tmp_path, arch):
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = [
        "translate",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--what",
        "queries",
        "--translator",
        f"mt:hf:{models[arch]}",
        "--max-new-tokens",
        "6",
        "--out",
        str(out),
    ]
    import os

    os.environ["CLIR_LLM_CACHE"] = str(cache)
    try:
        assert main(args) == 0
        acc = json.loads((out / "queries.translation.json").read_text())
        assert acc["identity"].get("family", "nllb") == arch and acc["usage"]["counters"]["translated_sentences"] >= 3
        assert main(args) == 0  # warm: the sentence cache answers
        acc = json.loads((out / "queries.translation.json").read_text())
        assert acc["usage"]["counters"].get("translated_sentences", 0) == 0 and acc["usage"]["cache_hits"] >= 3
    finally:
        del os.environ["CLIR_LLM_CACHE"]
    assert len((out / "queries.de.tsv").read_text().splitlines()) == 3


def test_family_tokenizer_only_and_worker_recipe(models, tmp_path):
    "The family is read from the tokenizer alone; the recipe rebuilds the same family and translations; Marian gets its target."
    t = get_translator(f"mt:hf:{models['marian']}", cache=Cache(tmp_path), max_new_tokens=4, progress=False)
    assert t.family == "marian" and t._model is None and t.lengths(["the cat sleeps."], "en", "de")[0] > 2
    factory, args = t.worker()
    w = factory(*args)
    assert (
        type(w) is type(t)
        and w.identity == t.identity
        and w.translate_batch(["the cat."], "en", "de") == t.translate(["the cat."], "en", "de")
    )
    assert TranslatorSpec.parse(f"mt:hf:{models['marian']}").uses_gpu and TranslatorSpec.parse(
        "mt:hf:facebook/m2m100_418M"
    ).hub_models() == ["facebook/m2m100_418M"]
    # the bracket is the backend's
    assert (
        TranslatorSpec.parse("mt:llm:hf:Qwen/Qwen2.5-7B-Instruct[dtype=bfloat16]").arg
        == "hf:Qwen/Qwen2.5-7B-Instruct[dtype=bfloat16]"
    )


def test_spec_strings(models):
    assert str(TranslatorSpec.parse(f"mt:hf:{models['marian']}")) == f"mt:hf:{models['marian']}"
    assert "M2M-100" in TranslatorSpec.parse("mt:hf:facebook/m2m100_418M").describe()
    assert "transformers model" in TranslatorSpec.parse("mt:llm:hf:Qwen/Qwen2.5-7B-Instruct").describe()
    for bad, msg in [
        ("mt:hf:", "needs a model"),
        ("mt:llm:", "needs an LLM backend"),
        ("mt:llm:nope:x", "LLM backend spec must be"),
    ]:
        with pytest.raises(ClirError, match=msg):
            TranslatorSpec.parse(bad)


def _qt(spec, tmp_path):
    "BM25-QT on the fixture with translator `spec` (a few new tokens per sentence: tiny random models babble)."
    from clir_llm.collections import load_collection
    from clir_llm.retrieve import get_retriever

    cache = Cache(tmp_path / "c")
    r = get_retriever(
        "bm25-qt", translator=get_translator(spec, cache=cache, max_new_tokens=6, progress=False), cache=cache
    )
    return r, r.retrieve(load_collection("fixture", "en-de"), k=3)


def test_qt_retrieval_with_m2m(models, tmp_path):
    r, run = _qt(f"mt:hf:{models['m2m100']}", tmp_path)
    assert run.name == "bm25-qt[mt:hf:m2m]" and r.usage.counters["translated_sentences"] == 3


def test_llm_translation_cached_and_accounted(models, tmp_path):
    cache = Cache(tmp_path / "c")
    texts = ["Die Katze schläft. Der Hund läuft.", "Die Katze schläft."]
    tr = get_translator(f"mt:llm:hf:{models['qwen']}", cache=cache, max_new_tokens=5)
    out = tr.translate(texts, "de", "en")
    u = tr.usage
    assert (
        len(out) == 2 and u.calls >= 1 and u.tokens_in > 0 and u.tokens_out > 0 and u.counters["unique_sentences"] == 2
    )
    warm = get_translator(f"mt:llm:hf:{models['qwen']}", cache=cache, max_new_tokens=5)
    assert warm.translate(texts, "de", "en") == out
    assert (
        warm.usage.calls == 0
        and warm.usage.cache_hits == 2
        and warm.usage.counters.get("cached_tokens_in", 0) == u.tokens_in
    )
    (tmp_path / "mine.yaml").write_text('method: translate\nsource: a test\nprompt: "From {src} to {tgt}: {text}"\n')
    other = get_translator(
        f"mt:llm:hf:{models['qwen']}", cache=cache, max_new_tokens=5, prompt=str(tmp_path / "mine.yaml")
    )
    other.translate(texts[:1], "de", "en")
    assert other.usage.calls >= 1 and other.key != tr.key  # another prompt is another cache entry, another view


def test_llm_qt_retrieval_usage(models, tmp_path):
    r, run = _qt(f"mt:llm:hf:{models['qwen']}", tmp_path)
    assert run.name == f"bm25-qt[mt:llm:hf:{models['qwen']}]"
    u = r.usage  # the LLM's calls and tokens are in the run's usage (and so in its usage file)
    assert u.calls >= 1 and u.tokens_in > 0 and u.counters["unique_sentences"] == 3
