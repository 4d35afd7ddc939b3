"""clir_llm.regression (`clir-llm check`): damaged tables in one line, where it looked, strict regression files, and a
check that never imports a configuration's code (issues 14 and 26)."""
from __future__ import annotations
import subprocess, sys
from pathlib import Path

import pytest
import yaml

import _reliability as R


DEMO = R.ROOT / "configs" / "demo.yaml"


def test_check_reads_damaged_tables_in_one_line(tmp_path):
    from clir_llm.regression import check
    cfg = tmp_path / "t.yaml"
    cfg.write_text(yaml.safe_dump(dict(name="t", collection="fixture", pairs=["en-de"], measure="MAP", experiments=["1_first_stage"],
                                       first_stage=dict(methods=["bm25-og"]), regression="reg.yaml")))
    (tmp_path / "reg.yaml").write_text(yaml.safe_dump(dict(cells=[dict(table="first_stage", row="BM25-OG", col="en-de", expected=0.5)])))
    tables = tmp_path / "results" / "t" / "tables"; tables.mkdir(parents=True)
    for kind, text, what in (("table cut mid-quote", 'row,en-de\nBM25-OG,"0.5', "first_stage.csv: not a readable table"),
                             ("table not UTF-8", b"row,en-de\nBM25-OG,\xff\xfe\n", "first_stage.csv: not a readable table")):
        (tables / "first_stage.csv").write_bytes(text if isinstance(text, bytes) else text.encode())
        p = R.run_cli("check", cfg, "--results", tmp_path / "results")
        R.expect_rc(kind, p.returncode, p.stderr, what, cls="input files")
    (tables / "first_stage.csv").write_text("row,en-de\nBM25-OG,n/a?\n")
    p = R.run_cli("check", cfg, "--results", tmp_path / "results")
    R.hostile("input files", "hand-edited table cell", p.returncode == 1 and "Traceback" not in p.stderr)
    assert p.returncode == 1 and "Traceback" not in p.stderr and "en-de: not one number" in p.stdout, (p.stdout, p.stderr)


def test_check_from_another_folder_says_where_it_looked(tmp_path):
    p = R.run_cli("check", DEMO, cwd=tmp_path)
    assert p.returncode == 1 and "MISSING" in p.stdout
    assert f"no tables in {(tmp_path / 'results' / 'demo' / 'tables').resolve()}" in p.stdout, p.stdout[-500:]
