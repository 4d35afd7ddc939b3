"""The Ray executor's driver side without a Ray cluster: Ray's few calls (`ray.init`, `remote(cls).options(..).remote(..)`,
a method's `.remote`, `get`, `kill`, `ray.util.ActorPool`) are stood in by actors in this process that receive their
arguments and return their results through pickle, as Ray's do. Checked: every owner (dense encoder, NLLB translator,
`hf:` backend) sends exactly the batches it computes locally, `GROUP` batches per worker per group, each group committed
before the next; results, cache entries and usage are those of `LOCAL`; the recipes carry the device and dtype; errors are
one line; the execution options live in configs and on the command line, never in run names.
tests/test_engine.py runs the same on a real Ray cluster, through a killed worker."""

import pickle, socket, sys, time, traceback, types
import pytest, yaml
from clir_llm.cache import Cache
from clir_llm.core import ClirError, Document, Qrels, Query, Usage
from clir_llm.dense import Dense, Encoder, EncoderSpec, rebuild_encoder, tiny_random_model
from clir_llm.engine import GROUP, ExecutionSpec, RayExecutor, Worker, execution_of, make_executor
from clir_llm.executor import LOCAL, LocalExecutor
from clir_llm.testing import TinyCollection, tiny_setup

WORDS = "house dog cat water maji vaccine malaria children football cup final world news river city music book".split()


def _collection(n_docs=25, seed=0):
    "Distinct documents of the tiny encoder's own words (others are one unknown token), of 1 to 12 words: distinct vectors and lengths."
    import random

    rng, docs = random.Random(seed), {}
    while len(docs) < n_docs:
        text = " ".join(rng.choice(WORDS) for _ in range(1 + len(docs) % 12))
        if text not in {d.text for d in docs.values()}:
            docs[f"d{len(docs):02d}"] = Document(f"d{len(docs):02d}", text)
    queries = {f"q{i}": Query(f"q{i}", " ".join(rng.sample(WORDS, 3)), "en") for i in range(3)}
    return TinyCollection(queries, docs, Qrels({q: {"d00": 1} for q in queries}))


class Recording(LocalExecutor):
    "`LOCAL` that also records the first argument of every call (the batch) and the size of every group."

    def __init__(self):
        self.batches, self.sent = [], []

    def map(self, owner, method, calls):
        calls = list(calls)
        self.sent.append(len(calls))
        self.batches += [(method, list(c[0])) for c in calls]
        return super().map(owner, method, calls)


def _through_pickle(x):
    return pickle.loads(pickle.dumps(x))


def _fake_ray(cpus=4):
    """The calls clir_llm.engine makes of Ray, run in this process. Arguments and results go through pickle (a recipe
    that is not picklable fails here as on Ray); an actor is built on its first call, and an exception raised there
    arrives as Ray's `RayActorError` (`actor_init_failed`, the traceback in `error_msg`), one raised by a call as
    `RayTaskError` (the exception in `cause`). `ray.calls`: (actor, method, batch) per call; `ray.groups`: per
    `ActorPool.map`, the number of calls and the cache entries stored before it (`ray.watch`: a function giving them)."""
    ray = types.ModuleType("ray")
    TaskError = type("RayTaskError", (Exception,), {})
    ActorError = type("RayActorError", (Exception,), {})
    ray.exceptions = types.SimpleNamespace(RayTaskError=TaskError, RayActorError=ActorError)
    ray.calls, ray.created, ray.killed, ray.inits, ray.groups, ray.watch, up = [], [], [], [], [], None, []
    ray.is_initialized = lambda: bool(up)
    ray.init = lambda **kw: (ray.inits.append(kw), up.append(kw))
    ray.cluster_resources = lambda: {"CPU": cpus}

    class Handle:
        def __init__(self, cls, args):
            self._cls, self._args, self._obj = cls, _through_pickle(args), None

        def __getattr__(self, name):
            def remote(*a):
                if self._obj is None:
                    try:
                        self._obj = self._cls(*self._args)
                    except Exception as e:
                        err = ActorError("The actor died because of an error raised in its creation task")
                        err.actor_init_failed = True
                        err.error_msg = f"ray::{self._cls.__name__}.__init__() (pid=1)\n" + "".join(
                            traceback.format_exception(e)
                        )
                        raise err from None
                a = _through_pickle(a)
                if name == "call":
                    ray.calls.append((id(self), a[0], a[1][0]))
                try:
                    return _through_pickle(getattr(self._obj, name)(*a))
                except Exception as e:
                    err = TaskError(
                        f"ray::{self._cls.__name__}.{name}() (pid=1)\n" + "".join(traceback.format_exception(e))
                    )
                    err.cause = e
                    raise err from None

            return types.SimpleNamespace(remote=remote)

    class Remote:
        def __init__(self, cls):
            self.cls, self.kw = cls, {}

        def options(self, **kw):
            self.kw = kw
            return self

        def remote(self, *a):
            ray.created.append(self.kw)
            return Handle(self.cls, a)

    ray.remote = Remote
    ray.get = lambda refs: list(refs) if isinstance(refs, list) else refs
    ray.kill = lambda actor, no_restart=True: ray.killed.append(actor)

    class ActorPool:  # ray.util.ActorPool: here each call on the next actor in turn, results in order
        def __init__(self, actors):
            self.actors = actors

        def map(self, fn, values):
            ray.groups.append((len(values), ray.watch() if ray.watch else None))
            return (fn(self.actors[i % len(self.actors)], v) for i, v in enumerate(values))

    ray.util = types.ModuleType("ray.util")
    ray.util.ActorPool = ActorPool
    return ray


