"""clir_llm.collections: the shipped fixture through the public interface, bad input naming file and problem, CIRAL and
CLEF 2003 on fixtures in their upstream layouts (and on the real files when this machine has them), the sources' options
and what they say without loading, and the collection keys byte for byte as the code before Architecture II made them."""

import gzip, json, os, re, shutil, subprocess, sys, time
from pathlib import Path
import pytest
from clir_llm.core import ClirError, FormatError, Qrels
from clir_llm.collections import (
    COLLECTIONS,
    CIRAL_COUNTS,
    CIRAL_JUDGED,
    CIRAL_LANGS,
    CLEF_COUNTS,
    CLEF_LANGS,
    CLEF_PAIRS,
    CLEF_TOPICS,
    CountedOptions,
    ShippedOptions,
    clef_doc_files,
    collection_pairs,
    data_dir,
    list_collections,
    load_ciral,
    load_clef2003,
    load_collection,
    load_folder_collection,
    read_ciral_topics,
    read_jsonl,
)
import _reliability as R

CLI = [str(Path(sys.executable).parent / "clir-llm")]


def test_fixture_every_pair_is_consistent():
    for pair in list_collections()["fixture"]:
        c = load_collection("fixture", pair)
        docs = list(c.iter_docs())
        assert len(docs) == c.num_docs == 4 and all(d.lang == c.doc_lang for d in docs)
        assert set(c.queries) == set(c.qrels) and all(q.lang == c.query_lang for q in c.queries.values())
        for qid in c.qrels:
            for d in c.get_docs(c.qrels.relevant(qid)):
                assert d.docid.startswith(c.doc_lang)
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
    folder = tmp_path / "fx"
    shutil.copytree(data_dir() / "fixture", folder)
    q = folder / "qrels.en-de.txt"
    q.write_text(q.read_text() + "t2 0 de-99 1\n")
    with pytest.raises(FormatError) as e:
        load_folder_collection(folder, "en-de")
    assert str(e.value).startswith(f"{q}:6: ") and "'de-99'" in str(e.value)


def test_truncated_gzip_docs(tmp_path):
    folder = tmp_path / "fx"
    shutil.copytree(data_dir() / "fixture", folder)
    src = folder / "docs.de.jsonl"
    blob = gzip.compress(src.read_bytes() * 50, mtime=0)
    src.unlink()
    (folder / "docs.de.jsonl.gz").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(FormatError, match=r"docs\.de\.jsonl\.gz:\d+: gzip stream is truncated"):
        load_folder_collection(folder, "en-de")


def test_missing_field(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps({"docid": "a"}) + "\n")
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
    c = c.view("counted", expected_num_docs=715_355, corpus_path=c.corpus_path)
    with pytest.raises(ClirError, match=r"hausa_passages\.jsonl: 4 documents, expected 715,355"):
        c.num_docs


def test_ciral_truncated_and_missing(tmp_path):
    root = tmp_path / "c"
    shutil.copytree(CIRAL, root)
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


# CLEF 2003 (CLEF 2003 loader on the synthetic fixture in the distribution's layout; CIRAL's fail-fast without the Hub.)
FX = Path(__file__).parent / "fixtures" / "clef2003"
CLI = [str(Path(sys.executable).parent / "clir-llm")]


@pytest.fixture
def clef(tmp_path, monkeypatch):
    "Load a pair from the fixture through $CLEF_HOME, with the document store in a temporary cache."
    monkeypatch.setenv("CLEF_HOME", str(FX))
    return lambda pair, **kw: load_collection("clef2003", pair, check_counts=False, cache_root=tmp_path, **kw)


def _raw_docnos(lang):
    "DOCNOs of every <DOC> block of a language, read independently of the loader (plain text search)."
    out = []
    for f in clef_doc_files(FX, lang):
        raw = gzip.decompress(f.read_bytes()) if f.name.endswith(".gz") else f.read_bytes()
        text = raw.decode("utf-8" if lang == "ru" else "latin-1")
        blocks = text.split("<DOC>")[1:]
        assert len(blocks) == text.count("</DOC>")
        out += [re.search(r"<DOCNO>(.*?)</DOCNO>", b, re.S).group(1).strip() for b in blocks]
    return out


