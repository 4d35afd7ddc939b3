"""clir_llm.retrieve: reciprocal rank fusion, method strings, the DT rule (`dt_plan`, `docs_view`), the executor a method's
retriever is built with, the authors' first-stage settings, `clir-llm retrieve` on the shipped fixture collection, and the
method strings, descriptions and run names of every configuration byte for byte as the code before Architecture II made them."""

import json, re
from pathlib import Path
import pytest
import yaml
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
    runs = [
        Run.from_ranked({"q": ["x", "y", "z"]}),
        Run.from_ranked({"q": ["z", "x", "y"]}),
        Run.from_ranked({"q": ["y", "z", "x"]}),
    ]
    f = rrf(runs)
    assert f["q"]["x"] == f["q"]["y"] == f["q"]["z"]  # bit-identical: same ranks, summed in a fixed order
    assert f.docids("q") == ["z", "y", "x"]  # ties by docid, descending (trec_eval)
    assert rrf(runs[::-1]) == f and rrf(runs[1:] + runs[:1]) == f


def test_rrf_input_ties_use_run_order():
    "Tied scores inside an input run are ranked like trec_eval (docid descending) before fusion."
    tied = Run({"q": {"a": 1.0, "b": 1.0}}, name="t")
    assert rrf([tied]).docids("q") == ["b", "a"] and rrf([tied])["q"]["b"] > rrf([tied])["q"]["a"]


def test_rrf_union_of_queries_and_errors():
    f = rrf([Run.from_ranked({"q1": ["a"]}), Run.from_ranked({"q2": ["b"]})])
    assert f.docids("q1") == ["a"] and f.docids("q2") == ["b"]
    with pytest.raises(ClirError):
        rrf([])


def test_method_strings():
    class T:
        name = "dict:freedict"

    assert get_retriever("bm25-og").name == "bm25-og"
    assert get_retriever("bm25-qt", translator=T()).name == "bm25-qt[dict:freedict]"
    assert get_retriever("bm25-dt").name == "bm25-dt"
    f = get_retriever("rrf:bm25-dt+dense:nv-embed-v2")
    assert isinstance(f, Fusion) and f.name == "rrf(bm25-dt+dense:nv-embed-v2)"
    assert get_retriever("dense:repllama", paper_quirks=True).name == "dense:repllama[paper-quirks]"
    for bad, msg in (("tfidf", "unknown first-stage method"), ("rrf:bm25-og", "two or more"), ("dense:e7", "known")):
        with pytest.raises(ClirError, match=msg):
            get_retriever(bad)


def test_translated_views_need_a_translator():
    fx = load_collection("fixture", "en-de")
    with pytest.raises(ClirError, match="needs a translator"):
        get_retriever("bm25-qt").view(fx)
    with pytest.raises(ClirError, match="ships no document translations"):
        get_retriever("bm25-dt").view(fx)
    with pytest.raises(ClirError):
        Translated(get_retriever("bm25-og"), "xx")


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
    assert (
        main(
            [
                "retrieve",
                "--collection",
                "fixture",
                "--pair",
                "en-sw",
                "--method",
                "bm25-og",
                "--out",
                str(out),
                "--k",
                "2",
            ]
        )
        == 0
    )
    run = Run.read(out)
    assert run.name == "bm25-og" and all(len(v) <= 2 for v in run.values())
    u = json.loads(usage_path(out).read_text())
    assert u["seconds"] > 0 and u["counters"]["queries"] == len(load_collection("fixture", "en-sw").queries)
    assert "og.trec" in capsys.readouterr().out


def test_cli_retrieve_errors(tmp_path, capsys):
    out = str(tmp_path / "x.trec")
    assert main(["retrieve", "--collection", "fixture", "--pair", "en-de", "--method", "bm99", "--out", out]) == 1
    assert "unknown first-stage method" in capsys.readouterr().err
    assert (
        main(
            [
                "retrieve",
                "--collection",
                "fixture",
                "--pair",
                "en-de",
                "--method",
                "bm25-qt",
                "--translator",
                "babel",
                "--out",
                out,
            ]
        )
        == 1
    )
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
        assert (
            main(
                [
                    "retrieve",
                    "--collection",
                    "fixture",
                    "--pair",
                    "en-de",
                    "--method",
                    m,
                    "--translator",
                    "dict:freedict",
                    "--out",
                    str(tmp_path / f"{m}.trec"),
                ]
            )
            == 0
        )
    og, qt = (evaluate(Run.read(tmp_path / f"{m}.trec"), fx.qrels, "MAP")["MAP"] for m in ("bm25-og", "bm25-qt"))
    assert qt > og


