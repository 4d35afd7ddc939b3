"""Issue 14: the same configuration gives byte-identical tables however it is run: cold, warm (`--force`, runs read
back from their files), `--replay` (model calls served from the cache only) and with a fresh cache and results folder."""
import os, subprocess, sys
from pathlib import Path
import pytest, yaml
import _reliability as R

CONFIG = dict(name="tables-same", collection="fixture", pairs=["en-de", "en-sw"], measure="MAP", extra_measures=["nDCG@20"],
              experiments=["1_first_stage"],
              first_stage=dict(methods=["bm25-og", "bm25-dt", "rrf:bm25-og+bm25-dt"], translator="dict:freedict",
                               only_pairs={"bm25-dt": ["en-sw"], "rrf:bm25-og+bm25-dt": ["en-sw"]}))


def _reproduce(cfg, results, cache, *flags):
    env = {**os.environ, "CLIR_LLM_CACHE": str(cache), "MPLBACKEND": "Agg"}
    p = subprocess.run([sys.executable, "-m", "clir_llm.cli", "reproduce", str(cfg), "--results", str(results),
                        "--figures", str(results / "figures"), *flags], capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return {f.name: f.read_bytes() for f in sorted((results / CONFIG["name"] / "tables").iterdir())}


def test_tables_identical_cold_force_replay_fresh_cache(tmp_path):
    cfg = tmp_path / "tables-same.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    cold = _reproduce(cfg, tmp_path / "res", tmp_path / "cache")
    assert cold and "first_stage.csv" in cold
    runs = {"--force (runs read back)": _reproduce(cfg, tmp_path / "res", tmp_path / "cache", "--force"),
            "--replay": _reproduce(cfg, tmp_path / "res-replay", tmp_path / "cache", "--replay"),
            "fresh cache and results": _reproduce(cfg, tmp_path / "res-fresh", tmp_path / "cache-fresh")}
    for name, tables in runs.items():
        R.STATS["table_runs"].append(name)
        if tables != cold: R.STATS["table_mismatches"] += 1
    assert all(t == cold for t in runs.values()), [n for n, t in runs.items() if t != cold]