@pytest.mark.parametrize("lang", sorted(CLEF_LANGS))
def test_ids_are_docnos_and_no_document_is_skipped(tmp_path, lang):
    # The authors' loader iterated enumerate(zip(ids, docs)): ids became positions and every text a tuple.
    qlang = "de" if lang != "de" else "en"
    c = load_clef2003(f"{qlang}-{lang}", CountedOptions(root=FX, check_counts=False), cache_root=tmp_path)
    expected = _raw_docnos(lang)
    docs = list(c.iter_docs())
    assert [d.docid for d in docs] == expected and len(expected) >= 3
    assert c.num_docs == len(expected) == len(set(expected))
    assert all(isinstance(d.text, str) and d.text and not d.docid.isdigit() for d in docs)
    first, last = c.get_doc(expected[0]), c.get_doc(expected[-1])
    assert first == docs[0] and last == docs[-1] and last.lang == lang


def test_la_times_id_is_docno_not_docid(tmp_path):
    c = load_clef2003("de-en", CountedOptions(root=FX, check_counts=False), cache_root=tmp_path)
    d = c.get_doc("LA010194-0002")  # its <DOCID> is 2
    assert d.text.startswith("AVALANCHE KILLS THREE CLIMBERS IN SWISS ALPS An avalanche") and "<P>" not in d.text
    assert c.get_doc("LA010194-0001").text.endswith("Lift tickets cost $40 & up.")
    with pytest.raises(ClirError, match="has no document '2'"):
        c.get_doc("2")


# The text the paper's models saw: the authors' extractor per collection (rlitschk/clef-dataloaders
# clef_extractors.py: fields joined by spaces, in its order) then download_data.normalize_whitespace; no title field.
PAPER_TEXT = {
    (
        "en",
        "LA010194-0001",
    ): "SKI RESORTS OPEN EARLY Fresh snow let resorts in Colorado open a week early. Lift tickets cost $40 & up.",
    (
        "en",
        "GH950102-000000",
    ): "Rivers burst their banks The Clyde and the Tay flooded farmland across Scotland after a week of rain.",
    ("de", "SPIEGEL9495-000001"): "Matt in 40 Zügen Das Duell um die Schachkrone wird fortgesetzt. "
    "Die Weltmeisterschaft im Schach geht in die zweite Hälfte.",
    ("de", "FR940104-000002"): "Haushalt beschlossen Die Stadtverordneten beschlossen den Etat für 1994.",
    (
        "de",
        "SDA.940101.0001",
    ): "Eine Lawine hat im Wallis drei Bergsteiger verschüttet. Zermatt (sda) Drei Tote bei Lawinenniedergang KW",
    (
        "de",
        "SDA.950101.0001",
    ): "Der Rhein führt Hochwasser; die Schifffahrt ist eingestellt. Basel (sda) Hochwasser am Rhein KW",
    (
        "it",
        "LASTAMPA94-000002",
    ): "La sfida per il titolo mondiale di scacchi riprende domani. Scacchi, riprende la sfida",
    (
        "it",
        "AGZ.940101.0001",
    ): "Tre morti sotto una valanga Zermatt (ats) Una valanga ha travolto tre alpinisti in Vallese.",
    (
        "it",
        "AGZ.950101.0001",
    ): "Alluvione in Olanda Amsterdam (ats) Migliaia di persone evacuate per la piena della Mosa e del Reno.",
    ("fi", "AAMU950104-0003"): "Shakin MM-ottelu jatkui Lontoossa.",
    ("ru", "IZV-19950104-0001"): "Лавина погребла трёх альпинистов в Швейцарии. Лавина в Альпах происшествия",
}


@pytest.mark.parametrize("lang,docid", sorted(PAPER_TEXT))
def test_document_text_is_the_papers(tmp_path, lang, docid):
    d = load_clef2003(
        ("de" if lang != "de" else "en") + f"-{lang}", CountedOptions(root=FX, check_counts=False), cache_root=tmp_path
    ).get_doc(docid)
    assert (d.text, d.title, d.full_text) == (PAPER_TEXT[lang, docid], "", PAPER_TEXT[lang, docid])