def test_one_dt_view_shipped_translations_win_over_a_configured_translator(tmp_path):
    "Issue 15.1 / 13.4: with shipped translations (CIRAL-style) and a translator, BM25-DT and the rerankers read the shipped ones."
    from clir_llm.retrieve import docs_view

    sw = load_collection("fixture", "en-sw")
    assert sw.has_translations
    never = "nllb:/no/such/nllb-model"  # loading it would fail: it must not be touched
    cache = Cache(tmp_path)
    plain = get_retriever("bm25-dt", cache=cache, progress=False).retrieve(sw)
    with_tr = get_retriever("bm25-dt", translator=never, cache=cache, progress=False).retrieve(sw)
    assert with_tr == plain and len(plain)
    assert docs_view(sw, "dt", never).key == sw.translated().key
    with pytest.raises(ClirError):  # asked for explicitly, the translator is used (and fails here)
        get_retriever("bm25-dt", translator=never, cache=cache, dt_source="translator", progress=False).retrieve(sw)
    with pytest.raises(ClirError, match="ships no document translations"):
        docs_view(load_collection("fixture", "en-de"), "dt", source="shipped")


def test_method_specs_parse_once_and_keep_their_strings():
    from clir_llm.retrieve import FIRST_STAGES, FusionMethod, parse_method

    for s in (
        "bm25-og",
        "bm25-qt",
        "bm25-dt",
        "dense:e5-small",
        "dense:nv-embed-v2",
        "rrf:bm25-dt+dense:e5-small",
        "rrf:bm25-qt+bm25-dt+dense:m3",
    ):
        spec = parse_method(s)
        assert str(spec) == spec.key() == s and parse_method(str(spec)) == spec
    f = parse_method("rrf:bm25-dt+dense:e5-small")
    assert isinstance(f, FusionMethod) and f.translated and f.encoders == ("e5-small",)
    assert [e.example for e in FIRST_STAGES.entries()][:3] == ["bm25-og", "bm25-qt", "bm25-dt"]
    with pytest.raises(ClirError, match="accepted: bm25-og, bm25-qt, bm25-dt, dense:<encoder>"):
        parse_method("bm26")


IDS = json.loads((Path(__file__).parent / "fixtures" / "identities-v1.json").read_text())
CONFIGS = Path(__file__).parent.parent / "configs"


def test_dt_plan_is_the_rule_docs_view_follows():
    from clir_llm.retrieve import DTPlan, dt_plan, docs_view

    sw, de = load_collection("fixture", "en-sw"), load_collection("fixture", "en-de")
    assert (
        dt_plan("fixture", "en-sw", translator="dict:freedict")
        == dt_plan(sw, translator="dict:freedict")
        == DTPlan("shipped")
    )
    assert dt_plan("fixture", "en-de", translator="dict:freedict") == DTPlan("translator", "dict:freedict")
    assert (
        dt_plan("fixture", "en-sw", "translator", "dict:freedict").describe() == "documents translated by dict:freedict"
    )
    assert dt_plan("fixture", "en-sw").describe() == "the translations shipped with the collection"
    p = dt_plan("fixture", "en-de")
    assert p.problem and p.describe().startswith("none (collection 'fixture' (en-de) ships no document translations")
    with pytest.raises(ClirError, match="ships no document translations"):
        p.check()
    # the run asks the same rule
    with pytest.raises(ClirError, match="ships no document translations"):
        docs_view(de, "dt")
    assert (
        dt_plan("fixture", "en-de", "shipped").problem == "collection 'fixture' (en-de) ships no document translations"
    )
    with pytest.raises(ClirError, match="DT source must be"):
        dt_plan("fixture", "en-de", "web")


