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
    assert (
        main(
            base
            + [
                "--method",
                f"dense:hf:{xlmr}",
                "--pooling",
                "cls",
                "--query-prefix",
                "query: ",
                "--max-length",
                "60",
                "--cache",
                str(tmp_path / "c1"),
                "--out",
                str(one),
            ]
        )
        == 0
    )
    m = f'dense:hf:{xlmr}[pooling=cls,query_prefix="query: ",max_length=60]'
    assert f"dense:hf:{xlmr}[pooling=cls" in one.read_text().split("\n")[0]  # the run's tag holds the options
    for i in range(3):  # three jobs of a batch scheduler, then a run that merges their shards
        assert main(base + ["--method", m, "--cache", cache, "--shard", f"{i}/3"]) == 0
    out = tmp_path / "merged.trec"
    assert main(base + ["--method", m, "--cache", cache, "--out", str(out)]) == 0
    assert out.read_text() == one.read_text()
    usage = json.loads(next(tmp_path.glob("merged*.json")).read_text())
    assert usage["counters"].get("index_builds") == 1 and not usage["counters"].get("docs_encoded")  # shards were done
    again = tmp_path / "again.trec"
    assert main(base + ["--method", m, "--cache", cache, "--out", str(again)]) == 0
    usage = json.loads(next(tmp_path.glob("again*.json")).read_text())
    assert usage["counters"].get("index_loads") == 1 and "index_builds" not in usage["counters"]  # reused, not rebuilt
    assert again.read_text() == one.read_text()
    from clir_llm.cli_stages import cli_retrieve

    with pytest.raises(ClirError, match="option of dense:hf"):
        cli_retrieve(base[1:] + ["--method", "bm25-og", "--pooling", "cls", "--out", str(out)])
    with pytest.raises(ClirError, match="--out is required"):
        cli_retrieve(base[1:] + ["--method", m])


def test_sharded_index_equals_in_memory(xlmr, tmp_path):
    c = load_collection("demo", "en-fi")
    mem = D.Dense.create(
        f"hf:{xlmr}[max_length=60]", cache=Cache(tmp_path / "off", mode="off"), chunk_size=16, progress=False
    ).retrieve(c, k=10)
    for n in (1, 4):
        d = D.Dense.create(
            f"hf:{xlmr}[max_length=60]", cache=Cache(tmp_path / f"s{n}"), chunk_size=16, shards=n, progress=False
        )
        assert d.retrieve(c, k=10) == mem
        assert d.usage.counters["index_builds"] == 1 and d.usage.counters["shards_encoded"] == n


class _Counted(D.Document):
    "A document that counts how many of its kind are alive at once (issue 30: one chunk alive at a time)."

    live = peak = 0

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        type(self).live += 1
        type(self).peak = max(type(self).peak, type(self).live)

    def __del__(self):
        type(self).live -= 1


class _CountedStream:
    name, pair, doc_lang, query_lang, key, queries = "counted", "en-en", "en", "en", "counted-40", {}
    num_docs = 40

    def iter_docs(self):
        for i in range(self.num_docs):
            yield _Counted(f"c{i}", " ".join(D._WORDS[i : i + 1 + i % 7]))


@pytest.mark.parametrize("mode", ["off", "readwrite"])  # in memory, and the sharded persisted index
def test_one_chunk_of_documents_alive_at_a_time(xlmr, tmp_path, mode):
    "Before issue 30 the previous chunk was still held while the next was read: twice the chunk at the peak."
    _Counted.live = _Counted.peak = 0
    d = D.Dense.create(
        f"hf:{xlmr}[max_length=60]", cache=Cache(tmp_path / "c", mode=mode), chunk_size=8, shards=2, progress=False
    )
    index, docids = d.index(_CountedStream())
    assert index.ntotal == 40 and len(docids) == 40
    assert _Counted.peak <= 8, f"{_Counted.peak} documents alive at once with chunks of 8"


@pytest.mark.parametrize("mode", ["off", "readwrite"])
def test_index_storage_reserved_not_regrown(xlmr, tmp_path, mode, monkeypatch):
    """The FAISS index is sized for every document before the first add (merge: the shards' rows; in memory: num_docs),
    so its storage never moves while chunks are added (a move holds the old and the new buffer: up to twice the index)."""
    from clir_llm import dense_index as DI

    made, adds = [], []

    def spy(*a, **kw):
        ix = real(*a, **kw)
        made.append(ix)
        add = ix.add

        def traced_add(x):
            add(x)
            adds.append(int(ix.codes.data()))

        ix.add = traced_add
        return ix

    real = DI._new_index
    monkeypatch.setattr(DI, "_new_index", spy)
    d = D.Dense.create(
        f"hf:{xlmr}[max_length=60]", cache=Cache(tmp_path / "c", mode=mode), chunk_size=4, shards=2, progress=False
    )
    index, docids = d.index(_CountedStream())
    assert len(made) == 1 and index.ntotal == 40 and len(adds) == 10
    assert len(set(adds)) == 1, f"the index storage moved {len(set(adds)) - 1} times while chunks were added"
    plain = real(index.d, "float32")
    for r in range(0, 40, 4):
        plain.add(index.reconstruct_n(r, 4))
    assert (plain.search(index.reconstruct_n(0, 3), 5)[1] == index.search(index.reconstruct_n(0, 3), 5)[1]).all()


def test_shards_written_and_read_without_memory_maps(xlmr, tmp_path, monkeypatch):
    """issue 30: the shards are written and merged with plain file writes and reads, not through memory maps (a map's
    touched pages count in the resident memory, up to a whole shard); the shard files stay .npy files and the run is the same."""
    import numpy as np

    c = load_collection("demo", "en-fi")
    mem = D.Dense.create(
        f"hf:{xlmr}[max_length=60]", cache=Cache(tmp_path / "off", mode="off"), chunk_size=16, progress=False
    ).retrieve(c, k=10)
    ix = D.DenseIndex(
        D.Dense.create(
            f"hf:{xlmr}[max_length=60]", cache=Cache(tmp_path / "s"), chunk_size=16, shards=3, progress=False
        ),
        c,
    )

    def no_map(*a, **k):
        raise AssertionError("a shard went through a memory map")

    monkeypatch.setattr(np, "memmap", no_map)
    paths = [ix.encode_shard(i, 3) for i in range(3)]
    monkeypatch.undo()
    shapes = [np.load(p).shape for p in paths]
    assert sum(s[0] for s in shapes) == c.num_docs and {s[1] for s in shapes} == {
        ix.dense.encoder.load()[0].config.hidden_size
    }
    monkeypatch.setattr(np, "memmap", no_map)
    index, docids = ix.merge(3)
    monkeypatch.undo()
    assert index.ntotal == c.num_docs
    d = D.Dense.create(
        f"hf:{xlmr}[max_length=60]", cache=Cache(tmp_path / "s"), chunk_size=16, shards=3, progress=False
    )
    assert d.retrieve(c, k=10) == mem and d.usage.counters.get("index_loads") == 1
