"""clir_llm.files: your own files (`files:<folder>`): topics (TREC/TSV/JSONL), TREC qrels and a JSONL/TSV corpus through the registry,
the CLI (`--collection files: --root`, `files:<folder>?...`) and a configuration; file:line errors, BOM and CRLF."""

import json, os, subprocess, sys
from pathlib import Path
import pytest
from clir_llm.core import ClirError, FormatError
from clir_llm.collections import COLLECTIONS, AnyPair, collection_pairs, load_collection

CLI = [str(Path(sys.executable).parent / "clir-llm")]
ZHFA = Path(__file__).parent / "fixtures" / "zhfa"


def _own(
    tmp_path,
    topics="\ufeffq1\tNairobi sunny\r\nq2\tLagos rain\r\n",
    corpus=None,
    qrels="q1 0 d1 1\r\nq2 0 d2 1\r\nq2 0 d1 0\r\n",
):
    f = tmp_path / "own"
    f.mkdir(exist_ok=True)
    (f / "topics.tsv").write_bytes(topics.encode())
    (f / "qrels.txt").write_bytes(qrels.encode())
    (f / "corpus.jsonl").write_bytes(
        (
            corpus
            or '\ufeff{"_id": "d1", "title": "Weather", "text": "Nairobi is sunny today."}\r\n'
            '{"id": "d2", "text": "Heavy rain in Lagos."}\r\n{"docid": "d3", "text": "Tea."}\n'
        ).encode()
    )
    return f


