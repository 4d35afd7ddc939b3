"""The Ray executor on a real local Ray cluster (2 CPUs, `start_local_ray`): a configuration with
`execution: {engine: ray}` gives the same first-stage table, run file, usage counts and cache entries as `engine: local`,
byte for byte, although one of its two workers is killed with SIGKILL mid-run (Ray restarts it and re-runs its batch;
nothing lost or counted twice). The same for the two other loops on actors: sentence translation (a tiny NLLB, by batch
size through a killed worker, and by token budget) and an LLM reranker's generate and score calls (a tiny qwen2 on
`hf:`); and a model the workers cannot find is one error line.
A tiny random encoder on the demo collection's en-ru pair (184 documents, 175 queries; 7 of its query vectors differ
in the last bits between 1 and 2 torch threads, which the workers must therefore match). One Ray cluster for the
module. Set RAY_ADDRESS to use a running cluster (`ray start --head`)."""

import json, os, shutil, signal, threading, time
from pathlib import Path
import pytest, yaml

ray = pytest.importorskip("ray")  # the `ray` extra (not in `dev`: pip install -e ".[dev,ray]")

from clir_llm.cache import Cache
from clir_llm.config import load_config
from clir_llm.core import ClirError, Document
from clir_llm.dense import ENCODERS, Encoder, EncoderSpec, tiny_random_model
from clir_llm.engine import GROUP, ExecutionSpec, RayExecutor, start_local_ray
from clir_llm.executor import LOCAL
from clir_llm.pipeline import Pipeline
from clir_llm.tables import first_stage_table, save_table
from clir_llm.translate import get_translator, tiny_nllb

CONFIG = dict(
    name="engine",
    collection="demo",
    pairs=["en-ru"],
    measure="MAP",
    extra_measures=["nDCG@20"],
    first_stage=dict(methods=["dense:tiny-ray"], depth=20),
    experiments=["1_first_stage"],
)
DOCS, QUERIES = 184, 175
ENCODED = DOCS + QUERIES  # the pair's documents and queries: one cache entry (and one count) each


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    folder = tiny_random_model("xlmr", tmp_path_factory.mktemp("tiny") / "xlmr")
    ENCODERS.register(
        "tiny-ray", EncoderSpec("tiny-ray", str(folder), "Tiny", "mean", max_length=48, doc_max_length=48)
    )
    started = not ray.is_initialized()
    if started:
        try:
            if os.environ.get("RAY_ADDRESS"):
                ray.init(include_dashboard=False, log_to_driver=False)
            else:
                start_local_ray(num_cpus=2)
        except Exception as e:  # a machine where Ray cannot run at all (no shared memory, ...)
            pytest.skip(f"a local Ray cluster did not start: {str(e).strip().splitlines()[0]}")
    yield ENCODERS["tiny-ray"]
    if started:
        ray.shutdown()
    # other tests walk the registry (test_quirks: every real encoder pins a revision)
    ENCODERS._items.pop("tiny-ray", None)


def _ray(**kw) -> RayExecutor:
    return RayExecutor(ExecutionSpec(engine="ray", workers=2), **kw)


def _usage(u) -> dict:
    "A usage without its clock readings (the only values that differ between two identical runs)."
    d = u.to_dict() if hasattr(u, "to_dict") else dict(u)
    d.pop("seconds")
    d["counters"] = {k: v for k, v in d["counters"].items() if k != "cached_seconds"}
    return d


def _kill_one_worker_mid_run(ex: RayExecutor, cache: Path, record: dict, stage: str):
    "Once the actors are up and the driver has stored its first batches, SIGKILL the first actor's process."
    # none before the first batch; then once both have rebuilt the owner
    while not (pids := ex.pids()):
        time.sleep(0.05)
    record["pids"] = pids
    while not (n := Cache(cache, mode="readonly").stats().get(stage, 0)):
        time.sleep(0.02)
    os.kill(pids[0], signal.SIGKILL)
    record["stored_at_kill"] = n


def _killer(ex: RayExecutor, cache: Path, stage: str) -> tuple[threading.Thread, dict]:
    record = {}
    t = threading.Thread(target=_kill_one_worker_mid_run, args=(ex, cache, record, stage), daemon=True)
    t.start()
    return t, record


def _restarted(ex: RayExecutor, record: dict, total: int):
    "The first actor was killed mid-run and Ray restarted it; the second kept its process."
    assert 0 < record.get("stored_at_kill", 0) < total, f"the worker was not killed mid-run: {record}"
    after = ex.pids()
    assert (
        record["pids"][0] not in after and record["pids"][1] in after and len(after) == 2 and os.getpid() not in after
    )


# --- a configuration's first stage