def test_builders_take_the_executor(tmp_path):
    from clir_llm.executor import LocalExecutor

    class Two(LocalExecutor):
        workers = 2

    ex = Two()
    r = get_retriever(
        "rrf:bm25-qt+dense:e5", translator="nllb:facebook/nllb-200-1.3B", cache=Cache(tmp_path), executor=ex
    )
    qt, dense = r.retrievers
    assert (
        dense.encoder.executor is ex
        and qt.translator.executor is ex
        and qt.name == "bm25-qt[nllb:facebook/nllb-200-1.3B]"
    )
    assert get_retriever("dense:e5").encoder.executor is not ex


def test_paper_settings_and_capabilities():
    from clir_llm.retrieve import BM25Method, DenseMethod, FusionMethod, paper_first_stage, parse_method

    # issue 27 E: tevatron's inputs
    assert paper_first_stage() == {"dense_quirks": ["e5-no-prefix", "repllama-128", "repllama-tevatron"]}
    assert paper_first_stage("nllb:facebook/nllb-200-1.3B") == {
        "dense_quirks": ["e5-no-prefix", "repllama-128", "repllama-tevatron"],
        # issue 27 E: tevatron's inputs
        "nllb_output": "model-max-length",
    }
    assert BM25Method.paper_first_stage() == FusionMethod.paper_first_stage() == {} and DenseMethod.paper_first_stage()
    m = parse_method("rrf:bm25-dt+bm25-qt+dense:repllama")
    assert (
        m.reads() == {"dt", "qt", "og"}
        and parse_method("dense:e5").reads() == {"og"}
        and parse_method("bm25-dt").reads() == {"dt"}
    )
    assert (
        m.own_quirks(["e5-no-prefix", "repllama-128"]) == ("repllama-128",)
        and parse_method("bm25-og").own_quirks(["e5-no-prefix"]) == ()
    )
    assert m.hub_models() == [
        ("encoder repllama", "castorini/repllama-v1-7b-lora-passage"),
        ("encoder repllama base", "meta-llama/Llama-2-7b-hf"),
    ]


def test_cli_flags_come_from_the_options(capsys):
    from clir_llm.cli_stages import cli_retrieve

    with pytest.raises(SystemExit):
        cli_retrieve(["--help"])
    out = capsys.readouterr().out
    for flag in (
        "--k1",
        "--threads",
        "--batch-size",
        "--chunk-size",
        "--doc-max-length",
        "--paper-quirks",
        "--e5-no-prefix",
        "--vectors",
        "--shards",
        "--pooling",
        "--query-prefix",
        "--quirk",
        "--engine",
    ):
        assert flag in out, flag


def _config_first_stages():
    "(file, first-stage settings with the authors' settings laid under them when paper_quirks is on, raw first stage)."
    from clir_llm.retrieve import paper_first_stage

    for f in sorted(CONFIGS.glob("*.yaml")):
        raw = yaml.safe_load(f.read_text())
        fs = raw["first_stage"]
        extra = (
            {k: v for k, v in paper_first_stage(fs.get("translator")).items() if k not in fs}
            if raw.get("paper_quirks")
            else {}
        )
        yield f.name, {**extra, **fs}, extra


# issue 38 item 6: the paper's encoders and NLLB pinned to Hub commits. Their descriptions name the commits now and the
# configs' translator strings carry NLLB's; nothing else of the captured identities moved (keys, labels, run names).
PINNED_NOTES = [
    (
        r"(Alibaba-NLP/gte-multilingual-base [^;]*; )revision not pinned \(runs the Hub's remote code\)",
        r"\1revision 9bbca17d9273fd0d03d5725c7a4b0f6b45142062, remote code revision 40ced75c3017eb27626c9d4ea981bde21a2662f4",
    ),
    (r"(BAAI/bge-m3 [^;]*; )revision not pinned", r"\1revision 5617a9f61b028005a4858fdac845db406aefb181"),
    (
        r"(castorini/repllama-v1-7b-lora-passage[^;]*; )revision not pinned, base revision not pinned",
        r"\1revision 53f3ec543eafdc511092ade9de3f8b5a00155a3e, base revision 01c7f73d771dfac7d292323805ebc428287df4f9",
    ),
]
NLLB_PIN = "revision=b0de46b488af0cf31749cd8da5ed3171e11b2309"


