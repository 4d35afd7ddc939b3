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
    cfg["rerankers"][1]["windw"] = 5  # unknown key
    cfg["doc_length"]["tokens"] = [8, "long"]  # wrong type
    cfg["first_stage"]["depth"] = -3  # out of range
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    err = R.err_cli(
        "invalid configuration", "reproduce", bad, "--results", tmp_path / "results", "--figures", tmp_path / "figures"
    )
    assert (
        f"{bad}: rerankers.1: reranker 'pairwise-bubblesort' has no option 'windw'; its options: prompt, doc_title"
        in err
    )
    assert f"{bad}: doc_length.tokens.1: Input should be a valid integer" in err and "'long'" in err
    assert f"{bad}: first_stage.depth: Input should be greater than 0 (got -3)" in err
    assert not (tmp_path / "results").exists() and not (tmp_path / "figures").exists()


DEMO = R.ROOT / "configs" / "demo.yaml"


# ---------- findings 8/9: the dry run rejects, in one line naming the file and value, what would fail later
def _demo(**top):
    "The demo's configuration, to be written outside configs/: without its recorded responses and regression file (paths beside the config)."
    c = yaml.safe_load(DEMO.read_text())
    c.pop("regression")
    c.pop("recorded")
    for k, v in top.items():
        if callable(v):
            v(c)
        else:
            c[k] = v
    return c


def _rr(i=0, **kw):
    return lambda c: c["rerankers"][i].update(kw)


BAD_CONFIGS = [
    ("unknown measure", dict(measure="nosuch@3"), "unknown measure 'nosuch@3'"),
    ("zero cutoff in extra_measures", dict(extra_measures=["P@0"]), "'P@0': its cutoff must be an integer >= 1"),
    ("unknown prompt", dict(x=_rr(prompt="nosuch")), "unknown prompt template 'nosuch'"),
    ("context 3", dict(x=_rr(context=3)), "context: Input should be greater than or equal to 64"),
    ("doc_length tokens -5, 0", dict(x=lambda c: c["doc_length"].update(tokens=[-5, 0])), "doc_length.tokens.0"),
    (
        "missing gguf file",
        dict(x=_rr(llm="gguf:/nonexistent/model.gguf")),
        "no such GGUF file '/nonexistent/model.gguf'",
    ),
    ("root that does not exist", dict(root="../../nonexistent"), "root: no such folder '../../nonexistent'"),
    (
        "missing regression file",
        dict(regression="nonexistent/reg.yaml"),
        "nonexistent/reg.yaml: regression file not found",
    ),
    (
        "regression file outside the config's folder",
        dict(regression="/nonexistent/reg.yaml"),
        "must be a file in the configuration's folder",
    ),
    (
        "recorded responses outside the config's folder",
        dict(recorded="../../elsewhere.jsonl"),
        "must be a file in the configuration's folder",
    ),
    ("top_k: true", dict(x=_rr(top_k=True)), "rerankers.0.top_k: Input should be a valid integer (got True)"),
    ("window: '5'", dict(x=_rr(window="5")), "window: Input should be a valid integer"),
    ("sort k 0", dict(x=_rr(2, k=0)), "k: Input should be greater than 0"),
    ("name with ../", dict(name="../evil"), "name must be a plain file name"),
    ("absolute name", dict(name="/abs/evil"), "name must be a plain file name"),
]


@pytest.mark.parametrize("kind, change, what", BAD_CONFIGS, ids=[b[0] for b in BAD_CONFIGS])
def test_dry_run_rejects_in_one_line(tmp_path, kind, change, what):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(_demo(**change)))
    rc, err = R.dry_run(p)
    R.expect_rc(f"config: {kind}", rc, err, what)
    if "regression" not in kind and "measure" not in what:
        assert str(p) in err or "c.yaml" in err


