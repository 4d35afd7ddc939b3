"""Any Hugging Face encoder (`dense:hf:<id or folder>[options]`) and the persisted, sharded dense index: the options
name the run and change the vectors, the CLI flags and a configuration give them, sharded jobs merge into the index
of one process, and a second run loads the index instead of rebuilding it."""
import json
import numpy as np
import pytest
import yaml
from clir_llm.cache import Cache
from clir_llm.cli import main
from clir_llm.collections import load_collection
from clir_llm.core import ClirError, Run
from clir_llm import dense as D
from clir_llm.dense_index import DenseIndex
from clir_llm.retrieve import parse_method


@pytest.fixture(scope="module")
def xlmr(tmp_path_factory):
    return str(D.tiny_random_model("xlmr", tmp_path_factory.mktemp("tiny") / "xlmr"))


def test_method_string_holds_the_options(xlmr):
    m = parse_method(f'dense:hf:{xlmr}[pooling=cls,query_prefix="query: ",max_length=64]')
    assert str(m) == f'dense:hf:{xlmr}[pooling=cls,query_prefix="query: ",max_length=64]'
    assert parse_method(str(m)) == m
    assert parse_method({"method": f"dense:hf:{xlmr}", "pooling": "cls", "query_prefix": "query: ", "max_length": 64}) == m
    assert str(parse_method(f"dense:hf:{xlmr}")) == f"dense:hf:{xlmr}"
    assert m.label() == "xlmr" and "cls pooling" in m.describe()
    with pytest.raises(ClirError, match="pooling"): parse_method(f"dense:hf:{xlmr}[pooling=max]")
    with pytest.raises(ClirError, match="takes no options"): parse_method({"method": "bm25-og", "pooling": "cls"})
    with pytest.raises(ClirError, match="dense:hf"): parse_method({"method": "dense:e5", "pooling": "cls"})


def test_options_change_vectors_and_cache_keys(xlmr, tmp_path):
    c = load_collection("fixture", "en-de")
    runs = {}
    for opts in ("", "[pooling=cls]", '[query_prefix="query: "]', "[max_length=4]"):
        d = D.Dense(f"hf:{xlmr}{opts}", cache=Cache(tmp_path), progress=False)
        runs[opts] = d.retrieve(c, k=4)
        assert runs[opts].name == f"dense:hf:{xlmr}{opts}"
    scores = {o: [s for q in sorted(r) for _, s in r.ranking(q)] for o, r in runs.items()}
    assert len({tuple(np.round(v, 6)) for v in scores.values()}) == 4        # every option changes the scores


def test_cli_flags_and_shard_jobs(xlmr, tmp_path):
    cache, base = str(tmp_path / "cache"), ["retrieve", "--collection", "demo", "--pair", "en-fi", "--k", "5"]
    one = tmp_path / "one.trec"
    assert main(base + ["--method", f"dense:hf:{xlmr}", "--pooling", "cls", "--query-prefix", "query: ", "--max-length", "60",
                        "--cache", str(tmp_path / "c1"), "--out", str(one)]) == 0
    m = f'dense:hf:{xlmr}[pooling=cls,query_prefix="query: ",max_length=60]'
    assert f"dense:hf:{xlmr}[pooling=cls" in one.read_text().split("\n")[0]   # the run's tag holds the options
    for i in range(3):   # three jobs of a batch scheduler, then a run that merges their shards
        assert main(base + ["--method", m, "--cache", cache,
                            "--shard", f"{i}/3"]) == 0
    out = tmp_path / "merged.trec"
    assert main(base + ["--method", m, "--cache", cache, "--out", str(out)]) == 0
    assert out.read_text() == one.read_text()
    usage = json.loads(next(tmp_path.glob("merged*.json")).read_text())
    assert usage["counters"].get("index_builds") == 1 and not usage["counters"].get("docs_encoded")   # shards were done
    again = tmp_path / "again.trec"
    assert main(base + ["--method", m, "--cache", cache, "--out", str(again)]) == 0
    usage = json.loads(next(tmp_path.glob("again*.json")).read_text())
    assert usage["counters"].get("index_loads") == 1 and "index_builds" not in usage["counters"]   # reused, not rebuilt
    assert again.read_text() == one.read_text()
    from clir_llm.retrieve import cli_retrieve
    with pytest.raises(ClirError, match="option of dense:hf"): cli_retrieve(base[1:] + ["--method", "bm25-og", "--pooling", "cls", "--out", str(out)])
    with pytest.raises(ClirError, match="--out is required"): cli_retrieve(base[1:] + ["--method", m])


def test_sharded_index_equals_in_memory(xlmr, tmp_path):
    c = load_collection("demo", "en-fi")
    mem = D.Dense(f"hf:{xlmr}[max_length=60]", cache=Cache(tmp_path / "off", mode="off"), chunk_size=16, progress=False).retrieve(c, k=10)
    for n in (1, 4):
        d = D.Dense(f"hf:{xlmr}[max_length=60]", cache=Cache(tmp_path / f"s{n}"), chunk_size=16, shards=n, progress=False)
        assert d.retrieve(c, k=10) == mem
        assert d.usage.counters["index_builds"] == 1 and d.usage.counters["shards_encoded"] == n


def test_config_accepts_hf_methods(xlmr, tmp_path):
    from clir_llm.config import load_config
    cfg = yaml.safe_load(open("configs/demo.yaml"))
    cfg["first_stage"]["methods"] = ["bm25-og", f'dense:hf:{xlmr}[pooling=cls]', {"method": f"dense:hf:{xlmr}", "query_prefix": "q: "}]
    cfg["rerankers"], cfg["doc_length"], cfg["regression"] = [], None, None
    cfg["first_stage"]["only_pairs"] = {}
    p = tmp_path / "c.yaml"; p.write_text(yaml.safe_dump(cfg))
    c = load_config(p)
    assert [str(m) for m in c.first_stage.methods][1:] == [f"dense:hf:{xlmr}[pooling=cls]", f'dense:hf:{xlmr}[query_prefix="q: "]']
