"""The execution engine's driver side without a Ray cluster (Ray's few calls stood in by in-process actors): batches cut
as locally, results in the local order, the driver's cache and usage as `engine: local`; the execution options in
configs and on the command line, and that they never enter run names. tests/test_engine.py runs the same on real Ray."""
import sys, types
import pytest, yaml
from clir_llm.cache import Cache
from clir_llm.core import ClirError
from clir_llm.dense import Dense, EncoderSpec, tiny_random_model
from clir_llm.engine import ExecutionSpec, RayEngine, execution_of, make_engine
from clir_llm.core import Document, Qrels, Query
from clir_llm.testing import TinyCollection, tiny_setup

WORDS = "house dog cat water maji vaccine malaria children football cup final world news river city music book".split()


def _collection(n_docs=25, seed=0):
    "Documents of the tiny encoder's own words (others are one unknown token), of 1 to 12 words: distinct vectors and lengths."
    import random
    rng = random.Random(seed)
    docs = {f"d{i:02d}": Document(f"d{i:02d}", " ".join(rng.choice(WORDS) for _ in range(1 + i % 12))) for i in range(n_docs)}
    queries = {f"q{i}": Query(f"q{i}", " ".join(rng.sample(WORDS, 3)), "en") for i in range(3)}
    return TinyCollection(queries, docs, Qrels({q: {"d00": 1} for q in queries}))


def _fake_ray(cpus=4):
    "The calls clir_llm.engine makes (init, remote(cls).options(..).remote(..), method.remote, get, kill), run in this process."
    ray = types.ModuleType("ray")
    ray.exceptions = types.SimpleNamespace(RayTaskError=type("RayTaskError", (Exception,), {}), RayActorError=type("RayActorError", (Exception,), {}))
    ray.calls, ray.created, up = [], [], []
    ray.is_initialized = lambda: bool(up)
    ray.init = lambda **kw: up.append(kw)
    ray.cluster_resources = lambda: {"CPU": cpus}
    class Handle:
        def __init__(self, obj): self._obj = obj
        def __getattr__(self, name):
            def remote(*a): ray.calls.append((id(self), name, len(a[0]) if a and isinstance(a[0], list) else None)); return getattr(self._obj, name)(*a)
            return types.SimpleNamespace(remote=remote)
    class Cls:
        def __init__(self, cls): self.cls = cls
        def options(self, **kw): self.kw = kw; return self
        def remote(self, *a): ray.created.append(self.kw); return Handle(self.cls(*a))
    ray.remote = Cls
    ray.get = lambda refs: list(refs) if isinstance(refs, list) else refs
    ray.kill = lambda actor, no_restart=True: None
    class ActorPool:   # ray.util.ActorPool: here each call on the next actor in turn, results in order
        def __init__(self, actors): self.actors = actors
        def map(self, fn, values): return (fn(self.actors[i % len(self.actors)], v) for i, v in enumerate(values))
    ray.util = types.ModuleType("ray.util"); ray.util.ActorPool = ActorPool
    return ray


@pytest.fixture
def fake_ray(monkeypatch):
    ray = _fake_ray()
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "ray.util", ray.util)
    return ray


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return EncoderSpec("tiny-engine", str(tiny_random_model("xlmr", tmp_path_factory.mktemp("m") / "x")), "Tiny", "mean",
                       max_length=32, doc_max_length=32)


def test_engine_batches_order_cache_and_usage_as_local(fake_ray, spec, tmp_path):
    coll = _collection()
    local = Dense(spec, batch_size=4, cache=Cache(tmp_path / "l"), progress=False)
    want = local.retrieve(coll, k=10)
    engine = RayEngine(ExecutionSpec(engine="ray", workers=2))
    dense = engine.prepare(Dense(spec, batch_size=4, cache=Cache(tmp_path / "r"), progress=False))
    got = dense.retrieve(coll, k=10)
    assert dict(got) == dict(want)
    assert Cache(tmp_path / "r").stats() == Cache(tmp_path / "l").stats() == {"embed": 28}
    strip = lambda u: (u.calls, u.cache_hits, u.counters)
    assert strip(dense.usage) == strip(local.usage)
    encodes = [c for c in fake_ray.calls if c[1] == "encode"]
    assert len({c[0] for c in encodes}) == 2 and max(c[2] for c in encodes) == 4   # both actors, local batch size
    assert fake_ray.created[0]["max_restarts"] >= 1 and fake_ray.created[0]["max_task_retries"] >= 1
    vl, vr = local.encoder.encode_docs(list(coll.iter_docs())), dense.encoder.encode_docs(list(coll.iter_docs()))
    assert vl.tobytes() == vr.tobytes() and len({v.tobytes() for v in vl}) > 20   # the vectors differ from each other
    n = len(fake_ray.calls); dense.retrieve(coll, k=10); assert len(fake_ray.calls) == n   # warm: all from the driver's cache