def test_dry_run_file_level_errors(tmp_path):
    good = yaml.safe_dump(_demo())
    (tmp_path / "dir.yaml").mkdir()
    (tmp_path / "latin1.yaml").write_bytes(good.replace("Demo", "D\xe9mo").encode("latin-1"))
    for name, what in (("dir.yaml", "not a folder"), ("latin1.yaml", "latin1.yaml: not UTF-8 text")):
        rc, err = R.dry_run(tmp_path / name)
        R.expect_rc(f"config: {name}", rc, err, what)
    for name, text, what in (
        ("badyaml", b"a: [\n", "regression file is not valid YAML"),
        ("empty", b"", "got nothing"),
        ("list", b"- 1\n- 2\n", "got list"),
    ):
        (tmp_path / f"{name}.reg.yaml").write_bytes(text)
        p = tmp_path / f"{name}.yaml"
        p.write_text(yaml.safe_dump(_demo(regression=f"{name}.reg.yaml")))
        rc, err = R.dry_run(p)
        R.expect_rc(f"regression file: {name}", rc, err, what)
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbf" + good.replace("\n", "\r\n").encode())
    rc, err = R.dry_run(tmp_path / "bom.yaml")
    R.hostile("configs", "config with BOM and CRLF", rc == 0)
    assert rc == 0, err


# ---------- issue 26 items 3, 5, 10, 11: YAML read strictly and within bounds, numbers bounded, names that stay where they belong
def _alias_bomb():
    return (
        "a0: &a0 [x,x,x,x,x,x,x,x,x,x]\n"
        + "".join(f"a{i}: &a{i} [{','.join(['*a%d' % (i - 1)] * 10)}]\n" for i in range(1, 9))
        + yaml.safe_dump(_demo())
    )


def _five_thousand_digits():
    c = _demo()
    c["first_stage"]["depth"] = 7
    return yaml.safe_dump(c).replace("depth: 7", "depth: " + "9" * 5000)


# (kind, the file's text, what the one line says); each was a traceback, minutes, or silence on 7ce5228
ISSUE26_CONFIGS = [
    ("duplicate key", lambda: "name: a\n" + yaml.safe_dump(_demo()), "key 'name' given twice (first on line 1)"),
    ("alias bomb", _alias_bomb, "an alias bomb?"),
    (
        "nesting 5000 deep",
        lambda: yaml.safe_dump(_demo()) + "stand_in_note: " + "[" * 5000 + "]" * 5000 + "\n",
        "nesting deeper than 64 levels",
    ),
    ("a 5000-digit integer", _five_thousand_digits, "an integer of 5,000 digits"),
    (
        "depth 10^12",
        lambda: yaml.safe_dump(_demo(x=lambda c: c["first_stage"].update(depth=10**12))),
        "first_stage.depth: Input should be less than or equal to 10000",
    ),
    ("pairs: []", lambda: yaml.safe_dump(_demo(pairs=[])), "pairs: List should have at least 1 item"),
    (
        "a pair given twice",
        lambda: yaml.safe_dump(_demo(pairs=["en-de", "en-de", "en-fi", "en-it", "en-ru", "de-fi", "de-it", "de-ru"])),
        "pairs: pair en-de given twice",
    ),
    (
        "experiment outside nbs/experiments",
        lambda: yaml.safe_dump(_demo(experiments=["../../../outside/evil"])),
        "experiments.0: String should match pattern",
    ),
    (
        "plugin that is a path",
        lambda: yaml.safe_dump(_demo(plugins=["../evil"])),
        "plugins: '../evil' is not a module name",
    ),
    (
        "NaN reference value",
        lambda: yaml.safe_dump(
            _demo(references=[dict(measure="MAP", row="X (copied)", source="a paper", values={"en-de": float("nan")})])
        ),
        "references.0.values.en-de: Input should be a finite number",
    ),
    (
        "files: folder that does not exist",
        lambda: yaml.safe_dump(
            _demo(
                collection="files:/nonexistent/folder",
                x=lambda c: [c.pop("rerankers"), c.pop("doc_length"), c["first_stage"].pop("only_pairs")],
            )
        ),
        "/nonexistent/folder is not a folder",
    ),
]


@pytest.mark.parametrize("kind, text, what", ISSUE26_CONFIGS, ids=[b[0] for b in ISSUE26_CONFIGS])
def test_dry_run_refuses_unbounded_or_misplaced_configs(tmp_path, kind, text, what):
    "One line within seconds (no RecursionError, no 650 MB, no Java exception later, no silent acceptance)."
    import time

    p = tmp_path / "c.yaml"
    p.write_text(text())
    t0 = time.monotonic()
    rc, err = R.dry_run(p)
    R.expect_rc(f"config: {kind}", rc, err, what)
    assert time.monotonic() - t0 < 60


