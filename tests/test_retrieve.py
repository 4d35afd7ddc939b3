"First stage: reciprocal rank fusion, method strings, and `clir-llm retrieve` on the shipped fixture collection."
import json
import pytest
from clir_llm.cache import Cache
from clir_llm.cli import main
from clir_llm.collections import load_collection
from clir_llm.core import ClirError, Run, usage_path
from clir_llm.retrieve import Fusion, Translated, get_retriever, rrf


def test_rrf_scores_and_depth():
    a = Run.from_ranked({"q": ["d1", "d2", "d3"]}, name="a")
    b = Run.from_ranked({"q": ["d3", "d1", "d4"]}, name="b")
    f = rrf([a, b])
    assert f.name == "rrf(a+b)"
    assert f["q"] == pytest.approx({"d1": 1 / 61 + 1 / 62, "d3": 1 / 63 + 1 / 61, "d2": 1 / 62, "d4": 1 / 63})
    assert f.docids("q") == ["d1", "d3", "d2", "d4"]
    assert rrf([a, b], depth=1).docids("q") == ["d1"] and rrf([a, b], k=0)["q"]["d2"] == pytest.approx(1 / 2)


def test_rrf_deterministic_ties_and_order():
    runs = [Run.from_ranked({"q": ["x", "y", "z"]}), Run.from_ranked({"q": ["z", "x", "y"]}), Run.from_ranked({"q": ["y", "z", "x"]})]
    f = rrf(runs)
    assert f["q"]["x"] == f["q"]["y"] == f["q"]["z"]             # bit-identical: same ranks, summed in a fixed order
    assert f.docids("q") == ["z", "y", "x"]                      # ties by docid, descending (trec_eval)
    assert rrf(runs[::-1]) == f and rrf(runs[1:] + runs[:1]) == f


def test_rrf_input_ties_use_run_order():
    "Tied scores inside an input run are ranked like trec_eval (docid descending) before fusion."
    tied = Run({"q": {"a": 1.0, "b": 1.0}}, name="t")
    assert rrf([tied]).docids("q") == ["b", "a"] and rrf([tied])["q"]["b"] > rrf([tied])["q"]["a"]


def test_rrf_union_of_queries_and_errors():
    f = rrf([Run.from_ranked({"q1": ["a"]}), Run.from_ranked({"q2": ["b"]})])
    assert f.docids("q1") == ["a"] and f.docids("q2") == ["b"]
    with pytest.raises(ClirError): rrf([])


def test_method_strings():
    class T: name = "dict:freedict"
    assert get_retriever("bm25-og").name == "bm25-og"
    assert get_retriever("bm25-qt", translator=T()).name == "bm25-qt[dict:freedict]"
    assert get_retriever("bm25-dt").name == "bm25-dt"
    f = get_retriever("rrf:bm25-dt+dense:nv-embed-v2")
    assert isinstance(f, Fusion) and f.name == "rrf(bm25-dt+dense:nv-embed-v2)"
    assert get_retriever("dense:repllama", paper_quirks=True).name == "dense:repllama[paper-quirks]"
    for bad, msg in (("tfidf", "unknown first-stage method"), ("rrf:bm25-og", "two or more"), ("dense:e7", "known")):
        with pytest.raises(ClirError, match=msg): get_retriever(bad)


def test_translated_views_need_a_translator():
    fx = load_collection("fixture", "en-de")
    with pytest.raises(ClirError, match="needs a translator"): get_retriever("bm25-qt").view(fx)
    with pytest.raises(ClirError, match="ships no document translations"): get_retriever("bm25-dt").view(fx)
    with pytest.raises(ClirError): Translated(get_retriever("bm25-og"), "xx")


def test_bm25_og_and_fusion_on_fixture(tmp_path):
    fx = load_collection("fixture", "de-fi")
    og = get_retriever("bm25-og", cache=Cache(tmp_path), progress=False)
    r = og.retrieve(fx)
    assert set(r) == set(fx.queries) and all(len(v) <= 100 for v in r.values())
    f = Fusion([og, get_retriever("bm25-og", cache=Cache(tmp_path), progress=False, k1=1.2, b=0.75)]).retrieve(fx)
    assert set(f) == set(r) and all(set(f[q]) == set(r[q]) for q in r)


