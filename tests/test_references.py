"""Issue 15 finding 5: published rows the paper copied (CIRAL BM25-QT with Google MT, Adeyemi et al. 2024) appear in
the first-stage table beside the run clir-llm makes, labelled as copied and named in the table's note."""
import pandas as pd
import pytest, yaml
from clir_llm.config import load_config
from clir_llm.core import ClirError
from clir_llm.regression import load_regression, regression_path
from clir_llm.tables import first_stage_table, reference_notes, save_table

ADEYEMI = {"en-ha": 0.0870, "en-so": 0.0824, "en-sw": 0.1252, "en-yo": 0.2600}   # PAPER.md, nDCG@20, ha so sw yo


def _config(tmp_path, **ref):
    ref = dict(table="first_stage", measure="nDCG@20", row="BM25-QT (Google MT, copied)", after="bm25-og",
               values={"en-ha": 0.0870, "en-sw": 0.1252}, source="Adeyemi et al. 2024") | ref
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(dict(name="refs", collection="fixture", pairs=["en-ha", "en-sw"], measure="nDCG@20",
                                     experiments=[], first_stage=dict(methods=["bm25-og", "bm25-dt"]), references=[ref])))
    return load_config(p)


class _Pipe:
    "The two calls `first_stage_table` makes of a Pipeline, with fixed per-query scores (no index to build)."
    def __init__(self, cfg): self.cfg = cfg
    def first_stage(self, pair, method): return str(method)
    def scores(self, pair, run, measure=None):
        return pd.Series({"q1": 0.2, "q2": 0.4}) if run == "bm25-og" else pd.Series({"q1": 0.5, "q2": 0.7})


def test_small_table_shows_the_copied_row_beside_the_runs(tmp_path):
    cfg = _config(tmp_path)
    pipe = _Pipe(cfg)
    t = first_stage_table(pipe)
    assert list(t.means.index) == ["BM25-OG", "BM25-QT (Google MT, copied)", "BM25-DT"]
    row = t.means.loc["BM25-QT (Google MT, copied)"]
    assert row["en-ha"] == 0.0870 and row["en-sw"] == 0.1252 and row["AVG"] == pytest.approx((0.0870 + 0.1252) / 2)
    assert not (t.tests["row"] == "BM25-QT (Google MT, copied)").any()          # never tested for significance
    paths = save_table(t, tmp_path / "out", "first_stage", note="\n".join(reference_notes(cfg, "first_stage")))
    md = paths["md"].read_text()
    assert "| BM25-QT (Google MT, copied) | 0.087 | 0.125 | 0.106 |" in md
    assert "BM25-QT (Google MT, copied): published numbers copied from Adeyemi et al. 2024, as the paper did; not computed by clir-llm" in md
    assert "BM25-QT (Google MT, copied)" not in first_stage_table(pipe, measure="R@100").means.index   # values are nDCG@20 only


@pytest.mark.parametrize("change, why", [
    (dict(row="BM25-QT (Google MT)"), "must say it is copied"),
    (dict(values={"en-yo": 0.26}), "pairs en-yo are not in pairs"),
    (dict(after="bm25-qt"), "not in first_stage.methods")])
def test_bad_reference_rows_are_rejected(tmp_path, change, why):
    with pytest.raises(ClirError, match=why): _config(tmp_path, **change)


def test_paper_ciral_carries_adeyemi_beside_the_nllb_run():
    cfg = load_config("paper-ciral")
    [ref] = cfg.references
    assert ref.values == ADEYEMI and ref.after == "bm25-qt" and ref.measure == cfg.measure == "nDCG@20" and "copied" in ref.row
    cells = [c for c in load_regression(regression_path(cfg)).cells if c.row == ref.row]
    assert {c.col: c.expected for c in cells} == ADEYEMI
    assert load_config("demo").references == []   # the demo's tables do not change
