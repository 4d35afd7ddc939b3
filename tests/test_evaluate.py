"""clir_llm.evaluate: measure lists (issue 17 item 6) and the significance rules of the tables (issue 15 item 10), through
the public API and the `clir-llm evaluate` command; byte-order marks score like plain files, measures ir-measures cannot
compute and measures given twice are one-line errors, a closed pipe ends quietly, a run no query of which is judged
warns (issues 14 and 26)."""

import math, re, subprocess

import numpy as np
import pandas as pd
import pytest

import _reliability as R
from clir_llm.core import ClirError
from clir_llm.evaluate import (
    Cell,
    ResultTable,
    holm,
    measure_name,
    paired_ttest,
    parse_measures,
    per_query,
    split_measures,
)

QRELS = "1 0 d1 1\n1 0 d2 0\n1 0 d3 2\nq2 0 x 1\nq2 0 y 0\n"
RUN = "1 Q0 d2 1 3.0 r\n1 Q0 d1 2 2.0 r\n1 Q0 d3 3 1.0 r\nq2 Q0 y 1 2.0 r\nq2 Q0 x 2 1.0 r\n"


def test_split_keeps_parameters_together():
    assert split_measures("nDCG(dcg='exp-log2')@10 ndcg_cut_20") == ["nDCG(dcg='exp-log2')@10", "ndcg_cut_20"]
    assert split_measures("MAP,nDCG@20 ,  AP(rel=2,judged_only=True)") == [
        "MAP",
        "nDCG@20",
        "AP(rel=2,judged_only=True)",
    ]
    with pytest.raises(ClirError, match="unbalanced"):
        split_measures("nDCG(dcg='exp-log2'@10")


@pytest.mark.parametrize(
    "trec, ours",
    [
        ("ndcg_cut_20", "nDCG@20"),
        ("map", "AP"),
        ("P_10", "P@10"),
        ("recall_100", "R@100"),
        ("recip_rank", "RR"),
        ("map_cut_10", "AP@10"),
        ("ndcg", "nDCG"),
    ],
)
def test_trec_eval_names(trec, ours):
    assert [str(m) for m in parse_measures(trec)] == [ours]


def test_trec_eval_family_without_cutoff_is_refused():
    with pytest.raises(ClirError, match="names 9 measures in trec_eval"):
        parse_measures("ndcg_cut")


def test_gdeval_measures_on_any_topic_ids():
    "nDCG(dcg='exp-log2') is computed by gdeval, which reads only numeric topic ids: the ids are numbered for it."
    from clir_llm.core import Qrels, Run

    qrels = Qrels({"q-a": {"d1": 1, "d2": 0}, "q-b": {"x": 2}})
    run = Run({"q-a": {"d2": 2.0, "d1": 1.0}, "q-b": {"x": 1.0}})
    df = per_query(run, qrels, "nDCG(dcg='exp-log2')@10 ndcg_cut_20")
    assert list(df.columns) == ["nDCG(dcg='exp-log2')@10", "nDCG@20"] and df.loc["q-b"].tolist() == [1.0, 1.0]
    assert 0 < df.loc["q-a", "nDCG(dcg='exp-log2')@10"] < 1


def test_cli_evaluate_with_parameterised_and_trec_eval_measures(tmp_path):
    q, r = tmp_path / "qrels", tmp_path / "run"
    q.write_text(QRELS)
    r.write_text(RUN)
    p = R.run_cli("evaluate", "--qrels", q, "--run", r, "--measures", "nDCG(dcg='exp-log2')@10 ndcg_cut_20")
    assert p.returncode == 0, p.stderr
    names = [l.split("\t")[0] for l in p.stdout.splitlines()]
    assert names == ["nDCG(dcg='exp-log2')@10", "nDCG@20"], p.stdout
    assert all(0 < float(l.split("\t")[1]) < 1 for l in p.stdout.splitlines())


def _s(vals):
    return pd.Series(vals, index=[f"q{i}" for i in range(len(vals))], dtype=float)


def test_constant_difference_is_untested():
    base = _s([0.1, 0.2, 0.3, 0.4, 0.5])
    d, p = paired_ttest(base + 0.25, base)
    assert abs(d - 0.25) < 1e-12 and math.isnan(p)
    t = ResultTable([Cell("A", "en-de", base), Cell("A » B", "en-de", base + 0.25, "A")])
    assert t.marks().loc["A » B", "en-de"] == "" and math.isnan(t.tests.loc[0, "p"])
    assert "same amount on every query" in t.to_markdown()


def test_fewer_than_three_queries_is_untested():
    d, p = paired_ttest(_s([0.9, 0.8]), _s([0.1, 0.3]))
    assert d > 0.5 and math.isnan(p)
    t = ResultTable([Cell("A", "en-de", _s([0.1, 0.3])), Cell("A » B", "en-de", _s([0.9, 0.8]), "A")])
    assert t.marks().loc["A » B", "en-de"] == "" and "fewer than 3 queries" in t.to_markdown()
    # three queries with a varying difference are tested
    d, p = paired_ttest(_s([0.9, 0.8, 0.95]), _s([0.1, 0.3, 0.2]))
    assert 0 <= p < 0.05


def test_holm_ignores_untested():
    assert np.allclose(holm([0.01, float("nan"), 0.04]), [0.02, float("nan"), 0.04], equal_nan=True)


