"""NV-Embed-v2 without remote code (clir_llm.nvembed) against the published modelling code.

tests/fixtures/nvembed/ was produced by tests/fixtures/nvembed/make_fixture.py, which runs the Hub's published
modeling_nvembed.py / configuration_nvembed.py (not part of this package; a public copy is in the GitHub repository
The-X-School/Filtering-Techniques) under transformers 4.42.4 on CPU in float32, on a tiny random configuration
(2 Mistral layers, hidden 32, 4 heads / 2 key-value heads, 8 latents, 2 cross-attention heads of 16, 40-token
tokenizer). It holds the published state dict (model.safetensors, published key names), config.json, the tokenizer,
and the published `encode` outputs with their token ids and masks (expected.safetensors; texts in expected.json)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from clir_llm.cache import Cache
from clir_llm.core import ClirError, Document
from clir_llm import dense as D
from clir_llm import nvembed as N

FX = Path(__file__).parent / "fixtures" / "nvembed"
EXP = load_file(FX / "expected.safetensors")
CASES = json.loads((FX / "expected.json").read_text())["cases"]


@pytest.fixture(scope="module")
def nv():
    return N.load_nvembed(FX)


def encoder(tmp_path, **over):
    return D.Encoder.create(
        D.get_encoder_spec("nv-embed-v2", model=str(FX), **over), cache=Cache(tmp_path), progress=False, batch_size=2
    )


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_published_code(case, impl):
    """Same token ids, attention and pool masks, and embeddings (max abs diff < 1e-5) as the published code, for queries
    with the instruction, passages without, and passages truncated at 6 tokens, each batch padded."""
    c, model = CASES[case], N.load_nvembed(FX, attn_implementation=impl)
    ids, att, pool = N.features(model, c["texts"], c["instruction"], c["max_length"])
    for got, k in ((ids, "input_ids"), (att, "attention_mask"), (pool, "pool_mask")):
        assert torch.equal(got, EXP[f"{case}.{k}"]), k
    diff = (model.encode(c["texts"], c["instruction"], c["max_length"]) - EXP[f"{case}.embeddings"]).abs().max().item()
    assert diff < 1e-5, diff


def test_the_comparison_can_fail(nv):
    """The fixture tells the published computation from near misses: a causal decoder, a pool that keeps the
    instruction, or no randomised norms would each move the embeddings far beyond 1e-5."""
    c = CASES["queries"]
    ids, att, pool = N.features(nv, c["texts"], c["instruction"], c["max_length"])
    ref = EXP["queries.embeddings"]
    with torch.no_grad():
        assert (nv(ids, att, att) - ref).abs().max() > 1e-3  # instruction not masked out
        causal = torch.tril(torch.ones(ids.shape[1], ids.shape[1]))[None, None] * att[:, None, None, :]
        keep = N.padding_mask
        try:
            N.padding_mask = lambda m, dtype: (1.0 - causal.to(dtype)) * torch.finfo(dtype).min
            assert (nv(ids, att, pool) - ref).abs().max() > 1e-3  # causal mask
        finally:
            N.padding_mask = keep
        assert (nv(ids, att, pool) - ref).abs().max() < 1e-5


def test_missing_and_unknown_keys_are_clear_errors(tmp_path):
    def broken(name, change):
        d = tmp_path / name
        shutil.copytree(FX, d)
        sd = load_file(d / "model.safetensors")
        change(sd)
        save_file(sd, d / "model.safetensors")
        return d

    with pytest.raises(
        ClirError,
        match=r"2 weight\(s\) missing from the checkpoint, e.g. embedding_model.norm.weight, "
        r"latent_attention_model.cross_attend_blocks.0.fn.to_q.weight .*published NV-Embed layout",
    ):
        N.load_nvembed(
            broken(
                "missing",
                lambda sd: [
                    sd.pop(k)
                    for k in (
                        "embedding_model.norm.weight",
                        "latent_attention_model.cross_attend_blocks.0.fn.to_q.weight",
                    )
                ],
            )
        )
    with pytest.raises(ClirError, match=r"unknown weight\(s\) in the checkpoint, e.g. model.extra"):
        N.load_nvembed(broken("extra", lambda sd: sd.update({"model.extra": torch.zeros(1)})))
    renamed = broken(
        "renamed",
        lambda sd: sd.update(
            {k.replace("embedding_model.", "model."): sd.pop(k) for k in list(sd) if k.startswith("embedding_model.")}
        ),
    )
    # e.g. a plain Mistral checkpoint
    with pytest.raises(ClirError, match="missing from the checkpoint"):
        N.load_nvembed(renamed)
    with pytest.raises(ClirError, match="no config.json"):
        N.load_nvembed(tmp_path)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "config.json").write_text('{"model_type": "mistral"}')
    with pytest.raises(ClirError, match="no text_config or latent_attention_config"):
        N.load_nvembed(tmp_path / "x")


def test_sharded_checkpoint_and_dtype(tmp_path):
    """The published checkpoint is sharded (model.safetensors.index.json); a shard it names must exist."""
    d = tmp_path / "sharded"
    shutil.copytree(FX, d)
    sd = load_file(d / "model.safetensors")
    (d / "model.safetensors").unlink()
    keys = sorted(sd)
    half = len(keys) // 2
    save_file({k: sd[k] for k in keys[:half]}, d / "model-00001-of-00002.safetensors")
    save_file({k: sd[k] for k in keys[half:]}, d / "model-00002-of-00002.safetensors")
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {k: f"model-0000{1 + (i >= half)}-of-00002.safetensors" for i, k in enumerate(keys)}})
    )
    m = N.load_nvembed(d)
    c = CASES["docs"]
    assert (m.encode(c["texts"], "", c["max_length"]) - EXP["docs.embeddings"]).abs().max() < 1e-5
    assert N.load_nvembed(d, dtype="bfloat16").embedding_model.norm.weight.dtype == torch.bfloat16
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ClirError, match="shard model-00002-of-00002.safetensors"):
        N.load_nvembed(d)


def test_unreachable_hub_id_is_a_clear_error(monkeypatch, tmp_path):
    import huggingface_hub.constants as C

    monkeypatch.setattr(C, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(C, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ClirError, match="cannot get NV-Embed checkpoint nvidia/NV-Embed-v2@abc"):
        N.load_nvembed("nvidia/NV-Embed-v2", revision="abc")


def test_encoder_query_vs_passage_instruction(tmp_path):
    """dense:nv-embed-v2 through the Encoder: queries get the instruction (passed apart, masked out of the pool), passages
    the text only (title dropped, as the authors' encode.py) and no instruction; vectors = the published outputs."""
    e = encoder(tmp_path)
    q = CASES["queries"]["texts"]
    Q = e.encode_queries(q, sort=False)
    assert np.abs(Q - EXP["queries.embeddings"].numpy()).max() < 1e-5
    docs = [Document(str(i), t, "news") for i, t in enumerate(CASES["docs"]["texts"])]
    P = e.encode_docs(docs, sort=False)
    assert np.abs(P - EXP["docs.embeddings"].numpy()).max() < 1e-5
    assert not np.allclose(e.encode_queries(["cat"]), P[1:2], atol=1e-3)  # same text, query side: other vector
    # the pool starts at the instruction's last token (the published count of instruction tokens excludes <s>)
    nv = e.load()[0]
    ids, _, pool = N.features(nv, ["dog"], D.NV_INSTRUCTION, 512)
    n = len(nv.tokenizer.tokenize(D.NV_INSTRUCTION))
    assert (
        pool[0, :n].sum() == 0
        and pool[0, n:].tolist() == [1, 1, 1]
        and nv.tokenizer.convert_ids_to_tokens(ids[0, n:].tolist()) == [":", "dog", "</s>"]
    )
    short = encoder(tmp_path, doc_max_length=6).encode_docs(docs, sort=False)  # truncation as published: EOS cut off
    assert np.abs(short - EXP["docs_truncated.embeddings"].numpy()).max() < 1e-5


def test_padding_invariance(nv, tmp_path):
    """A text's vector does not depend on what it is batched with (right padding, padding-only mask, masked mean)."""
    c = CASES["queries"]
    together = nv.encode(c["texts"], c["instruction"], 512)
    alone = torch.cat([nv.encode([t], c["instruction"], 512) for t in c["texts"]])
    assert (together - alone).abs().max() < 1e-5
    docs = [Document(str(i), t) for i, t in enumerate(CASES["docs"]["texts"])]
    e = encoder(tmp_path)
    assert (
        np.abs(
            e.encode_docs(docs) - np.stack([encoder(tmp_path / str(i)).encode_docs([d])[0] for i, d in enumerate(docs)])
        ).max()
        < 1e-5
    )


def test_registry_entry():
    s = D.get_encoder_spec("nv-embed-v2")
    assert (s.model, s.pooling, s.half, s.trust_remote_code, s.revision) == (
        "nvidia/NV-Embed-v2",
        "latent",
        "float32",
        False,
        D.NV_EMBED_REVISION,
    )
    # the authors' precision on a GPU
    assert D.Encoder.create(s, device="cuda", cache=Cache(mode="off")).dtype == "float32"
    assert D.Dense.create("nv-embed-v2", cache=Cache(mode="off")).name == "dense:nv-embed-v2"


def test_never_runs_or_asks_for_remote_code(monkeypatch):
    """The published config.json names its remote code (auto_map, as tests/fixtures/nvembed/config.json written by the
    published config class); loading must neither run it nor ask whether to (transformers' trust_remote_code prompt)."""
    assert "auto_map" in json.loads((FX / "config.json").read_text())
    asked = []

    def answer_no(prompt=""):
        asked.append(prompt)
        return "n"  # transformers' prompt swallows errors: record instead

    monkeypatch.setattr("builtins.input", answer_no)
    m = N.load_nvembed(FX)
    assert asked == [] and type(m).__module__ == "clir_llm.nvembed" and m.tokenizer.eos_token == "</s>"


def test_no_weights_is_a_clear_error(tmp_path):
    d = tmp_path / "noweights"
    shutil.copytree(FX, d)
    (d / "model.safetensors").unlink()
    with pytest.raises(ClirError, match="no model.safetensors"):
        N.load_nvembed(d)
