"""clir_llm.config: a configuration is checked, before any work, in one line naming the file, the line and the value:
unknown keys and wrong types, bad names, paths outside the configuration's folder, YAML that is not strict (duplicate
keys, alias bombs, nesting, huge values), numbers out of range (issues 14 and 26)."""
from __future__ import annotations
import io, os
from pathlib import Path

import pytest
import yaml

import _reliability as R


def test_config_with_unknown_keys_or_wrong_types_fails_before_work(tmp_path):
    cfg = yaml.safe_load(R.reduced_config(tmp_path / "ok.yaml").read_text())
    cfg["rerankers"][1]["windw"] = 5                       # unknown key
    cfg["doc_length"]["tokens"] = [8, "long"]              # wrong type
    cfg["first_stage"]["depth"] = -3                       # out of range
    bad = tmp_path / "bad.yaml"; bad.write_text(yaml.safe_dump(cfg))
    err = R.err_cli("invalid configuration", "reproduce", bad, "--results", tmp_path / "results", "--figures", tmp_path / "figures")
    assert f"{bad}: rerankers.1: reranker 'pairwise-bubblesort' has no option 'windw'; its options: prompt, doc_title" in err
    assert f"{bad}: doc_length.tokens.1: Input should be a valid integer" in err and "'long'" in err
    assert f"{bad}: first_stage.depth: Input should be greater than 0 (got -3)" in err
    assert not (tmp_path / "results").exists() and not (tmp_path / "figures").exists()


DEMO = R.ROOT / "configs" / "demo.yaml"


# ---------- findings 8/9: the dry run rejects, in one line naming the file and value, what would fail later
def _demo(**top):
    "The demo's configuration, to be written outside configs/: without its recorded responses and regression file (paths beside the config)."
    c = yaml.safe_load(DEMO.read_text())
    c.pop("regression"); c.pop("recorded")
    for k, v in top.items():
        if callable(v): v(c)
        else: c[k] = v
    return c


def _rr(i=0, **kw): return lambda c: c["rerankers"][i].update(kw)


BAD_CONFIGS = [
    ("unknown measure", dict(measure="nosuch@3"), "unknown measure 'nosuch@3'"),
    ("zero cutoff in extra_measures", dict(extra_measures=["P@0"]), "'P@0': its cutoff must be an integer >= 1"),
    ("unknown prompt", dict(x=_rr(prompt="nosuch")), "unknown prompt template 'nosuch'"),
    ("context 3", dict(x=_rr(context=3)), "context: Input should be greater than or equal to 64"),
    ("doc_length tokens -5, 0", dict(x=lambda c: c["doc_length"].update(tokens=[-5, 0])), "doc_length.tokens.0"),
    ("missing gguf file", dict(x=_rr(llm="gguf:/nonexistent/model.gguf")), "no such GGUF file '/nonexistent/model.gguf'"),
    ("root that does not exist", dict(root="../../nonexistent"), "root: no such folder '../../nonexistent'"),
    ("missing regression file", dict(regression="nonexistent/reg.yaml"), "nonexistent/reg.yaml: regression file not found"),
    ("regression file outside the config's folder", dict(regression="/nonexistent/reg.yaml"), "must be a file in the configuration's folder"),
    ("recorded responses outside the config's folder", dict(recorded="../../elsewhere.jsonl"), "must be a file in the configuration's folder"),
    ("top_k: true", dict(x=_rr(top_k=True)), "rerankers.0.top_k: Input should be a valid integer (got True)"),
    ("window: '5'", dict(x=_rr(window="5")), "window: Input should be a valid integer"),
    ("sort k 0", dict(x=_rr(2, k=0)), "k: Input should be greater than 0"),
    ("name with ../", dict(name="../evil"), "name must be a plain file name"),
    ("absolute name", dict(name="/tmp/evil"), "name must be a plain file name"),
]


@pytest.mark.parametrize("kind, change, what", BAD_CONFIGS, ids=[b[0] for b in BAD_CONFIGS])
def test_dry_run_rejects_in_one_line(tmp_path, kind, change, what):
    p = tmp_path / "c.yaml"; p.write_text(yaml.safe_dump(_demo(**change)))
    rc, err = R.dry_run(p)
    R.expect_rc(f"config: {kind}", rc, err, what)
    if "regression" not in kind and "measure" not in what: assert str(p) in err or "c.yaml" in err


def test_dry_run_file_level_errors(tmp_path):
    good = yaml.safe_dump(_demo())
    (tmp_path / "dir.yaml").mkdir()
    (tmp_path / "latin1.yaml").write_bytes(good.replace("Demo", "D\xe9mo").encode("latin-1"))
    for name, what in (("dir.yaml", "not a folder"), ("latin1.yaml", "latin1.yaml: not UTF-8 text")):
        rc, err = R.dry_run(tmp_path / name); R.expect_rc(f"config: {name}", rc, err, what)
    for name, text, what in (("badyaml", b"a: [\n", "regression file is not valid YAML"), ("empty", b"", "got nothing"),
                             ("list", b"- 1\n- 2\n", "got list")):
        (tmp_path / f"{name}.reg.yaml").write_bytes(text)
        p = tmp_path / f"{name}.yaml"; p.write_text(yaml.safe_dump(_demo(regression=f"{name}.reg.yaml")))
        rc, err = R.dry_run(p); R.expect_rc(f"regression file: {name}", rc, err, what)
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbf" + good.replace("\n", "\r\n").encode())
    rc, err = R.dry_run(tmp_path / "bom.yaml")
    R.hostile("configs", "config with BOM and CRLF", rc == 0)
    assert rc == 0, err
