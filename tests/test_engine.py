"""Issue 18 item 4 on a real local Ray cluster (2 CPUs): a configuration with `execution: {engine: ray}` gives the same
first-stage table, run file, usage counts and cache entries as `engine: local`, byte for byte, although one of its two
workers is killed with SIGKILL mid-run (Ray restarts it and re-runs its batch; nothing lost or counted twice).
The same for the two other loops on actors: sentence translation (a tiny NLLB, by batch size through a killed worker,
and by token budget) and an LLM reranker's generate and score calls (a tiny qwen2 on `hf:`).
A tiny random encoder on the demo collection's en-ru pair (184 documents, 175 queries; 7 of its query vectors differ
in the last bits between 1 and 2 torch threads, which the workers must therefore match). One Ray run. Set RAY_ADDRESS to use a running cluster (`ray start --head`)."""
import json, os, signal, threading, time
from pathlib import Path
import pytest, yaml

ray = pytest.importorskip("ray")   # the `ray` extra (not in `dev`: pip install -e ".[dev,ray]")

from clir_llm.cache import Cache
from clir_llm.config import load_config
from clir_llm.dense import ENCODERS, EncoderSpec, tiny_random_model
from clir_llm.engine import ExecutionSpec, RayEngine, start_local_ray
from clir_llm.pipeline import Pipeline
from clir_llm.tables import first_stage_table, save_table

CONFIG = dict(name="engine", collection="demo", pairs=["en-ru"], measure="MAP", extra_measures=["nDCG@20"],
              first_stage=dict(methods=["dense:tiny-ray"], depth=20), experiments=["1_first_stage"])
DOCS, QUERIES = 184, 175
ENCODED = DOCS + QUERIES   # the pair's documents and queries: one cache entry (and one count) each


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    folder = tiny_random_model("xlmr", tmp_path_factory.mktemp("tiny") / "xlmr")
    ENCODERS.register("tiny-ray", EncoderSpec("tiny-ray", str(folder), "Tiny", "mean", max_length=48, doc_max_length=48))
    started = not ray.is_initialized()
    if started:
        try:
            if os.environ.get("RAY_ADDRESS"): ray.init(include_dashboard=False, log_to_driver=False)
            else: start_local_ray(num_cpus=2)
        except Exception as e:   # a machine where Ray cannot run at all (no shared memory, ...)
            pytest.skip(f"a local Ray cluster did not start: {str(e).strip().splitlines()[0]}")
    yield ENCODERS["tiny-ray"]
    if started: ray.shutdown()
    ENCODERS._items.pop("tiny-ray", None)   # other tests walk the registry (test_quirks: every real encoder pins a revision)


def _pipeline(tmp: Path, execution: dict | None) -> Pipeline:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "engine.yaml").write_text(yaml.safe_dump(dict(CONFIG, **({"execution": execution} if execution else {}))))
    return Pipeline(load_config(tmp / "engine.yaml"), out_dir=tmp / "res", cache=Cache(tmp / "cache"), progress=False)


def _outputs(pipe: Pipeline, tmp: Path):
    "The first-stage table and run files (bytes by name), the usage counts, the cache entries."
    save_table(first_stage_table(pipe), tmp / "res", "first_stage")
    files = {p.relative_to(tmp / "res").as_posix(): p.read_bytes() for p in sorted((tmp / "res").rglob("*")) if p.is_file()}
    usage = json.loads(next(v for k, v in files.items() if k.endswith(".usage.json")))
    usage.pop("seconds")
    return {k: v for k, v in files.items() if not k.endswith(".usage.json")}, usage, Cache(tmp / "cache").stats()


def _kill_one_worker_mid_run(engine: RayEngine, cache: Path, record: dict, stage: str = "embed"):
    "Once the actors are up and the driver has stored its first batches, SIGKILL the first actor's process."
    while not engine._actors: time.sleep(0.05)
    record["pids"] = pids = engine.pids()   # returns once both have loaded the model
    while not (n := Cache(cache, mode="readonly").stats().get(stage, 0)): time.sleep(0.02)
    os.kill(pids[0], signal.SIGKILL)
    record["stored_at_kill"] = n


