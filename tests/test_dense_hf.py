"""clir_llm.dense_hf: any Hugging Face encoder (`dense:hf:<id or folder>[options]`): the options, read with the one
bracket grammar, name the run and change the vectors, and a configuration gives them."""

import json
import numpy as np
import pytest
import yaml
from clir_llm.cache import Cache
from clir_llm.cli import main
from clir_llm.collections import load_collection
from clir_llm.core import ClirError, Run
from clir_llm import dense as D
from clir_llm.retrieve import parse_method


@pytest.fixture(scope="module")
def xlmr(tmp_path_factory):
    return str(D.tiny_random_model("xlmr", tmp_path_factory.mktemp("tiny") / "xlmr"))


def test_method_string_holds_the_options(xlmr):
    m = parse_method(f'dense:hf:{xlmr}[pooling=cls,query_prefix="query: ",max_length=64]')
    assert str(m) == f'dense:hf:{xlmr}[pooling=cls,query_prefix="query: ",max_length=64]'
    assert parse_method(str(m)) == m
    assert (
        parse_method({"method": f"dense:hf:{xlmr}", "pooling": "cls", "query_prefix": "query: ", "max_length": 64}) == m
    )
    assert str(parse_method(f"dense:hf:{xlmr}")) == f"dense:hf:{xlmr}"
    assert m.label() == "xlmr" and "cls pooling" in m.describe()
    with pytest.raises(ClirError, match="pooling"):
        parse_method(f"dense:hf:{xlmr}[pooling=max]")
    with pytest.raises(ClirError, match="takes no options"):
        parse_method({"method": "bm25-og", "pooling": "cls"})
    with pytest.raises(ClirError, match="dense:hf"):
        parse_method({"method": "dense:e5", "pooling": "cls"})


def test_options_change_vectors_and_cache_keys(xlmr, tmp_path):
    c = load_collection("fixture", "en-de")
    runs = {}
    for opts in ("", "[pooling=cls]", '[query_prefix="query: "]', "[max_length=4]"):
        d = D.Dense.create(f"hf:{xlmr}{opts}", cache=Cache(tmp_path), progress=False)
        runs[opts] = d.retrieve(c, k=4)
        assert runs[opts].name == f"dense:hf:{xlmr}{opts}"
    scores = {o: [s for q in sorted(r) for _, s in r.ranking(q)] for o, r in runs.items()}
    assert len({tuple(np.round(v, 6)) for v in scores.values()}) == 4  # every option changes the scores


def test_config_accepts_hf_methods(xlmr, tmp_path):
    from clir_llm.config import load_config

    cfg = yaml.safe_load(open("configs/demo.yaml"))
    cfg["first_stage"]["methods"] = [
        "bm25-og",
        f"dense:hf:{xlmr}[pooling=cls]",
        {"method": f"dense:hf:{xlmr}", "query_prefix": "q: "},
    ]
    cfg["rerankers"], cfg["doc_length"], cfg["regression"] = [], None, None
    cfg["first_stage"]["only_pairs"] = {}
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(cfg))
    c = load_config(p)
    assert [str(m) for m in c.first_stage.methods][1:] == [
        f"dense:hf:{xlmr}[pooling=cls]",
        f'dense:hf:{xlmr}[query_prefix="q: "]',
    ]


def test_one_bracket_grammar_and_the_family_registry(xlmr):
    from clir_llm.dense_hf import HFEncoderOptions, parse_hf_encoder

    h = parse_hf_encoder('hf:m[query_prefix="a, b=\\"c\\"",max_length=64,title=false]')
    assert (h.query_prefix, h.max_length, h.title) == ('a, b="c"', 64, False) and parse_hf_encoder(h.key()) == h
    assert h.key() == 'hf:m[query_prefix="a, b=\\"c\\"",max_length=64,title=false]'
    for bad, msg in [
        ("hf:x[pooling]", "not key=value"),
        ("hf:x[size=3]", "unknown option"),
        ('hf:x[query_prefix="a]', "cannot read"),
        ("hf:x[title=1,title=0]", "twice"),
    ]:
        with pytest.raises(ClirError, match=msg):
            parse_hf_encoder(bad)
    assert D.get_encoder_spec(f"hf:{xlmr}[pooling=cls]").name == f"hf:{xlmr}[pooling=cls]"
    assert [e.name for e in D.ENCODER_FAMILIES.entries()] == ["hf:"] and list(HFEncoderOptions.model_fields)[
        0
    ] == "pooling"
    with pytest.raises(ClirError, match=r"or hf:<model id or folder>\[options\]"):
        D.get_encoder_spec("e6")
