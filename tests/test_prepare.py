"""Issue 16 item 7: what a run downloads is fetched by one explicit step (`clir-llm prepare CONFIG`, which
`clir-llm reproduce` runs first and which says what it fetches), not from inside a notebook kernel."""
import subprocess, sys
from pathlib import Path
import pytest, yaml

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "clir-llm")


def test_demo_needs_exactly_the_dictionaries_its_runs_read():
    from clir_llm.config import load_config
    from clir_llm.reproduce import needs
    n = needs(load_config(ROOT / "configs" / "demo.yaml"))
    # QT: query->document language where bm25-qt runs; DT: document->query language where bm25-dt / the hybrid run
    # and where rerankers read DT documents; en-it and en-ru have neither, so their dictionaries are not fetched
    assert n["directions"] == ["de-en", "de-fi", "de-it", "de-ru", "en-de", "en-fi", "fi-de", "fi-en", "it-de"]
    assert "dense:e5-small" in n["models"]
    # CIRAL: NLLB translates the queries (QT); its documents' translations ship with the corpus (no DT direction)
    assert needs(load_config(ROOT / "configs" / "paper-ciral.yaml"))["directions"] == ["en-ha", "en-so", "en-sw", "en-yo"]


def test_prepare_fetches_what_is_missing_and_says_so(monkeypatch, tmp_path):
    import clir_llm.translate_dict as T
    from clir_llm.config import load_config
    from clir_llm.reproduce import prepare
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(dict(name="c", collection="fixture", pairs=["en-de"], measure="MAP", experiments=["1_first_stage"],
                                       first_stage=dict(translator="dict:freedict", methods=["bm25-og", "bm25-qt"]))))
    fetched = []
    monkeypatch.setattr(T, "find_freedict", lambda pair, *a, **k: None)
    monkeypatch.setattr(T, "ensure_freedict", lambda pair, *a, **k: fetched.append(pair) or (tmp_path / "x.index", tmp_path / "x.dict.dz", "1.0"))
    said = []
    lines = prepare(load_config(cfg), log=said.append)
    assert fetched == ["en-de"] and lines == [f"FreeDict en-de: dict-freedict-eng-deu 1.0 ({tmp_path})"]
    assert said and said[0].startswith("prepare: FreeDict en-de: apt-get download dict-freedict-eng-deu into ")


def test_cli_prepare_lists_what_a_config_reads(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(dict(name="c", collection="fixture", pairs=["en-de"], measure="MAP", experiments=["1_first_stage"],
                                       first_stage=dict(translator="dict:freedict", methods=["bm25-dt"]))))
    p = subprocess.run([CLI, "prepare", str(cfg)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("FreeDict de-en: dict-freedict-deu-eng ")