def test_fields_the_authors_leave_out_stay_out(clef):
    sda = clef("en-de").get_doc("SDA.940101.0001")
    # SDA's <ST> is not read; text first
    assert "Lawine; Alpen" not in sda.text and sda.text.startswith("Eine Lawine")
    assert "KW" not in clef("en-it").get_doc("AGZ.940101.0001").text  # Italian SDA: no <KW>
    # Aamulehti's title is not read
    assert "Lumivyöry surmasi" not in clef("en-fi").get_doc("AAMU940103-0001").text
    assert clef("en-it").get_doc("LASTAMPA94-000001").text.endswith(". Piena del Po")  # La Stampa: text, then title


def test_key_names_the_text_version(monkeypatch):
    from clir_llm import collections as C

    k = load_clef2003("en-de", CountedOptions(root=FX, check_counts=False)).key
    monkeypatch.setattr(C, "CLEF_TEXT_VERSION", C.CLEF_TEXT_VERSION + 1)
    # document stores and indexes are rebuilt
    assert load_clef2003("en-de", CountedOptions(root=FX, check_counts=False)).key != k


def test_every_paper_pair(clef):
    assert list_collections()["clef2003"] == CLEF_PAIRS
    for pair in CLEF_PAIRS:
        c = clef(pair)
        ql, dl = pair.split("-")
        assert (c.name, c.pair, c.query_lang, c.doc_lang) == ("clef2003", pair, ql, dl)
        assert sorted(c.queries) == ["141", "142", "143"] and all(q.lang == ql for q in c.queries.values())
        assert all(d.lang == dl for d in c.iter_docs())
        c.check_qrels()
        assert c.get_docs(sorted(c.qrels.relevant("141")))[0].docid
    assert clef("en-de").key != clef("fi-it").key


def test_queries_are_title_plus_description(clef):
    q = clef("en-fi").queries
    assert q["142"].text == "Floods in Europe Find documents about river floods in European countries."
    assert "not relevant" not in q["141"].text  # narrative unused
    assert clef("de-ru").queries["141"].text.startswith("Lawinentote in den Alpen Finde Berichte über")
    ruq = load_clef2003("ru-de", CountedOptions(root=FX, check_counts=False)).queries  # UTF-8 with a byte-order mark
    assert ruq["143"].text == "Чемпионат мира по шахматам Найти сообщения о матче на первенство мира по шахматам."
    assert clef("fi-ru").queries["141"].text.startswith("Lumivyöryjen uhrit Alpeilla")


def test_judged_topic_without_relevant_document_is_kept(clef):
    c = clef("en-it")
    assert "143" in c.queries and c.qrels["143"] == {"LASTAMPA94-000002": 0} and c.qrels.relevant("143") == set()
    from clir_llm.core import Run
    from clir_llm.evaluate import per_query

    run = Run.from_ranked({q: [(d, 1.0) for d in sorted(c.qrels[q])] for q in c.queries})
    assert per_query(run, c.qrels, ["AP"]).loc["143"].iloc[0] == 0


def test_counts_checked(tmp_path):
    with pytest.raises(ClirError, match=r"Top-en03\.txt: 3 topics, CLEF 2003 has the 60 topics C141-C200"):
        load_clef2003("en-de", CountedOptions(root=FX), cache_root=tmp_path)
    c = load_clef2003("en-ru", CountedOptions(root=FX, check_counts=False), cache_root=tmp_path)
    c = c.view("counted", expected_num_docs=CLEF_COUNTS["ru"], corpus_path=c.corpus_path)
    with pytest.raises(ClirError, match=r"Russian_data/xml: 3 documents, expected 16,716 for clef2003 ru \(Russian\)"):
        c.num_docs


def test_missing_data_names_what_and_layout(tmp_path, monkeypatch):
    monkeypatch.delenv("CLEF_HOME", raising=False)
    with pytest.raises(
        ClirError,
        match=r"set \$CLEF_HOME.*DocumentData/.*Topics/2003/Top-<code>03\.txt.*RelAssess/2003/qrels_<LANGUAGE>",
    ):
        load_collection("clef2003", "en-de")
    monkeypatch.setenv("CLEF_HOME", str(tmp_path / "nope"))
    with pytest.raises(ClirError, match=r"nope: no such folder"):
        load_collection("clef2003", "en-de")
    home = tmp_path / "clef"
    shutil.copytree(FX, home)
    shutil.rmtree(home / "RelAssess")
    with pytest.raises(ClirError, match=r"RelAssess: no such folder"):
        load_clef2003("en-de", CountedOptions(root=home, check_counts=False))
    home2 = tmp_path / "clef2"
    shutil.copytree(FX, home2)
    (home2 / "RelAssess/2003/qrels_GERMAN").unlink()
    with pytest.raises(ClirError, match=r"2003: no qrels_GERMAN \(files there: qrels_ENGLISH"):
        load_clef2003("en-de", CountedOptions(root=home2, check_counts=False))
    shutil.rmtree(home2 / "DocumentData/DataCollections/Finnish_data")
    with pytest.raises(ClirError, match=r"DocumentData: no folder for Finnish documents"):
        load_clef2003("en-fi", CountedOptions(root=home2, check_counts=False))