@pytest.fixture
def fake_ray(monkeypatch):
    ray = _fake_ray()
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "ray.util", ray.util)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return ray


def _ray(workers=2, **kw) -> RayExecutor:
    return RayExecutor(ExecutionSpec(engine="ray", workers=workers, **kw))


def _usage(u: Usage) -> dict:
    "A usage without its clock readings (the only values that differ between two identical runs)."
    d = u.to_dict()
    d.pop("seconds")
    d["counters"] = {k: v for k, v in d["counters"].items() if k != "cached_seconds"}
    return d


def _sent(ray, method: str) -> list:
    "The batches the stand-in actors computed for `method`, in the order they were sent."
    return [(m, list(b)) for _, m, b in ray.calls if m == method]


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return EncoderSpec(
        "tiny-engine",
        str(tiny_random_model("xlmr", tmp_path_factory.mktemp("m") / "x")),
        "Tiny",
        "mean",
        max_length=32,
        doc_max_length=32,
    )


# --- dense encoding


def test_dense_on_actors_sends_the_local_batches_and_keeps_the_local_run_cache_and_usage(fake_ray, spec, tmp_path):
    coll, rec = _collection(), Recording()
    local = Dense.create(spec, batch_size=4, device="cpu", cache=Cache(tmp_path / "l"), executor=rec, progress=False)
    want = local.retrieve(coll, k=10)
    ex = _ray()
    dense = Dense.create(spec, batch_size=4, cache=Cache(tmp_path / "r"), executor=ex, progress=False)
    got = dense.retrieve(coll, k=10)
    assert dict(got) == dict(want)
    # the local batches, in order
    assert _sent(fake_ray, "encode_batch") == rec.batches and max(len(b) for _, b in rec.batches) == 4
    assert len({actor for actor, _, _ in fake_ray.calls}) == 2  # on both actors
    # stored by the driver
    assert Cache(tmp_path / "r").stats() == Cache(tmp_path / "l").stats() == {"embed": 28}
    # each text counted once
    assert _usage(dense.usage) == _usage(local.usage) and dense.usage.counters["docs_encoded"] == 25
    assert fake_ray.created[0]["max_restarts"] >= 1 and fake_ray.created[0]["max_task_retries"] >= 1
    assert fake_ray.created[0]["num_cpus"] == 1 and fake_ray.created[0]["num_gpus"] == 0
    vl, vr = (d.encoder.encode_docs(list(coll.iter_docs())) for d in (local, dense))
    assert vl.tobytes() == vr.tobytes() and len({v.tobytes() for v in vl}) == 25  # the vectors differ from each other
    # warm: all from the driver's cache
    n = len(fake_ray.calls)
    dense.retrieve(coll, k=10)
    assert len(fake_ray.calls) == n
    # the driver never loaded the model
    assert dense.encoder._model is None