def test_dry_run_says_the_configuration_imports_code(tmp_path, monkeypatch):
    "issue 26 item 12: a configuration with `plugins:` is said to import code (the dry run imports it to resolve its names)."
    (tmp_path / "cfg26_plugin.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(_demo(plugins=["cfg26_plugin"])))
    r = R.run_main("reproduce", p, "--dry-run")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "this configuration imports code: cfg26_plugin" in r.stdout and "nothing was loaded" not in r.stdout.replace(
        "nothing was loaded or downloaded; the configuration's code was imported", ""
    ), r.stdout[-1500:]


# ---------- issue 39 items 5-6: names, rows and lists a dry run accepted
def _fs(**kw):
    return lambda c: c["first_stage"].update(kw)


NAMES_AND_ROWS = [
    # was an OSError traceback (file name too long)
    ("a 300-character name", dict(name="n" * 300), "name must be at most 100 characters"),
    ("a name holding a newline", dict(name="demo\nevil"), "control characters"),
    ("a name holding ESC", dict(name="demo\x1b[2Jevil"), "control characters"),
    ("a reranker name holding a newline", dict(x=_rr(name="Fake\nlistwise")), "control characters"),
    ("a reranker name holding ESC", dict(x=_rr(name="Fake\x1b[31mlistwise")), "control characters"),
    (
        "a first-stage method given twice",
        dict(x=lambda c: c["first_stage"]["methods"].append(c["first_stage"]["methods"][0])),
        "given twice",
    ),
    (
        "rrf of one method twice",
        dict(x=lambda c: c["first_stage"]["methods"].append("rrf:bm25-og+bm25-og")),
        "names one twice",
    ),
]


@pytest.mark.parametrize("kind, change, what", NAMES_AND_ROWS, ids=[b[0] for b in NAMES_AND_ROWS])
def test_dry_run_refuses_bad_names_and_repeated_rows(tmp_path, kind, change, what):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(_demo(**change)))
    rc, err = R.dry_run(p)
    R.expect_rc(f"config: {kind}", rc, err, what)
    assert "c.yaml" in err


def test_reproduce_refuses_an_empty_experiments_list(tmp_path):
    "`experiments: []` ran nothing and exited 0 (issue 39 item 6); the library still takes it (a Pipeline built in Python)."
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(_demo(experiments=[])))
    rc, err = R.dry_run(p)
    R.expect_rc("config: experiments: []", rc, err, "experiments: [] names no notebook")


def test_a_regression_file_linked_from_outside_the_folder_is_never_read(tmp_path):
    "A `regression:` that is a symbolic link to a file outside the configuration's folder was read and printed (issue 39 item 6)."
    (tmp_path / "cfg").mkdir()
    secret = tmp_path / "outside.yaml"
    secret.write_text("tolerance: 0.001\ncells:\n  - {table: t, row: SECRET-ROW-TEXT, column: x, value: 1}\n")
    (tmp_path / "cfg" / "reg.yaml").symlink_to(secret)
    p = tmp_path / "cfg" / "c.yaml"
    p.write_text(yaml.safe_dump(_demo(regression="reg.yaml")))
    for args in (("reproduce", p, "--dry-run"), ("check", p)):
        r = R.run_main(*args)
        R.expect_rc(
            f"config: regression linked from outside ({args[0]})",
            r.returncode,
            r.stderr,
            "outside the configuration's folder",
        )
        assert "SECRET-ROW-TEXT" not in r.stdout + r.stderr


def _alias_bomb(path: Path, key: str, n: int = 20_000) -> Path:
    "A configuration whose `key` is a list of `n` aliases of one 10,000-character scalar (inside the alias budget)."
    c = {k: v for k, v in _demo().items() if k not in ("description", key)}
    body = yaml.safe_dump(c, sort_keys=False)
    path.write_text(f"description: &a {'x' * 10_000}\n{key}: [{', '.join(['*a'] * n)}]\n{body}")
    return path


