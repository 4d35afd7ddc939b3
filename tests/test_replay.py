"""Recorded LLM calls (clir_llm.replay), issue 16: the demo's LLM calls are committed as recorded responses (configs/recorded/demo-llm.jsonl), `reproduce`
seeds the cache from them, a missing or edited line is a one-line error, and (slow) a random sample of them computed
again with the real stand-in gives the same answers."""

import json, os, random, subprocess, sys
from pathlib import Path
import pytest, yaml
import _reliability as R
from clir_llm.config import load_config
from clir_llm.replay import read_llm_calls, recompute_llm_calls
from clir_llm.reproduce import recorded_path
from clir_llm.testing import make_tiny_hf_model

DEMO_RECORDED = R.ROOT / "configs" / "recorded" / "demo-llm.jsonl"


def _config(tmp: Path, model: Path) -> Path:
    "A small configuration with a tiny random Qwen2 as its LLM: a listwise (generate) and a PRP (score) reranker."
    llm = f"hf:{model}"
    cfg = dict(
        name="recorded",
        collection="fixture",
        pairs=["en-de"],
        measure="MAP",
        extra_measures=["nDCG@20"],
        first_stage=dict(translator="dict:freedict", depth=4, methods=["dense:e5-small"]),
        rerankers=[
            dict(
                name="Tiny listwise",
                llm=llm,
                method="listwise",
                prompt="rankzephyr",
                first_stages=["dense:e5-small"],
                docs=["og", "dt"],
                top_k=3,
                window=3,
                step=3,
                max_words=12,
            ),
            dict(
                name="Tiny PRP",
                llm=llm,
                method="pairwise-bubblesort",
                k=1,
                scoring="likelihood",
                first_stages=["dense:e5-small"],
                docs=["og"],
                top_k=3,
                passage_tokens=12,
            ),
        ],
        experiments=["2_listwise", "3_pairwise"],
        recorded="recorded.jsonl",
        stand_in_note="Test with a tiny random model: numbers test the machinery only.",
    )
    path = tmp / "recorded.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _run(cfg: Path, tmp: Path, tag: str, *flags):
    cache = R.seed_cache(tmp / f"cache-{tag}")
    res = tmp / f"res-{tag}"
    p = subprocess.run(
        [*R.reproduce_cmd(cfg, res, res / "figures"), *flags],
        capture_output=True,
        text=True,
        timeout=900,
        env=R.env_for(cache),
    )
    tables = (
        {f.name: f.read_bytes() for f in sorted((res / "recorded" / "tables").glob("*"))} if p.returncode == 0 else {}
    )
    return p, tables


@pytest.mark.slow
def test_record_wipe_replay_and_bad_lines(tmp_path):
    "Through `clir-llm reproduce` (3 runs of 2 notebooks: a few minutes on 2 free cores)."
    model = make_tiny_hf_model(tmp_path / "tiny-qwen2", "qwen2", hidden_size=32, num_layers=2)
    cfg = _config(tmp_path, model)
    rec = tmp_path / "recorded.jsonl"
    cold, cold_tables = _run(cfg, tmp_path, "cold", "--no-recorded")
    assert cold.returncode == 0, cold.stderr[-2000:]
    calls = read_llm_calls(rec)
    assert {c["op"] for c in calls} == {"generate", "score"} and f"recorded {len(calls)} LLM calls" in cold.stdout
    assert [c["key"] for c in calls] == sorted({c["key"] for c in calls})  # sorted, one line per call
    # a wiped cache replays the recorded calls: the same tables, no model call
    warm, warm_tables = _run(cfg, tmp_path, "replay")
    assert warm.returncode == 0, warm.stderr[-2000:]
    assert f"{len(calls)} calls from {rec} seeded" in warm.stdout and warm_tables == cold_tables and cold_tables
    # an edited line: one line naming it, before any notebook runs
    lines = rec.read_text().splitlines()
    edited = json.loads(lines[0])
    edited["response"]["tokens_in"] += 1
    rec.write_text("\n".join([json.dumps(edited, ensure_ascii=False, sort_keys=True)] + lines[1:]) + "\n")
    bad, _ = _run(cfg, tmp_path, "edited")
    err = bad.stderr.strip().splitlines()
    assert (
        bad.returncode != 0
        and "Traceback" not in bad.stderr
        and "line 1: the line does not match its check hash" in err[-1]
    ), bad.stderr[-800:]


