"""CLEF 2003 loader on the synthetic fixture in the distribution's layout; CIRAL's fail-fast without the Hub."""
import gzip, os, re, shutil, subprocess, sys, time
from pathlib import Path
import pytest
from clir_llm.core import ClirError, FormatError
from clir_llm.collections import (load_collection, list_collections, load_clef2003, clef_doc_files, CLEF_PAIRS,
                                  CLEF_COUNTS, CLEF_LANGS)

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
    c = load_clef2003(f"{qlang}-{lang}", root=FX, check_counts=False, cache_root=tmp_path)
    expected = _raw_docnos(lang)
    docs = list(c.iter_docs())
    assert [d.docid for d in docs] == expected and len(expected) >= 3
    assert c.num_docs == len(expected) == len(set(expected))
    assert all(isinstance(d.text, str) and d.text and not d.docid.isdigit() for d in docs)
    first, last = c.get_doc(expected[0]), c.get_doc(expected[-1])
    assert first == docs[0] and last == docs[-1] and last.lang == lang


def test_la_times_id_is_docno_not_docid(tmp_path):
    c = load_clef2003("de-en", root=FX, check_counts=False, cache_root=tmp_path)
    d = c.get_doc("LA010194-0002")        # its <DOCID> is 2
    assert d.text.startswith("AVALANCHE KILLS THREE CLIMBERS IN SWISS ALPS An avalanche") and "<P>" not in d.text
    assert c.get_doc("LA010194-0001").text.endswith("Lift tickets cost $40 & up.")
    with pytest.raises(ClirError, match="has no document '2'"):
        c.get_doc("2")


# The text the paper's models saw: the authors' extractor per collection (rlitschk/clef-dataloaders
# clef_extractors.py: fields joined by spaces, in its order) then download_data.normalize_whitespace; no title field.
PAPER_TEXT = {
    ("en", "LA010194-0001"): "SKI RESORTS OPEN EARLY Fresh snow let resorts in Colorado open a week early. Lift tickets cost $40 & up.",
    ("en", "GH950102-000000"): "Rivers burst their banks The Clyde and the Tay flooded farmland across Scotland after a week of rain.",
    ("de", "SPIEGEL9495-000001"): "Matt in 40 Zügen Das Duell um die Schachkrone wird fortgesetzt. "
                                  "Die Weltmeisterschaft im Schach geht in die zweite Hälfte.",
    ("de", "FR940104-000002"): "Haushalt beschlossen Die Stadtverordneten beschlossen den Etat für 1994.",
    ("de", "SDA.940101.0001"): "Eine Lawine hat im Wallis drei Bergsteiger verschüttet. Zermatt (sda) Drei Tote bei Lawinenniedergang KW",
    ("de", "SDA.950101.0001"): "Der Rhein führt Hochwasser; die Schifffahrt ist eingestellt. Basel (sda) Hochwasser am Rhein KW",
    ("it", "LASTAMPA94-000002"): "La sfida per il titolo mondiale di scacchi riprende domani. Scacchi, riprende la sfida",
    ("it", "AGZ.940101.0001"): "Tre morti sotto una valanga Zermatt (ats) Una valanga ha travolto tre alpinisti in Vallese.",
    ("it", "AGZ.950101.0001"): "Alluvione in Olanda Amsterdam (ats) Migliaia di persone evacuate per la piena della Mosa e del Reno.",
    ("fi", "AAMU950104-0003"): "Shakin MM-ottelu jatkui Lontoossa.",
    ("ru", "IZV-19950104-0001"): "Лавина погребла трёх альпинистов в Швейцарии. Лавина в Альпах происшествия",
}


@pytest.mark.parametrize("lang,docid", sorted(PAPER_TEXT))
def test_document_text_is_the_papers(tmp_path, lang, docid):
    d = load_clef2003(("de" if lang != "de" else "en") + f"-{lang}", root=FX, check_counts=False, cache_root=tmp_path).get_doc(docid)
    assert (d.text, d.title, d.full_text) == (PAPER_TEXT[lang, docid], "", PAPER_TEXT[lang, docid])


