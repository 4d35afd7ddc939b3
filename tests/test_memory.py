"""clir_llm.memory (issue 28 item 1): collections made from DataFrames or dicts, registered nowhere and usable
everywhere a collection is; other queries asked of any collection's documents. Also core's DataFrame faces of `Run`
and `Qrels` (PyTerrier's column names), which these collections and clir_llm.pyterrier read."""

import pandas as pd
import pytest
from clir_llm.core import ClirError, Document, Qrels, Query, Run
from clir_llm.collections import StreamedCollection, check_collection, load_collection
from clir_llm.memory import InMemoryCollection, QueriesView, documents_from, qrels_from, queries_from, with_queries
from clir_llm.rerank import get_reranker
from clir_llm.retrieve import docs_view
from clir_llm.testing import QrelsOracle
from clir_llm.translate import Translator, translate_documents, translate_queries


# ---------- core: Run and Qrels as DataFrames


def test_run_to_df_has_pyterriers_columns_and_ranks_from_zero():
    r = Run.from_ranked({"q2": [("x", 2.0), ("y", 1.0)], "q1": [("d1", 3.0), ("d2", 1.0), ("d3", 1.0)]}, name="bm25")
    df = r.to_df()
    assert list(df.columns) == ["qid", "docno", "score", "rank"]
    assert df.values.tolist() == [
        ["q1", "d1", 3.0, 0],
        ["q1", "d3", 1.0, 1],
        ["q1", "d2", 1.0, 2],
        ["q2", "x", 2.0, 0],
        ["q2", "y", 1.0, 1],
    ]
    assert Run.from_df(df, name="bm25") == r and Run.from_df(df).docids("q1") == r.docids("q1")
    assert Run().to_df().empty and list(Run().to_df().columns) == ["qid", "docno", "score", "rank"]


def test_run_from_df_reads_pyterrier_and_ir_measures_frames():
    pt_frame = pd.DataFrame(
        {"qid": [1, 1, 2], "docid": [0, 1, 2], "docno": ["a", "b", "c"], "rank": [1, 0, 0], "query": "q"}
    )
    assert Run.from_df(pt_frame).docids("1") == ["b", "a"]  # no score: the rank orders (ids read as strings)
    irm = pd.DataFrame({"query_id": ["1"], "doc_id": ["a"], "score": [0.5]})
    assert Run.from_df(irm) == {"1": {"a": 0.5}}


@pytest.mark.parametrize(
    "frame,match",
    [
        (
            pd.DataFrame({"qid": ["1"], "score": [1.0]}),
            "a DataFrame needs a column 'docno' or 'doc_id'; its columns: qid, score",
        ),
        (pd.DataFrame({"qid": ["1"], "docno": ["a"]}), "needs a 'score' or a 'rank' column"),
        (pd.DataFrame({"qid": ["1"], "docno": ["a"], "score": ["x"]}), "document 'a' has score 'x' .not a number."),
        (
            pd.DataFrame({"qid": ["1", "1"], "docno": ["a", "a"], "score": [1.0, 2.0]}),
            "document 'a' ranked twice for query '1'",
        ),
        (pd.DataFrame({"qid": ["1"], "docno": ["a"], "score": [float("nan")]}), "has score nan"),
    ],
)
def test_bad_run_frames_are_one_line(frame, match):
    with pytest.raises(ClirError, match=match) as e:
        Run.from_df(frame)
    assert "\n" not in str(e.value)


def test_qrels_frames():
    q = Qrels({"q1": {"d2": 0, "d1": 1}, "q2": {"d3": 2}})
    df = q.to_df()
    assert list(df.columns) == ["qid", "docno", "label"] and df.values.tolist() == [
        ["q1", "d1", 1],
        ["q1", "d2", 0],
        ["q2", "d3", 2],
    ]
    assert (
        Qrels.from_df(df) == q
        and Qrels.from_df(df.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})) == q
    )
    with pytest.raises(ClirError, match="document 'd1' has grade 0.5"):
        Qrels.from_df(df.assign(label=0.5))
    with pytest.raises(ClirError, match="document 'd1' judged twice for query 'q1'"):
        Qrels.from_df(pd.concat([df, df]))
    with pytest.raises(ClirError, match="needs a column 'label' or 'relevance'"):
        Qrels.from_df(df.drop(columns="label"))


# ---------- InMemoryCollection


def _coll(**kw):
    return InMemoryCollection(
        {"a": "Die Katze schläft.", "b": {"title": "Hund", "text": "Ein Hund läuft."}, "c": Document("c", "Wasser.")},
        {"q1": "sleeping cat", "q2": "a dog"},
        {"q1": {"a": 1}, "q2": {"b": 1}},
        query_lang="en",
        doc_lang="de",
        **kw,
    )


def test_an_in_memory_collection_is_a_collection():
    c = _coll(name="pets")
    assert check_collection(c) is c and isinstance(c, StreamedCollection)
    assert (c.name, c.pair, c.query_lang, c.doc_lang, c.num_docs) == ("pets", "en-de", "en", "de", 3)
    assert c.get_doc("b") == Document("b", "Ein Hund läuft.", "Hund", "de") and c.queries["q1"] == Query(
        "q1", "sleeping cat", "en"
    )
    assert [d.docid for d in c.iter_docs()] == ["a", "b", "c"] and c.qrels.relevant("q2") == {"b"}
    with pytest.raises(ClirError, match="collection 'pets' .en-de, documents in de. has no document 'z'"):
        c.get_doc("z")


