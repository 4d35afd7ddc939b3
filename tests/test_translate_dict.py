"""clir_llm.translate_dict: the dictionary translator on real FreeDict data (Debian's dict-freedict-eng-deu / -eng-fin,
fetched with `apt-get download` into the test cache when not installed: needs Debian's archive, which CI reaches), and
its options on a dictionary built here."""

import gzip, json, os, shutil, subprocess, sys
from pathlib import Path
import pytest
from clir_llm.cache import Cache
from clir_llm.core import ClirError, FormatError
from clir_llm.translate import TranslatorSpec, get_translator, translate_queries
from clir_llm.translate_dict import DictionaryTranslator, DictOptions, FreeDict, ensure_freedict, freedict_package
from clir_llm.collections import load_collection

needs_freedict = pytest.mark.skipif(
    not shutil.which("apt-get") and not os.environ.get("CLIR_LLM_FREEDICT"),
    reason="needs apt-get (Debian) or CLIR_LLM_FREEDICT to get the FreeDict files",
)


@pytest.fixture(scope="module")
def cache():
    # one shared download per test session: the user's cache (CI sets CLIR_LLM_CACHE to a fresh folder)
    return Cache()


@pytest.fixture(scope="module")
def tr(cache):
    return DictionaryTranslator(cache=cache)


@needs_freedict
def test_ensure_freedict_downloads_and_is_idempotent(cache):
    idx, dz, version = ensure_freedict("en-fi", cache)
    assert idx.name == "freedict-eng-fin.index" and dz.name == "freedict-eng-fin.dict.dz" and version
    assert ensure_freedict("en-fi", cache) == (idx, dz, version)
    d = FreeDict(idx, dz)
    assert len(d) > 40000 and "computer" in d


@needs_freedict
def test_en_de_real_dictionary(tr):
    out = tr.translate(["computer file", "the house of my children", "running programs", "Xorg kernel"], "en", "de")
    assert "Datei" in out[0].split() or "Computerdatei" in out[0].split()
    assert out[1].split()[0] == "Haus" and "Kinder" in out[1].split()  # lemmatised, function words dropped
    assert out[3].split()[0] == "Xorg" and "Betriebssystemkern" in out[3].split()  # unknown word passed through
    d = tr.dictionary("en", "de")
    assert len(d) > 300000 and d.version.startswith("20")
    assert "dict-freedict-eng-deu" in tr.identity["dictionaries"]["en-de"]


@needs_freedict
def test_en_fi_real_dictionary_needs_lemmas(tr):
    d = tr.dictionary("en", "fi")
    assert "files" not in d and "file" in d  # English-Finnish has lemmas only
    out = tr.translate(["files", "houses", "computer", "children"], "en", "fi")
    assert "tiedosto" in out[0].split() and "talo" in out[1].split() and out[2].split()[0] == "tietokone"
    assert out[3] != "children"
    assert tr.usage.counters["unknown_words"] >= 1  # "Xorg" earlier


@needs_freedict
def test_views_and_refusal(tr):
    fx = load_collection("fixture", "en-fi")
    qt = translate_queries(fx, tr)
    assert qt.query_lang == "fi" and qt.queries["t1"].text != fx.queries["t1"].text
    assert "rokote" in qt.queries["t1"].text.split()  # vaccine
    with pytest.raises(ClirError, match="no FreeDict dictionary for en-yo.*serves: en-de"):
        tr.translate(["water"], "en", "yo")
    with pytest.raises(ClirError):
        freedict_package("ha-en")


def test_bad_index_line_names_file_and_line(tmp_path):
    (tmp_path / "x.index").write_text("good\tA\tB\nbroken line without tabs\n")
    (tmp_path / "x.dict.dz").write_bytes(gzip.compress(b"x"))
    with pytest.raises(FormatError, match=r"x\.index:2"):
        FreeDict(tmp_path / "x.index", tmp_path / "x.dict.dz")