def test_archives_must_be_unpacked(tmp_path):
    home = tmp_path / "clef"
    shutil.copytree(FX, home)
    aamu = home / "DocumentData/DataCollections/Finnish_data/aamu"
    for f in aamu.iterdir():
        f.unlink()
    (aamu / "aamu9495.tgz").write_bytes(b"")
    with pytest.raises(ClirError, match=r"no document files for Finnish; unpack the archives first \(aamu9495\.tgz\)"):
        load_clef2003("en-fi", CountedOptions(root=home, check_counts=False))


def test_unsupported_pair():
    with pytest.raises(ClirError, match="no pair 'en-sw'"):
        load_collection("clef2003", "en-sw")
    with pytest.raises(ClirError, match="CLEF 2003 has no sw data"):
        load_clef2003("en-sw", CountedOptions(root=FX))


def _copy(tmp_path):
    home = tmp_path / "clef"
    shutil.copytree(FX, home)
    return home


def test_bad_encoding_names_file_and_line(tmp_path):
    home = _copy(tmp_path)
    izv = home / "DocumentData/DataCollections/Russian_data/xml/izv95_01.xml"
    lines = izv.read_text(encoding="utf-8").splitlines(keepends=True)
    raw = b"".join(l.encode("cp1251") if i == 12 else l.encode("utf-8") for i, l in enumerate(lines))
    izv.write_bytes(raw)
    c = load_clef2003("en-ru", CountedOptions(root=home, check_counts=False), cache_root=tmp_path)
    with pytest.raises(
        FormatError, match=rf"izv95_01\.xml:13: not valid UTF-8: byte 0x.. at column \d+ \(expected UTF-8"
    ):
        list(c.iter_docs())


def test_unclosed_doc_and_missing_docno(tmp_path):
    home = _copy(tmp_path)
    fr = home / "DocumentData/DataCollections/German_data/fr_rundschau/FR940104.sgml"
    text = fr.read_text(encoding="latin-1")
    fr.write_text(text.replace("</DOC>\n", "\n", 1), encoding="latin-1")
    with pytest.raises(
        FormatError, match=r"FR940104\.sgml:\d+: <DOC> opened on line 1 is not closed before the next <DOC>"
    ):
        list(load_clef2003("en-de", CountedOptions(root=home, check_counts=False)).iter_docs())
    fr.write_text(
        text.replace("<DOCNO>FR940104-000002</DOCNO>\n<DOCID>FR940104-000002</DOCID>\n", ""), encoding="latin-1"
    )
    with pytest.raises(FormatError, match=r"FR940104\.sgml:10: document without <DOCNO>"):
        list(load_clef2003("en-de", CountedOptions(root=home, check_counts=False)).iter_docs())
    gh = home / "DocumentData/DataCollections/English_data/GlasgowHerald95/GH95/GH950102.gz"
    gh.write_bytes(gh.read_bytes()[:-20])
    with pytest.raises(FormatError, match=r"GH950102\.gz:\d+: gzip stream is truncated"):
        list(load_clef2003("de-en", CountedOptions(root=home, check_counts=False)).iter_docs())


