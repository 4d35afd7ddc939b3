"""clir_llm.irds: `irds:<id>` collections on datasets registered locally from fixture files in each family's upstream format
(tests/irds_fixture.py, tests/fixtures/irds): in-process, `clir-llm retrieve --plugin`, `clir-llm datasets`, a config."""

import json, os, subprocess, sys
from pathlib import Path
import pytest
import irds_fixture  # noqa: F401  (registers clir-llm-test/...)
from clir_llm.core import ClirError
from clir_llm.collections import COLLECTIONS, collection_pairs, load_collection
from clir_llm.irds import irds_ids, irds_languages, irds_dataset

CLI = [str(Path(sys.executable).parent / "clir-llm")]
TESTS = Path(__file__).parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}


def test_neuclir_format_languages_queries_and_mt_topics(tmp_path):
    c = load_collection("irds:clir-llm-test/neuclir-like", "en-zh", cache_root=tmp_path)
    assert (c.name, c.query_lang, c.doc_lang, c.num_docs) == ("irds:clir-llm-test/neuclir-like", "en", "zh", 4)
    assert c.queries["2"].text == "railway station travellers Travellers at Shanghai railway station."
    assert {q: t.text for q, t in c.query_translations.items()} == {
        "1": "北京 天气 北京的天气如何？",
        "2": "火车站 旅客 上海火车站旅客。",
        "3": "熊猫 竹林 大熊猫住在哪里？",
    }
    assert c.qrels["1"] == {"zh1": 3, "zh4": 0} and c.get_doc("zh2").text.startswith("上海")
    assert collection_pairs("irds:clir-llm-test/neuclir-like") == ["en-zh"]


def test_languages_rule_on_real_registered_ids():
    "Format-level only: the metadata of real ids is read without downloading anything."
    assert irds_languages(irds_dataset("neuclir/1/zh/trec-2022"), "neuclir/1/zh/trec-2022") == "en-zh"
    assert irds_languages(irds_dataset("hc4/fa/test"), "hc4/fa/test") == "en-fa"
    assert irds_languages(irds_dataset("miracl/sw/dev"), "miracl/sw/dev") == "sw-sw"
    with pytest.raises(ClirError, match="documents are in zh, not fa"):
        irds_languages(irds_dataset("neuclir/1/zh/trec-2022"), "neuclir/1/zh/trec-2022", "en-fa")


def test_pair_given_translated_documents_and_errors(tmp_path):
    with pytest.raises(
        ClirError, match=r"does not say the language of its documents; give it: irds:clir-llm-test/tsv-nolang\?pair="
    ):
        load_collection("irds:clir-llm-test/tsv-nolang", "en-fa")
    fa = load_collection("irds:clir-llm-test/tsv-nolang?pair=en-fa", "en-fa", cache_root=tmp_path)
    assert fa.pair == "en-fa" and fa.get_doc("fa3").text.startswith("کوه")
    mt = load_collection("irds:clir-llm-test/xml-mt", "en-zh", cache_root=tmp_path)
    assert mt.has_translations and mt.translated().get_doc("zh1").text == "Beijing has fine, sunny weather today."
    with pytest.raises(ClirError, match="4 documents, expected 5"):
        load_collection("irds:clir-llm-test/neuclir-truncated", "en-zh", cache_root=tmp_path).num_docs
    assert load_collection("irds:clir-llm-test/neuclir-truncated?check=0", "en-zh", cache_root=tmp_path).num_docs == 4
    with pytest.raises(
        ClirError, match="unknown ir_datasets id 'clir-llm-test/neuclir-lik'; close: clir-llm-test/neuclir-like"
    ):
        load_collection("irds:clir-llm-test/neuclir-lik", "en-zh")
    with pytest.raises(ClirError, match="has no queries and no qrels"):
        load_collection("irds:clir-llm-test/docs-only?pair=en-fa", "en-fa")
    with pytest.raises(ClirError, match="unknown option"):
        load_collection("irds:clir-llm-test/xml-mt?lang=zh", "en-zh")


def test_listed_ids():
    ids = irds_ids()
    assert {"clir-llm-test/neuclir-like", "neuclir/1/zh/trec-2022", "hc4/fa/test", "miracl/sw/dev"} <= set(ids)
    assert "clir-llm-test/docs-only" not in ids
    p = subprocess.run([*CLI, "datasets", "irds:"], capture_output=True, text=True, timeout=300, env=ENV)
    assert p.returncode == 0, p.stderr
    assert "  irds:neuclir/1/zh/trec-2022" in p.stdout and "  irds:hc4/fa/test" in p.stdout