def test_each_group_is_GROUP_batches_per_worker_committed_before_the_next(fake_ray, spec, tmp_path):
    docs = list(_collection(40).iter_docs())
    cache = Cache(tmp_path / "r")
    fake_ray.watch = lambda: Cache(tmp_path / "r", mode="readonly").stats().get("embed", 0)
    enc = Encoder.create(spec, batch_size=1, cache=cache, executor=_ray(workers=2), progress=False)
    enc.encode_docs(docs)
    # workers x GROUP batches, then the rest
    assert [n for n, _ in fake_ray.groups] == [2 * GROUP, 2 * GROUP, 40 - 4 * GROUP]
    # each group stored before the next went out
    assert [stored for _, stored in fake_ray.groups] == [0, 2 * GROUP, 4 * GROUP]


def test_one_pool_per_recipe_the_previous_released(fake_ray, spec, tmp_path):
    "Two owners with the same recipe share the actors; another recipe (another model) releases them first."
    ex, docs = _ray(workers=2), list(_collection(12).iter_docs())
    a = Encoder.create(spec, batch_size=2, cache=Cache(tmp_path / "a"), executor=ex, progress=False)
    b = Encoder.create(spec, batch_size=2, cache=Cache(tmp_path / "a"), executor=ex, progress=False)
    a.encode_docs(docs[:6])
    b.encode_docs(docs[6:])
    assert len(fake_ray.created) == 2 and not fake_ray.killed and len({actor for actor, _, _ in fake_ray.calls}) == 2
    other = Encoder.create(spec, dtype="bfloat16", cache=Cache(tmp_path / "c"), executor=ex, progress=False)
    other.encode_docs(docs[:1])
    assert len(fake_ray.created) == 4 and len(fake_ray.killed) == 2
    ex.close()
    assert len(fake_ray.killed) == 4 and ex.pids() == []


# --- translation and LLM reranking


@pytest.mark.parametrize("budget", [0, 200])
def test_translation_on_actors_sends_the_local_batches_by_size_and_by_token_budget(fake_ray, tmp_path, budget):
    from clir_llm.translate import get_translator, tiny_nllb

    mt = tiny_nllb(tmp_path / "mt")
    texts = [f"Der Satz {i} {'ist lang ' * (i % 5)}hier. Noch {i}." for i in range(20)]
    make = lambda where, ex, **kw: get_translator(
        f"nllb:{mt}",
        cache=Cache(tmp_path / where),
        executor=ex,
        max_new_tokens=6,
        batch_size=3,
        batch_tokens=budget,
        progress=False,
        **kw,
    )
    rec = Recording()
    local = make("l", rec, device="cpu")
    want = local.translate(texts, "de", "en")
    tr = make("r", _ray(workers=2))
    assert tr.translate(texts, "de", "en") == want and len(set(want)) > 1
    assert _sent(fake_ray, "translate_batch") == rec.batches and len({a for a, _, _ in fake_ray.calls}) == 2
    sizes = [len(b) for _, b in rec.batches]
    # batch_size sentences, or as many as the budget holds
    assert (max(sizes) == 3) if not budget else (len(set(sizes)) > 1)
    assert _usage(tr.usage) == _usage(local.usage) and tr.usage.calls == len(rec.batches)  # each batch counted once
    assert Cache(tmp_path / "r").stats() == Cache(tmp_path / "l").stats() == {"translate": 40}
    # the driver never loaded the model (the budget needs the tokenizer only)
    assert tr._model is None