def test_avg_rule():
    cells = [Cell("X", c, pd.Series([v])) for c, v in (("a", 0.1234), ("b", 0.1234), ("c", 0.1237))]
    assert (
        abs(ResultTable(cells).means.loc["X", "AVG"] - np.mean([0.1234, 0.1234, 0.1237])) < 1e-12
    )  # default unchanged
    assert abs(ResultTable(cells, avg_rule="rounded").means.loc["X", "AVG"] - np.mean([0.123, 0.123, 0.124])) < 1e-12
    with pytest.raises(ClirError, match="avg_rule must be one of"):
        ResultTable(cells, avg_rule="paper")


def test_significantly_worse_cells_carry_their_own_mark():
    "A reranker significantly worse than its first stage is marked (↓ / ⇓), in Markdown and LaTeX, and the legend says so."
    rng = np.random.default_rng(1)
    q = [f"q{i}" for i in range(40)]
    base = pd.Series(rng.uniform(0.3, 0.7, 40), index=q)
    t = ResultTable(
        [
            Cell("BM25", "en-de", base),
            Cell("BM25 » LLM", "en-de", base - rng.uniform(0.05, 0.2, 40), "BM25"),
            Cell("BM25 » same", "en-de", base + rng.normal(0, 0.01, 40), "BM25"),
        ],
        measure="MAP",
    )
    assert t.marks().loc["BM25 » LLM", "en-de"] == "⇓" and t.marks().loc["BM25 » same", "en-de"] in ("", "↓", "†")
    assert t.tests.set_index("row").loc["BM25 » LLM", "worse_holm"]
    md = t.to_markdown()
    assert "⇓" in md.splitlines()[3] and "⇓ worse also after Holm" in md
    assert r"$^\Downarrow$" in t.to_latex()


# ---------- the command line with hostile input (issues 14 and 26)


def test_bom_files_score_the_same_via_the_cli(tmp_path):
    pq, pr = R.trec_files(tmp_path)
    plain = R.run_cli("evaluate", "--qrels", pq, "--run", pr, "--measures", "MAP")
    q, r = R.trec_files(tmp_path, bom=True, crlf=True)
    bom = R.run_cli("evaluate", "--qrels", q, "--run", r, "--measures", "MAP")
    assert (
        plain.returncode == bom.returncode == 0 and plain.stdout == bom.stdout and float(plain.stdout.split()[1]) > 0
    ), (plain, bom)


@pytest.mark.parametrize(
    "measure, what",
    [
        ("nDCG@0", "measure 'nDCG@0': its cutoff must be an integer >= 1"),
        ("P@0", "measure 'P@0': its cutoff must be an integer >= 1"),
        ("Judged@0", "measure 'Judged@0': its cutoff must be an integer >= 1"),
        # ERR@20 is computed now (numbered topics for gdeval)
        ("alpha_nDCG@10", "measure 'alpha_nDCG@10' cannot be computed by ir-measures here"),
        ("RBP(p=0.8)", "measure 'RBP(p=0.8)' cannot be computed by ir-measures here"),
    ],
)
def test_bad_measures_are_one_line_errors(tmp_path, measure, what):
    from clir_llm.evaluate import parse_measures

    with pytest.raises(ClirError, match=__import__("re").escape(what)):
        parse_measures(measure)
    q, r = R.trec_files(tmp_path)
    err = R.fail_cli("bad measure", "evaluate", "--qrels", q, "--run", r, "--measures", f"MAP {measure}")
    assert what in err, err


def test_closed_pipe_ends_quietly(tmp_path):
    "`clir-llm evaluate --per-query | head`: the reader closes the pipe early; no BrokenPipeError traceback."
    q, r = R.trec_files(tmp_path)
    p = subprocess.Popen(
        [R.CLI, "evaluate", "--qrels", str(q), "--run", str(r), "--per-query"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # before the process writes anything: its first write fails with EPIPE
    err = p.stderr.read().decode()
    p.wait(timeout=300)
    assert p.returncode == 141 and err == "", (p.returncode, err[-2000:])


def test_no_judged_query_warns(tmp_path):
    q, r = R.trec_files(tmp_path, run="zz Q0 de-1 1 1.0 x\n")
    p = R.run_cli("evaluate", "--qrels", q, "--run", r, "--measures", "MAP")
    assert p.returncode == 0 and p.stdout.split() == ["MAP", "0.0000"], p
    assert (
        p.stderr.strip().count("\n") == 0 and "warning: no query of the run (1 query, e.g. 'zz') is judged" in p.stderr
    ), p.stderr


def test_a_measure_given_twice_and_a_huge_argument(tmp_path):
    "issue 26 items 10, 13: a measure given twice (two spellings) is one line; a 100 KB argument is not echoed whole."
    q, r = R.trec_files(tmp_path)
    p = R.run_main("evaluate", "--qrels", q, "--run", r, "--measures", "MAP map")
    R.expect_one_line_error("measure given twice", p, "arguments", "measure 'map' is given twice (as MAP)")
    p = R.run_main("evaluate", "--qrels", q, "--run", r, "--measures", "x" * 100_000)
    err = R.expect_one_line_error("a 100 KB argument", p, "arguments", "unknown measure")
    assert len(err) < 1000 and "(100,002 characters)" in err, len(err)