def test_cli_retrieve_end_to_end_with_a_plugin(tmp_path):
    "The local registration happens in the subprocess through --plugin; BM25-OG with the dataset's MT queries as documents' language."
    out = tmp_path / "run.txt"
    p = subprocess.run(
        [
            *CLI,
            "retrieve",
            "--plugin",
            "irds_fixture",
            "--collection",
            "irds:clir-llm-test/tsv-nolang?pair=fa-fa",
            "--pair",
            "fa-fa",
            "--method",
            "bm25-og",
            "--out",
            out,
            "--cache",
            tmp_path / "c",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
    )
    # metadata wins over a wrong pair
    assert p.returncode == 1 and "the dataset's queries are in en, not fa" in p.stderr, p.stderr
    # BM25 on the dataset's own English document translations (DT, shipped): each query finds its Chinese document's id
    p = subprocess.run(
        [
            *CLI,
            "retrieve",
            "--plugin",
            "irds_fixture",
            "--collection",
            "irds:clir-llm-test/xml-mt",
            "--pair",
            "en-zh",
            "--method",
            "bm25-dt",
            "--dt-source",
            "shipped",
            "--out",
            out,
            "--cache",
            tmp_path / "c",
            "--k",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
    )
    assert p.returncode == 0, p.stderr
    top = {l.split()[0]: l.split()[2] for l in out.read_text().splitlines() if l.split()[3] == "1"}
    assert top == {"1": "zh1", "2": "zh2"}, out.read_text()
    # BM25-OG on the NeuCLIR-format dataset runs (English queries on Chinese documents: no hits expected)
    p = subprocess.run(
        [
            *CLI,
            "retrieve",
            "--plugin",
            "irds_fixture",
            "--collection",
            "irds:clir-llm-test/neuclir-like",
            "--pair",
            "en-zh",
            "--method",
            "bm25-og",
            "--out",
            out,
            "--cache",
            tmp_path / "c",
            "--k",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
    )
    assert p.returncode == 0 and "3 queries" in p.stdout, p.stderr + p.stdout
    p = subprocess.run(
        [
            *CLI,
            "retrieve",
            "--collection",
            "irds:clir-llm-test/neuclir-like",
            "--pair",
            "en-zh",
            "--method",
            "bm25-og",
            "--out",
            out,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
    )
    assert (
        p.returncode == 1
        and "unknown ir_datasets id 'clir-llm-test/neuclir-like'" in p.stderr
        and "Traceback" not in p.stderr
    )


def test_a_config_with_an_irds_collection(tmp_path):
    from clir_llm.config import load_config
    from clir_llm.plan import plan
    from clir_llm.pipeline import Pipeline
    from clir_llm.retrieve import Run  # noqa: F401

    cfg = tmp_path / "irds.yaml"
    cfg.write_text(
        "name: irds-test\nplugins: [irds_fixture]\ncollection: irds:clir-llm-test/neuclir-like\npairs: [en-zh]\n"
        "measure: nDCG@20\nfirst_stage: {methods: [bm25-og]}\nexperiments: []\n"
    )
    c = load_config(cfg)
    assert plan(c)[1].startswith("collection irds:clir-llm-test/neuclir-like: an ir_datasets id")
    pipe = Pipeline(c, out_dir=tmp_path / "res", progress=False, cache=None)
    run = pipe.first_stage("en-zh", "bm25-og")
    assert run is not None and set(run) <= {"1", "2", "3"}


def test_keys_and_translations_v1(tmp_path):
    "The keys of irds: collections are the pristine code's; whether a dataset has translations is known from its metadata."
    from clir_llm.irds import IrdsOptions, irds_translations, load_irds

    ids = json.loads((TESTS / "fixtures" / "identities-v1.json").read_text())
    got = {}
    for arg, pair in [
        ("clir-llm-test/neuclir-like", "en-zh"),
        ("clir-llm-test/tsv-nolang?pair=en-fa", "en-fa"),
        ("clir-llm-test/xml-mt", "en-zh"),
        ("clir-llm-test/neuclir-like?fields=title", "en-zh"),
    ]:
        c = load_collection(f"irds:{arg}", pair, cache_root=tmp_path)
        got[f"collection irds:{arg} {pair} key"], got[f"collection irds:{arg} {pair} name"] = c.key, c.name
        if c.has_translations:
            got[f"collection irds:{arg} {pair} translated key"] = c.translated().key
        assert irds_translations(pair, arg) == c.has_translations == COLLECTIONS["irds:"].ships_translations(pair, arg)
    want = {k: v for k, v in ids.items() if k.startswith("collection irds:")}
    assert len(got) == len(want) == 9 and got == want
    assert (
        load_irds("en-zh", IrdsOptions(fields="title"), "clir-llm-test/neuclir-like").key
        == got[
            # an option given apart is the query string's
            "collection irds:clir-llm-test/neuclir-like?fields=title en-zh key"
        ]
    )


def test_fields_joined_by_plus_in_the_id(tmp_path):
    "The documented form `?fields=title+description`: a '+' joins fields (a query string decoder reads it as a space)."
    from clir_llm.irds import parse_irds_spec

    assert parse_irds_spec("clir-llm-test/neuclir-like?fields=title+description") == (
        "clir-llm-test/neuclir-like",
        {"fields": "title+description"},
    )
    plus = load_collection("irds:clir-llm-test/neuclir-like?fields=title+description", "en-zh", cache_root=tmp_path)
    comma = load_collection("irds:clir-llm-test/neuclir-like?fields=title,description", "en-zh", cache_root=tmp_path)
    assert {q: t.text for q, t in plus.queries.items()} == {q: t.text for q, t in comma.queries.items()}
    assert plus.queries["2"].text == "railway station travellers Travellers at Shanghai railway station."


def test_a_dataset_that_cannot_be_downloaded_is_one_line(tmp_path):
    """issue 26 item 10: `irds:` without network (every download refused: a proxy nothing listens at) was a 52-line
    traceback; now one line naming the id, the network and $IR_DATASETS_HOME."""
    import os
    import _reliability as R

    env = {
        **os.environ,
        "IR_DATASETS_HOME": str(tmp_path / "irds"),
        "HTTP_PROXY": "http://127.0.0.1:1",
        "HTTPS_PROXY": "http://127.0.0.1:1",
        "http_proxy": "http://127.0.0.1:1",
        "https_proxy": "http://127.0.0.1:1",
        "CLIR_LLM_CACHE": str(tmp_path / "cache"),
    }
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    err = R.fail_cli(
        "irds: without network",
        "retrieve",
        "--collection",
        "irds:vaswani",
        "--pair",
        "en-en",
        "--method",
        "bm25-og",
        "--out",
        tmp_path / "r.trec",
        env=env,
        cls="servers",
        says="irds:vaswani: cannot read its queries",
    )
    assert "IR_DATASETS_HOME" in err and not (tmp_path / "r.trec").exists()
