"""clir_llm.neuclir: the NeuCLIR 2022 extension: `configs/neuclir-2022.yaml` passes its dry run here (nothing downloaded), its
regression cells cite the published BM25 baselines, and the `neuclir22` collection reads NeuCLIR-format topics,
documents, judgements (a locally registered ir_datasets fixture) and the organizers' translations (a folder)."""

import json
import pytest
import yaml
from clir_llm.cli import main
from clir_llm.core import ClirError


def test_dry_run(capsys):
    assert main(["reproduce", "configs/neuclir-2022.yaml", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "collection neuclir22" in out and "pairs: en-zh, en-fa, en-ru" in out
    assert (
        'dense:hf:intfloat/multilingual-e5-base[query_prefix="query: ",passage_prefix="passage: ",title=false]' in out
    )
    assert "nothing was loaded or downloaded" in out


def test_regression_cells_cite_published_values():
    from clir_llm.config import load_config
    from clir_llm.regression import load_regression, regression_path

    reg = load_regression(regression_path(load_config("configs/neuclir-2022.yaml")))
    cells = {c.col: c for c in reg.cells}
    assert {k: cells[k].expected for k in ("en-zh", "en-fa", "en-ru")} == {
        "en-zh": 0.3723,
        "en-fa": 0.3670,
        "en-ru": 0.3080,
    }
    assert all("Anserini regressions-neuclir22" in cells[k].source for k in ("en-zh", "en-fa", "en-ru"))
    assert abs(cells["AVG"].expected - (0.3723 + 0.3670 + 0.3080) / 3) < 1e-4


def test_collection_on_a_neuclir_format_fixture(tmp_path, monkeypatch):
    import irds_fixture  # registers clir-llm-test/neuclir-like (tests/ is on sys.path under pytest)
    from clir_llm.neuclir import NeuclirOptions, load_neuclir22

    c = load_neuclir22("en-zh", NeuclirOptions(dataset="clir-llm-test/neuclir-like"))
    ids = [d.docid for d in c.iter_docs()]
    assert c.query_translations and not c.has_translations
    (tmp_path / "zho.mt.jsonl").write_text(
        "".join(json.dumps({"id": d, "title": "t", "text": f"english {d}"}) + "\n" for d in ids)
    )
    monkeypatch.setenv("NEUCLIR_MT_HOME", str(tmp_path))
    t = load_neuclir22("en-zh", NeuclirOptions(dataset="clir-llm-test/neuclir-like"))
    assert [d.text for d in t.translated().iter_docs()] == [f"english {d}" for d in ids] and t.key != c.key
    (tmp_path / "zho.mt.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(ClirError, match="zho.mt.jsonl:1"):
        list(load_neuclir22("en-zh", NeuclirOptions(dataset="clir-llm-test/neuclir-like")).translated().iter_docs())


def test_built_once_with_its_name_key_and_translations_v1(tmp_path, monkeypatch):
    "The collection is constructed with its own name, key and DT documents (nothing patched after loading); keys as before."
    import os
    from pathlib import Path
    import irds_fixture  # noqa: F401
    from clir_llm.collections import COLLECTIONS, load_collection

    ids = json.loads((Path(__file__).parent / "fixtures" / "identities-v1.json").read_text())
    monkeypatch.delenv("NEUCLIR_MT_HOME", raising=False)
    c = load_collection("neuclir22", "en-zh", dataset="clir-llm-test/neuclir-like")
    got = {"collection neuclir22 fixture key": c.key, "collection neuclir22 fixture name": c.name}
    mt = tmp_path / "mt"
    mt.mkdir()
    (mt / "zho.mt.jsonl").write_text(
        "".join(json.dumps({"id": d.docid, "title": "t", "text": f"english {d.docid}"}) + "\n" for d in c.iter_docs())
    )
    os.utime(mt / "zho.mt.jsonl", (1700000000, 1700000000))
    t = load_collection("neuclir22", "en-zh", root=str(mt), dataset="clir-llm-test/neuclir-like")
    got |= {
        "collection neuclir22 fixture+mt key": t.key,
        "collection neuclir22 fixture+mt name": t.name,
        "collection neuclir22 fixture+mt translated key": t.translated().key,
    }
    want = {k: v for k, v in ids.items() if k.startswith("collection neuclir22 ")}
    assert len(got) == len(want) == 5 and got == want
    src = COLLECTIONS["neuclir22"]  # the dry run's answer is the run's: translations only with the organizers' folder
    assert not src.ships_translations("en-zh") and not c.has_translations
    assert src.ships_translations("en-zh", root=str(mt)) and t.has_translations


def test_reads_the_hubs_published_mt_file_names(tmp_path):
    "Issue 27 H: the Hub repo neuclir/neuclir1 ships data/<iso3>-mt-eng-00000-of-00001.jsonl.gz; NEUCLIR_MT_HOME may point at it."
    import gzip
    from clir_llm.neuclir import neuclir_mt_path, read_mt_docs

    (tmp_path / "data").mkdir()
    with gzip.open(tmp_path / "data" / "fas-mt-eng-00000-of-00001.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps({"id": "d1", "title": "t", "text": "english d1", "url": "u"}) + "\n")
    p = neuclir_mt_path(tmp_path, "fa")
    assert p == tmp_path / "data" / "fas-mt-eng-00000-of-00001.jsonl.gz" and [d.text for d in read_mt_docs(p)] == [
        "english d1"
    ]
    (tmp_path / "fas.mt.jsonl").write_text(json.dumps({"id": "d1", "text": "x"}) + "\n")
    assert neuclir_mt_path(tmp_path, "fa") == tmp_path / "fas.mt.jsonl"  # the older name first, as before
    assert neuclir_mt_path(tmp_path, "zh") is None
