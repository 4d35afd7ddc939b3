"BM25 in Chinese and Persian through the Lucene analyzers the language table names (tests/fixtures/zhfa, the shipped layout)."
from pathlib import Path
import pytest
from clir_llm import bm25 as B
from clir_llm.cache import Cache
from clir_llm.collections import load_folder_collection
from clir_llm.languages import language

ZHFA = Path(__file__).parent / "fixtures" / "zhfa"


@pytest.mark.parametrize("pair", ["zh-zh", "fa-fa"])
def test_bm25_finds_each_document_through_the_analyzer(pair, tmp_path):
    coll = load_folder_collection(ZHFA, pair)
    lang = language(coll.doc_lang)
    assert lang.lucene == coll.doc_lang and B.analyzer_name(coll.doc_lang) == f"lucene-{lang.code}"
    for batch in (True, False):   # SearchCollection (batch) and LuceneSearcher (one query) both analyze the query
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