def test_ray_config_reproduces_local_first_stage_table_through_a_killed_worker(cluster, tmp_path):
    local = _pipeline(tmp_path / "local", None)
    want = _outputs(local, tmp_path / "local")
    pipe = _pipeline(tmp_path / "ray", {"engine": "ray", "workers": 2})
    engine = pipe.engine()
    assert local.engine() is None and isinstance(engine, RayEngine)
    engine.delay = 0.1   # each batch a little slower, so that the kill lands mid-run
    record = {}
    killer = threading.Thread(target=_kill_one_worker_mid_run, args=(engine, tmp_path / "ray" / "cache", record), daemon=True)
    killer.start()
    try:
        got = _outputs(pipe, tmp_path / "ray")
        killer.join(10)
        assert 0 < record.get("stored_at_kill", 0) < ENCODED, f"the worker was not killed mid-run: {record}"
        after = engine.pids()
        assert record["pids"][0] not in after and record["pids"][1] in after and len(after) == 2   # Ray restarted the killed actor
    finally: engine.close()
    files, usage, stats = got
    assert any(k.endswith("first_stage.csv") for k in files) and any(k.endswith(".trec") for k in files)
    assert files == want[0]                    # table (csv, md, tex) and run file, byte for byte, under the same names
    assert usage == want[1] and (usage["counters"]["docs_encoded"], usage["counters"]["queries_encoded"]) == (DOCS, QUERIES)   # nothing counted twice
    assert stats == want[2] == {"embed": ENCODED}   # every vector stored once, by the driver


# --- translation and LLM reranking on actors

from clir_llm.translate import NLLBTranslator, tiny_nllb

SENTENCES = 96   # unique sentences: 24 local batches of 4, two groups of 2 workers x GROUP (8) batches: 16, then 8


def _texts():
    "Documents of two sentences each; every sentence once (plus one repeated document: a cache hit inside the call)."
    words = "Haus Hund Katze Wasser Fluss Stadt Musik Buch Baum Licht".split()
    sents = [f"Der {words[i % 10]} Nummer {i} steht {'am ' * (i % 7)}Fluss." for i in range(SENTENCES)]
    docs = [" ".join(sents[i:i + 2]) for i in range(0, SENTENCES, 2)]
    return docs + docs[:1]


def _nllb(model, cache: Path, engine=None, **kw) -> NLLBTranslator:
    tr = NLLBTranslator(str(model), device="cpu", max_new_tokens=10, batch_size=4, cache=Cache(cache), progress=False, **kw)
    return engine.attach_translator(tr) if engine is not None else tr


def _usage(u) -> dict:
    "A usage without its clock readings (the only values that differ between two identical runs)."
    d = u.to_dict(); d.pop("seconds")
    d["counters"] = {k: v for k, v in d["counters"].items() if k != "cached_seconds"}
    return d


def _actor_batches(engine: RayEngine) -> list[int]:
    "The sizes of the batches the current pool's actors computed (a restarted actor forgets its own)."
    return sorted(n for sizes in ray.get([a.batches.remote() for a in engine._actors]) for n in sizes)


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    return tiny_nllb(tmp_path_factory.mktemp("mt") / "nllb")


def test_ray_translation_is_local_through_a_killed_worker(cluster, mt, tmp_path):
    texts = _texts()
    local = _nllb(mt, tmp_path / "local")
    want = local.translate(texts, "de", "en")
    engine = RayEngine(ExecutionSpec(engine="ray", workers=2), delay=0.1)
    tr = _nllb(mt, tmp_path / "ray", engine)
    record = {}
    killer = threading.Thread(target=_kill_one_worker_mid_run, args=(engine, tmp_path / "ray", record, "translate"), daemon=True)
    killer.start()
    try:
        got = tr.translate(texts, "de", "en")
        killer.join(10)
        assert 0 < record.get("stored_at_kill", 0) < SENTENCES, f"the worker was not killed mid-run: {record}"
        after = engine.pids()
        assert record["pids"][0] not in after and os.getpid() not in after and len(after) == 2   # restarted, and not this process
    finally: engine.close()
    assert got == want and len(set(got)) > 10
    assert tr._model is None                     # the driver never loaded the model: every batch ran on an actor
    assert _usage(tr.usage) == _usage(local.usage) and tr.usage.calls == SENTENCES // 4   # nothing counted twice
    assert Cache(tmp_path / "ray").stats() == Cache(tmp_path / "local").stats() == {"translate": SENTENCES}
    replay = _nllb(mt, tmp_path / "ray")
    replay.cache.mode = "replay"                 # every entry stored by the driver, under the local key, with the local value
    assert replay.translate(texts, "de", "en") == want