def _pipeline(tmp: Path, execution: dict | None) -> Pipeline:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "engine.yaml").write_text(yaml.safe_dump(dict(CONFIG, **({"execution": execution} if execution else {}))))
    return Pipeline(load_config(tmp / "engine.yaml"), out_dir=tmp / "res", cache=Cache(tmp / "cache"), progress=False)


def _outputs(pipe: Pipeline, tmp: Path):
    "The first-stage table and run files (bytes by name), the usage counts, the cache entries."
    save_table(first_stage_table(pipe), tmp / "res", "first_stage")
    files = {
        p.relative_to(tmp / "res").as_posix(): p.read_bytes() for p in sorted((tmp / "res").rglob("*")) if p.is_file()
    }
    usage = json.loads(next(v for k, v in files.items() if k.endswith(".usage.json")))
    return (
        {k: v for k, v in files.items() if not k.endswith(".usage.json")},
        _usage(usage),
        Cache(tmp / "cache").stats(),
    )


def test_ray_config_reproduces_local_first_stage_table_through_a_killed_worker(cluster, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the local pipeline on the CPU, as the CPU actors
    local = _pipeline(tmp_path / "local", None)
    want = _outputs(local, tmp_path / "local")
    pipe = _pipeline(tmp_path / "ray", {"engine": "ray", "workers": 2})
    ex = pipe.executor
    assert local.executor is LOCAL and isinstance(ex, RayExecutor) and ex.workers == 2
    ex.delay = 0.1  # each batch a little slower, so that the kill lands mid-run
    killer, record = _killer(ex, tmp_path / "ray" / "cache", "embed")
    try:
        got = _outputs(pipe, tmp_path / "ray")
        killer.join(10)
        _restarted(ex, record, ENCODED)
    finally:
        ex.close()
    files, usage, stats = got
    assert any(k.endswith("first_stage.csv") for k in files) and any(k.endswith(".trec") for k in files)
    assert files == want[0]  # table (csv, md, tex) and run file, byte for byte, under the same names
    assert usage == want[1] and (usage["counters"]["docs_encoded"], usage["counters"]["queries_encoded"]) == (
        DOCS,
        QUERIES,
    )
    assert stats == want[2] == {"embed": ENCODED}  # every vector stored once, by the driver


# --- translation and LLM reranking on actors

SENTENCES = 96  # unique sentences: 24 local batches of 4, two groups of 2 workers x GROUP (8) batches: 16, then 8


def _texts():
    "Documents of two sentences each; every sentence once (plus one repeated document: a cache hit inside the call)."
    words = "Haus Hund Katze Wasser Fluss Stadt Musik Buch Baum Licht".split()
    sents = [f"Der {words[i % 10]} Nummer {i} steht {'am ' * (i % 7)}Fluss." for i in range(SENTENCES)]
    docs = [" ".join(sents[i : i + 2]) for i in range(0, SENTENCES, 2)]
    return docs + docs[:1]


def _nllb(model, cache: Path, executor=LOCAL, **kw):
    "The tiny NLLB; here on this CPU, on Ray on the executor's device (its CPU actors)."
    where = {"device": "cpu"} if executor is LOCAL else {}
    return get_translator(
        f"nllb:{model}",
        cache=Cache(cache),
        executor=executor,
        max_new_tokens=10,
        batch_size=4,
        progress=False,
        **where,
        **kw,
    )


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    return tiny_nllb(tmp_path_factory.mktemp("mt") / "nllb")


def test_ray_translation_is_local_through_a_killed_worker(cluster, mt, tmp_path):
    texts = _texts()
    local = _nllb(mt, tmp_path / "local")
    want = local.translate(texts, "de", "en")
    ex = _ray(delay=0.1)
    tr = _nllb(mt, tmp_path / "ray", ex)
    killer, record = _killer(ex, tmp_path / "ray", "translate")
    try:
        got = tr.translate(texts, "de", "en")
        killer.join(10)
        _restarted(ex, record, SENTENCES)
    finally:
        ex.close()
    assert SENTENCES > 2 * GROUP * 4  # two groups (the first committed before the second goes out)
    assert got == want and len(set(got)) > 10
    assert tr._model is None  # the driver never loaded the model: every batch ran on an actor
    assert _usage(tr.usage) == _usage(local.usage) and tr.usage.calls == SENTENCES // 4  # nothing counted twice
    assert Cache(tmp_path / "ray").stats() == Cache(tmp_path / "local").stats() == {"translate": SENTENCES}
    replay = _nllb(mt, tmp_path / "ray")
    # every entry stored by the driver, under the local key, with the local value
    replay.cache.mode = "replay"
    assert replay.translate(texts, "de", "en") == want


def test_ray_translation_by_token_budget_sends_the_local_batches(cluster, mt, tmp_path):
    from clir_llm.executor import LocalExecutor

    class Sizes(LocalExecutor):  # LOCAL, recording the size of each batch it computes
        def __init__(self):
            self.seen = []

        def map(self, owner, method, calls):
            calls = list(calls)
            self.seen += [len(c[0]) for c in calls]
            return super().map(owner, method, calls)

    texts, sizes = _texts(), Sizes()
    local = _nllb(mt, tmp_path / "local", sizes, batch_tokens=300, device="cpu")
    want = local.translate(texts, "de", "en")
    ex = _ray()
    tr = _nllb(mt, tmp_path / "ray", ex, batch_tokens=300)
    try:
        got = tr.translate(texts, "de", "en")
        # the budget's unequal batches
        assert sorted(ex.batch_sizes()) == sorted(sizes.seen) and len(set(sizes.seen)) > 1
    finally:
        ex.close()
    assert got == want and _usage(tr.usage) == _usage(local.usage)
    assert tr._model is None and tr._tok is not None  # lengths for the budget: the tokenizer only
    assert Cache(tmp_path / "ray").stats() == Cache(tmp_path / "local").stats() == {"translate": SENTENCES}


def test_ray_hf_pairwise_generate_and_score_are_local(cluster, tmp_path):
    from clir_llm.llm_hf import HFBackend
    from clir_llm.rerank import get_reranker
    from clir_llm.testing import make_tiny_hf_model, tiny_setup

    coll, first = tiny_setup(n_queries=2, n_docs=6)
    model = make_tiny_hf_model(tmp_path / "qwen2")

    def rerank(b):
        return [
            get_reranker("pairwise-bubblesort", b, k=2, scoring=s, progress=False).rerank(coll, first, k=6)
            for s in ("generation", "likelihood")
        ]

    local = HFBackend.create(str(model), cache=Cache(tmp_path / "local"), batch_size=2, device="cpu")
    want = rerank(local)
    ex = _ray()
    b = HFBackend.create(str(model), cache=Cache(tmp_path / "ray"), batch_size=2, executor=ex)
    try:
        got = rerank(b)
        batches = ex.batch_sizes()
    finally:
        ex.close()
    assert got == want and local.usage.calls > 0
    # the local batches, on the actors
    assert b._model is None and sum(batches) == local.usage.calls and max(batches) == 2
    # what prefix reuse saved depends on which process held which states (each actor keeps its own): those counters
    # differ by design (here 8,716 prefilled tokens on the actors, 7,652 locally, of 21,896 without reuse); all else equal
    reuse = ("prefill_tokens", "prefix_cache_tokens", "prefix_cache_hits", "prefill_padding_tokens")

    def counted(u):
        d = _usage(u)
        d["counters"] = {k: v for k, v in d["counters"].items() if k not in reuse}
        return d

    assert counted(b.usage) == counted(local.usage)
    assert b.usage.counters["prefill_tokens_without_reuse"] == local.usage.counters["prefill_tokens_without_reuse"]
    assert Cache(tmp_path / "ray").stats() == Cache(tmp_path / "local").stats()
    # a rerun: all cache hits in the driver, no new call
    assert rerank(b) == want and b.usage.calls == local.usage.calls


# --- errors from real actors


def test_a_model_the_workers_cannot_find_is_one_error_line(cluster, tmp_path):
    """A model folder that exists where the driver built its owner but not where the workers run: an encoder (which
    loads on its first batch) fails in the call, an hf: backend (which reads its config when built) cannot start.
    One executor for both (as in a pipeline): two pools of 2 actors each would not fit the 2-CPU cluster at once."""
    from clir_llm.llm_hf import HFBackend
    from clir_llm.testing import make_tiny_hf_model

    spec = EncoderSpec(
        "gone", str(tiny_random_model("xlmr", tmp_path / "enc")), "gone", "mean", max_length=16, doc_max_length=16
    )
    ex = _ray()
    enc = Encoder.create(spec, cache=Cache(tmp_path / "c"), executor=ex, progress=False)
    b = HFBackend.create(str(make_tiny_hf_model(tmp_path / "qwen2")), cache=Cache(tmp_path / "c"), executor=ex)
    shutil.rmtree(tmp_path / "enc")
    shutil.rmtree(tmp_path / "qwen2")
    try:
        with pytest.raises(ClirError) as e:
            enc.encode_docs([Document("d", "house")])
        assert str(e.value).startswith("a Ray worker failed: ClirError: cannot load encoder gone") and "\n" not in str(
            e.value
        )
        with pytest.raises(ClirError) as e:
            b.generate(["Which passage?"], max_new_tokens=2, progress=False)
        assert str(e.value).startswith("a Ray worker could not start: ") and "cannot load model config" in str(e.value)
        assert "\n" not in str(e.value)
    finally:
        ex.close()