def test_hf_pairwise_generate_and_score_on_actors_are_local(fake_ray, tmp_path):
    "PRP by generation and by likelihood on an hf: backend: the local batches, reranked runs, cache entries and usage."
    from clir_llm.llm_hf import HFBackend
    from clir_llm.rerank import get_reranker
    from clir_llm.testing import make_tiny_hf_model

    coll, first = tiny_setup(n_queries=2, n_docs=5)
    model = make_tiny_hf_model(tmp_path / "qwen2")
    rerank = lambda b: [
        get_reranker("pairwise-bubblesort", b, k=2, scoring=s, progress=False).rerank(coll, first, k=5)
        for s in ("generation", "likelihood")
    ]
    rec = Recording()
    # prefix reuse off on both sides: with it on, the local backend's batches differ from those the actors get (the
    # answers are equal), and this test compares the batches themselves
    local = HFBackend.create(
        str(model), cache=Cache(tmp_path / "l"), batch_size=3, device="cpu", executor=rec, prefix_cache=False
    )
    want = rerank(local)
    b = HFBackend.create(
        str(model), cache=Cache(tmp_path / "r"), batch_size=3, executor=_ray(workers=2), prefix_cache=False
    )
    assert rerank(b) == want
    gen, score = _sent(fake_ray, "_generate_batch"), _sent(fake_ray, "_score_batch")
    # the local batches, in the local order
    assert gen and score and [(m, b) for _, m, b in fake_ray.calls] == rec.batches
    assert max(len(x) for _, x in gen + score) == 3 and sum(len(x) for _, x in gen + score) == local.usage.calls
    assert _usage(b.usage) == _usage(local.usage) and Cache(tmp_path / "r").stats() == Cache(tmp_path / "l").stats()
    assert b._model is None  # the driver renders prompts (tokenizer) but never loads the model
    # a rerun: all hits in the driver's cache
    n = len(fake_ray.calls)
    assert rerank(b) == want and len(fake_ray.calls) == n


# --- a configuration


def test_a_ray_config_routes_its_translator_encoders_and_hf_backends_through_its_executor(
    fake_ray, tmp_path, spec, monkeypatch
):
    "A pipeline of `execution: {engine: ray}`: QT translation, dense encoding and hf: calls on the actors, outputs as local."
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the local pipeline on the CPU, as the CPU actors
    from clir_llm.config import load_config
    from clir_llm.pipeline import Pipeline
    from clir_llm.testing import make_tiny_hf_model
    from clir_llm.translate import tiny_nllb

    lm = f"hf:{make_tiny_hf_model(tmp_path / 'qwen2')}"
    fs = dict(
        methods=["bm25-qt", f"dense:hf:{spec.model}[max_length=32]"],
        depth=4,
        translator=f"nllb:{tiny_nllb(tmp_path / 'mt')}[max_new_tokens=6]",
    )
    base = dict(
        name="route",
        collection="fixture",
        pairs=["en-de"],
        measure="MAP",
        first_stage=fs,
        experiments=["1_first_stage"],
    )
    out = {}
    for name, execution in (("local", None), ("ray", {"engine": "ray", "workers": 2})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "c.yaml").write_text(
            yaml.safe_dump(dict(base, **({"execution": execution} if execution else {})))
        )
        pipe = Pipeline(
            load_config(tmp_path / name / "c.yaml"),
            out_dir=tmp_path / name / "res",
            cache=Cache(tmp_path / name / "cache"),
            progress=False,
        )
        runs = [dict(pipe.first_stage("en-de", m)) for m in fs["methods"]]
        answers = pipe.backend(lm).generate(
            ["Which passage is about a cat?", "Passage A or B?"], max_new_tokens=4, progress=False
        )
        files = sorted(p.name for p in (tmp_path / name / "res").rglob("*.trec"))
        out[name] = (pipe, runs, answers, files, Cache(tmp_path / name / "cache").stats())
    (local, *want), (pipe, *got) = out["local"], out["ray"]
    assert local.executor is LOCAL and isinstance(pipe.executor, RayExecutor) and pipe.executor.workers == 2
    assert pipe.translator().executor is pipe.executor and pipe.backend(lm).executor is pipe.executor
    assert {m for _, m, _ in fake_ray.calls} == {"translate_batch", "encode_batch", "_generate_batch"}
    assert got == want  # runs, answers, run file names, cache entries
    assert pipe.backend(lm).identity() == local.backend(lm).identity()  # cache keys never name the executor


def test_a_dictionary_translator_takes_the_executor_and_never_calls_it(fake_ray, tmp_path):
    "Word-by-word lookups run here: the dictionary translator is built with the pipeline's executor and holds no recipe."
    from clir_llm.translate import get_translator

    d = get_translator("dict:freedict", cache=Cache(tmp_path), executor=_ray())
    assert not d.uses_gpu and not hasattr(d, "worker") and fake_ray.created == [] and not fake_ray.inits