def test_registered_as_a_prefix_and_listed():
    entry, arg = COLLECTIONS.lookup("files:/some/where")
    assert entry.name == "files:" and arg == "/some/where" and entry.example == "files:<folder>"
    p = subprocess.run([*CLI, "datasets"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "files:<folder>" in p.stdout and "irds:<id>" in p.stdout


def test_any_pair_bom_crlf_and_only_judged_topics(tmp_path):
    f = _own(tmp_path, topics="\ufeffq1\tNairobi sunny\r\nq2\tLagos rain\r\nq9\tnot judged\r\n")
    assert isinstance(collection_pairs(f"files:{f}"), AnyPair) and "sw-yo" in collection_pairs(f"files:{f}")
    c = load_collection(f"files:{f}", "en-en", cache_root=tmp_path)
    assert sorted(c.queries) == ["q1", "q2"] and c.queries["q1"].text == "Nairobi sunny" and c.num_docs == 3
    assert c.get_doc("d1").title == "Weather" and c.qrels["q2"] == {"d2": 1, "d1": 0}


def test_trec_topics_and_tsv_corpus_named_in_the_spec(tmp_path):
    f = tmp_path / "x"
    f.mkdir()
    (f / "t.trec").write_text(
        "<top>\r\n<num> Number: 401\r\n<title> foreign minorities\r\n<desc> Description:\r\nGermany\r\n</top>\r\n"
    )
    (f / "q").write_text("401 0 LA1 1\n")
    (f / "c.tsv").write_text("LA1\tMinorities in Germany\tText about minorities.\nLA2\tOther\n")
    c = load_collection(f"files:{f}?topics=t.trec&qrels=q&corpus=c.tsv", "en-en", cache_root=tmp_path)
    assert c.queries["401"].text == "foreign minorities Germany" and c.get_doc("LA1").title == "Minorities in Germany"
    assert c.get_doc("LA2").text == "Other"


@pytest.mark.parametrize(
    "what,content,where,msg",
    [
        ("topics", "q1\tok\nq2 no tab\n", "topics.tsv:2", "expected 'qid<TAB>text'"),
        ("topics", "q1\tok\nq1\tagain\n", "topics.tsv:2", "query 'q1' appears twice"),
        ("corpus", '{"_id": "d1", "text": "x"}\n{"_id": "d2", "text": "y"\n', "corpus.jsonl:2", "invalid JSON"),
        ("corpus", '{"_id": "d1", "text": "x"}\n{"title": "no id"}\n', "corpus.jsonl:2", "a document needs an id"),
        ("qrels", "q1 0 d1 1\nq2 0 d2\n", "qrels.txt:2", "expected 4 columns"),
        ("qrels", "q1 0 d1 1\nq2 0 d7 1\n", "qrels.txt:2", "judges document 'd7'"),
        ("qrels", "q1 0 d1 1\nq5 0 d1 1\n", "qrels.txt:2", "query 'q5' is judged but not in"),
    ],
)
def test_malformed_input_names_file_and_line(tmp_path, what, content, where, msg):
    f = _own(tmp_path, **{what: content})
    with pytest.raises(FormatError) as e:
        c = load_collection(f"files:{f}", "en-en", cache_root=tmp_path)
        c.num_docs
    assert str(e.value).startswith(f"{f}/{where}: ") and msg in str(e.value), str(e.value)


def test_missing_files_and_bad_specs(tmp_path):
    with pytest.raises(ClirError, match="no corpus file"):
        (tmp_path / "e").mkdir()
        (tmp_path / "e" / "topics.tsv").write_text("1\tx\n")
        (tmp_path / "e" / "qrels").write_text("1 0 a 1\n")
        load_collection(f"files:{tmp_path / 'e'}", "en-en")
    with pytest.raises(ClirError, match="unknown option"):
        load_collection(f"files:{tmp_path}?topcs=a", "en-en")
    with pytest.raises(ClirError, match="unknown language code 'xx'"):
        load_collection(f"files:{tmp_path}", "en-xx")


def _retrieve(*args, env=None):
    return subprocess.run([*CLI, "retrieve", *map(str, args)], capture_output=True, text=True, timeout=600, env=env)


def test_cli_retrieve_on_own_chinese_files(tmp_path):
    "The own-files layout (`queries`, `qrels.<pair>`, `corpus.<lang>` names) with `--root`; BM25 through the CJK analyzer."
    f = tmp_path / "zh"
    f.mkdir()
    (f / "topics.zh.jsonl").write_text((ZHFA / "queries.zh.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    (f / "qrels.zh-zh.txt").write_text((ZHFA / "qrels.zh-zh.txt").read_text())
    (f / "corpus.zh.jsonl").write_text((ZHFA / "docs.zh.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "run.txt"
    p = _retrieve(
        "--collection",
        "files:",
        "--root",
        f,
        "--pair",
        "zh-zh",
        "--method",
        "bm25-og",
        "--out",
        out,
        "--cache",
        tmp_path / "c",
        "--k",
        "2",
    )
    assert p.returncode == 0, p.stderr
    top = {}
    for line in out.read_text().splitlines():
        q, _, d, r, *_ = line.split()
        if r == "1":
            top[q] = d
    assert top == {"1": "zh1", "2": "zh2", "3": "zh3"}
    p = _retrieve("--collection", f"files:{f}?qrels=nope.txt", "--pair", "zh-zh", "--method", "bm25-og", "--out", out)
    assert p.returncode == 1 and "nope.txt: no such file" in p.stderr and "Traceback" not in p.stderr


def test_a_config_with_own_files_loads_and_plans(tmp_path):
    from clir_llm.config import load_config
    from clir_llm.plan import plan

    f = _own(tmp_path)
    cfg = tmp_path / "own.yaml"
    cfg.write_text(
        f"name: own\ncollection: files:{f}\npairs: [en-en]\nmeasure: MAP\nfirst_stage: {{methods: [bm25-og]}}\nexperiments: []\n"
    )
    c = load_config(cfg)
    lines = plan(c)
    assert lines[1].startswith(f"collection files:{f}: your own files") and "pairs: en-en" in lines[2]
    from clir_llm.pipeline import Pipeline

    pipe = Pipeline(c, out_dir=tmp_path / "res", progress=False)
    assert pipe.collection("en-en").num_docs == 3


def test_options_and_translations_known_without_loading(tmp_path):
    from clir_llm.files import FilesOptions, files_translations

    f = tmp_path / "own"
    f.mkdir()
    (f / "topics.tsv").write_text("q1\tcats\n")
    (f / "qrels.txt").write_text("q1 0 d1 1\n")
    (f / "corpus.jsonl").write_text('{"docid": "d1", "text": "cats sleep"}\n')
    assert COLLECTIONS["files:"].Options is FilesOptions and not COLLECTIONS["files:"].ships_translations(
        "en-en", str(f)
    )
    (f / "corpus.en.en.jsonl").write_text('{"docid": "d1", "text": "cats sleep"}\n')
    assert (
        files_translations("en-en", str(f))
        and load_collection(f"files:{f}", "en-en", cache_root=tmp_path).has_translations
    )
    c = load_collection("files:", "en-en", root=f, cache_root=tmp_path, name="mine", corpus="corpus.jsonl")
    assert c.name == "mine" and c.corpus_path == f / "corpus.jsonl"
    with pytest.raises(ClirError, match="topic"):
        load_collection("files:", "en-en", root=f, topic="x")


# ---------- issue 26 item 6: ids a TREC line cannot hold are refused at load, naming the file and the line
BAD_IDS = [
    (
        "corpus",
        '{"_id": "d1", "text": "x"}\n{"_id": "d 2", "text": "y"}\n',
        "corpus.jsonl:2",
        "document id 'd 2' contains whitespace",
    ),
    ("corpus", '{"_id": "d1", "text": "x"}\n{"_id": "", "text": "y"}\n', "corpus.jsonl:2", "document id is empty"),
    (
        "corpus",
        '{"_id": "d1", "text": "x"}\n{"_id": "d2 ", "text": "y"}\n',
        "corpus.jsonl:2",
        "document id 'd2 ' contains whitespace",
    ),
    (
        "corpus",
        '{"_id": "d1", "text": "x"}\n{"_id": "d2\\nq1 Q0 d1 1 9 x", "text": "y"}\n',
        "corpus.jsonl:2",
        "contains whitespace",
    ),
    ("topics", "q1\tNairobi sunny\nq 2\tLagos rain\n", "topics.tsv:2", "query id 'q 2' contains whitespace"),
    ("topics", "q1\tNairobi sunny\n\tLagos rain\n", "topics.tsv:2", "query id is empty"),
]


@pytest.mark.parametrize("what,content,where,msg", BAD_IDS, ids=[f"{b[0]}: {b[3]}" for b in BAD_IDS])
def test_ids_a_trec_line_cannot_hold_are_refused_at_load(tmp_path, what, content, where, msg):
    "A document or query id with a space, a trailing space, a newline, or none: a FormatError at its file and line, not a broken run later."
    import _reliability as R

    f = _own(tmp_path, **{what: content})
    try:
        c = load_collection(f"files:{f}", "en-en", cache_root=tmp_path)
        list(c.iter_docs())
        err = None
    except ClirError as e:
        err = str(e)
    R.hostile(
        "identifiers", f"files: {what} {msg}", err is not None and err.startswith(f"{f}/{where}: ") and msg in err
    )
    assert err is not None and err.startswith(f"{f}/{where}: ") and msg in err, err