@pytest.mark.parametrize("key", ["nosuch", "experiments", "pairs"])
def test_an_aliased_long_scalar_is_cut_before_it_is_shown(tmp_path, key):
    """Issue 39 item 7: a 10,000-character scalar aliased many times was written out whole before the message was cut
    (150,000 aliases: 1.66 GB and 12 s in the dry run) or made a 31 MB error line; here 20,000 aliases (200 MB written
    out whole before): one short line, and the message costs a few MB at most."""
    import tracemalloc
    from clir_llm.config import load_config
    from clir_llm.core import ClirError

    p = _alias_bomb(tmp_path / "bomb.yaml", key)
    tracemalloc.start()
    try:
        try:
            load_config(p)
            msg = None
        except ClirError as e:
            msg = str(e)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    rc, err = R.dry_run(p)
    ok = (
        msg is not None
        and len(msg) < 20_000
        and peak < 150e6
        and rc == 1
        and len(err.strip().splitlines()) == 1
        and len(err) < 1_200
    )
    R.hostile("configs", f"a 10,000-character scalar aliased 20,000 times ({key})", ok)
    assert ok, (len(msg or ""), peak, rc, len(err), err[:300])


@pytest.mark.parametrize(
    "ending", ["import os\nos._exit(0)\n", "from os import _exit\n_exit(3)\n", "import sys\nsys.exit(0)\n"]
)
def test_a_plugin_that_ends_the_process_is_no_silent_success(tmp_path, ending):
    """issue 39 item 6: a plugin calling os._exit(0) while imported made `reproduce --dry-run` exit 0 with no output. The
    command says which code it imports before it does, imports each plugin first in a separate process (os._exit cannot
    be stopped in the process that calls it without replacing it, which the package never does), so one that ends that
    process is one line naming it and exit 1; a plugin calling sys.exit is one line and exit 1."""
    mod = f"cfg39_exit_{abs(hash(ending)) % 10**6}"
    (tmp_path / f"{mod}.py").write_text(ending)
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(_demo(plugins=[mod])))
    r = R.run_cli("reproduce", p, "--dry-run", env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=300)
    said = f"importing the configuration's code (plugins: {mod})" in r.stderr
    last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    if "sys.exit" in ending:
        ok = said and r.returncode == 1 and last.endswith(f"plugin '{mod}' called sys.exit(0) while it was imported")
    # this session: imported apart first, so a plugin ending the process is one line naming it and exit 1 (was exit 0)
    else:
        code = ending.split("(")[-1].rstrip(")\n")
        ok = (
            said
            and r.returncode == 1
            and "dry run:" not in r.stdout
            and f"plugin '{mod}' ended the process while it was imported (exit status {code}" in last
        )
    R.hostile("configs", f"a plugin ending the process ({ending.split()[-1]})", ok)
    assert ok, (r.returncode, r.stdout[-300:], r.stderr[-600:])


