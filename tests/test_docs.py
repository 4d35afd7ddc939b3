"""The nbdev documentation site builds where Quarto exists (issue 16 item 6): its Quarto files are committed as nbdev
generates them (so `nbdev-docs` leaves git clean), and every notebook passes `nbdev-proc-nbs` with no warning (slow:
it executes each notebook's import and export cells; the cells it executes are checked without running them too)."""

import ast, json, os, re, shutil, subprocess, sys, warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"


def test_quarto_files_are_committed():
    for name in ("_quarto.yml", "nbdev.yml", "sidebar.yml", "styles.css"):
        assert (NBS / name).is_file(), f"nbs/{name} is missing"
    q = (NBS / "_quarto.yml").read_text()
    assert "metadata-files: [nbdev.yml, sidebar.yml]" in q and "styles.css" in q


def test_nbdev_yml_is_what_nbdev_writes():
    "nbdev rewrites nbs/nbdev.yml from pyproject.toml on every docs build: the committed file must be that text."
    from nbdev.config import get_config
    from nbdev.quarto import _nbdev_yml

    cfg = get_config(path=ROOT)
    vals = {k: cfg[k] for k in ["title", "description", "branch", "git_url", "doc_host", "doc_baseurl"]}
    vals["doc_path"] = cfg.doc_path.name
    assert (NBS / "nbdev.yml").read_text() == _nbdev_yml.format(**vals)


def test_quarto_yml_is_nbdevs_default():
    "Kept as nbdev's default (nbdev only writes it when missing): no custom settings to go stale."
    from nbdev.quarto import _quarto_yml

    assert (NBS / "_quarto.yml").read_text() == _quarto_yml


def test_sidebar_lists_every_notebook_grouped_by_stage():
    """Every page notebook is in the sidebar, in a section per stage; nothing else is (no nbdev.yml or styles.css as
    pages). The experiment notebooks are papermill templates without outputs: their executed copies live in
    results/<config>/, so the site does not list them."""
    import yaml

    side = yaml.safe_load((NBS / "sidebar.yml").read_text())["website"]["sidebar"]["contents"]
    flat = lambda items: [x for i in items for x in ([i] if isinstance(i, str) else flat(i["contents"]))]
    listed = flat(side)
    nbs = sorted(
        p.relative_to(NBS).as_posix()
        for p in NBS.glob("**/*.ipynb")
        if not any(s.startswith((".", "_")) for s in p.parts) and p.parts[-2] != "experiments"
    )
    assert sorted(listed) == nbs, (set(nbs) - set(listed), set(listed) - set(nbs))
    sections = [i["section"] for i in side if isinstance(i, dict)]
    assert {
        "Guides",
        "Collections",
        "Translation",
        "First stage",
        "Rerankers",
        "Evaluation",
        "Experiments",
        "Engine",
    } <= set(sections)


def test_sidebar_is_not_rewritten_by_nbdev():
    "nbdev-proc-nbs and nbdev-docs run nbdev-sidebar first, which replaces sidebar.yml by a flat list unless custom_sidebar."
    from nbdev.config import get_config

    assert get_config(path=ROOT).custom_sidebar


# written apart: this file names none
_ROOTS = ["work/", "root/", "home/[a-z]", "Users/[A-Za-z]", "tmp/tmp\\w+", "private/var/"]
MACHINE_PATH = re.compile("|".join("/" + r for r in _ROOTS))


def test_no_machine_paths_in_tracked_files():
    "No absolute path of the machine a file was written on (checkouts, home folders, temporary folders) in any tracked text file."
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not files:
        pytest.skip("not a git checkout")
    bad = []
    for f in files:
        try:
            text = (ROOT / f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        bad += [
            f"{f}:{i}: {m.group(0)}"
            for i, line in enumerate(text.splitlines(), 1)
            for m in [MACHINE_PATH.search(line)]
            if m and "MACHINE_PATH" not in line
        ]
    assert not bad, bad[:30]


def test_readme_is_short_and_opens_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, len(lines)
    first_code = next(i for i, l in enumerate(lines) if l.startswith("```"))
    cmds = lines[first_code + 1 : first_code + 3]
    assert lines[first_code + 3] == "```" and all(c.startswith("python3 -m venv .venv") for c in cmds)
    assert not any(l.startswith(("$ ", ".venv/", "python")) for l in lines[:first_code])  # no command before them
    assert cmds[0].endswith("clir-llm reproduce configs/demo.yaml") and "pytest" in cmds[1]
    assert "build machine" not in " ".join(lines)


def test_readme_is_never_overwritten_by_nbdev():
    "README.md is written by hand: nbdev-readme skips a readme_nb that does not exist."
    from nbdev.config import get_config

    assert not (NBS / get_config(path=ROOT).readme_nb).exists()


_EXTRAS_NOT_IN_DEV = {"ray", "vllm", "accelerate", "llama_cpp"}  # pyproject's ray, gpu and gguf extras (modules)


def _imports_only(stmt) -> bool:
    "An import, or `try:` imports `except ImportError:` a fallback (an optional module)."
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return True
    return (
        isinstance(stmt, ast.Try)
        and all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in stmt.body)
        and all(ast.unparse(h.type) in ("ImportError", "ModuleNotFoundError") for h in stmt.handlers if h.type)
    )