def test_engine_refuses_more_workers_than_the_cluster_has(monkeypatch, spec, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", _fake_ray(cpus=2))
    engine = RayEngine(ExecutionSpec(engine="ray", workers=3))
    with pytest.raises(ClirError, match="3 workers need 3 CPUs"):
        engine.prepare(Dense(spec, cache=Cache(tmp_path), progress=False)).retrieve(tiny_setup(1, 3)[0], k=2)


def test_execution_in_configs_not_in_run_names(tmp_path, monkeypatch):
    from clir_llm.config import load_config
    from clir_llm.pipeline import Pipeline
    base = dict(name="x", collection="fixture", pairs=["en-de"], measure="MAP", first_stage=dict(methods=["bm25-og"]), experiments=[])
    paths = []
    for ex in (None, {"engine": "ray", "workers": 3, "address": "ray://head:10001", "gpus_per_worker": 1}):
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(dict(base, **({"execution": ex} if ex else {}))))
        cfg = load_config(tmp_path / "c.yaml")
        paths.append(Pipeline(cfg, out_dir=tmp_path / "res", cache=Cache(tmp_path / "cache")).first_stage_path("en-de", "bm25-og"))
    assert paths[0] == paths[1] and cfg.execution.workers == 3 and execution_of(cfg).address == "ray://head:10001"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(dict(base, execution={"engine": "spark"})))
    with pytest.raises(ClirError, match="execution.engine"): load_config(tmp_path / "c.yaml")
    assert make_engine(execution_of(None)) is None
    monkeypatch.setenv("CLIR_LLM_EXECUTION", '{"engine": "ray", "workers": 5}')   # what `reproduce --engine ray --workers 5` hands its notebooks
    assert execution_of(cfg).workers == 5 and execution_of(cfg, workers=6).workers == 6


def test_cli_engine_options(tmp_path, capsys):
    "A bad execution option is one error line from `clir-llm retrieve` (before any collection or model is loaded)."
    from clir_llm.cli import main
    assert main(["retrieve", "--collection", "fixture", "--pair", "en-de", "--method", "bm25-og", "--out", str(tmp_path / "r.trec"),
                 "--engine", "ray", "--workers", "0"]) == 1
    assert "workers" in capsys.readouterr().err and not (tmp_path / "r.trec").exists()


def test_workers_use_the_drivers_torch_threads_unless_told(fake_ray, spec, tmp_path, monkeypatch):
    "CPU vectors depend on torch's thread count: by default each actor takes the driver's (1 Ray CPU reserved each)."
    import torch
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    n, made = torch.get_num_threads(), []
    monkeypatch.setattr(torch, "set_num_threads", made.append)   # the stand-in actors run in this process: keep its threads
    coll = _collection(6)
    for threads, cpus, want in ((None, 1, n), (3, 3, 3)):
        engine = RayEngine(ExecutionSpec(engine="ray", workers=1, threads_per_worker=threads))
        engine.prepare(Dense(spec, batch_size=4, cache=Cache(tmp_path / str(threads)), progress=False)).retrieve(coll, k=2)
        assert made[-1] == want and fake_ray.created[-1]["num_cpus"] == cpus
    assert torch.get_num_threads() == n


def test_no_address_starts_a_local_cluster_never_joins_one(monkeypatch, spec, tmp_path):
    ray = _fake_ray()
    kws = []
    ray.init = lambda **kw: (kws.append(kw), setattr(ray, "is_initialized", lambda: True))
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    RayEngine(ExecutionSpec(engine="ray", workers=1)).start()
    assert kws[-1]["address"] == "local"          # not None: Ray would join a stale /tmp/ray/ray_current_cluster
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    RayEngine(ExecutionSpec(engine="ray", workers=1, address="auto")).start()
    assert kws[-1]["address"] == "auto"


def _sizes(ray, method: str) -> list[int]: return sorted(c[2] for c in ray.calls if c[1] == method)


@pytest.mark.parametrize("budget", [None, 200])
def test_translation_batches_cache_and_usage_as_local(fake_ray, tmp_path, budget):
    "The engine's translator: the local batches (by batch size or token budget) on the actors, the local cache and usage."
    from clir_llm.translate import NLLBTranslator, tiny_nllb
    mt, seen = tiny_nllb(tmp_path / "mt"), []
    texts = [f"Der Satz {i} {'ist lang ' * (i % 5)}hier. Noch {i}." for i in range(20)]
    make = lambda where: NLLBTranslator(str(mt), device="cpu", max_new_tokens=6, batch_size=3, batch_tokens=budget,
                                        cache=Cache(tmp_path / where), progress=False)
    local = make("l")
    compute = local._translate_batch
    local._translate_batch = lambda b, s, t: seen.append(len(b)) or compute(b, s, t)
    want = local.translate(texts, "de", "en")
    engine = RayEngine(ExecutionSpec(engine="ray", workers=2))
    tr = engine.attach_translator(make("r"))
    assert tr.translate(texts, "de", "en") == want and tr._model is None
    assert _sizes(fake_ray, "translate") == sorted(seen) and len({c[0] for c in fake_ray.calls if c[1] == "translate"}) == 2
    strip = lambda u: (u.calls, u.cache_hits, u.tokens_in, u.tokens_out, u.counters)
    assert strip(tr.usage) == strip(local.usage) and Cache(tmp_path / "r").stats() == Cache(tmp_path / "l").stats()


