"""clir_llm.pipeline: runs computed once, kept on disk, and read back the same; what a pipeline returns, ranks and fuses
is exactly what its run files hold (issue 14 finding 1)."""

import yaml

import _reliability as R
from clir_llm.config import load_config
from clir_llm.core import Run
from clir_llm.pipeline import Pipeline
from clir_llm.retrieve import rrf


def test_a_first_stage_that_finds_nothing_is_read_back_as_an_empty_run(tmp_path):
    "BM25 on English queries over Somali documents finds nothing: the empty run file it keeps is read back (it was refused)."
    (tmp_path / "c.yaml").write_text(
        yaml.safe_dump(
            dict(
                name="c",
                collection="fixture",
                pairs=["en-so"],
                measure="MAP",
                experiments=["first_stage"],
                first_stage=dict(methods=["bm25-og"]),
            )
        )
    )
    first = Pipeline(load_config(tmp_path / "c.yaml"), tmp_path / "out", progress=False).first_stage("en-so", "bm25-og")
    assert len(first) == 0
    again = Pipeline(load_config(tmp_path / "c.yaml"), tmp_path / "out", progress=False)
    assert len(again.first_stage("en-so", "bm25-og")) == 0 and list(again._paths.values())[0].exists()


def test_cold_run_is_its_file_and_fusion_is_of_the_files(tmp_path):
    from clir_llm.cache import Cache
    from clir_llm.pipeline import Pipeline

    cfg = R.near_config(tmp_path)
    cold = Pipeline(cfg, out_dir=tmp_path / "res", cache=Cache(tmp_path / "cache"), progress=False)
    runs = {m: cold.first_stage("en-de", m) for m in ("nearties:1", "nearties:3", "rrf:nearties:1+nearties:3")}
    for m, run in runs.items():
        back = Run.read(cold.first_stage_path("en-de", m))
        assert run == back and all(run.docids(q) == back.docids(q) for q in run), m  # cold == file round trip
    a, b = (Run.read(cold.first_stage_path("en-de", m)) for m in ("nearties:1", "nearties:3"))
    fused = rrf([a, b], depth=4, name="f")
    raw = [R.near_ties(1).retrieve(cold.collection("en-de")), R.near_ties(3).retrieve(cold.collection("en-de"))]
    fused_raw = rrf(raw, depth=4, name="f")
    for q in fused:  # fused from the files == fused now from the unrounded runs == the fused run's file
        assert fused.docids(q) == fused_raw.docids(q) == runs["rrf:nearties:1+nearties:3"].docids(q), q
    warm = Pipeline(cfg, out_dir=tmp_path / "res", cache=Cache(tmp_path / "cache"), progress=False)
    for m, run in runs.items():
        w = warm.first_stage("en-de", m)
        assert w == run and (warm.scores("en-de", w) == cold.scores("en-de", run)).all(), m
    raw_order = sorted(raw[0]["t1"], key=lambda d: -raw[0]["t1"][d])
    assert raw_order != a.docids("t1")  # the test has teeth: the order of the unrounded scores is not the file's


def test_a_recording_run_logs_the_calls_of_a_reranked_run_already_stored(tmp_path, monkeypatch):
    """`reproduce --no-recorded` (CLIR_LLM_KEY_LOG set) after an interrupted run: the reranked runs stored by the first
    attempt were read back without a call, so their LLM calls were missing from the recorded file (the demo's first
    recording lost 200 listwise windows this way). A recording run reranks again (from the cache) and logs every key."""
    from clir_llm.cache import Cache
    from clir_llm.testing import make_tiny_hf_model

    model = make_tiny_hf_model(tmp_path / "tiny", "qwen2", hidden_size=32, num_layers=2)
    (tmp_path / "c.yaml").write_text(
        yaml.safe_dump(
            dict(
                name="rec",
                collection="fixture",
                pairs=["en-de"],
                measure="MAP",
                first_stage=dict(methods=["bm25-og"], depth=4),
                rerankers=[
                    dict(
                        name="Tiny listwise",
                        llm=f"hf:{model}",
                        method="listwise",
                        first_stages=["bm25-og"],
                        top_k=3,
                        window=2,
                        step=1,
                        max_words=8,
                    )
                ],
                experiments=["2_listwise"],
            )
        )
    )
    cfg, log = load_config(tmp_path / "c.yaml"), tmp_path / ".llm-keys.log"
    monkeypatch.setenv("CLIR_LLM_KEY_LOG", str(log))
    rc = cfg.rerankers[0]

    def keys():
        p = Pipeline(cfg, out_dir=tmp_path / "res", cache=Cache(tmp_path / "cache"), progress=False)
        log.unlink(missing_ok=True)
        run = p.rerank("en-de", rc, "bm25-og", "og")
        return run, set(log.read_text().split()) if log.exists() else set()

    first, k1 = keys()
    again, k2 = keys()  # the run file exists now: read back before the fix, no key logged
    assert k1 and k2 == k1 and again == first