def test_no_apt_message(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no apt-get, no dpkg-deb
    monkeypatch.delenv("CLIR_LLM_FREEDICT", raising=False)
    with pytest.raises(ClirError, match="apt-get download dict-freedict-eng-ita.*CLIR_LLM_FREEDICT"):
        ensure_freedict("en-it", Cache(tmp_path / "empty"), system_dir=tmp_path / "none")


@needs_freedict
def test_cli_dictionary_qt(tmp_path):
    cli = str(Path(sys.executable).parent / "clir-llm")
    p = subprocess.run(
        [
            cli,
            "translate",
            "--collection",
            "fixture",
            "--pair",
            "en-de",
            "--what",
            "queries",
            "--translator",
            "dict:freedict",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    rows = dict(l.split("\t") for l in (tmp_path / "queries.de.tsv").read_text().splitlines())
    assert set(rows) == {"t1", "t2", "t3"} and "Impfstoff" in rows["t1"]
    acc = json.loads((tmp_path / "queries.translation.json").read_text())
    assert (
        acc["translator"] == "dict:freedict"
        and "en-fi" in acc["pairs_served"]
        and acc["usage"]["counters"]["texts"] == 3
    )
    p = subprocess.run(
        [
            cli,
            "translate",
            "--collection",
            "fixture",
            "--pair",
            "en-yo",
            "--translator",
            "dict:freedict",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 1 and "no FreeDict dictionary for en-yo" in p.stderr


@needs_freedict
def test_repeated_words_are_parsed_once(cache, monkeypatch):
    """The main job translates the same documents in several runs (BM25-DT, then every DT reranking): a word's
    dictionary entries are parsed once per translator, and the second translation of a text reads no entry at all
    (it read every entry again before: 440 of the 655 s of a replayed listwise notebook went into FreeDict parsing)."""
    tr = DictionaryTranslator(cache=cache)
    text = "the house of my children is running programs on the computer of the house"
    first = tr.translate([text], "en", "de")
    calls = []
    monkeypatch.setattr(FreeDict, "senses", lambda self, w: calls.append(w) or [])
    assert tr.translate([text], "en", "de") == first and calls == []
    DictionaryTranslator(cache=cache).translate([text], "en", "de")
    assert calls  # a new translator parses again


def _tiny_dict(folder):
    "A dictd dictionary of a few English-German entries in the upstream layout."
    B = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    enc64 = lambda n: B[n] if n < 64 else enc64(n // 64) + B[n % 64]
    entries = {
        "file": "file\nAkte <fem>, Ordner <masc>\n",
        "file2": 'file\nDatei <fem>\n  "a file" - eine Datei\n',
        "house": "house\nHaus <neut>, Gebäude <neut>\n",
    }
    blob, idx, off = b"", [], 0
    for k, v in entries.items():
        b = v.encode()
        idx.append(f"{k.rstrip('2')}\t{enc64(off)}\t{enc64(len(b))}")
        blob += b
        off += len(b)
    (folder / "x.index").write_text("\n".join(idx) + "\n")
    (folder / "x.dict.dz").write_bytes(gzip.compress(blob))
    return FreeDict(folder / "x.index", folder / "x.dict.dz", name="dict-freedict-eng-deu", version="test")


def test_options_change_translations_and_identity(tmp_path):
    d = {"en-de": _tiny_dict(tmp_path)}
    full = DictionaryTranslator(DictOptions(), dictionaries=d)
    one = DictionaryTranslator(
        TranslatorSpec.parse("dict:freedict[senses=1,terms_per_sense=1]").options_model, dictionaries=d
    )
    assert full.translate(["the files of a house"], "en", "de") == ["Datei Akte Ordner Haus Gebäude"]
    assert one.translate(["the files of a house"], "en", "de") == ["Datei Haus"]
    assert (
        one.identity["senses"] == 1 and one.key != full.key and one.pairs_served() == list(DictionaryTranslator.pairs())
    )
    assert get_translator("dict:freedict[max_phrase=1]").options == DictOptions(max_phrase=1)
    with pytest.raises(ClirError, match="senses"):
        get_translator("dict:freedict[senses=0]")