def _pinned(v):
    "A captured description with the pinned commits written in."
    if not isinstance(v, str):
        return v
    for pat, rep in PINNED_NOTES:
        v = re.sub(pat, rep, v)
    return v


def test_configs_v1(tmp_path):
    "Every configuration's method strings, translator, descriptions, quirks and run names are the pristine code's."
    from clir_llm.retrieve import parse_method
    from clir_llm.translate import TranslatorSpec

    got, cache = {}, Cache(tmp_path)
    # the configurations the identities were captured with
    v1 = {k.split(" ")[1] for k in IDS if k.startswith("config ")}
    for name, fs, extra in _config_first_stages():
        if name not in v1:
            continue  # added since (paper-*-gpu, *-extended): their own identities are new
        methods = [parse_method(m) for m in fs["methods"]]
        tr = TranslatorSpec.parse(fs["translator"]) if fs.get("translator") else None
        got[f"config {name} methods"] = [str(m) for m in methods]
        got[f"config {name} translator"] = str(tr) if tr else None
        got[f"config {name} translator describe"] = tr.describe() if tr else None
        got[f"config {name} dense_quirks"] = list(fs.get("dense_quirks", []))
        got[f"config {name} nllb_output"] = fs.get("nllb_output", "256-new-tokens")
        got[f"config {name} expanded first_stage extra keys"] = extra
        got[f"config {name} translator_options"] = {
            k: v
            for k, v in (
                tr.with_options(nllb_output=fs["nllb_output"]).view_options() if "nllb_output" in fs else {}
            ).items()
        }
        for m in methods:
            got[f"config {name} {m} describe"] = m.describe(tr, fs.get("dense_title"))
            got[f"config {name} {m} quirks_of"] = list(m.own_quirks(fs.get("dense_quirks", [])))
            got[f"config {name} {m} text_only"] = list(m.text_only(fs.get("dense_title")))
            if not any(e.startswith("hf:") for e in m.encoders):
                r = m.build(
                    str(tr) if tr else None,
                    cache,
                    fs.get("dense_title"),
                    fs.get("dt_source", "auto"),
                    quirks=m.own_quirks(fs.get("dense_quirks", [])),
                    dense_dtype=fs.get("dense_dtype", {}),
                    doc_max_length=fs.get("dense_doc_max_length") if m.encoders else None,
                    device="cpu",
                )
                got[f"config {name} {m} retriever name"] = r.name
    want = {k: v for k, v in IDS.items() if k.startswith("config ") and not k.endswith(" dtypes_of")}
    # issue 27 G: the paper configs give NLLB the authors' batch size (speed only: TranslatorSpec.key() and the run names
    # stay); E: the *-quirks configs add repllama-tevatron, so their RepLlama run is another run
    for name in ("paper-clef", "paper-ciral", "paper-clef-quirks", "paper-ciral-quirks"):
        want[f"config {name}.yaml translator"] += "[batch_size=256]"
    for name in ("paper-clef-quirks", "paper-ciral-quirks"):
        k = f"config {name}.yaml"
        want[f"{k} dense_quirks"] = want[f"{k} dense_quirks"] + ["repllama-tevatron"]
        extra = want[f"{k} expanded first_stage extra keys"]
        want[f"{k} expanded first_stage extra keys"] = {
            **extra,
            "dense_quirks": extra["dense_quirks"] + ["repllama-tevatron"],
        }
        want[f"{k} dense:repllama quirks_of"] = want[f"{k} dense:repllama quirks_of"] + ["repllama-tevatron"]
        want[f"{k} dense:repllama retriever name"] = "dense:repllama[repllama-128,repllama-tevatron]"
    want = {k: _pinned(v) for k, v in want.items()}
    for k in [
        k for k in want if k.endswith(" translator") and want[k] and want[k].startswith("nllb:facebook/nllb-200-1.3B")
    ]:
        want[k] = want[k][:-1] + "," + NLLB_PIN + "]" if want[k].endswith("]") else want[k] + f"[{NLLB_PIN}]"
    assert len(got) == len(want) and got == want