def test_frames_and_dicts_give_the_same_collection():
    docs = pd.DataFrame(
        {
            "docno": ["a", "b", "c"],
            "title": [None, "Hund", None],
            "text": ["Die Katze schläft.", "Ein Hund läuft.", "Wasser."],
        }
    )
    topics = pd.DataFrame({"qid": ["q1", "q2"], "query": ["sleeping cat", "a dog"]})
    qrels = pd.DataFrame({"qid": ["q1", "q2"], "docno": ["a", "b"], "label": [1, 1]})
    f, d = InMemoryCollection(docs, topics, qrels, query_lang="en", doc_lang="de"), _coll()
    assert (
        f.key == d.key and list(f.iter_docs()) == list(d.iter_docs()) and f.queries == d.queries and f.qrels == d.qrels
    )


def test_the_key_names_the_documents_not_the_queries():
    "Indexes and views built from the documents are shared by collections of the same documents asked other queries."
    a, b = (
        _coll(),
        InMemoryCollection(
            {"a": "Die Katze schläft.", "b": {"title": "Hund", "text": "Ein Hund läuft."}, "c": "Wasser."},
            {"x": "water"},
            query_lang="en",
            doc_lang="de",
            name="other",
        ),
    )
    assert a.key == b.key
    assert (
        _coll().key != InMemoryCollection({"a": "Die Katze schläft!"}, {"q1": "x"}, query_lang="en", doc_lang="de").key
    )
    assert (
        _coll().key
        != InMemoryCollection(
            {"a": "Die Katze schläft.", "b": {"title": "Hund", "text": "Ein Hund läuft."}, "c": "Wasser."},
            {"q1": "x"},
            query_lang="en",
            doc_lang="fi",
        ).key
    )


def test_translations_are_the_shipped_dt_view():
    c = InMemoryCollection(
        {"a": "Die Katze.", "b": "Der Hund."},
        {"q": "cat"},
        query_lang="en",
        doc_lang="de",
        translations={"a": "The cat.", "b": {"title": "Dog", "text": "The dog."}},
    )
    dt = docs_view(c, "dt")
    assert (
        c.has_translations
        and dt.doc_lang == "en"
        and dt.get_doc("b").full_text == "Dog\nThe dog."
        and dt.queries == c.queries
    )
    with pytest.raises(ClirError, match="the translations and the documents differ in ids .e.g. 'b'."):
        InMemoryCollection({"a": "x", "b": "y"}, {"q": "cat"}, query_lang="en", doc_lang="de", translations={"a": "X"})


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: InMemoryCollection({"a": "x", "b": "y"}, {"q": "c"}, query_lang="en", doc_lang="xx"), "xx"),
        (lambda: documents_from([Document("a", "x"), Document("a", "y")], "de"), "document 'a' appears twice"),
        (lambda: documents_from({"a b": "x"}, "de"), "contains whitespace"),
        (lambda: documents_from({"a": 5}, "de"), "expected a Document, a text or a dict with 'text', got int"),
        (
            lambda: documents_from(pd.DataFrame({"id": ["a"], "text": ["x"]}), "de"),
            "document row 0: needs 'docno' or 'doc_id' or 'docid'",
        ),
        (lambda: queries_from({"q": "  "}, "en"), "query 'q': the text must be a non-empty string"),
        (
            lambda: queries_from(pd.DataFrame({"qid": ["q"], "title": ["x"]}), "en"),
            "query row 0: needs 'query' or 'text'",
        ),
        (lambda: qrels_from({"q": {"a": "1"}}), "document 'a' has grade '1'"),
        (lambda: qrels_from([("q", "a", 1)]), "qrels: expected a DataFrame or a dict of dicts, got list"),
    ],
)
def test_bad_inputs_are_one_line(make, match):
    with pytest.raises(ClirError, match=match) as e:
        make()
    assert "\n" not in str(e.value)


def test_rerankers_take_an_in_memory_collection():
    c = _coll()
    out = get_reranker("listwise", QrelsOracle(c), window=3, step=1, progress=False).rerank(
        c, Run.from_ranked({"q1": ["c", "b", "a"]}), k=3
    )
    assert out.docids("q1")[0] == "a"


# ---------- with_queries


class Upper(Translator):
    name = "upper"

    def translate(self, texts, src, tgt):
        return [t.upper() for t in texts]


def test_with_queries_keeps_the_documents_key_and_views():
    fx = load_collection("fixture", "en-de")
    v = with_queries(fx, {"mine": "malaria"})
    assert (
        isinstance(v, QueriesView)
        and v.key == fx.key
        and list(v.queries) == ["mine"]
        and v.queries["mine"].lang == "en"
    )
    assert [d.docid for d in v.iter_docs()] == [d.docid for d in fx.iter_docs()] and v.num_docs == fx.num_docs
    qt, qt_base = translate_queries(v, Upper()), translate_queries(fx, Upper())
    # the same QT index, its own queries
    assert qt.key == qt_base.key and qt.queries == {"mine": Query("mine", "MALARIA", "de")}
    dt = translate_documents(v, Upper())
    assert (
        dt.key == translate_documents(fx, Upper()).key
        and list(dt.queries) == ["mine"]
        and dt.get_doc("de-1").text.isupper()
    )
    fx_sw = load_collection("fixture", "en-sw")  # ships translations: the DT view keeps the queries too
    assert list(with_queries(fx_sw, {"mine": "x"}).translated().queries) == ["mine"]


def test_a_views_key_changes_with_its_queries_but_not_with_queries_of_with_queries():
    "The view a PyTerrier topics frame needs did not exist: a StreamedCollection's own `view` changes the key (so every index)."
    fx = load_collection("fixture", "en-de")
    assert fx.view("queries", queries={}).key != fx.key and with_queries(fx, {"q": "x"}).key == fx.key