def test_cli_retrieve_writes_run_and_usage(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CLIR_LLM_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "runs" / "og.trec"
    assert main(["retrieve", "--collection", "fixture", "--pair", "en-sw", "--method", "bm25-og", "--out", str(out), "--k", "2"]) == 0
    run = Run.read(out)
    assert run.name == "bm25-og" and all(len(v) <= 2 for v in run.values())
    u = json.loads(usage_path(out).read_text())
    assert u["seconds"] > 0 and u["counters"]["queries"] == len(load_collection("fixture", "en-sw").queries)
    assert "og.trec" in capsys.readouterr().out


def test_cli_retrieve_errors(tmp_path, capsys):
    out = str(tmp_path / "x.trec")
    assert main(["retrieve", "--collection", "fixture", "--pair", "en-de", "--method", "bm99", "--out", out]) == 1
    assert "unknown first-stage method" in capsys.readouterr().err
    assert main(["retrieve", "--collection", "fixture", "--pair", "en-de", "--method", "bm25-qt", "--translator", "babel", "--out", out]) == 1
    assert "unknown translator" in capsys.readouterr().err
    assert main(["retrieve", "--collection", "nope", "--pair", "en-de", "--method", "bm25-og", "--out", out]) == 1
    assert not (tmp_path / "x.trec").exists()


@pytest.mark.slow
def test_cli_bm25_qt_dictionary_on_fixture(tmp_path, monkeypatch):
    "BM25-QT with the FreeDict dictionary beats BM25-OG on the fixture's English->German queries."
    from clir_llm.evaluate import evaluate
    monkeypatch.setenv("CLIR_LLM_CACHE", str(tmp_path / "cache"))
    fx = load_collection("fixture", "en-de")
    for m in ("bm25-og", "bm25-qt"):
        assert main(["retrieve", "--collection", "fixture", "--pair", "en-de", "--method", m, "--translator", "dict:freedict",
                     "--out", str(tmp_path / f"{m}.trec")]) == 0
    og, qt = (evaluate(Run.read(tmp_path / f"{m}.trec"), fx.qrels, "MAP")["MAP"] for m in ("bm25-og", "bm25-qt"))
    assert qt > og


def test_one_dt_view_shipped_translations_win_over_a_configured_translator(tmp_path):
    "Issue 15.1 / 13.4: with shipped translations (CIRAL-style) and a translator, BM25-DT and the rerankers read the shipped ones."
    from clir_llm.retrieve import docs_view
    sw = load_collection("fixture", "en-sw")
    assert sw.has_translations
    never = "nllb:/no/such/nllb-model"            # loading it would fail: it must not be touched
    cache = Cache(tmp_path)
    plain = get_retriever("bm25-dt", cache=cache, progress=False).retrieve(sw)
    with_tr = get_retriever("bm25-dt", translator=never, cache=cache, progress=False).retrieve(sw)
    assert with_tr == plain and len(plain)
    assert docs_view(sw, "dt", never).key == sw.translated().key
    with pytest.raises(ClirError):                 # asked for explicitly, the translator is used (and fails here)
        get_retriever("bm25-dt", translator=never, cache=cache, dt_source="translator", progress=False).retrieve(sw)
    with pytest.raises(ClirError, match="ships no document translations"):
        docs_view(load_collection("fixture", "en-de"), "dt", source="shipped")


def test_method_specs_parse_once_and_keep_their_strings():
    from clir_llm.retrieve import FIRST_STAGES, FusionMethod, parse_method
    for s in ("bm25-og", "bm25-qt", "bm25-dt", "dense:e5-small", "dense:nv-embed-v2", "rrf:bm25-dt+dense:e5-small",
              "rrf:bm25-qt+bm25-dt+dense:m3"):
        spec = parse_method(s)
        assert str(spec) == spec.key() == s and parse_method(str(spec)) == spec
    f = parse_method("rrf:bm25-dt+dense:e5-small")
    assert isinstance(f, FusionMethod) and f.translated and f.encoders == ("e5-small",)
    assert [e.example for e in FIRST_STAGES.entries()][:3] == ["bm25-og", "bm25-qt", "bm25-dt"]
    with pytest.raises(ClirError, match="accepted: bm25-og, bm25-qt, bm25-dt, dense:<encoder>"):
        parse_method("bm26")