def _docs_time_cells():
    """(notebook, cell, warnings) for each non-export cell that `nbdev-proc-nbs` executes, by nbdev's own rule
    (`_do_eval`: in a notebook with docs, every cell holding an import anywhere) and the warnings that rule gives."""
    from fastcore.nbio import read_nb
    from nbdev.process import NBProcessor
    from nbdev.processors import _do_eval, _show_docs, _want_doc

    for p in sorted(NBS.glob("**/*.ipynb")):
        if any(s.startswith((".", "_")) for s in p.relative_to(NBS).parts):
            continue
        cells = NBProcessor(nb=read_nb(p), procs=[]).nb.cells
        if not (any(_want_doc(c) for c in cells) or _show_docs([t for c in cells for t in (c.parsed_() or [])])):
            continue
        for c in cells:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                run = _do_eval(c)
            if run and not (c.directives_.keys() & {"export", "exports", "exporti", "exec_doc"}):
                yield p.relative_to(NBS).as_posix(), c, [str(x.message) for x in w]


def test_cells_run_at_docs_time_hold_only_imports():
    """`nbdev-proc-nbs` executes every cell that holds an import (warning when it also holds other code): an example
    cell with an import anywhere would run at docs time without the cells before it. So each such cell holds imports
    only (an optional module inside `try: ... except ImportError`), and none imports an extra that dev does not
    install (the docs build on a dev install)."""
    mixed, extras = [], []
    for nb, c, warned in _docs_time_cells():
        if warned or not all(_imports_only(s) for s in ast.parse(c.source).body):
            mixed.append(f"{nb} cell {c.idx_}: {c.source[:80]!r}")
        guarded = {id(n) for s in ast.parse(c.source).body if isinstance(s, ast.Try) for n in ast.walk(s)}
        mods = {
            a.name.split(".")[0]
            for n in ast.walk(ast.parse(c.source))
            if id(n) not in guarded
            for a in (n.names if isinstance(n, ast.Import) else [])
        }
        mods |= {
            n.module.split(".")[0]
            for n in ast.walk(ast.parse(c.source))
            if isinstance(n, ast.ImportFrom) and n.module and id(n) not in guarded
        }
        if mods & _EXTRAS_NOT_IN_DEV:
            extras.append(f"{nb} cell {c.idx_}: {sorted(mods & _EXTRAS_NOT_IN_DEV)}")
    assert not mixed, mixed
    assert not extras, extras


