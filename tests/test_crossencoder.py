"""clir_llm.crossencoder: the `ce:hf:` backend (pairs tokenised as sentence-transformers does, cached per pair's ids,
sorted by length and batched across queries, run by an injected executor, rebuilt from its worker recipe) and the
`cross-encoder` reranker (scores kept in the run, OG/DT, passage cuts, estimate), on tiny random cross-encoders in the
upstream formats (XLMRobertaForSequenceClassification, BertForSequenceClassification); equal to
sentence_transformers.CrossEncoder within 1e-5 on tiny models, and batched within a quarter of CrossEncoder's own batching noise."""

import json
import pytest
from clir_llm.cache import Cache
from clir_llm.core import ClirError, Run
from clir_llm.executor import LocalExecutor
from clir_llm.llm import BACKENDS, BackendSpec, LLMError
from clir_llm.rerank import RERANKERS, RerankerSpec, TextStats, get_reranker
from clir_llm.crossencoder import (
    CROSS_ENCODERS,
    CrossEncoderBackend,
    CrossEncoderOptions,
    CrossEncoderReranker,
    tiny_cross_encoder,
)
from clir_llm.testing import QrelsOracle, tiny_setup

PAIRS = [
    ("cat water", "die katze trinkt wasser am fluss"),
    ("malaria vaccine for children", "dog"),
    ("кошка вода", "кошка " * 40),
    ("football world cup final", "the final of the world cup was in the city of music"),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("ce")
    return {a: tiny_cross_encoder(a, root / a) for a in ("xlmr", "bert")}


def test_model_table_pins_the_three_cards():
    assert set(CROSS_ENCODERS) == {
        "BAAI/bge-reranker-v2-m3",
        "jinaai/jina-reranker-v2-base-multilingual",
        "cross-encoder/mmarco-mMiniLMv2-L12-H384-v1",
    }
    assert all(len(c.revision) == 40 for c in CROSS_ENCODERS.values())
    bge, jina = (
        CrossEncoderBackend("BAAI/bge-reranker-v2-m3"),
        CrossEncoderBackend("jinaai/jina-reranker-v2-base-multilingual"),
    )
    assert (bge.revision, bge.max_length, bge.activation, bge.trust_remote_code) == (
        CROSS_ENCODERS["BAAI/bge-reranker-v2-m3"].revision,
        512,
        "raw",
        False,
    )
    assert (jina.max_length, jina.activation, jina.trust_remote_code) == (1024, "sigmoid", True)
    own = CrossEncoderBackend(
        "BAAI/bge-reranker-v2-m3", CrossEncoderOptions(max_length=256, activation="sigmoid"), revision="abc"
    )
    assert (own.revision, own.max_length, own.activation) == ("abc", 256, "sigmoid")


def test_spec_strings_and_dry_run_words():
    s = BackendSpec.parse("ce:hf:BAAI/bge-reranker-v2-m3@953dc6f6f85a1b2dbfca4c34a2796e7dde08d41e[max_length=256]")
    assert (s.kind, s.model, s.key()) == (
        "ce:hf",
        "BAAI/bge-reranker-v2-m3",
        "ce:hf:BAAI/bge-reranker-v2-m3@953dc6f6f85a1b2dbfca4c34a2796e7dde08d41e[max_length=256]",
    )
    assert "as its model card" in s.describe() and s.backend_class.hub_models(s) == ["BAAI/bge-reranker-v2-m3"]
    assert "WARNING revision not pinned" in BackendSpec.parse("ce:hf:my/ce").describe()
    with pytest.raises(ClirError, match="does not take option window"):
        BackendSpec.parse("ce:hf:my/ce[window=3]")
    assert "ce:hf:" in BACKENDS.names()


def test_generate_is_refused_in_one_line():
    with pytest.raises(LLMError, match="is a cross-encoder: it scores query-passage pairs"):
        CrossEncoderBackend("my/ce").generate(["hello"])


@pytest.mark.parametrize("arch", ["xlmr", "bert"])
@pytest.mark.parametrize("activation", ["raw", "sigmoid"])
def test_equal_to_sentence_transformers_cross_encoder(tiny, arch, activation):
    "Same token ids as CrossEncoder.preprocess and the same scores (fp32) within 1e-5, segment ids included."
    import torch
    from sentence_transformers import CrossEncoder

    st = CrossEncoder(
        str(tiny[arch]),
        max_length=24,
        activation_fn=torch.nn.Sigmoid() if activation == "sigmoid" else torch.nn.Identity(),
    )
    ref = st.predict(PAIRS, batch_size=2, show_progress_bar=False).tolist()
    be = CrossEncoderBackend(str(tiny[arch]), CrossEncoderOptions(max_length=24, activation=activation, batch_size=3))
    assert [st.preprocess([p])["input_ids"][0].tolist() for p in PAIRS] == [be._render(p)["ids"] for p in PAIRS]
    assert max(abs(a - b) for a, b in zip(be.rank_pairs(PAIRS, progress=False), ref)) < 1e-5
    assert ("types" in be._render(PAIRS[0])) == (arch == "bert")


@pytest.mark.parametrize("seed", [0, 3])
def test_batched_scores_equal_each_pair_alone(tmp_path, seed):
    """Length-sorted batches across queries give every pair's score alone (CrossEncoder, batch size 1) to within a quarter
    of CrossEncoder's own batching noise (the most its scores move between batch sizes 2, 16 and 48 and each pair alone, on
    the same pairs: 2e-5 to 7e-5 on this shape), and never less than 8 float32 ulps of the score scale. Per-pair attention
    leaves only the linear layers' batching (measured 2e-6 to 4e-6, at most 0.15 of the noise, seeds 0-7); padded attention
    is the reference's own batching (0.5 to 1 of it) and fails the bound, as does one score moved by the noise."""
    import random, numpy as np, torch
    from sentence_transformers import CrossEncoder
    from clir_llm.crossencoder import _TINY_WORDS

    rng, words = random.Random(seed), list(_TINY_WORDS)
    pairs = [
        (
            " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))),
            " ".join(rng.choice(words) for _ in range(rng.randint(10, 200))),
        )
        for _ in range(48)
    ]
    folder = tiny_cross_encoder("xlmr", tmp_path / "xlmr-256", seed=seed, hidden_size=256, layers=4, max_positions=256)
    st = CrossEncoder(str(folder), max_length=256, activation_fn=torch.nn.Identity())
    alone = st.predict(pairs, batch_size=1, show_progress_bar=False)
    noise = max(
        float(np.abs(st.predict(pairs, batch_size=b, show_progress_bar=False) - alone).max()) for b in (2, 16, 48)
    )
    bound = max(noise / 4, 8 * float(np.spacing(np.float32(np.abs(alone).max()))))

    def gap(scores):
        return float(np.abs(np.asarray(scores) - alone).max())

    ours = CrossEncoderBackend(
        str(folder), CrossEncoderOptions(max_length=256, batch_size=16, device="cpu")
    ).rank_pairs(pairs, progress=False)
    assert gap(ours) <= bound, (gap(ours), noise)
    padded = CrossEncoderBackend(
        str(folder), CrossEncoderOptions(max_length=256, batch_size=16, device="cpu", attention="padded")
    )
    # the bound tells per-pair attention from padding's rounding
    assert gap(padded.rank_pairs(pairs, progress=False)) > bound
    # one score moved as CrossEncoder's batching moves it
    assert gap([s + (noise if i == 7 else 0.0) for i, s in enumerate(ours)]) > bound


def test_attention_per_pair_on_a_cpu_padded_on_a_gpu_or_own_attention_code(tiny, monkeypatch):
    import clir_llm.crossencoder as ce

    assert CrossEncoderBackend("my/ce", CrossEncoderOptions(device="cpu")).attention == "per-pair"
    assert CrossEncoderBackend("my/ce", CrossEncoderOptions(device="cuda")).attention == "padded"
    be = CrossEncoderBackend(str(tiny["bert"]), CrossEncoderOptions(device="cpu"))
    assert be.hf_model.config._attn_implementation == "clir_per_pair" and be.attention == "per-pair"
    assert "attention" not in CrossEncoderOptions(attention="padded").identity()
    # a model with its own attention code (trust_remote_code)
    monkeypatch.setattr(ce, "_attend_per_pair", lambda model: False)
    fallback = CrossEncoderBackend(str(tiny["xlmr"]), CrossEncoderOptions(device="cpu"))
    assert fallback.hf_model is not None and fallback.attention == "padded"
    with pytest.raises(LLMError, match="attention=per-pair needs a model on transformers' attention interface"):
        CrossEncoderBackend(str(tiny["xlmr"]), CrossEncoderOptions(device="cpu", attention="per-pair")).hf_model


class Recording(LocalExecutor):
    "Two workers' groups, each batch recorded."

    workers = 2

    def __init__(self):
        self.calls = []

    def map(self, owner, method, calls):
        self.calls.append((method, [[len(it["ids"]) for it in c[0]] for c in calls]))
        return super().map(owner, method, calls)


def test_batches_are_sorted_by_length_cached_and_run_on_the_executor(tiny, tmp_path):
    ex = Recording()
    be = CrossEncoderBackend(
        str(tiny["xlmr"]), CrossEncoderOptions(max_length=64, batch_size=2), cache=Cache(tmp_path), executor=ex
    )
    first = be.rank_pairs(PAIRS, progress=False)
    lengths = [n for _, group in ex.calls for batch in group for n in batch]
    assert lengths == sorted(lengths) and {m for m, _ in ex.calls} == {"_pair_batch"} and len(ex.calls) == 1
    assert be.usage.calls == 4 and be.usage.tokens_in == sum(lengths)
    again = CrossEncoderBackend(
        str(tiny["xlmr"]), CrossEncoderOptions(max_length=64, batch_size=2), cache=Cache(tmp_path)
    )
    assert again.rank_pairs(PAIRS, progress=False) == first and again.usage.cache_hits == 4 and again.usage.calls == 0
    factory, args = be.worker()
    rebuilt = factory(*args)
    assert type(rebuilt) is CrossEncoderBackend and rebuilt.identity() == be.identity() and rebuilt.cache.mode == "off"
    assert rebuilt.rank_pairs(PAIRS, progress=False) == pytest.approx(first, abs=1e-6)


def test_device_from_options_then_executor():
    class OnGPU(LocalExecutor):
        device = "cuda:1"

    assert CrossEncoderBackend("my/ce", executor=OnGPU()).device == "cuda:1"
    assert CrossEncoderBackend("my/ce", CrossEncoderOptions(device="cpu"), executor=OnGPU()).device == "cpu"
    assert CrossEncoderBackend("my/ce", CrossEncoderOptions(device="cuda")).identity()["dtype"] == "float16"
    assert "dtype" not in CrossEncoderBackend("my/ce", CrossEncoderOptions(device="cpu")).identity()


def test_reranker_keeps_scores_in_the_run_and_batches_across_queries(tiny, tmp_path):
    coll, first = tiny_setup(3, 12)
    be = CrossEncoderBackend(str(tiny["xlmr"]), CrossEncoderOptions(max_length=64), cache=Cache(tmp_path))
    rr = get_reranker("cross-encoder", be, progress=False)
    out = rr.rerank(coll, first, k=8)
    for q in first:
        head = out.ranking(q, 8)
        assert [s for _, s in head] == sorted((s for _, s in head), reverse=True)
        assert [d for d, _ in out.ranking(q)[8:]] == first.docids(q)[8:] and out.ranking(q)[8][1] < head[-1][1]
        assert rr.diagnostics[q]["prompts"] == 8 and rr.diagnostics[q]["calls"] == 1
    pairs = [
        (" ".join(coll.queries[q].text.split()), coll.get_doc(d).full_text)
        for q in sorted(first)
        for d in first.docids(q, 8)
    ]
    assert {round(s, 6) for q in first for _, s in out.ranking(q, 8)} == {
        round(s, 6) for s in be.rank_pairs(pairs, progress=False)
    }
    one = get_reranker("cross-encoder", be, batch_queries=False, batch_size=3, progress=False)
    assert one.rerank(coll, first, k=8) == out and sum(one.diagnostics[q]["calls"] for q in first) == 9


def test_passage_cut_and_document_length_options(tiny):
    coll, first = tiny_setup(1, 4)
    be = CrossEncoderBackend(str(tiny["bert"]), CrossEncoderOptions(max_length=128))
    spec = RerankerSpec.parse("cross-encoder")
    rr = spec.build(be, progress=False)
    rr.rerank(coll, first, k=4)
    assert rr.diagnostics["q0"]["truncated_docs"] == {}
    cut = RerankerSpec(method="cross-encoder", options=CrossEncoderReranker.at_length(spec.options, 8)).build(
        be, progress=False
    )
    cut.rerank(coll, first, k=4)
    assert cut.diagnostics["q0"]["truncated_docs"] == {"de": 4} and cut.params["passage_tokens"] == 8
    assert "passage_tokens=8" in RerankerSpec(method="cross-encoder", options=cut.options).key()


def test_needs_a_cross_encoder_backend_and_takes_no_prompt():
    coll, _ = tiny_setup(1, 3)

    class NoPairs(QrelsOracle):
        scores_pairs = False

    with pytest.raises(ClirError, match=r"needs a cross-encoder backend \(--llm ce:hf:<model>\)"):
        get_reranker("cross-encoder", NoPairs(coll))
    with pytest.raises(ClirError, match="takes no prompt"):
        RerankerSpec.parse("cross-encoder", prompt="rankgpt")
    with pytest.raises(ClirError, match="needs an LLM backend"):
        get_reranker("cross-encoder")


def test_oracle_as_a_cross_encoder_gives_the_ideal_top_10():
    coll, first = tiny_setup(2, 30)
    out = get_reranker("cross-encoder", QrelsOracle(coll), progress=False).rerank(coll, first, k=30)
    for q in first:
        grades = [coll.qrels[q].get(d, 0) for d in out.docids(q, 10)]
        assert grades == sorted(coll.qrels[q].values(), reverse=True)[:10]


def test_estimate_is_one_pair_per_document():
    stats = TextStats(docs=100, query_tokens=30, doc_words=[200, 900], tokens_per_word=1.4, template_tokens=len)
    est = CrossEncoderReranker.estimate(RerankerSpec.parse("cross-encoder").options, "cross-encoder", stats)
    assert (est.calls, est.output_tokens, est.prefix_tokens) == (100, 0.0, 0.0)
    assert est.prompt_tokens == 30 + stats.passage_tokens(max_tokens=478) + 4
    cut = CrossEncoderReranker.estimate(
        RerankerSpec.parse("cross-encoder", passage_tokens=64).options, "cross-encoder", stats
    )
    assert cut.prompt_tokens == 30 + 64 + 4


def test_methods_list_the_backend_and_the_reranker():
    from clir_llm.methods import registries

    reg = registries()
    assert any(
        s == "ce:hf:<model id or folder>" and "max_length=None" in o
        for s, _, o in reg["LLM backends (rerank --llm; config: rerankers[].llm)"]
    )
    assert any(
        s == "cross-encoder" and "passage_tokens=None" in o
        for s, _, o in reg["rerankers (rerank --method; config: rerankers[].method)"]
    )
    assert RERANKERS["cross-encoder"] is CrossEncoderReranker


def test_cli_rerank_with_a_tiny_cross_encoder(tiny, tmp_path):
    from clir_llm.collections import load_collection
    from clir_llm.cli_stages import cli_rerank

    fx = load_collection("fixture", "en-de")
    Run.from_ranked({q: [d.docid for d in fx.iter_docs()] for q in fx.queries}, name="order").write(
        tmp_path / "first.trec"
    )
    assert (
        cli_rerank(
            [
                "--collection",
                "fixture",
                "--pair",
                "en-de",
                "--run",
                str(tmp_path / "first.trec"),
                "--method",
                "cross-encoder",
                "--llm",
                f"ce:hf:{tiny['xlmr']}",
                "--llm-max-length",
                "64",
                "--top-k",
                "3",
                "--cache",
                str(tmp_path / "c"),
                "--out",
                str(tmp_path / "out.trec"),
            ]
        )
        == 0
    )
    saved = json.loads((tmp_path / "out.trec.rerank.json").read_text())
    assert saved["backend"]["kind"] == "ce:hf" and saved["params"]["method"] == "cross-encoder"
    assert len(Run.read(tmp_path / "out.trec")) == len(fx.queries)
