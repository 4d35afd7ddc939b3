"""Loaders on the REAL upstream files, when this machine has them (skipped otherwise, with the reason).

CIRAL: the test-A topic and pool-qrels files, looked for in $CIRAL_HOME (Hugging Face layout or flat) and in
Anserini's download cache ~/.cache/pyserini/topics-and-qrels (where `pyserini`/Anserini put them after a
`get_topics('ciral-v1.0-so-test-a')`). Neither pyserini 1.6 nor its Anserini 1.7.1 jar ship the files themselves:
the jar holds only their names (io/anserini/search/topicreader/Topics, io/anserini/eval/Qrels) and downloads them.
CLEF 2003: the whole licensed collection under $CLEF_HOME (slow: streams every document of a language).
"""
import os
from pathlib import Path
import pytest
from clir_llm.core import Qrels
from clir_llm.collections import (read_ciral_topics, load_ciral, load_clef2003, CIRAL_LANGS, CIRAL_COUNTS, CIRAL_JUDGED,
                                  CLEF_LANGS, CLEF_COUNTS, CLEF_TOPICS)

ANSERINI_CACHE = Path.home() / ".cache" / "pyserini" / "topics-and-qrels"


def _ciral_upstream(code):
    "(topics, qrels) paths of the real test-A files for `code`, or None."
    lang = CIRAL_LANGS[code]
    t, q = f"topics.ciral-v1.0-{code}-test-a.tsv", f"qrels.ciral-v1.0-{code}-test-a-pools.tsv"
    bases = []
    if os.environ.get("CIRAL_HOME"):
        h = Path(os.environ["CIRAL_HOME"])
        bases += [(h / "ciral" / f"ciral-{lang}" / "topics", h / "ciral" / f"ciral-{lang}" / "qrels"),
                  (h / f"ciral-{lang}" / "topics", h / f"ciral-{lang}" / "qrels"), (h / "ciral", h / "ciral"), (h, h)]
    bases.append((ANSERINI_CACHE, ANSERINI_CACHE))
    for tb, qb in bases:
        if (tb / t).exists() and (qb / q).exists(): return tb / t, qb / q
    return None


@pytest.mark.parametrize("code", sorted(CIRAL_LANGS))
def test_ciral_real_topics_and_pool_qrels(code):
    found = _ciral_upstream(code)
    if not found:
        pytest.skip(f"no real CIRAL {code} test-A topics/pool qrels here ($CIRAL_HOME unset or lacking them, nothing in "
                    f"{ANSERINI_CACHE}); pyserini 1.6 / Anserini 1.7.1 ship only the file names, not the files")
    tpath, qpath = found
    queries, qrels = read_ciral_topics(tpath), Qrels.read(qpath)
    nq, _ = CIRAL_COUNTS[code]
    assert len(queries) == nq and len(qrels) == nq and set(qrels) <= set(queries)
    assert sum(map(len, qrels.values())) == CIRAL_JUDGED[code]
    assert {g for d in qrels.values() for g in d.values()} <= {0, 1}
    assert all(q.text and q.text == q.text.strip() and q.qid.isdigit() for q in queries.values())
    assert all(d.count("#") == 2 for dd in qrels.values() for d in dd)      # SOURCE#article#passage


def test_ciral_real_collection():
    if not os.environ.get("CIRAL_HOME"):
        pytest.skip("$CIRAL_HOME is not set (a copy of the Hugging Face repos CIRAL/ciral and CIRAL/ciral-corpus)")
    for code in CIRAL_LANGS:     # topics, qrels and the two passage files are found and the counts on load hold
        c = load_ciral(f"en-{code}", root=os.environ["CIRAL_HOME"])
        assert len(c.queries) == CIRAL_COUNTS[code][0] and c.has_translations


@pytest.mark.slow
@pytest.mark.parametrize("code", sorted(CLEF_LANGS))
def test_clef2003_real_collection(code, tmp_path):
    if not os.environ.get("CLEF_HOME"):
        pytest.skip("$CLEF_HOME is not set (CLEF 2003, ELRA-E0008, is licensed and never shipped)")
    other = "de" if code != "de" else "en"
    c = load_clef2003(f"{other}-{code}", cache_root=tmp_path)   # 60 topics checked on load
    qside = load_clef2003(f"{code}-{other}", cache_root=tmp_path).queries   # this language's topics parse too
    assert set(qside) <= set(CLEF_TOPICS) and all(q.text and q.lang == code for q in qside.values())
    assert set(c.queries) == set(c.qrels) and set(c.qrels) <= set(CLEF_TOPICS)
    assert c.num_docs == CLEF_COUNTS[code]                         # streams every document; raises on a mismatch
    c.check_qrels()                                                # every judged document exists under its DOCNO
    assert all(d.text for d in c.get_docs(sorted(c.qrels.relevant(sorted(c.qrels, key=int)[0]))[:5]))