def test_an_api_backend_takes_the_pipelines_executor_and_never_calls_it(fake_ray, tmp_path):
    "An openai: backend spreads its calls over its servers itself: built as Pipeline.backend builds it, nothing reaches Ray."
    from clir_llm.llm import BackendSpec
    from clir_llm.testing import FakeOpenAIServer

    with FakeOpenAIServer(responder=lambda msgs, body: "A") as s:
        api = BackendSpec.parse({"spec": "openai:m", "base_url": s.url}).build(cache=Cache(tmp_path), executor=_ray())
        assert api.generate(["x"], max_new_tokens=2, progress=False) == ["A"]
    assert fake_ray.calls == [] and fake_ray.created == [] and not fake_ray.inits


def test_execution_lives_in_configs_and_on_the_command_line_never_in_run_names(tmp_path, monkeypatch):
    from clir_llm.config import load_config
    from clir_llm.pipeline import Pipeline

    monkeypatch.delenv("CLIR_LLM_EXECUTION", raising=False)
    base = dict(
        name="x",
        collection="fixture",
        pairs=["en-de"],
        measure="MAP",
        first_stage=dict(methods=["bm25-og"]),
        experiments=["1_first_stage"],
    )
    paths = []
    for ex in (None, {"engine": "ray", "workers": 3, "address": "ray://head:10001", "gpus_per_worker": 1}):
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(dict(base, **({"execution": ex} if ex else {}))))
        cfg = load_config(tmp_path / "c.yaml")
        paths.append(
            Pipeline(cfg, out_dir=tmp_path / "res", cache=Cache(tmp_path / "cache")).first_stage_path(
                "en-de", "bm25-og"
            )
        )
    assert paths[0] == paths[1] and cfg.execution.workers == 3 and execution_of(cfg).address == "ray://head:10001"
    assert make_executor(execution_of(cfg)).device == "cuda" and make_executor(execution_of(cfg)).workers == 3
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(dict(base, execution={"engine": "spark"})))
    with pytest.raises(ClirError, match="execution.engine"):
        load_config(tmp_path / "c.yaml")
    assert make_executor(execution_of(None)) is LOCAL and make_executor(None) is LOCAL
    # what `reproduce --engine ray --workers 5` hands its notebooks
    monkeypatch.setenv("CLIR_LLM_EXECUTION", '{"engine": "ray", "workers": 5}')
    assert execution_of(cfg).workers == 5 and execution_of(cfg, workers=6).workers == 6
    monkeypatch.setenv("CLIR_LLM_EXECUTION", "workers=5")
    with pytest.raises(ClirError, match=r"^\$CLIR_LLM_EXECUTION is not a JSON mapping"):
        execution_of(cfg)