def test_record_wipe_replay_rerankers(tmp_path, monkeypatch):
    "Listwise (generate) and PRP (score) on a tiny model: recorded, cache wiped, seeded: the same runs, no model call."
    from clir_llm.cache import Cache
    from clir_llm.llm import get_backend
    from clir_llm.replay import export_llm_calls, seed_llm_calls
    from clir_llm.rerank import get_reranker
    from clir_llm.testing import tiny_setup

    model = make_tiny_hf_model(tmp_path / "tiny", "qwen2", hidden_size=32, num_layers=2)
    coll, run = tiny_setup(n_queries=3, n_docs=8)

    def rerank_all(cache):
        b = get_backend(f"hf:{model}", cache)
        lw = get_reranker("listwise", b, progress=False, window=4, step=2, max_words=12).rerank(coll, run, k=6)
        prp = get_reranker(
            "pairwise-bubblesort", b, progress=False, k=2, scoring="likelihood", passage_tokens=12
        ).rerank(coll, run, k=4)
        return {q: lw.docids(q) for q in lw}, {q: prp.docids(q) for q in prp}, b

    *cold, b = rerank_all(Cache(tmp_path / "cold"))
    res = export_llm_calls(b.cache, tmp_path / "rec.jsonl", [b])
    ops = {c["op"] for c in read_llm_calls(tmp_path / "rec.jsonl")}
    assert res["calls"] == b.usage.calls > 0 and ops == {"generate", "score"}
    fresh = Cache(tmp_path / "fresh")
    assert seed_llm_calls(fresh, tmp_path / "rec.jsonl") == res["calls"]
    monkeypatch.setenv("CLIR_LLM_REPLAY_STAGES", "llm")
    *warm, b2 = rerank_all(fresh)
    assert warm == cold and b2.usage.calls == 0 and b2.usage.cache_hits == res["calls"]


def test_missing_recorded_call_is_an_error(tmp_path, monkeypatch):
    "A call missing from the recorded responses stops the run with one line (what `reproduce` sets for the kernels)."
    from clir_llm.cache import Cache, CacheMiss
    from clir_llm.llm import get_backend
    from clir_llm.replay import export_llm_calls, seed_llm_calls

    model = make_tiny_hf_model(tmp_path / "tiny", "qwen2", hidden_size=32, num_layers=2)
    b = get_backend(f"hf:{model}", Cache(tmp_path / "c1"))
    b.generate(["one", "two"], max_new_tokens=2, progress=False)
    export_llm_calls(b.cache, tmp_path / "r.jsonl", [b])
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    (tmp_path / "r.jsonl").write_text(lines[0] + "\n")
    fresh = Cache(tmp_path / "c2")
    assert seed_llm_calls(fresh, tmp_path / "r.jsonl") == 1
    monkeypatch.setenv("CLIR_LLM_REPLAY_STAGES", "llm")
    monkeypatch.setenv("CLIR_LLM_REPLAY_HINT", "record them again")
    b2 = get_backend(f"hf:{model}", fresh)
    with pytest.raises(CacheMiss) as e:
        b2.generate(["one", "two"], max_new_tokens=2, progress=False)
    assert "1 of 2" in str(e.value) and str(e.value).endswith("; record them again") and "\n" not in str(e.value)
    assert b2.usage.calls == 0


def test_demo_recorded_file_is_clean():
    "The committed file: every line checked, sorted by key, no duplicates, a few MB at most, named by the demo config."
    assert recorded_path(load_config(R.ROOT / "configs" / "demo.yaml")).resolve() == DEMO_RECORDED.resolve()
    calls = read_llm_calls(DEMO_RECORDED)
    keys = [c["key"] for c in calls]
    assert keys == sorted(set(keys)) and len(keys) > 1000
    assert {c["backend"] for c in calls} == {"hf:qwen2.5-coder-0.5b-offline"} and DEMO_RECORDED.stat().st_size < 8e6


