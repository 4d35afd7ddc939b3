"""`ort:<model>`: ONNX Runtime GenAI as an LLM backend. A tiny random Qwen2 exported with GenAI's model builder: at fp32
the answers and continuation log-likelihoods are those of `hf:` on the same model; int4 through the spec (built once
into the cache's models dir, reused); cache hits make no model call; one-line errors."""

import subprocess, sys
import numpy as np
import pytest
from clir_llm.cache import Cache
from clir_llm.core import ClirError
from clir_llm.executor import LocalExecutor
from clir_llm.llm import BACKENDS, BackendSpec, LLMError, get_backend
from clir_llm.testing import make_tiny_hf_model

pytest.importorskip("onnxruntime_genai", reason="the [ort] extra is not installed")
import clir_llm.llm_ort as llm_ort
from clir_llm.llm_ort import ORTBackend, ORTOptions, export_ort, ort_export_dir

PROMPTS = [
    "the cat sleeps on the sofa",
    "Passage A: ein Hund läuft im Park",
    [{"role": "user", "content": "Output Passage A or Passage B:"}, {"role": "assistant", "content": " Passage"}],
]
CANDS = [" A", " B", "the dog runs"]  # single- and multi-token continuations


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    # GenAI's attention: head size 16
    return make_tiny_hf_model(tmp_path_factory.mktemp("tiny") / "qwen2", hidden_size=64)


@pytest.fixture(scope="module")
def fp32_dir(tiny, tmp_path_factory):
    return export_ort(tiny, tmp_path_factory.mktemp("onnx") / "tiny-fp32", "fp32", progress=False)


def test_registered_with_its_options():
    assert "ort:" in BACKENDS.names()
    s = BackendSpec.parse("ort:/m/qwen[precision=int8,block_size=64]")
    assert s.key() == "ort:/m/qwen[precision=int8,block_size=64]" and s.backend_class is ORTBackend
    assert BackendSpec.parse("ort:/m/qwen").key() == "ort:/m/qwen"
    with pytest.raises(ClirError, match="does not take option precision"):
        BackendSpec.parse("hf:/m/qwen[precision=int4]")
    with pytest.raises(ClirError, match="does not take option dtype"):
        BackendSpec.parse("ort:/m/qwen[dtype=bfloat16]")
    with pytest.raises(ClirError, match="precision"):
        BackendSpec.parse("ort:/m/qwen[precision=int3]")
    o = ORTOptions()
    assert (o.precision, o.block_size, o.batch_size) == ("int4", 32, 8) and BackendSpec.parse(
        "ort:/m/q[block_size=64]"
    ).options.block_size == 64
    assert ORTBackend.local_model and not ORTBackend.supports_batching and ORTBackend.throughput_engine is None
    with pytest.raises(ClirError, match="not a Hub revision"):
        get_backend("ort:/m/qwen@main")


def test_fp32_export_matches_hf(tiny, fp32_dir):
    hf, ort = get_backend(f"hf:{tiny}"), ORTBackend(str(fp32_dir))
    assert [ort._ids(p) for p in PROMPTS] == [hf._ids(p) for p in PROMPTS]  # the same chat template and ids
    assert ort.generate(PROMPTS, max_new_tokens=8, progress=False) == hf.generate(
        PROMPTS, max_new_tokens=8, progress=False
    )
    a, b = np.array(hf.score(PROMPTS, CANDS, progress=False)), np.array(ort.score(PROMPTS, CANDS, progress=False))
    assert np.isfinite(b).all() and (b < 0).all() and np.abs(a - b).max() < 1e-3, (a, b)
    assert ort.usage.calls == 2 * len(PROMPTS) and ort.usage.tokens_out > 0 and ort.usage.tokens_in > 0


def test_min_new_tokens_and_eos(tiny, fp32_dir):
    hf, ort = get_backend(f"hf:{tiny}"), ORTBackend(str(fp32_dir))
    kw = dict(max_new_tokens=6, min_new_tokens=3, progress=False)
    assert ort.generate(PROMPTS, **kw) == hf.generate(PROMPTS, **kw)
    assert 2 in ort._eos  # <|im_end|> of the tiny model ends an answer