def test_llm_batches_cache_and_usage_as_local(fake_ray, tmp_path):
    "An hf: backend's generate and score batches on the actors: the local batches, runs, cache entries and usage."
    from clir_llm.llm import HFBackend
    from clir_llm.rerank import get_reranker
    from clir_llm.testing import make_tiny_hf_model
    coll, first = tiny_setup(n_queries=2, n_docs=5)
    model = make_tiny_hf_model(tmp_path / "qwen2")
    rerank = lambda b: [get_reranker("pairwise-bubblesort", b, k=2, scoring=s, progress=False).rerank(coll, first, k=5)
                        for s in ("generation", "likelihood")]
    local = HFBackend(str(model), cache=Cache(tmp_path / "l"), batch_size=3)
    want = rerank(local)
    engine = RayEngine(ExecutionSpec(engine="ray", workers=2))
    b = engine.attach_backend(HFBackend(str(model), cache=Cache(tmp_path / "r"), batch_size=3))
    assert rerank(b) == want and b._model is None
    gen, score = _sizes(fake_ray, "generate"), _sizes(fake_ray, "score")
    assert gen and score and max(gen + score) == 3 and sum(gen + score) == local.usage.calls
    strip = lambda u: (u.calls, u.cache_hits, u.tokens_in, u.tokens_out)
    assert strip(b.usage) == strip(local.usage) and Cache(tmp_path / "r").stats() == Cache(tmp_path / "l").stats()


def test_worker_errors_are_one_line_even_without_a_message(fake_ray):
    "A worker's exception without a message (MemoryError()) and a worker that cannot start: one line each, the cause named."
    engine = RayEngine(ExecutionSpec(engine="ray", workers=1))
    class Boom:
        def __init__(self, exc): self.exc = exc
        def work(self, x): raise self.exc
    TaskError, ActorError = fake_ray.exceptions.RayTaskError, fake_ray.exceptions.RayActorError
    task = TaskError("ray::Boom.work()"); task.cause = MemoryError()
    engine._actors = [fake_ray.remote(Boom).options().remote(task)]
    with pytest.raises(ClirError, match=r"^a Ray worker failed: MemoryError$"): engine.map("work", [(1,)])
    died = ActorError("The actor died because of an error raised in its creation task"); died.actor_init_failed = True
    died.error_msg = "ray::LLMWorker.__init__() (pid=1)\n  File x\nclir_llm.core.ClirError: cannot load NLLB model 'x': not found\n"
    engine._actors = [fake_ray.remote(Boom).options().remote(died)]
    with pytest.raises(ClirError, match=r"^a Ray worker could not start: clir_llm.core.ClirError: cannot load NLLB model 'x': not found$"):
        engine.map("work", [(1,)])


def test_actors_take_the_encoder_spec_dtype_and_the_card_dtype_of_their_device(fake_ray, spec, tmp_path):
    "An encoder's own dtype stays on actors; an hf: model card's dtype is the GPU actors' dtype even when the driver has no GPU."
    from clir_llm.dense import Encoder
    from clir_llm.llm import HFBackend
    from clir_llm.testing import make_tiny_hf_model
    import dataclasses
    enc = Encoder(dataclasses.replace(spec, dtype="bfloat16"), device="cpu", cache=Cache(tmp_path / "e"), progress=False)
    RayEngine(ExecutionSpec(engine="ray", workers=1)).attach_encoder(enc)
    assert enc.dtype == "bfloat16"
    tiny = make_tiny_hf_model(tmp_path / "qwen2")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    b = HFBackend("meta-llama/Llama-3.1-8B-Instruct", cache=Cache(tmp_path / "b"), device="cpu",
                  hf_model=AutoModelForCausalLM.from_pretrained(tiny), tokenizer=AutoTokenizer.from_pretrained(tiny))
    assert b._dtype == "float32"            # the card's half dtype is for GPUs; this driver is a CPU
    b._model = None                         # as a driver that has not loaded it
    RayEngine(ExecutionSpec(engine="ray", workers=1, gpus_per_worker=1)).attach_backend(b)
    from clir_llm.llm import model_card
    card = model_card("meta-llama/Llama-3.1-8B-Instruct").dtype
    assert card in ("float16", "bfloat16") and b._dtype == card and b.identity()["dtype"] == card, b.identity()


def test_hub_translator_revision_from_config_alone(monkeypatch):
    "A Hub NLLB not in the local cache is named by fetching its config.json, never by loading the model."
    import huggingface_hub
    from clir_llm.translate import NLLBTranslator
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *a, **k: None)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo, f, revision=None: f"/hf/models--x/snapshots/abc123/{f}")
    tr = NLLBTranslator("facebook/nllb-200-distilled-600M", device="cpu", cache=Cache(mode="off"), progress=False)
    tr.load = lambda: pytest.fail("the model was loaded to name its revision")
    assert tr.revision == "abc123" and tr._model is None