def test_prepare_says_the_configuration_imports_code(tmp_path, monkeypatch):
    "issue 39 item 6: `prepare` imported `plugins:` without saying so (the dry run says it)."
    (tmp_path / "cfg39_plugin.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    p = tmp_path / "c.yaml"
    p.write_text(
        yaml.safe_dump(
            dict(
                name="p39",
                plugins=["cfg39_plugin"],
                collection="fixture",
                pairs=["en-de"],
                measure="MAP",
                first_stage=dict(methods=["bm25-og"]),
                experiments=["1_first_stage"],
            )
        )
    )
    r = R.run_main("prepare", p)
    ok = r.returncode == 0 and "importing the configuration's code (plugins: cfg39_plugin)" in r.stderr
    R.hostile("configs", "prepare with plugins: said", ok)
    assert ok, (r.returncode, r.stdout[-500:], r.stderr[-800:])


@pytest.mark.parametrize("key", ["nosuch", "experiments"])
def test_an_aliased_long_scalar_is_refused_while_the_file_is_read(tmp_path, key):
    """Issue 39 item 7, the time: a 0.6 MB config with a 10,000-character scalar aliased 150,000 times (inside the node
    budget) took 11-12 s in the dry run (PyYAML's parse of every alias, then pydantic). The characters the aliases
    expand to are counted while the file is composed: refused at its first aliases, one line naming the file and line."""
    import time
    from clir_llm.core import ClirError, load_yaml

    p = _alias_bomb(tmp_path / "bomb.yaml", key, n=150_000)
    t0 = time.monotonic()
    try:
        load_yaml(p)
        msg = None
    except ClirError as e:
        msg = str(e)
    took = time.monotonic() - t0
    rc, err = R.dry_run(p)
    ok = (
        msg is not None
        and msg.startswith(f"{p}:2: not valid YAML: its values expand to more than 2,000,000 characters")
        and took < 0.5
        and rc == 1
        and len(err.strip().splitlines()) == 1
        and "2,000,000 characters" in err
    )
    R.hostile("configs", f"a 10,000-character scalar aliased 150,000 times ({key}): refused while read", ok)
    assert ok, (msg, took, rc, err[:300])
    # a normal configuration, and one that aliases a value a few times, read as before
    d = _demo()
    d["description"] = "d" * 5_000
    q = tmp_path / "ok.yaml"
    q.write_text(
        yaml.safe_dump(d).replace("description: " + "d" * 5_000, "description: &d " + "d" * 5_000) + "again: *d\n"
    )
    assert load_yaml(q)["again"] == "d" * 5_000
    assert load_yaml(DEMO)["name"] == yaml.safe_load(DEMO.read_text())["name"]


@pytest.mark.parametrize("how", ["--plugin", "entry point"])
def test_a_plugin_ending_the_process_is_named_from_the_command_line_and_entry_points(tmp_path, how):
    """Issue 39 item 6, the other ways in: `clir-llm methods --plugin M` and an installed package's entry point
    (clir_llm.first_stage_method) whose module calls os._exit(0) while imported exited 0 with no output (the dry run's
    announce line aside, nothing says which code did it); now one line naming the module, exit 1. An entry point whose
    module raises is one line too (it was a traceback)."""
    mod = "cfg39_ep_exit" if how == "entry point" else "cfg39_cli_exit"
    (tmp_path / f"{mod}.py").write_text("import os\nos._exit(0)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    if how == "entry point":
        for name, body in (
            ("cfg39_ep_exit", "import os\nos._exit(0)\n"),
            ("cfg39_ep_raise", "raise ValueError('bad plugin state')\n"),
        ):
            (tmp_path / f"{name}.py").write_text(body)
        dist = tmp_path / "cfg39_ep-0.1.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: cfg39-ep\nVersion: 0.1\n")
        (dist / "entry_points.txt").write_text("[clir_llm.first_stage_method]\nends = cfg39_ep_exit:X\n")
        r = R.run_cli("methods", env=env, timeout=300)
        says = "the module of a clir_llm.first_stage_method entry point, 'cfg39_ep_exit' ended the process while it was imported (exit status 0"
    else:
        r = R.run_cli("methods", "--plugin", mod, env=env, timeout=300)
        says = f"plugin '{mod}' ended the process while it was imported (exit status 0"
    R.expect_one_line_error(f"a plugin calling os._exit(0) ({how})", r, "arguments", says)
    if how == "entry point":
        (dist / "entry_points.txt").write_text("[clir_llm.first_stage_method]\nraises = cfg39_ep_raise:X\n")
        r = R.run_cli("methods", env=env, timeout=300)
        R.expect_one_line_error(
            "an entry point whose module raises",
            r,
            "arguments",
            "clir_llm.first_stage_method entry point 'raises' (cfg39_ep_raise:X) failed while it was loaded: ValueError: bad plugin state",
        )


def test_two_rows_of_one_reranker_name_share_no_cell(tmp_path):
    """Sweep of issue 39 item 6 (this session): a second row with the name of the first (here with another top_k) that
    runs the same pair, first stage and documents was accepted by the dry run: both rows write one result, one of them
    silently. Rows of one name may split the pairs (the demo's two 'Qwen-0.5B listwise' rows do), not share a cell."""
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(_demo(x=lambda c: c["rerankers"].append({**c["rerankers"][0], "top_k": 5}))))
    rc, err = R.dry_run(p)
    R.expect_rc(
        "two reranker rows of one name running one cell",
        rc,
        err,
        "reranker 'Qwen-0.5B listwise': rows 1 and 5 both run pair en-de, first stage bm25-qt, OG documents",
    )
    q = tmp_path / "split.yaml"
    q.write_text(yaml.safe_dump(_demo(x=lambda c: c["rerankers"].append({**c["rerankers"][0], "pairs": ["en-fi"]}))))
    from clir_llm.config import load_config

    assert [r.name for r in load_config(q).rerankers].count("Qwen-0.5B listwise") == 3