def test_int4_from_spec_builds_once_and_caches(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("CLIR_LLM_CACHE", str(tmp_path / "home"))
    cache = Cache(tmp_path / "cache")
    b = get_backend(f"ort:{tiny}[precision=int4,block_size=32]", cache)
    assert (
        b.identity()["precision"] == "int4"
        and b.identity()["block_size"] == 32
        and b.identity()["engine"].startswith("onnxruntime-genai")
    )
    texts = b.generate(PROMPTS, max_new_tokens=5, progress=False)
    scores = b.score(PROMPTS, CANDS, progress=False)
    assert (
        b.onnx_dir == ort_export_dir(tiny, b.revision, "int4", 32) and b.onnx_dir.parent == tmp_path / "home" / "models"
    )
    assert "MatMulNBits" in (b.onnx_dir / "model.onnx").read_bytes().decode("latin-1")  # int4 weights
    assert len(texts) == 3 and np.isfinite(scores).all() and b.usage.calls == 6

    def no_export(*a, **k):
        raise AssertionError("exported again")

    monkeypatch.setattr(llm_ort.subprocess, "run", no_export)
    again = get_backend(f"ort:{tiny}[precision=int4,block_size=32]", cache)
    assert again.generate(PROMPTS, max_new_tokens=5, progress=False) == texts
    assert again.score(PROMPTS, CANDS, progress=False) == scores
    # no model call, not even loaded
    assert again.usage.calls == 0 and again.usage.cache_hits == 6 and again._og is None
    assert again.usage.counters["cached_tokens_in"] == b.usage.tokens_in  # what the hits would have cost
    # another precision: other entries
    fp32 = get_backend(f"ort:{tiny}[precision=fp32]", cache)
    assert fp32.identity() != b.identity()


def test_prebuilt_folder_and_prepare(tiny, fp32_dir, tmp_path):
    b = get_backend(f"ort:{fp32_dir}")
    assert b.prebuilt and b.onnx_dir == fp32_dir and "precision" not in b.identity()
    with pytest.raises(ClirError, match="exported already"):
        get_backend(f"ort:{fp32_dir}[precision=int4]")
    import yaml
    from clir_llm.config import load_config
    from clir_llm.reproduce import needs, prepare

    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        yaml.safe_dump(
            dict(
                name="c",
                collection="fixture",
                pairs=["en-de"],
                measure="MAP",
                experiments=["1_first_stage"],
                first_stage=dict(methods=["bm25-og"]),
                rerankers=[
                    dict(
                        name="ort",
                        llm=f"ort:{fp32_dir}",
                        method="listwise",
                        prompt="rankzephyr",
                        first_stages=["bm25-og"],
                    )
                ],
            )
        )
    )
    assert needs(load_config(cfg))["models"] == [f"ort:{fp32_dir}"]
    assert prepare(load_config(cfg)) == [f"ort:{fp32_dir}: {fp32_dir}"]


def test_errors_are_one_line(tmp_path, monkeypatch, fp32_dir):
    (tmp_path / "empty").mkdir()
    with pytest.raises(LLMError, match="not a model folder") as e:
        get_backend(f"ort:{tmp_path / 'empty'}")
    assert "\n" not in str(e.value)
    with pytest.raises(LLMError, match="not a model folder"):
        get_backend(f"ort:{tmp_path / 'missing'}")
    b = ORTBackend(str(fp32_dir))
    monkeypatch.setitem(sys.modules, "onnxruntime_genai", None)  # as if the [ort] extra were not installed
    with pytest.raises(LLMError, match=r"pip install 'clir-llm\[ort\]'") as e:
        b.generate(["x"], max_new_tokens=2, progress=False)
    assert "\n" not in str(e.value)


def test_failed_export_is_one_line(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text('{"architectures": ["NoSuchModel"], "model_type": "nosuch"}')
    with pytest.raises(LLMError, match="exporting .* failed") as e:
        export_ort(bad, tmp_path / "out", "fp32", progress=False)
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()


def test_models_list_shows_the_ort_export_of_a_prepared_model(tmp_path, capsys):
    "`clir-llm models list` names the ONNX Runtime GenAI export built from the stand-in (and not a killed, unfinished one)."
    from clir_llm.assets import _qwen_hf_dest
    from clir_llm.cli_data import cli_models

    src = _qwen_hf_dest(tmp_path)
    src.mkdir(parents=True)
    (src / "model.safetensors").write_bytes(b"x")
    done, killed = (
        ort_export_dir(src, "r1", "int4", 32, root=tmp_path),
        ort_export_dir(src, "r1", "int8", 32, root=tmp_path),
    )
    done.mkdir()
    (done / "genai_config.json").write_text("{}")
    killed.mkdir()
    assert cli_models(["list", "hf:qwen2.5-coder-0.5b-offline", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"ort export (int4, ort:qwen2.5-coder-0.5b-offline): {done}" in out and "int8" not in out, out


def test_batches_go_through_the_executor_and_the_worker_rebuilds(fp32_dir, tmp_path):
    "An executor computing two batches per group gives the local records and cache entries; the worker recipe rebuilds."
    import pickle

    class TwoWorkers(LocalExecutor):
        workers = 2

        def __init__(self):
            self.calls = []

        def map(self, owner, method, calls):
            self.calls.append(len(calls))
            return super().map(owner, method, calls)

    ex = TwoWorkers()
    local = get_backend(f"ort:{fp32_dir}", Cache(tmp_path / "l"), batch_size=1)
    remote = get_backend(f"ort:{fp32_dir}", Cache(tmp_path / "r"), batch_size=1, executor=ex)
    assert remote.generate(PROMPTS, max_new_tokens=4, progress=False) == local.generate(
        PROMPTS, max_new_tokens=4, progress=False
    )
    assert ex.calls == [2, 1]
    keys = lambda c: [r["key"] for r in c.export_entries("llm")]
    assert keys(Cache(tmp_path / "r")) == keys(Cache(tmp_path / "l"))
    factory, args = pickle.loads(pickle.dumps(remote.worker()))
    w = factory(*args)
    assert w.identity() == remote.identity() and w.cache.mode == "off" and w.batch_size == 1