def test_methods_v1(tmp_path):
    "Method strings, keys, labels, descriptions and retriever names of the methods the identities were captured with."
    from clir_llm.retrieve import parse_method
    from clir_llm.dense import ENCODERS

    # those of the capture (Qwen3-Embedding came later)
    v1_encoders = ["mgte", "m3", "e5", "nv-embed-v2", "repllama", "e5-small"]
    assert set(v1_encoders) <= set(ENCODERS.names())
    METHODS = (
        ["bm25-og", "bm25-qt", "bm25-dt", "dense:e5-small", "rrf:bm25-dt+dense:e5-small"]
        + [f"dense:{n}" for n in v1_encoders]
        + [
            "dense:hf:/models/tiny-xlmr",
            'dense:hf:/models/tiny-xlmr[pooling=cls,query_prefix="query: ",max_length=64]',
            {
                "method": "dense:hf:intfloat/multilingual-e5-base",
                "query_prefix": "query: ",
                "passage_prefix": "passage: ",
                "title": False,
            },
            "rrf:bm25-dt+dense:nv-embed-v2",
            "rrf:bm25-dt+dense:m3",
            "rrf:bm25-og+bm25-qt+dense:e5",
        ]
    )
    got, cache = {}, Cache(tmp_path)
    for m in METHODS:
        s = parse_method(m)
        k = json.dumps(m) if isinstance(m, dict) else m
        got[f"method {k} str"], got[f"method {k} key"], got[f"method {k} label"] = str(s), s.key(), s.label()
        got[f"method {k} translated"], got[f"method {k} encoders"] = s.translated, list(s.encoders)
        for tr in (None, "dict:freedict", "nllb:facebook/nllb-200-1.3B"):
            for dtl in (None, False, {"m3": False, "repllama": True}):
                try:
                    got[f"method {k} describe tr={tr} title={json.dumps(dtl)}"] = s.describe(tr, dtl)
                except ClirError as e:
                    got[f"method {k} describe tr={tr} title={json.dumps(dtl)}"] = f"ERROR ClirError: {e}"
        for tr in ("dict:freedict", "nllb:facebook/nllb-200-1.3B"):
            if not s.encoders or all(not e.startswith("hf:/") for e in s.encoders):
                got[f"method {k} retriever name tr={tr}"] = get_retriever(
                    s, translator=tr, cache=cache, device="cpu"
                ).name
    want = {k: _pinned(v) for k, v in IDS.items() if k.startswith("method ")}
    assert len(got) == len(want) == 252 and got == want


# ---------- issue 26 items 10, 11: numbers bounded at the edge (a Java exception, a traceback or silence on 7ce5228)
@pytest.mark.parametrize(
    "kind, args, says",
    [
        ("--k 100000000000", ["--method", "bm25-og", "--k", "100000000000"], "--k must be between 1 and 10,000"),
        (
            "--batch-size 0",
            ["--method", "dense:e5-small", "--batch-size", "0"],
            "batch_size: Input should be greater than 0",
        ),
        (
            "--doc-max-length -1",
            ["--method", "dense:e5-small", "--doc-max-length", "-1"],
            "--doc-max-length must be at least 1, got -1",
        ),
    ],
)
def test_out_of_range_numbers_are_one_line(tmp_path, kind, args, says):
    import _reliability as R

    p = R.run_main("retrieve", "--collection", "fixture", "--pair", "en-de", *args, "--out", tmp_path / "r.trec")
    R.expect_one_line_error(f"retrieve {kind}", p, "numbers", says)
    assert not (tmp_path / "r.trec").exists()


def test_a_negative_doc_max_length_is_refused_by_the_api():
    "issue 26 item 11: `get_retriever('dense:e5-small', doc_max_length=-1)` was accepted without a word (the CLI flag was checked)."
    with pytest.raises(ClirError, match=r"doc_max_length: Input should be greater than 0 \(got -1\)"):
        get_retriever("dense:e5-small", doc_max_length=-1)