def test_ray_translation_by_token_budget_sends_the_local_batches(cluster, mt, tmp_path):
    texts, seen = _texts(), []
    local = _nllb(mt, tmp_path / "local", batch_tokens=300)
    compute = local._translate_batch
    local._translate_batch = lambda b, s, t: seen.append(len(b)) or compute(b, s, t)
    want = local.translate(texts, "de", "en")
    engine = RayEngine(ExecutionSpec(engine="ray", workers=2))
    tr = _nllb(mt, tmp_path / "ray", engine, batch_tokens=300)
    try:
        got = tr.translate(texts, "de", "en")
        assert _actor_batches(engine) == sorted(seen) and len(set(seen)) > 1   # the budget's batches (of unequal sizes), on actors
    finally: engine.close()
    assert got == want and _usage(tr.usage) == _usage(local.usage) and tr._model is None and tr._tok is not None   # lengths: the tokenizer only
    assert Cache(tmp_path / "ray").stats() == Cache(tmp_path / "local").stats() == {"translate": SENTENCES}


def test_ray_llm_rerank_generate_and_score_are_local(cluster, tmp_path):
    from clir_llm.llm import HFBackend
    from clir_llm.rerank import get_reranker
    from clir_llm.testing import make_tiny_hf_model, tiny_setup
    coll, first = tiny_setup(n_queries=2, n_docs=6)
    model = make_tiny_hf_model(tmp_path / "qwen2")
    def rerank(b):
        return [get_reranker("pairwise-bubblesort", b, k=2, scoring=s, progress=False).rerank(coll, first, k=6)
                for s in ("generation", "likelihood")]
    local = HFBackend(str(model), cache=Cache(tmp_path / "local"), batch_size=2)
    want = rerank(local)
    engine = RayEngine(ExecutionSpec(engine="ray", workers=2))
    b = engine.attach_backend(HFBackend(str(model), cache=Cache(tmp_path / "ray"), batch_size=2))
    try:
        got = rerank(b)
        batches = _actor_batches(engine)
    finally: engine.close()
    assert got == want and local.usage.calls > 0
    assert b._model is None and sum(batches) == local.usage.calls and max(batches) == 2   # the local batches, on the actors
    assert _usage(b.usage) == _usage(local.usage)
    assert Cache(tmp_path / "ray").stats() == Cache(tmp_path / "local").stats()
    assert rerank(b) == want and b.usage.calls == local.usage.calls   # a rerun: all cache hits in the driver, no new call


def test_a_ray_config_routes_its_translator_and_local_model_backends(mt, tmp_path):
    "The pipeline attaches the translator of its QT/DT views and its rerankers' hf: backends (no Ray started for that)."
    from types import SimpleNamespace
    from clir_llm.testing import make_tiny_hf_model
    from clir_llm.translate import DictionaryTranslator
    lm = f"hf:{make_tiny_hf_model(tmp_path / 'qwen2')}"
    fs = dict(methods=["bm25-qt"], depth=20, translator=f"nllb:{mt}")
    pipes = {}
    for name, execution in (("local", None), ("ray", {"engine": "ray", "workers": 2})):
        (tmp_path / name).mkdir()
        cfg = dict(CONFIG, first_stage=fs, **({"execution": execution} if execution else {}))
        (tmp_path / name / "c.yaml").write_text(yaml.safe_dump(cfg))
        pipes[name] = Pipeline(load_config(tmp_path / name / "c.yaml"), out_dir=tmp_path / name / "res",
                               cache=Cache(tmp_path / name / "cache"), progress=False)
    engine = pipes["ray"].engine()
    assert pipes["ray"].translator()._engine is engine and pipes["ray"].backend(lm)._engine is engine
    assert not hasattr(pipes["local"].translator(), "_engine") and not hasattr(pipes["local"].backend(lm), "_engine")
    assert engine._actors == []                  # actors start with the first batch, not when attached
    assert pipes["ray"].translator()._namespace("de", "en").key("x") == pipes["local"].translator()._namespace("de", "en").key("x")
    assert pipes["ray"].backend(lm).identity() == pipes["local"].backend(lm).identity()   # cache keys do not name the engine
    d, api = DictionaryTranslator(), SimpleNamespace(kind="openai", _threaded=True)
    assert engine.attach_translator(d) is d and not hasattr(d, "_engine")        # word-by-word lookups stay here
    assert engine.attach_backend(api) is api and not hasattr(api, "_engine")     # a server pool spreads openai: itself