def test_fields_the_authors_leave_out_stay_out(clef):
    sda = clef("en-de").get_doc("SDA.940101.0001")
    assert "Lawine; Alpen" not in sda.text and sda.text.startswith("Eine Lawine")        # SDA's <ST> is not read; text first
    assert "KW" not in clef("en-it").get_doc("AGZ.940101.0001").text                      # Italian SDA: no <KW>
    assert "Lumivyöry surmasi" not in clef("en-fi").get_doc("AAMU940103-0001").text       # Aamulehti's title is not read
    assert clef("en-it").get_doc("LASTAMPA94-000001").text.endswith(". Piena del Po")    # La Stampa: text, then title


def test_key_names_the_text_version(monkeypatch):
    from clir_llm import collections as C
    k = load_clef2003("en-de", root=FX, check_counts=False).key
    monkeypatch.setattr(C, "CLEF_TEXT_VERSION", C.CLEF_TEXT_VERSION + 1)
    assert load_clef2003("en-de", root=FX, check_counts=False).key != k   # document stores and indexes are rebuilt


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
    assert "not relevant" not in q["141"].text                         # narrative unused
    assert clef("de-ru").queries["141"].text.startswith("Lawinentote in den Alpen Finde Berichte über")
    ruq = load_clef2003("ru-de", root=FX, check_counts=False).queries   # UTF-8 with a byte-order mark
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
        load_clef2003("en-de", root=FX, cache_root=tmp_path)
    c = load_clef2003("en-ru", root=FX, check_counts=False, cache_root=tmp_path)
    c.expected_num_docs = CLEF_COUNTS["ru"]
    with pytest.raises(ClirError, match=r"Russian_data/xml: 3 documents, expected 16,716 for clef2003 ru \(Russian\)"):
        c.num_docs


def test_missing_data_names_what_and_layout(tmp_path, monkeypatch):
    monkeypatch.delenv("CLEF_HOME", raising=False)
    with pytest.raises(ClirError, match=r"set \$CLEF_HOME.*DocumentData/.*Topics/2003/Top-<code>03\.txt.*RelAssess/2003/qrels_<LANGUAGE>"):
        load_collection("clef2003", "en-de")
    monkeypatch.setenv("CLEF_HOME", str(tmp_path / "nope"))
    with pytest.raises(ClirError, match=r"nope: no such folder"):
        load_collection("clef2003", "en-de")
    home = tmp_path / "clef"; shutil.copytree(FX, home)
    shutil.rmtree(home / "RelAssess")
    with pytest.raises(ClirError, match=r"RelAssess: no such folder"):
        load_clef2003("en-de", root=home, check_counts=False)
    home2 = tmp_path / "clef2"; shutil.copytree(FX, home2)
    (home2 / "RelAssess/2003/qrels_GERMAN").unlink()
    with pytest.raises(ClirError, match=r"2003: no qrels_GERMAN \(files there: qrels_ENGLISH"):
        load_clef2003("en-de", root=home2, check_counts=False)
    shutil.rmtree(home2 / "DocumentData/DataCollections/Finnish_data")
    with pytest.raises(ClirError, match=r"DocumentData: no folder for Finnish documents"):
        load_clef2003("en-fi", root=home2, check_counts=False)


def test_archives_must_be_unpacked(tmp_path):
    home = tmp_path / "clef"; shutil.copytree(FX, home)
    aamu = home / "DocumentData/DataCollections/Finnish_data/aamu"
    for f in aamu.iterdir(): f.unlink()
    (aamu / "aamu9495.tgz").write_bytes(b"")
    with pytest.raises(ClirError, match=r"no document files for Finnish; unpack the archives first \(aamu9495\.tgz\)"):
        load_clef2003("en-fi", root=home, check_counts=False)


def test_unsupported_pair():
    with pytest.raises(ClirError, match="no pair 'en-sw'"):
        load_collection("clef2003", "en-sw")
    with pytest.raises(ClirError, match="CLEF 2003 has no sw data"):
        load_clef2003("en-sw", root=FX)


def _copy(tmp_path):
    home = tmp_path / "clef"; shutil.copytree(FX, home); return home


