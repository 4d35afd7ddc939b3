"""clir_llm.demo: the demo builder on tiny real .deb packages built here with dpkg-deb: rules for queries, aliases, determinism."""

import gzip, json, shutil, subprocess, sys
from pathlib import Path
import pytest
from clir_llm.collections import load_folder_collection, load_collection
from clir_llm.demo import build_demo, compare_folders

pytestmark = pytest.mark.skipif(
    not (shutil.which("dpkg-deb") and shutil.which("groff")), reason="needs dpkg-deb and groff"
)

PAGE = '.TH {T} 1 "2023" "t" "t"\n.SH {H}\n{name} \\- {desc}\n.SH {S}\n{body}\n'
EN = {
    "ls": "list directory contents",
    "cp": "copy files",
    "mv": "move files",
    "rm": "remove files",
    "cat": "concatenate files",
}
DE = {
    "ls": "Verzeichnisinhalte auflisten",
    "cp": "Dateien kopieren",
    "mv": "Dateien verschieben",
    "rm": "copy files",  # untranslated would be "remove files"; make it identical to another English query instead
    "cat": "concatenate files",  # untranslated: dropped from en-de
    "tac": "Dateien verketten",
}  # only in German: a distractor document


def make_deb(root: Path, pkg: str, pages: dict[str, bytes], out: Path):
    d = root / pkg
    (d / "DEBIAN").mkdir(parents=True)
    (d / "DEBIAN/control").write_text(
        f"Package: {pkg}\nVersion: 1.0-1\nArchitecture: all\nMaintainer: t <t@t>\nDescription: test\n"
    )
    for rel, data in pages.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if data.startswith(b"->"):
            p.symlink_to(data[2:].decode())
        else:
            p.write_bytes(gzip.compress(data, mtime=0))
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-b", str(d), str(out / f"{pkg}_1.0-1_all.deb")],
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def debs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("debs")
    out = tmp / "debs"
    out.mkdir()
    en = {
        f"usr/share/man/man1/{n}.1.gz": PAGE.format(
            T=n.upper(), H="NAME", S="DESCRIPTION", name=n, desc=d, body=f"The {n} command."
        ).encode()
        for n, d in EN.items()
    }
    de = {
        f"usr/share/man/de/man1/{n}.1.gz": PAGE.format(
            T=n.upper(), H="BEZEICHNUNG", S="BESCHREIBUNG", name=n, desc=d, body=f"Der Befehl {n}."
        ).encode()
        for n, d in DE.items()
    }
    de["usr/share/man/de/man1/dir.1.gz"] = b".so man1/ls.1\n"  # alias stub: skipped
    de["usr/share/man/de/man1/vdir.1.gz"] = b"->ls.1.gz"  # symlink alias: skipped
    make_deb(tmp / "src", "coreutils", en, out)
    make_deb(tmp / "src", "manpages-de", de, out)
    return out


def test_build_rules_and_determinism(debs, tmp_path):
    pk = ["coreutils", "manpages-de"]
    m = build_demo(tmp_path / "a", packages=pk, deb_dir=debs, min_pages=1, progress=False)
    build_demo(tmp_path / "b", packages=pk, deb_dir=debs, min_pages=1, progress=False)
    assert compare_folders(tmp_path / "a", tmp_path / "b") == []  # byte-identical rebuild
    assert (
        m["pairs"] == ["en-de"]
        and m["pages"]["de"] == 6
        and [p["version"] for p in m["packages"]] == ["1.0-1", "1.0-1"]
    )
    s = m["pair_stats"]["en-de"]
    assert (s["pages_in_both"], s["untranslated_description"], s["docs"]) == (5, 1, 6)
    c = load_folder_collection(tmp_path / "a", "en-de")
    assert set(c.queries) == {"cp.1", "ls.1", "mv.1", "rm.1"}  # cat.1 untranslated: no query
    assert c.queries["ls.1"].text == "list directory contents"
    assert c.get_doc("ls.1").text.splitlines()[0] == "ls - Verzeichnisinhalte auflisten"
    assert "Der Befehl ls." in c.get_doc("ls.1").text and "BEZEICHNUNG" not in c.get_doc("ls.1").text
    assert {d.docid for d in c.iter_docs()} == {f"{n}.1" for n in DE}  # aliases dir/vdir skipped
    assert c.qrels["rm.1"] == {"rm.1": 1}
    with gzip.open(tmp_path / "a" / "docs.de.jsonl.gz") as f:
        assert f.read(1) == b"{"
    assert (tmp_path / "a" / "LICENSE").read_text().count("GPL-3+") >= 1


def test_missing_package_in_deb_dir(debs, tmp_path):
    from clir_llm.core import ClirError

    with pytest.raises(ClirError, match="no .deb for manpages-fi"):
        build_demo(tmp_path / "x", packages=["coreutils", "manpages-fi"], deb_dir=debs, progress=False)


def test_shipped_demo_pairs_and_evaluate_cli(tmp_path):
    c = load_collection("demo", "en-de")
    assert c.num_docs > 500 and len(c.queries) > 500 and all(c.qrels.relevant(q) for q in c.queries)
    # perfect for 100 queries, nothing for the rest
    run = {q: sorted(c.qrels.relevant(q)) for q in list(c.queries)[:100]}
    from clir_llm.core import Run

    Run.from_ranked(run, name="oracle").write(tmp_path / "r.trec")
    cli = str(Path(sys.executable).parent / "clir-llm")
    p = subprocess.run(
        [cli, "evaluate", "--collection", "demo", "--pair", "en-de", "--run", tmp_path / "r.trec", "--measures", "MAP"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert abs(float(p.stdout.split()[-1]) - 100 / len(c.queries)) < 1e-3, p.stdout
