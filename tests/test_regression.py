"""clir_llm.regression (`clir-llm check`): damaged tables in one line, where it looked, strict regression files, and a
check that never imports a configuration's code (issues 14 and 26)."""

from __future__ import annotations
import os, subprocess, sys
from pathlib import Path

import pytest
import yaml

import _reliability as R


DEMO = R.ROOT / "configs" / "demo.yaml"


def test_check_reads_damaged_tables_in_one_line(tmp_path):
    from clir_llm.regression import check

    cfg = tmp_path / "t.yaml"
    cfg.write_text(
        yaml.safe_dump(
            dict(
                name="t",
                collection="fixture",
                pairs=["en-de"],
                measure="MAP",
                experiments=["1_first_stage"],
                first_stage=dict(methods=["bm25-og"]),
                regression="reg.yaml",
            )
        )
    )
    (tmp_path / "reg.yaml").write_text(
        yaml.safe_dump(dict(cells=[dict(table="first_stage", row="BM25-OG", col="en-de", expected=0.5)]))
    )
    tables = tmp_path / "results" / "t" / "tables"
    tables.mkdir(parents=True)
    for kind, text, what in (
        ("table cut mid-quote", 'row,en-de\nBM25-OG,"0.5', "first_stage.csv: not a readable table"),
        ("table not UTF-8", b"row,en-de\nBM25-OG,\xff\xfe\n", "first_stage.csv: not a readable table"),
    ):
        (tables / "first_stage.csv").write_bytes(text if isinstance(text, bytes) else text.encode())
        p = R.run_cli("check", cfg, "--results", tmp_path / "results")
        R.expect_rc(kind, p.returncode, p.stderr, what, cls="input files")
    (tables / "first_stage.csv").write_text("row,en-de\nBM25-OG,n/a?\n")
    p = R.run_cli("check", cfg, "--results", tmp_path / "results")
    R.hostile("input files", "hand-edited table cell", p.returncode == 1 and "Traceback" not in p.stderr)
    assert p.returncode == 1 and "Traceback" not in p.stderr and "en-de: not one number" in p.stdout, (
        p.stdout,
        p.stderr,
    )


def test_check_from_another_folder_says_where_it_looked(tmp_path):
    p = R.run_cli("check", DEMO, cwd=tmp_path)
    assert p.returncode == 1 and "MISSING" in p.stdout
    assert f"no tables in {(tmp_path / 'results' / 'demo' / 'tables').resolve()}" in p.stdout, p.stdout[-500:]


# ---------- issue 26 items 11, 12: regression files bounded; `check` never imports a configuration's code
def _checked(tmp_path, reg: dict, plugins=()):
    "`clir-llm check` (a subprocess) of a one-cell configuration on the fixture, its table in place: (exit status, stdout, stderr)."
    cfg = tmp_path / "t.yaml"
    cfg.write_text(
        yaml.safe_dump(
            dict(
                name="t",
                collection="fixture",
                pairs=["en-de"],
                measure="MAP",
                experiments=["1_first_stage"],
                first_stage=dict(methods=["bm25-og"]),
                regression="reg.yaml",
                **({"plugins": list(plugins)} if plugins else {}),
            )
        )
    )
    (tmp_path / "reg.yaml").write_text(yaml.safe_dump(reg))
    tables = tmp_path / "results" / "t" / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    (tables / "first_stage.csv").write_text("row,en-de\nBM25-OG,0.9\n")  # far from the expected 0.5: a wrong table
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = R.run_cli("check", cfg, "--results", tmp_path / "results", env=env)
    return p.returncode, p.stdout, p.stderr


CELL = dict(table="first_stage", row="BM25-OG", col="en-de", expected=0.5)


@pytest.mark.parametrize(
    "kind, reg, what",
    [
        ("tolerance .inf", dict(tolerance=float("inf"), cells=[CELL]), "tolerance: Input should be a finite number"),
        (
            "negative tolerance",
            dict(tolerance=-0.1, cells=[CELL]),
            "tolerance: Input should be greater than or equal to 0",
        ),
        ("cells: []", dict(tolerance=0.001, cells=[]), "cells: List should have at least 1 item"),
        ("NaN expected value", dict(cells=[{**CELL, "expected": float("nan")}]), "finite number"),
    ],
)
def test_regression_files_are_bounded(tmp_path, kind, reg, what):
    "A tolerance that lets a wrong table pass, or a file that checks nothing: one line, exit 1 (never 'check passed')."
    rc, out, err = _checked(tmp_path, reg)
    R.expect_rc(f"regression file: {kind}", rc, err, what, cls="numbers")


def test_check_never_imports_plugins(tmp_path):
    "`clir-llm check` of a configuration with `plugins:` compares its tables without importing them (the module would leave a file)."
    canary = tmp_path / "imported"
    (tmp_path / "reg26_plugin.py").write_text(f"open({str(canary)!r}, 'w').write('x')\n")
    rc, out, err = _checked(tmp_path, dict(cells=[{**CELL, "expected": 0.9}]), plugins=["reg26_plugin"])
    R.hostile("configs", "check of a configuration with plugins:", rc == 0 and not canary.exists())
    assert rc == 0 and not canary.exists(), (rc, out[-800:], err[-800:])