def test_bad_encoding_names_file_and_line(tmp_path):
    home = _copy(tmp_path)
    izv = home / "DocumentData/DataCollections/Russian_data/xml/izv95_01.xml"
    lines = izv.read_text(encoding="utf-8").splitlines(keepends=True)
    raw = b"".join(l.encode("cp1251") if i == 12 else l.encode("utf-8") for i, l in enumerate(lines))
    izv.write_bytes(raw)
    c = load_clef2003("en-ru", root=home, check_counts=False, cache_root=tmp_path)
    with pytest.raises(FormatError, match=rf"izv95_01\.xml:13: not valid UTF-8: byte 0x.. at column \d+ \(expected UTF-8"):
        list(c.iter_docs())


def test_unclosed_doc_and_missing_docno(tmp_path):
    home = _copy(tmp_path)
    fr = home / "DocumentData/DataCollections/German_data/fr_rundschau/FR940104.sgml"
    text = fr.read_text(encoding="latin-1")
    fr.write_text(text.replace("</DOC>\n", "\n", 1), encoding="latin-1")
    with pytest.raises(FormatError, match=r"FR940104\.sgml:\d+: <DOC> opened on line 1 is not closed before the next <DOC>"):
        list(load_clef2003("en-de", root=home, check_counts=False).iter_docs())
    fr.write_text(text.replace("<DOCNO>FR940104-000002</DOCNO>\n<DOCID>FR940104-000002</DOCID>\n", ""), encoding="latin-1")
    with pytest.raises(FormatError, match=r"FR940104\.sgml:10: document without <DOCNO>"):
        list(load_clef2003("en-de", root=home, check_counts=False).iter_docs())
    gh = home / "DocumentData/DataCollections/English_data/GlasgowHerald95/GH95/GH950102.gz"
    gh.write_bytes(gh.read_bytes()[:-20])
    with pytest.raises(FormatError, match=r"GH950102\.gz:\d+: gzip stream is truncated"):
        list(load_clef2003("de-en", root=home, check_counts=False).iter_docs())


def test_qrels_errors(tmp_path):
    home = _copy(tmp_path)
    q = home / "RelAssess/2003/qrels_ITALIAN"
    q.write_text(q.read_text() + "199 0 AGZ.940101.0001 1\n")
    with pytest.raises(FormatError, match=rf"qrels_ITALIAN:5: topic 199 is judged but not in .*Top-de03\.txt"):
        load_clef2003("de-it", root=home, check_counts=False)
    q.write_text("141 0 AGZ.940101.0001 yes\n")
    with pytest.raises(FormatError, match=r"qrels_ITALIAN:1: relevance must be an integer, got 'yes'"):
        load_clef2003("de-it", root=home, check_counts=False)
    q.write_text("141 0 AGZ.940101.0099 1\n")
    c = load_clef2003("de-it", root=home, check_counts=False, cache_root=tmp_path)
    with pytest.raises(FormatError, match=r"qrels_ITALIAN:1: query '141' judges document 'AGZ\.940101\.0099'"):
        c.check_qrels()


def test_key_changes_with_the_data(tmp_path):
    home = _copy(tmp_path)
    k1 = load_clef2003("en-fi", root=home, check_counts=False).key
    f = home / "DocumentData/DataCollections/Finnish_data/aamu/aamu9401.sgml"
    f.write_text(f.read_text(encoding="latin-1") + "\n", encoding="latin-1")
    assert load_clef2003("en-fi", root=home, check_counts=False).key != k1


def test_paper_config_dry_run_without_data():
    env = {k: v for k, v in os.environ.items() if k != "CLEF_HOME"}
    out = subprocess.run([*CLI, "reproduce", "configs/paper-clef.yaml", "--dry-run"], capture_output=True, text=True,
                         timeout=300, env=env, cwd=Path(__file__).parents[1])
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
    for k in PROXIES: monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")   # nothing listens on the discard port
    with pytest.raises(ClirError, match=r"Hugging Face Hub \(http://127\.0\.0\.1:9\) is unreachable .*set \$CIRAL_HOME"):
        load_collection("ciral", "en-sw")
