"""Collections: the shipped fixture through the public interface, and bad input naming file and problem."""
import gzip, json, shutil, subprocess, sys
from pathlib import Path
import pytest
from clir_llm.core import ClirError, FormatError
from clir_llm.collections import load_collection, list_collections, load_folder_collection, data_dir, read_jsonl

CLI = [str(Path(sys.executable).parent / "clir-llm")]


def test_fixture_every_pair_is_consistent():
    for pair in list_collections()["fixture"]:
        c = load_collection("fixture", pair)
        docs = list(c.iter_docs())
        assert len(docs) == c.num_docs == 4 and all(d.lang == c.doc_lang for d in docs)
        assert set(c.queries) == set(c.qrels) and all(q.lang == c.query_lang for q in c.queries.values())
        for qid in c.qrels:
            for d in c.get_docs(c.qrels.relevant(qid)): assert d.docid.startswith(c.doc_lang)
        if c.doc_lang in ("ha", "so", "sw", "yo"):
            t = c.translated()
            assert [d.docid for d in t.iter_docs()] == [d.docid for d in docs] and t.doc_lang == "en"
            assert t.queries is c.queries and t.qrels is c.qrels


def test_unsupported_pair_names_the_pairs():
    with pytest.raises(ClirError, match="no pair 'fi-it'.*en-de"):
        load_collection("fixture", "fi-it")
    with pytest.raises(ClirError, match="unknown language code 'xx'"):
        load_collection("fixture", "en-xx")


def test_qrels_naming_unknown_document(tmp_path):
    folder = tmp_path / "fx"; shutil.copytree(data_dir() / "fixture", folder)
    q = folder / "qrels.en-de.txt"
    q.write_text(q.read_text() + "t2 0 de-99 1\n")
    with pytest.raises(FormatError) as e:
        load_folder_collection(folder, "en-de")
    assert str(e.value).startswith(f"{q}:6: ") and "'de-99'" in str(e.value)


def test_truncated_gzip_docs(tmp_path):
    folder = tmp_path / "fx"; shutil.copytree(data_dir() / "fixture", folder)
    src = folder / "docs.de.jsonl"
    blob = gzip.compress(src.read_bytes() * 50, mtime=0)
    src.unlink(); (folder / "docs.de.jsonl.gz").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(FormatError, match=r"docs\.de\.jsonl\.gz:\d+: gzip stream is truncated"):
        load_folder_collection(folder, "en-de")


def test_missing_field(tmp_path):
    p = tmp_path / "x.jsonl"; p.write_text(json.dumps({"docid": "a"}) + "\n")
    with pytest.raises(FormatError, match=r"x\.jsonl:1: record lacks field\(s\) text"):
        list(read_jsonl(p, ("docid", "text")))


def test_cli_datasets_lists_fixture():
    out = subprocess.run([*CLI, "datasets", "fixture"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sum(l.startswith("fixture ") for l in out.stdout.splitlines()) == len(list_collections()["fixture"])
    bad = subprocess.run([*CLI, "datasets", "nope"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "unknown collection 'nope'" in bad.stderr


CIRAL = Path(__file__).parent / "fixtures" / "ciral"


def test_ciral_from_local_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("CIRAL_HOME", str(CIRAL))
    c = load_collection("ciral", "en-yo", check_counts=False, cache_root=tmp_path)
    assert (c.query_lang, c.doc_lang, len(c.queries)) == ("en", "yo", 3)
    assert c.qrels["1"] == {"yo-1": 1, "yo-4": 0} and c.num_docs == 4
    assert "ibà" in c.get_doc("yo-1").text and (tmp_path / "docstore").is_dir()
    t = c.translated()
    assert t.doc_lang == "en" and "malaria" in t.get_doc("yo-1").text and t.key != c.key
    c.check_qrels()


def test_ciral_counts_checked(tmp_path):
    with pytest.raises(ClirError, match=r"topics\.ciral-v1\.0-ha-test-a\.tsv: 3 test-A queries, the paper has 80"):
        load_collection("ciral", "en-ha", root=CIRAL)
    c = load_collection("ciral", "en-ha", root=CIRAL, check_counts=False, cache_root=tmp_path)
    c.expected_num_docs = 715_355
    with pytest.raises(ClirError, match=r"hausa_passages\.jsonl: 4 documents, expected 715,355"):
        c.num_docs


def test_ciral_truncated_and_missing(tmp_path):
    root = tmp_path / "c"; shutil.copytree(CIRAL, root)
    p = root / "ciral-corpus/passages-v1.0/yoruba_passages.jsonl"
    p.write_bytes(p.read_bytes()[:-30])
    c = load_collection("ciral", "en-yo", root=root, check_counts=False, cache_root=tmp_path)
    with pytest.raises(FormatError, match=r"yoruba_passages\.jsonl:4: invalid JSON \(the file looks truncated\)"):
        c.get_doc("yo-1")
    with pytest.raises(ClirError, match=r"ciral-somali/topics/topics\.ciral-v1\.0-so-test-a\.tsv: no such file"):
        load_collection("ciral", "en-so", root=root)
    q = root / "ciral/ciral-hausa/qrels/qrels.ciral-v1.0-ha-test-a-pools.tsv"
    q.write_text(q.read_text() + "2 Q0 ha-77 1\n")
    c = load_collection("ciral", "en-ha", root=root, check_counts=False, cache_root=tmp_path / "x")
    with pytest.raises(FormatError, match=r"test-a-pools\.tsv:6: query '2' judges document 'ha-77'"):
        c.check_qrels()