def test_qrels_errors(tmp_path):
    home = _copy(tmp_path)
    q = home / "RelAssess/2003/qrels_ITALIAN"
    q.write_text(q.read_text() + "199 0 AGZ.940101.0001 1\n")
    with pytest.raises(FormatError, match=rf"qrels_ITALIAN:5: topic 199 is judged but not in .*Top-de03\.txt"):
        load_clef2003("de-it", CountedOptions(root=home, check_counts=False))
    q.write_text("141 0 AGZ.940101.0001 yes\n")
    with pytest.raises(FormatError, match=r"qrels_ITALIAN:1: relevance must be an integer, got 'yes'"):
        load_clef2003("de-it", CountedOptions(root=home, check_counts=False))
    q.write_text("141 0 AGZ.940101.0099 1\n")
    c = load_clef2003("de-it", CountedOptions(root=home, check_counts=False), cache_root=tmp_path)
    with pytest.raises(FormatError, match=r"qrels_ITALIAN:1: query '141' judges document 'AGZ\.940101\.0099'"):
        c.check_qrels()


def test_key_changes_with_the_data(tmp_path):
    home = _copy(tmp_path)
    k1 = load_clef2003("en-fi", CountedOptions(root=home, check_counts=False)).key
    f = home / "DocumentData/DataCollections/Finnish_data/aamu/aamu9401.sgml"
    f.write_text(f.read_text(encoding="latin-1") + "\n", encoding="latin-1")
    assert load_clef2003("en-fi", CountedOptions(root=home, check_counts=False)).key != k1


