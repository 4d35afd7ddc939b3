"""clir_llm.dense_index: the persisted, sharded dense index: sharded jobs (the CLI's --shard) merge into the index of one
process, and a second run loads the index instead of rebuilding it."""
import json
import pytest
from clir_llm.cache import Cache
from clir_llm.cli import main
from clir_llm.collections import load_collection
from clir_llm.core import ClirError
from clir_llm import dense as D


@pytest.fixture(scope="module")
def xlmr(tmp_path_factory):
    return str(D.tiny_random_model("xlmr", tmp_path_factory.mktemp("tiny") / "xlmr"))


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
    mem = D.Dense.create(f"hf:{xlmr}[max_length=60]", cache=Cache(tmp_path / "off", mode="off"), chunk_size=16, progress=False).retrieve(c, k=10)
    for n in (1, 4):
        d = D.Dense.create(f"hf:{xlmr}[max_length=60]", cache=Cache(tmp_path / f"s{n}"), chunk_size=16, shards=n, progress=False)
        assert d.retrieve(c, k=10) == mem
        assert d.usage.counters["index_builds"] == 1 and d.usage.counters["shards_encoded"] == n