@pytest.mark.slow
def test_demo_recorded_calls_recompute():
    "A random sample of 10 recorded demo calls, computed again by the real stand-in (fp32 CPU): the same keys and answers."
    seed = int(os.environ.get("RECORDED_SEED") or random.SystemRandom().randrange(10**6))
    out = recompute_llm_calls(DEMO_RECORDED, n=10, seed=seed)
    bad = [c for c in out if not (c["same_key"] and c["same"])]
    assert len(out) == 10 and not bad, f"seed {seed}: {bad}"


def test_call_keys_name_the_recorded_lines(tmp_path):
    "Each exported line's key is the key its backend gives the noted prompt (`clir_llm.llm.call_key`); an edited prompt is refused."
    from clir_llm.cache import Cache
    from clir_llm.core import ClirError
    from clir_llm.llm import call_key, get_backend
    from clir_llm.replay import export_llm_calls

    model = make_tiny_hf_model(tmp_path / "tiny", "qwen2", hidden_size=32, num_layers=2)
    b = get_backend(f"hf:{model}", Cache(tmp_path / "c"))
    b.generate(["one"], max_new_tokens=2, progress=False)
    b.score(["two"], [" A", " B"], progress=False)
    assert export_llm_calls(b.cache, tmp_path / "r.jsonl", [b]) == {"calls": 2, "skipped": 0}
    for c in read_llm_calls(tmp_path / "r.jsonl"):
        assert call_key(b, c["op"], c["params"], c["prompt"], c.get("candidates")) == c["key"]
    other = get_backend(f"hf:{model}", Cache(tmp_path / "c"), double_bos=True)  # a quirk on: other keys
    with pytest.raises(ClirError, match="none of .* gives its key"):
        export_llm_calls(
            b.cache, tmp_path / "r2.jsonl", [other], keys=[c["key"] for c in read_llm_calls(tmp_path / "r.jsonl")]
        )


@pytest.mark.slow
def test_every_recorded_demo_key_is_reproduced():
    "Byte-identical cache keys: the stand-in renders every prompt of the committed demo calls to its recorded key (no model run)."
    from clir_llm.cache import Cache
    from clir_llm.llm import call_key, get_backend

    calls = read_llm_calls(DEMO_RECORDED)
    b = get_backend("hf:qwen2.5-coder-0.5b-offline", Cache(mode="off"))
    bad = [c["key"] for c in calls if call_key(b, c["op"], c["params"], c["prompt"], c.get("candidates")) != c["key"]]
    assert not bad and len(calls) > 2000, bad[:5]


@pytest.mark.parametrize("response", [None, [1, 2], {}, {"text": 5}, {"text": "x", "tokens_in": "many"}])
def test_a_planted_response_of_the_wrong_shape_is_refused_with_its_line(tmp_path, response):
    """A recorded: line whose check hash was recomputed over a response of the wrong shape (issue 39 item 5) is refused
    with one line naming the file and line, before it reaches the cache (it was five different tracebacks later)."""
    from clir_llm.core import ClirError
    from clir_llm.replay import _check

    d = {
        "key": "k" * 16,
        "backend": "hf:x",
        "op": "generate",
        "params": {"max_new_tokens": 8},
        "prompt": "p",
        "response": response,
    }
    d["check"] = _check(d)
    p = tmp_path / "rec.jsonl"
    p.write_text(json.dumps(d) + "\n")
    try:
        read_llm_calls(p)
        msg = None
    except ClirError as e:
        msg = str(e)
    R.hostile(
        "configs", f"a recorded: line planting a cache row ({str(response)[:20]})", msg is not None and "\n" not in msg
    )
    assert msg and f"{p} line 1: response" in msg and "is not a generate record" in msg, msg