def test_paper_config_dry_run_without_data():
    env = {k: v for k, v in os.environ.items() if k != "CLEF_HOME"}
    out = subprocess.run(
        [*CLI, "reproduce", "configs/paper-clef.yaml", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=Path(__file__).parents[1],
    )
    assert out.returncode == 0, out.stderr
    assert "collection clef2003" in out.stdout and "fi-ru" in out.stdout


PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def test_ciral_fails_fast_offline(monkeypatch):
    monkeypatch.delenv("CIRAL_HOME", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ClirError, match=r"HF_HUB_OFFLINE is set; .*set \$CIRAL_HOME"):
        load_collection("ciral", "en-sw")


def test_ciral_fails_fast_when_hub_unreachable(monkeypatch):
    monkeypatch.delenv("CIRAL_HOME", raising=False)
    for k in PROXIES:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(
        ClirError, match=r"Hugging Face Hub \(http://127\.0\.0\.1:9\) is unreachable .*set \$CIRAL_HOME"
    ):
        load_collection("ciral", "en-sw")


# Loaders on the REAL upstream files, when this machine has them (skipped otherwise, with the reason).
# CIRAL: the test-A topic and pool-qrels files, looked for in $CIRAL_HOME (Hugging Face layout or flat) and in
# Anserini's download cache ~/.cache/pyserini/topics-and-qrels (where `pyserini`/Anserini put them after a
# `get_topics('ciral-v1.0-so-test-a')`). Neither pyserini 1.6 nor its Anserini 1.7.1 jar ship the files themselves:
# the jar holds only their names (io/anserini/search/topicreader/Topics, io/anserini/eval/Qrels) and downloads them.
# CLEF 2003: the whole licensed collection under $CLEF_HOME (slow: streams every document of a language).
ANSERINI_CACHE = Path.home() / ".cache" / "pyserini" / "topics-and-qrels"


def _ciral_upstream(code):
    "(topics, qrels) paths of the real test-A files for `code`, or None."
    lang = CIRAL_LANGS[code]
    t, q = f"topics.ciral-v1.0-{code}-test-a.tsv", f"qrels.ciral-v1.0-{code}-test-a-pools.tsv"
    bases = []
    if os.environ.get("CIRAL_HOME"):
        h = Path(os.environ["CIRAL_HOME"])
        bases += [
            (h / "ciral" / f"ciral-{lang}" / "topics", h / "ciral" / f"ciral-{lang}" / "qrels"),
            (h / f"ciral-{lang}" / "topics", h / f"ciral-{lang}" / "qrels"),
            (h / "ciral", h / "ciral"),
            (h, h),
        ]
    bases.append((ANSERINI_CACHE, ANSERINI_CACHE))
    for tb, qb in bases:
        if (tb / t).exists() and (qb / q).exists():
            return tb / t, qb / q
    return None


@pytest.mark.parametrize("code", sorted(CIRAL_LANGS))
def test_ciral_real_topics_and_pool_qrels(code):
    found = _ciral_upstream(code)
    if not found:
        pytest.skip(
            f"no real CIRAL {code} test-A topics/pool qrels here ($CIRAL_HOME unset or lacking them, nothing in "
            f"{ANSERINI_CACHE}); pyserini 1.6 / Anserini 1.7.1 ship only the file names, not the files"
        )
    tpath, qpath = found
    queries, qrels = read_ciral_topics(tpath), Qrels.read(qpath)
    nq, _ = CIRAL_COUNTS[code]
    assert len(queries) == nq and len(qrels) == nq and set(qrels) <= set(queries)
    assert sum(map(len, qrels.values())) == CIRAL_JUDGED[code]
    assert {g for d in qrels.values() for g in d.values()} <= {0, 1}
    assert all(q.text and q.text == q.text.strip() and q.qid.isdigit() for q in queries.values())
    assert all(d.count("#") == 2 for dd in qrels.values() for d in dd)  # SOURCE#article#passage


def test_ciral_real_collection():
    if not os.environ.get("CIRAL_HOME"):
        pytest.skip("$CIRAL_HOME is not set (a copy of the Hugging Face repos CIRAL/ciral and CIRAL/ciral-corpus)")
    for code in CIRAL_LANGS:  # topics, qrels and the two passage files are found and the counts on load hold
        c = load_ciral(f"en-{code}", CountedOptions(root=os.environ["CIRAL_HOME"]))
        assert len(c.queries) == CIRAL_COUNTS[code][0] and c.has_translations


@pytest.mark.slow
@pytest.mark.parametrize("code", sorted(CLEF_LANGS))
def test_clef2003_real_collection(code, tmp_path):
    if not os.environ.get("CLEF_HOME"):
        pytest.skip("$CLEF_HOME is not set (CLEF 2003, ELRA-E0008, is licensed and never shipped)")
    other = "de" if code != "de" else "en"
    c = load_clef2003(f"{other}-{code}", cache_root=tmp_path)  # 60 topics checked on load
    qside = load_clef2003(f"{code}-{other}", cache_root=tmp_path).queries  # this language's topics parse too
    assert set(qside) <= set(CLEF_TOPICS) and all(q.text and q.lang == code for q in qside.values())
    assert set(c.queries) == set(c.qrels) and set(c.qrels) <= set(CLEF_TOPICS)
    assert c.num_docs == CLEF_COUNTS[code]  # streams every document; raises on a mismatch
    c.check_qrels()  # every judged document exists under its DOCNO
    assert all(d.text for d in c.get_docs(sorted(c.qrels.relevant(sorted(c.qrels, key=int)[0]))[:5]))


# the sources' options, what they say without loading, and the keys


IDS = json.loads((Path(__file__).parent / "fixtures" / "identities-v1.json").read_text())


def test_sources_declare_their_options():
    assert COLLECTIONS["demo"].Options is ShippedOptions and COLLECTIONS["clef2003"].Options is CountedOptions
    with pytest.raises(ClirError, match=r"collection 'demo'.*check_counts"):
        load_collection("demo", "en-de", check_counts=False)
    assert not load_collection("fixture", "en-de", check=False).has_translations
    assert (
        load_collection("fixture", "en-de", root=data_dir() / "fixture").key == load_collection("fixture", "en-de").key
    )


def test_sources_answer_without_loading(monkeypatch):
    monkeypatch.delenv("CLEF_HOME", raising=False)
    monkeypatch.delenv("CIRAL_HOME", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    clef, ciral, fx = COLLECTIONS["clef2003"], COLLECTIONS["ciral"], COLLECTIONS["fixture"]
    assert clef.env == "CLEF_HOME" and not clef.shipped and fx.shipped
    assert (
        clef.missing("clef2003")
        == "$CLEF_HOME is unset: CLEF 2003 is licensed (ELRA-E0008); set it to your copy, the run fails without it"
    )
    assert (
        ciral.missing("ciral")
        == "$CIRAL_HOME is unset: ciral would be downloaded from the Hugging Face Hub but HF_HUB_OFFLINE is set: the run fails"
    )
    assert clef.missing("clef2003", root="/data/clef") is None and fx.missing("fixture") is None
    assert fx.ships_translations("en-sw") and not fx.ships_translations("en-de") and ciral.ships_translations("en-ha")
    assert "neuclir22" in COLLECTIONS.names() and "neuclir22" in list_collections()


def test_cli_datasets_lists_every_collection():
    out = subprocess.run([*CLI, "datasets"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    listed = next(l for l in lines if l.startswith("--collection and the config key"))
    assert all(e.example in listed for e in COLLECTIONS.entries()) and "neuclir22" in listed
    assert any(l.split()[:2] == ["neuclir22", "en-zh"] for l in lines)
    # every collection with its options, read from the registry (issue 25: datasets lists options too)
    options = {l.split()[0]: l.split(None, 1)[1] for l in lines[lines.index(listed) + 2 :]}
    assert set(options) == {e.example for e in COLLECTIONS.entries()}
    assert "topics=None" in options["files:<folder>"] and "dataset=neuclir/1/{lang}/trec-2022" in options["neuclir22"]


def test_keys_v1(tmp_path):
    "The key and name of every demo and fixture pair (and of their shipped translations) are the pristine code's."
    got = {}
    for name in ("demo", "fixture"):
        for p in collection_pairs(name):
            c = load_collection(name, p)
            got[f"collection {name} {p} key"], got[f"collection {name} {p} name"] = c.key, c.name
            if c.has_translations:
                got[f"collection {name} {p} translated key"] = c.translated().key
    want = {k: v for k, v in IDS.items() if k.startswith(("collection demo ", "collection fixture "))}
    assert len(got) == len(want) == 40 and got == want


# ---------- reliability (issue 14; moved from the test_reliability_* files)
FIX = R.FIX


def test_empty_query_is_rejected_at_load(tmp_path):
    "An empty query text is a format error of the topic file (as CIRAL's TSV topics), not a silent empty run."
    from clir_llm.collections import load_collection

    shutil.copytree(FIX, tmp_path / "fx")
    qf = tmp_path / "fx" / "queries.en.jsonl"
    lines = qf.read_text().splitlines()
    rec = json.loads(lines[1])
    rec["text"] = "   "
    lines[1] = json.dumps(rec)
    qf.write_text("\n".join(lines) + "\n")
    R.STATS["bad_input"].add("empty query")
    with pytest.raises(FormatError, match=rf"{qf}:2: query '{rec['qid']}' has an empty text"):
        load_collection("fixture", "en-de", root=tmp_path / "fx")


def test_non_utf8_clef_file(tmp_path):
    "A byte that is not UTF-8 in the (UTF-8) Izvestia collection: file, line and byte."
    from clir_llm.collections import load_collection

    src = R.ROOT / "tests" / "fixtures" / "clef2003"
    shutil.copytree(src, tmp_path / "clef")
    izv = tmp_path / "clef" / "DocumentData" / "DataCollections" / "Russian_data" / "xml" / "izv95_01.xml"
    lines = izv.read_bytes().split(b"\n")
    n = next(i for i, l in enumerate(lines) if "а".encode() in l or "о".encode() in l)
    lines[n] = lines[n] + b" \xff\xfe"
    izv.write_bytes(b"\n".join(lines))
    R.STATS["bad_input"].add("non-UTF-8 CLEF file")
    with pytest.raises(FormatError) as e:
        coll = load_collection("clef2003", "en-ru", root=tmp_path / "clef", check_counts=False)
        for _ in coll.iter_docs():
            pass
    assert e.value.path == str(izv) and e.value.line == n + 1 and "0xff" in str(e.value), str(e.value)


def test_datasets_fails_on_a_broken_folder(tmp_path):
    "issue 26 item 13: `clir-llm datasets files:<folder>` of a folder that is not a collection said so and exited 0; now exit 1."
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "queries.en.tsv").write_text("q1\thello\n")
    p = R.run_main("datasets", f"files:{broken}", "--pair", "en-de")
    R.hostile("input files", "datasets of a broken folder", p.returncode == 1 and "Traceback" not in p.stderr)
    assert p.returncode == 1 and "Traceback" not in p.stderr and f"files:{broken} en-de" in p.stderr, (
        p.returncode,
        p.stderr,
    )


def test_datasets_of_a_folder_that_does_not_exist_fails(tmp_path):
    "issue 39 item 6: `clir-llm datasets files:/nonexistent` (no --pair) listed it as 'give --pair' and exited 0."
    p = R.run_main("datasets", f"files:{tmp_path / 'nonexistent'}")
    R.expect_rc(
        "datasets files:<a folder that does not exist>",
        p.returncode,
        p.stderr,
        f"{tmp_path / 'nonexistent'} is not a folder",
        cls="arguments",
    )
