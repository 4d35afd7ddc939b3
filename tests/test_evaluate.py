"""clir_llm.evaluate through `clir-llm evaluate`: byte-order marks score like plain files, measures ir-measures cannot
compute are one-line errors, a closed pipe ends quietly, a run no query of which is judged warns (issue 14)."""
from __future__ import annotations
import re, subprocess

import pytest

import _reliability as R
from clir_llm.core import ClirError


def test_bom_files_score_the_same_via_the_cli(tmp_path):
    pq, pr = R.trec_files(tmp_path)
    plain = R.run_cli("evaluate", "--qrels", pq, "--run", pr, "--measures", "MAP")
    q, r = R.trec_files(tmp_path, bom=True, crlf=True)
    bom = R.run_cli("evaluate", "--qrels", q, "--run", r, "--measures", "MAP")
    assert plain.returncode == bom.returncode == 0 and plain.stdout == bom.stdout and float(plain.stdout.split()[1]) > 0, (plain, bom)


@pytest.mark.parametrize("measure, what", [
    ("nDCG@0", "measure 'nDCG@0': its cutoff must be an integer >= 1"),
    ("P@0", "measure 'P@0': its cutoff must be an integer >= 1"),
    ("Judged@0", "measure 'Judged@0': its cutoff must be an integer >= 1"),
    ("alpha_nDCG@10", "measure 'alpha_nDCG@10' cannot be computed by ir-measures here"),  # ERR@20 is computed now (numbered topics for gdeval)
    ("RBP(p=0.8)", "measure 'RBP(p=0.8)' cannot be computed by ir-measures here"),
])
def test_bad_measures_are_one_line_errors(tmp_path, measure, what):
    from clir_llm.evaluate import parse_measures
    with pytest.raises(ClirError, match=__import__("re").escape(what)): parse_measures(measure)
    q, r = R.trec_files(tmp_path)
    err = R.fail_cli("bad measure", "evaluate", "--qrels", q, "--run", r, "--measures", f"MAP {measure}")
    assert what in err, err


def test_closed_pipe_ends_quietly(tmp_path):
    "`clir-llm evaluate --per-query | head`: the reader closes the pipe early; no BrokenPipeError traceback."
    q, r = R.trec_files(tmp_path)
    p = subprocess.Popen([R.CLI, "evaluate", "--qrels", str(q), "--run", str(r), "--per-query"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()            # before the process writes anything: its first write fails with EPIPE
    err = p.stderr.read().decode(); p.wait(timeout=300)
    assert p.returncode == 141 and err == "", (p.returncode, err[-2000:])


def test_no_judged_query_warns(tmp_path):
    q, r = R.trec_files(tmp_path, run="zz Q0 de-1 1 1.0 x\n")
    p = R.run_cli("evaluate", "--qrels", q, "--run", r, "--measures", "MAP")
    assert p.returncode == 0 and p.stdout.split() == ["MAP", "0.0000"], p
    assert p.stderr.strip().count("\n") == 0 and "warning: no query of the run (1 query, e.g. 'zz') is judged" in p.stderr, p.stderr


def test_a_measure_given_twice_and_a_huge_argument(tmp_path):
    "issue 26 items 10, 13: a measure given twice (two spellings) is one line; a 100 KB argument is not echoed whole."
    q, r = R.trec_files(tmp_path)
    p = R.run_main("evaluate", "--qrels", q, "--run", r, "--measures", "MAP map")
    R.expect_one_line_error("measure given twice", p, "arguments", "measure 'map' is given twice (as MAP)")
    p = R.run_main("evaluate", "--qrels", q, "--run", r, "--measures", "x" * 100_000)
    err = R.expect_one_line_error("a 100 KB argument", p, "arguments", "unknown measure")
    assert len(err) < 1000 and "(100,002 characters)" in err, len(err)