@pytest.mark.slow
def test_nbdev_proc_nbs_passes_and_leaves_git_clean(tmp_path):
    """`nbdev-proc-nbs` over all notebooks (as `nbdev-docs` runs it before Quarto). A stub `quarto` on PATH keeps
    nbdev from trying to install Quarto (sudo + download); processing the notebooks does not call it."""
    exe = shutil.which("nbdev-proc-nbs") or str(Path(sys.executable).with_name("nbdev-proc-nbs"))
    if not Path(exe).exists():
        pytest.skip("nbdev is not installed")
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "quarto").write_text("#!/bin/sh\nexit 0\n")
    (stub / "quarto").chmod(0o755)
    tracked = {n: (NBS / n).read_bytes() for n in ("nbdev.yml", "sidebar.yml", "_quarto.yml")}
    modidx = (ROOT / "clir_llm" / "_modidx.py").read_bytes()
    env = dict(os.environ, PATH=f"{stub}{os.pathsep}{os.environ.get('PATH', '')}")
    # nbdev skips notebooks older than their copy in its cache _proc/ (a second run would check nothing): emptied first.
    # Not --force: it also makes nbdev-sidebar rewrite sidebar.yml despite custom_sidebar.
    shutil.rmtree(ROOT / "_proc", ignore_errors=True)
    r = subprocess.run([exe, "--n-workers", "1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # no warnings (nbdev's "cells containing imports and other code" among them)
    assert not r.stderr.strip(), r.stderr[-3000:]
    for n, before in tracked.items():
        assert (NBS / n).read_bytes() == before, f"nbdev-proc-nbs rewrote nbs/{n}"
    assert (ROOT / "clir_llm" / "_modidx.py").read_bytes() == modidx, "nbdev-proc-nbs rewrote clir_llm/_modidx.py"


# --- relative links and images resolve from the file that holds them (issue 36 item 6): the guides' links were written
# relative to the repository root, so JupyterLab, a Git host and nbdev's output showed broken images and dead links.

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_TARGETS = [
    re.compile(r"!?\[[^\]]*\]\(\s*<([^>]+)>"),  # [text](<path with spaces>)
    re.compile(r"!?\[[^\]]*\]\(\s*([^)\s<][^)\s]*)"),  # [text](path "title"), ![alt](path)
    re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?([^>\s]+)", re.M),  # [ref]: path
    re.compile(r"<(?:img|a|source)\b[^>]*?\b(?:src|href)\s*=\s*[\"']([^\"']+)", re.I),
]


def link_targets(markdown: str) -> list[str]:
    "The link and image targets of a markdown (or HTML) text, code blocks and code spans left out."
    text = _CODE.sub("", _FENCE.sub("", markdown))
    return [m.group(1) for rx in _TARGETS for m in rx.finditer(text)]


def broken_links(text: str, holder: Path) -> list[str]:
    "The relative targets in `text` that name no file or folder from `holder`'s folder (URLs, mailto: and #anchors skipped)."
    from urllib.parse import unquote

    out = []
    for t in link_targets(text):
        # http(s):, mailto:, data:, attachment:
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", t) or t.startswith(("#", "//")):
            continue
        path = unquote(t.split("#", 1)[0].split("?", 1)[0])
        if path and not (holder.parent / path).exists():
            out.append(t)
    return out


def _texts(nb: Path):
    "(where, text) of a notebook's markdown cells and of its outputs' markdown and HTML."
    for i, c in enumerate(json.loads(nb.read_text(encoding="utf-8"))["cells"]):
        src = lambda v: v if isinstance(v, str) else "".join(v)
        if c["cell_type"] == "markdown":
            yield f"cell {i}", src(c["source"])
        for o in c.get("outputs", []):
            for mime in ("text/markdown", "text/html"):
                if mime in o.get("data", {}):
                    yield f"cell {i} output {mime}", src(o["data"][mime])


DOC_FILES = sorted(
    p for p in NBS.glob("**/*.ipynb") if not any(s.startswith((".", "_")) for s in p.relative_to(NBS).parts)
)


def test_link_check_can_fail(tmp_path):
    for d in ("figures", "guides"):
        (tmp_path / d).mkdir()
    (tmp_path / "figures" / "a b.png").write_bytes(b"png")
    holder = tmp_path / "guides" / "g.md"
    text = (
        "![fig](../figures/a%20b.png) [ok](<../figures/a b.png>) [anchor](../figures/#top) [web](https://x.org/a) "
        '[root-relative](figures/a%20b.png) ![gone](../figures/none.png "t") `[code](nope.md)`\n'
        '```\n[fenced](nope.md)\n```\n<img src="../nope.svg"> [m](mailto:a@b.c) [h](#here)\n[ref]: ../missing.ipynb\n'
    )
    assert sorted(broken_links(text, holder)) == sorted(
        ["figures/a%20b.png", "../figures/none.png", "../nope.svg", "../missing.ipynb"]
    )


@pytest.mark.parametrize("path", [ROOT / "README.md", *DOC_FILES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve_from_the_file_that_holds_them(path):
    texts = [("file", path.read_text(encoding="utf-8"))] if path.suffix == ".md" else list(_texts(path))
    broken = [(where, t) for where, text in texts for t in broken_links(text, path)]
    assert not broken, f"{path.relative_to(ROOT)}: {broken}"