@pytest.mark.parametrize("root", ["file", "nowhere"])
def test_a_root_that_is_no_folder_is_refused_by_the_dry_run(tmp_path, root):
    """Sweep of issue 39 item 6 (this session): `root:` naming a file passed the dry run as 'missing: nothing (data,
    credentials and models are here)' (a missing path was refused; a file only had to exist), and the run failed when
    it loaded the collection. One line now; a folder, relative to the configuration too, is still accepted."""
    given = {"file": "run.trec", "nowhere": str(tmp_path / "no" / "such")}[root]
    (tmp_path / "run.trec").write_text("t1 Q0 de-1 1 1.0 x\n")
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(_demo(root=given)))
    rc, err = R.dry_run(p)
    R.expect_rc(f"root: {root}", rc, err, f"root: {'not a folder' if root == 'file' else 'no such folder'} {given!r}")
    (tmp_path / "data").mkdir()
    q = tmp_path / "d.yaml"
    q.write_text(yaml.safe_dump(_demo(root="data")))
    assert R.run_main("reproduce", q, "--dry-run").returncode == 0


def test_a_regression_file_that_is_a_named_pipe_is_named_so(tmp_path):
    """Sweep of issue 39 item 6 (this session): `check` on a configuration whose regression file is a FIFO said
    'regression file not found' (it is there); the line names what is there, and nothing waits on the pipe."""
    import time

    os.mkfifo(tmp_path / "reg.yaml")
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({**_demo(), "regression": "reg.yaml"}))
    t0 = time.monotonic()
    r = R.run_main("check", p)
    R.expect_rc(
        "regression: a named pipe", r.returncode, r.stderr, "reg.yaml: regression file not found (it is a named pipe)"
    )
    assert time.monotonic() - t0 < 30


def test_a_row_holds_its_parsed_spec(monkeypatch):
    "Issue 37 item 2: a reranker row's spec is parsed once, when the row is validated; reading it never parses again."
    from pydantic import ValidationError
    from clir_llm.config import load_config
    from clir_llm.rerank import RerankerSpec

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "demo.yaml")
    calls, parse = [], RerankerSpec.parse.__func__
    monkeypatch.setattr(RerankerSpec, "parse", classmethod(lambda cls, *a, **k: calls.append(a) or parse(cls, *a, **k)))
    for rc in cfg.rerankers:
        assert rc.spec is rc.spec and rc.reranker is rc.spec.reranker and rc.family
    assert calls == []
    with pytest.raises(ValidationError, match="frozen"):  # a row cannot change under its spec
        cfg.rerankers[0].top_k = 5


def test_a_copied_row_with_other_options_parses_its_own_spec():
    "A row copied with other options (model_copy, as tests and notebooks do) does not keep the original's spec."
    from clir_llm.config import load_config

    rc = next(r for r in load_config(Path(__file__).resolve().parents[1] / "configs" / "demo.yaml").rerankers)
    other = rc.options.model_copy(
        update={"passage_tokens": 7} if "passage_tokens" in type(rc.options).model_fields else {}
    )
    copy = rc.model_copy(update={"options": other})
    assert copy.spec is not rc.spec and copy.spec.options == other.model_copy() and rc.spec is rc.spec


def test_a_rows_options_cannot_change_under_its_spec():
    "A row is frozen and so are its options: its kept spec cannot go stale by a change in place."
    from pydantic import ValidationError
    from clir_llm.config import load_config

    rc = next(r for r in load_config(Path(__file__).resolve().parents[1] / "configs" / "demo.yaml").rerankers)
    field = "passage_tokens" if "passage_tokens" in type(rc.options).model_fields else "max_words"
    with pytest.raises(ValidationError, match="frozen"):
        setattr(rc.options, field, getattr(rc.options, field) + 1)
    with pytest.raises(ValidationError, match="frozen"):
        rc.options = rc.options