def test_cli_refuses_a_bad_execution_option_in_one_line(tmp_path, capsys):
    "A bad execution option is one error line from `clir-llm retrieve` (before any collection or model is loaded)."
    from clir_llm.cli import main

    assert (
        main(
            [
                "retrieve",
                "--collection",
                "fixture",
                "--pair",
                "en-de",
                "--method",
                "bm25-og",
                "--out",
                str(tmp_path / "r.trec"),
                "--engine",
                "ray",
                "--workers",
                "0",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err.strip()
    assert "workers" in err and len(err.splitlines()) == 1 and not (tmp_path / "r.trec").exists()


# --- the cluster, the workers' threads, devices and dtypes


def test_the_cluster_must_have_the_cpus_the_workers_ask_for(fake_ray, monkeypatch, spec, tmp_path):
    monkeypatch.setattr(fake_ray, "cluster_resources", lambda: {"CPU": 2})
    enc = Encoder.create(spec, cache=Cache(tmp_path), executor=_ray(workers=3), progress=False)
    with pytest.raises(ClirError, match=r"^the Ray cluster has 2 CPUs and 0 GPUs; 3 workers need 3 CPUs"):
        enc.encode_docs([Document("d", "house")])
    gpu = Encoder.create(spec, cache=Cache(tmp_path), executor=_ray(workers=1, gpus_per_worker=1), progress=False)
    with pytest.raises(ClirError, match="1 workers need 1 CPUs and 1 GPUs"):
        gpu.encode_docs([Document("d", "house")])


def test_workers_take_the_drivers_torch_threads_unless_told(fake_ray, spec, tmp_path, monkeypatch):
    "CPU vectors depend on torch's thread count: by default each actor takes the driver's (1 Ray CPU reserved each)."
    import torch

    n, made = torch.get_num_threads(), []
    # the stand-in actors run in this process: keep its threads
    monkeypatch.setattr(torch, "set_num_threads", made.append)
    assert ExecutionSpec(engine="ray").threads_per_worker is None and ExecutionSpec(engine="ray").cpus() == 1
    for threads, cpus, want in ((None, 1, n), (3, 3, 3)):
        enc = Encoder.create(
            spec,
            batch_size=4,
            cache=Cache(tmp_path / str(threads)),
            executor=_ray(1, threads_per_worker=threads),
            progress=False,
        )
        enc.encode_docs(list(_collection(6).iter_docs()))
        assert made[-1] == want and fake_ray.created[-1]["num_cpus"] == cpus
    assert torch.get_num_threads() == n


def test_no_address_starts_a_local_cluster_never_joins_one(fake_ray, monkeypatch):
    _ray(1).start()
    # not None: Ray would join a stale cluster named in its ray_current_cluster file
    assert fake_ray.inits[-1]["address"] == "local"
    monkeypatch.setattr(fake_ray, "is_initialized", lambda: False)
    _ray(1, address="auto").start()
    assert fake_ray.inits[-1]["address"] == "auto"
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    _ray(1).start()
    assert fake_ray.inits[-1]["address"] == "auto" and len(fake_ray.inits) == 3


def test_a_local_start_that_timed_out_is_made_again_through_ray_init_only(fake_ray, monkeypatch):
    """Issue 37 item 5: `start_local_ray` calls Ray's public `ray.init` (no private method replaced); a start that timed
    out on a busy machine ("The current node timed out during startup") is shut down and made again, at most `attempts`
    times; any other error is raised at once."""
    from clir_llm.engine import start_local_ray

    fails, shut = ["The current node timed out during startup. This could happen because ..."], []

    def init(**kw):
        fake_ray.inits.append(kw)
        if fails:
            raise Exception(fails.pop())

    monkeypatch.setattr(fake_ray, "init", init)
    monkeypatch.setattr(fake_ray, "shutdown", lambda: shut.append(1), raising=False)
    # the failed start shut down
    assert start_local_ray(num_cpus=2) is fake_ray and len(fake_ray.inits) == 2 and len(shut) == 1
    assert all(
        k == dict(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False) for k in fake_ray.inits
    )
    fails[:] = ["timed out"] * 3
    with pytest.raises(Exception, match="timed out"):
        start_local_ray(attempts=3)
    assert len(fake_ray.inits) == 5 and len(shut) == 4
    fails[:] = ["no shared memory"]
    with pytest.raises(Exception, match="no shared memory"):
        start_local_ray()
    assert len(fake_ray.inits) == 6


def test_actors_take_the_encoder_spec_dtype_and_the_card_dtype_of_their_device(tmp_path, spec):
    """The recipe carries the executor's device: an encoder's own dtype stays on every device, an encoder without one
    takes its GPU dtype on GPU actors; an hf: model card's dtype is the GPU actors' dtype, and the translator's float16,
    although this driver has no GPU (nothing is loaded to check it)."""
    import dataclasses
    from clir_llm.llm_hf import HFBackend, model_card
    from clir_llm.testing import make_tiny_hf_model
    from clir_llm.translate import get_translator, tiny_nllb
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cpu, gpu = _ray(1), _ray(1, gpus_per_worker=1)
    assert (cpu.device, gpu.device) == ("cpu", "cuda")
    own = Encoder.create(
        dataclasses.replace(spec, dtype="bfloat16"), cache=Cache(tmp_path / "e"), executor=cpu, progress=False
    )
    factory, args = _through_pickle(own.worker())
    assert factory is rebuild_encoder and (factory(*args).device, factory(*args).dtype) == ("cpu", "bfloat16")
    plain = Encoder.create(spec, cache=Cache(tmp_path / "e"), executor=gpu, progress=False)
    factory, args = _through_pickle(plain.worker())
    assert (plain.device, plain.dtype) == ("cuda", spec.half) and (factory(*args).device, factory(*args).dtype) == (
        "cuda",
        spec.half,
    )
    assert factory(*args).cache.mode == "off"  # a worker stores nothing: the driver does

    tiny = make_tiny_hf_model(tmp_path / "qwen2")
    hub, card = "meta-llama/Llama-3.1-8B-Instruct", model_card("meta-llama/Llama-3.1-8B-Instruct").dtype
    loaded = lambda: {
        "hf_model": AutoModelForCausalLM.from_pretrained(tiny),
        "hf_tokenizer": AutoTokenizer.from_pretrained(tiny),
    }
    here = HFBackend.create(hub, cache=Cache(tmp_path / "b"), device="cpu", **loaded())
    # the card's half dtype is for GPUs
    assert card in ("float16", "bfloat16") and here.identity()["dtype"] == "float32"
    b = HFBackend.create(hub, cache=Cache(tmp_path / "b"), executor=gpu, **loaded())
    assert b.identity()["dtype"] == card
    factory, args = _through_pickle(b.worker())
    assert args[2].device == "cuda"  # the recipe carries the device: the actor picks the card's dtype there
    assert factory(*args, loaded()).identity() == b.identity()  # (the tiny model stands in for the Hub's, not loaded)

    tr = get_translator(f"nllb:{tiny_nllb(tmp_path / 'mt')}", cache=Cache(tmp_path / "t"), executor=gpu, progress=False)
    factory, args = _through_pickle(tr.worker())
    assert (tr.device, tr.dtype) == ("cuda", "float16") and (factory(*args).device, factory(*args).dtype) == (
        "cuda",
        "float16",
    )
    assert factory(*args).identity == tr.identity and tr._model is None


# --- errors


class Boom:
    "An owner's stand-in that raises `exc` when built (`at='init'`) or on every call."

    def __init__(self, exc, at="call"):
        if at == "init":
            raise exc
        self.exc, self.usage = exc, Usage()

    def work(self, batch):
        raise self.exc


class Owner:
    "The smallest owner: a recipe and a usage."

    def __init__(self, exc, at="call"):
        self.recipe, self.usage = (Boom, (exc, at)), Usage()

    def worker(self):
        return self.recipe


def test_a_worker_exception_without_a_message_is_one_line(fake_ray):
    ex = _ray(1)
    with pytest.raises(ClirError, match=r"^a Ray worker failed: MemoryError$"):
        ex.map(Owner(MemoryError()), "work", [([1],)])
    ex = _ray(1)
    with pytest.raises(ClirError, match=r"^a Ray worker failed: ValueError: bad batch$"):
        ex.map(Owner(ValueError("first line\nbad batch")), "work", [([1],)])


def test_a_worker_that_cannot_start_is_one_line(fake_ray):
    ex = _ray(1)
    with pytest.raises(ClirError) as e:
        ex.map(Owner(ClirError("cannot load NLLB model 'x': not found"), at="init"), "work", [([1],)])
    assert (
        str(e.value) == "a Ray worker could not start: clir_llm.core.ClirError: cannot load NLLB model 'x': not found"
    )


def test_an_unreachable_address_is_one_line_within_its_timeout(fake_ray):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ClirError, match=rf"^cannot reach the Ray cluster at '127.0.0.1:{port}' within 2 s: "):
        _ray(1, address=f"127.0.0.1:{port}", timeout=2).start()
    # a server whose one-connection backlog is taken: the next connection waits until `timeout`
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(0)
        port = s.getsockname()[1]
        held = socket.create_connection(("127.0.0.1", port), timeout=1)
        t0 = time.perf_counter()
        with pytest.raises(
            ClirError, match=rf"^cannot reach the Ray cluster at 'ray://127.0.0.1:{port}' within 0.5 s: timed out$"
        ):
            _ray(1, address=f"ray://127.0.0.1:{port}", timeout=0.5).start()
        assert 0.4 < time.perf_counter() - t0 < 3
        held.close()
    with pytest.raises(ClirError, match="is not host:port"):
        _ray(1, address="head-node", timeout=1).start()
    assert not fake_ray.inits  # Ray itself was never asked


def test_worker_returns_each_value_and_the_usage_its_call_added(tmp_path, spec):
    "The actor class itself (in this process): the owner rebuilt from its recipe, one batch per call, the cost of each."
    from clir_llm.translate import get_translator, tiny_nllb

    tr = get_translator(
        f"nllb:{tiny_nllb(tmp_path / 'mt')}", cache=Cache(tmp_path), max_new_tokens=4, device="cpu", progress=False
    )
    import torch

    w = Worker(*tr.worker(), threads=torch.get_num_threads())  # (it sets this process's threads)
    out, used = w.call("translate_batch", (["Der Hund.", "Die Katze schläft."], "de", "en"))
    out2, used2 = w.call("translate_batch", (["Das Haus."], "de", "en"))
    assert out == tr.translate_batch(["Der Hund.", "Die Katze schläft."], "de", "en") and len(out2) == 1
    assert (used.calls, used2.calls) == (1, 1) and used.tokens_in > used2.tokens_in > 0 and w.obj.usage.calls == 2
    assert w.batches() == [2, 1] and isinstance(w.pid(), int)


def test_a_hub_nllb_is_named_from_its_config_alone(monkeypatch):
    "A Hub NLLB not in the local cache is named by fetching its config.json, never by loading the model (a Ray driver never loads it)."
    import huggingface_hub
    from clir_llm.translate import NLLBTranslator, get_translator

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *a, **k: None)
    monkeypatch.setattr(
        huggingface_hub, "hf_hub_download", lambda repo, f, revision=None: f"/hf/models--x/snapshots/abc123/{f}"
    )
    monkeypatch.setattr(NLLBTranslator, "load", lambda self: pytest.fail("the model was loaded to name its revision"))
    tr = get_translator("nllb:facebook/nllb-200-distilled-600M", cache=Cache(mode="off"), device="cpu", progress=False)
    assert tr.revision == "abc123" and tr._model is None


def test_engine_ray_without_ray_fails_before_anything_loads(tmp_path, monkeypatch):
    "`--engine ray` where Ray is not installed was a ModuleNotFoundError traceback after the model had loaded (issue 39 item 5)."
    import importlib.util
    import _reliability as R
    from clir_llm import cli_stages

    find = importlib.util.find_spec
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find(name, *a))
    monkeypatch.setattr(cli_stages, "load_collection", lambda *a, **k: pytest.fail("the collection was loaded"))
    p = R.run_main(
        "retrieve",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--method",
        "dense:e5-small",
        "--engine",
        "ray",
        "--out",
        tmp_path / "r.trec",
    )
    R.expect_rc("--engine ray without Ray", p.returncode, p.stderr, "engine: ray needs Ray", cls="arguments")
    with pytest.raises(ClirError, match="not installed here"):
        make_executor(ExecutionSpec(engine="ray"), installed=True)
    assert isinstance(make_executor(ExecutionSpec(engine="ray")), RayExecutor)  # a plan or a run's names need no Ray
    cfg = R.reduced_config(tmp_path / "c.yaml")
    # reproduce hands --engine to its notebooks there: restored (unset) after the test
    monkeypatch.setenv("CLIR_LLM_EXECUTION", "{}")
    monkeypatch.setattr("clir_llm.cli_experiments.reproduce", lambda *a, **k: pytest.fail("a notebook started"))
    p = R.run_main("reproduce", cfg, "--engine", "ray", "--results", tmp_path / "res", "--figures", tmp_path / "fig")
    R.expect_rc("reproduce --engine ray without Ray", p.returncode, p.stderr, "engine: ray needs Ray", cls="arguments")


@pytest.mark.parametrize(
    "flag,value", [("--workers", "1000000"), ("--threads-per-worker", "1000000"), ("--gpus-per-worker", "inf")]
)
def test_execution_counts_are_bounded(tmp_path, flag, value):
    "issue 39 item 6: --threads 1000000-style counts were accepted; the execution options are bounded (one line naming the option)."
    import _reliability as R

    p = R.run_main(
        "retrieve",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--method",
        "bm25-og",
        "--engine",
        "ray",
        flag,
        value,
        "--out",
        tmp_path / "r.trec",
    )
    R.expect_rc(f"retrieve {flag} {value}", p.returncode, p.stderr, flag.lstrip("-").replace("-", "_"), cls="numbers")
