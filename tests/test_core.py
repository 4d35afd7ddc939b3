"""clir_llm.core: TREC runs and qrels read and written strictly (byte-order marks, CRLF, huge grades, long lines, malformed
input, property-based round trips), the one YAML reader, output files that never replace what they should not,
identifiers a TREC line can hold, and the one redaction of secrets (issues 14 and 26)."""

from __future__ import annotations
import json, math, os, re, stat, subprocess, sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

import _reliability as R
from clir_llm.core import ClirError, FormatError, Qrels, Run, canonical_score


def test_bom_and_crlf_read_like_plain_files(tmp_path):
    plain_q, plain_r = R.trec_files(tmp_path)
    for bom, crlf in [(True, False), (False, True), (True, True)]:
        q, r = R.trec_files(tmp_path, bom=bom, crlf=crlf)
        assert Qrels.read(q) == Qrels.read(plain_q) and Run.read(r) == Run.read(plain_r), (bom, crlf)
        assert "\ufeff" not in "".join(Run.read(r)) + "".join(Qrels.read(q))
    R.STATS["bad_input"].add("BOM/CRLF run and qrels")


def test_folder_as_run_or_qrels(tmp_path):
    q, r = R.trec_files(tmp_path)
    assert f"{tmp_path}: is a folder, not a file" in R.fail_cli(
        "folder as --run", "evaluate", "--qrels", q, "--run", tmp_path
    )
    assert f"{tmp_path}: is a folder, not a file" in R.fail_cli(
        "folder as --qrels", "evaluate", "--qrels", tmp_path, "--run", r
    )


@pytest.mark.parametrize("grade", ["9223372036854775808", "99999999999999999999999", "4294967296", "-2147483649"])
def test_grade_out_of_range(tmp_path, grade):
    q, r = R.trec_files(tmp_path, qrels=R.FIX_QRELS + f"t2 0 de-4 {grade}\n")
    err = R.fail_cli("qrels grade beyond int range", "evaluate", "--qrels", q, "--run", r)
    assert f"{q}:4: grade '{grade}' is out of range" in err, err


def test_long_bad_line_is_cut(tmp_path):
    "A CR-only file is read line by line; a very long malformed line is shown cut, not in full."
    q, r = R.trec_files(tmp_path, run=R.FIX_RUN.replace("\n", "\r") + "t3 " * 100_000 + "\r")
    err = R.fail_cli("very long malformed line", "evaluate", "--qrels", q, "--run", r)
    assert f"{r}:5: expected 6 columns" in err and len(err) < 400 and "(299,999 characters)" in err, err[:1000]


TOKEN = st.text(st.characters(categories=["L", "N", "P", "S"]), min_size=1, max_size=12)


SCORE = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


PROPS = settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


EXAMPLES = {"n": 0}


@PROPS
@given(
    st.dictionaries(TOKEN, st.dictionaries(TOKEN, SCORE, min_size=1, max_size=6), min_size=1, max_size=5),
    TOKEN,
    st.booleans(),
)
def test_run_round_trip(tmp_path, data, tag, bom):
    EXAMPLES["n"] += 1
    R.STATS["hypothesis_examples"] += 1
    p = tmp_path / "r.trec"
    Run(data, name=tag).write(p)
    if bom:
        p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes().replace(b"\n", b"\r\n"))
    back = Run.read(p)
    assert back == {q: {d: round(s, 6) for d, s in docs.items()} for q, docs in data.items()} and back.name == tag


@PROPS
@given(
    st.dictionaries(
        TOKEN, st.dictionaries(TOKEN, st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=6), min_size=1, max_size=5
    )
)
def test_qrels_round_trip(tmp_path, data):
    EXAMPLES["n"] += 1
    R.STATS["hypothesis_examples"] += 1
    p = tmp_path / "q.txt"
    Qrels(data).write(p)
    assert Qrels.read(p) == data


LINE = st.lists(
    st.one_of(TOKEN, st.sampled_from(["Q0", "0", "1", "-1", "1.5", "nan", "inf", "1e999", "99999999999999999999"])),
    max_size=8,
).map(" ".join)


@PROPS
@given(
    st.one_of(
        st.binary(max_size=300),
        st.lists(LINE, max_size=6).map(lambda ls: "\n".join(ls).encode()),
        st.lists(st.text(max_size=40), max_size=6).map(lambda ls: "\r\n".join(ls).encode("utf-8", "surrogatepass")),
    )
)
def test_malformed_input_is_a_format_error(tmp_path, data):
    "Anything at all: either a valid run/qrels, or a FormatError (never another exception)."
    EXAMPLES["n"] += 1
    R.STATS["hypothesis_examples"] += 1
    p = tmp_path / "any.txt"
    p.write_bytes(data)
    for reader in (Run.read, Qrels.read):
        try:
            reader(p)
        except FormatError:
            pass


def test_property_examples_were_run():
    R.STATS["bad_input"].add(f"hypothesis: {EXAMPLES['n']} generated runs/qrels")
    assert EXAMPLES["n"] >= 300 or EXAMPLES["n"] == 0  # 0 when run alone (-k)


@pytest.mark.parametrize(
    "line, what",
    [
        ("t1 Q0 de-3 3 1.0", "expected 6 columns 'qid Q0 docid rank score tag', got 5: 't1 Q0 de-3 3 1.0'"),
        ("t1 Q0 de-3 three 1.0 x", "rank must be an integer, got 'three'"),
        ("t1 Q0 de-3 3 high x", "score must be a number, got 'high'"),
        ("t1 Q0 de-3 3 nan x", "score must be finite, got 'nan'"),
        ("t1 Q0 de-1 3 0.5 x", "document 'de-1' appears twice for query 't1' (first on line 1)"),
    ],
)
def test_malformed_run_via_evaluate_and_rerank(tmp_path, line, what):
    run = R.good_run(tmp_path)
    run.write_text(run.read_text() + line + "\n")  # line 5
    for cmd in (
        ["evaluate", "--collection", "fixture", "--pair", "en-de", "--run", run],
        [
            "rerank",
            "--collection",
            "fixture",
            "--pair",
            "en-de",
            "--run",
            run,
            "--method",
            "listwise",
            "--llm",
            "openai:never-called",
            "--out",
            tmp_path / "out.trec",
        ],
    ):
        err = R.err_cli("malformed TREC run", *cmd)
        assert f"{run}:5: {what}" in err, err
    assert not (tmp_path / "out.trec").exists()


@pytest.mark.parametrize(
    "text, where, what",
    [
        ("t1 0 de-1 1\nt1 0 de-2\n", 2, "expected 4 columns 'qid iter docid grade', got 3"),
        ("t1 0 de-1 1\nt1 0 de-2 relevant\n", 2, "grade must be an integer, got 'relevant'"),
        ("t1 0 de-1 1\nt2 0 de-2 1\nt1 0 de-1 0\n", 3, "document 'de-1' judged twice for query 't1' (first on line 1)"),
        (b"t1 0 de-1 1\nt1 0 d\xe9-2 1\n", 2, "not UTF-8 (byte b'\\xe9' at column 7)"),
    ],
)
def test_malformed_qrels_via_evaluate(tmp_path, text, where, what):
    q = tmp_path / "qrels.txt"
    q.write_bytes(text if isinstance(text, bytes) else text.encode())
    err = R.err_cli("malformed qrels", "evaluate", "--qrels", q, "--run", R.good_run(tmp_path))
    assert f"{q}:{where}: {what}" in err, err


def test_yaml_errors_name_file_and_line_not_pyyaml_stream(tmp_path):
    "A config that is not YAML: `file:line: not valid YAML: <problem> (column c)`, not PyYAML's '<unicode string>' block."
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\npairs: [en-de\n")
    err = R.err_cli("config not YAML", "check", str(bad))
    assert (
        f"{bad}:3: not valid YAML: while parsing a flow sequence; expected ',' or ']'" in err
        and "unicode string" not in err
    ), err


@settings(max_examples=200, deadline=None, database=None)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12))
def test_canonical_score_is_the_written_value(s):
    R.STATS["hypothesis_examples"] += 1
    assert canonical_score(s) == float(f"{s:.6f}") and canonical_score(canonical_score(s)) == canonical_score(s)


@settings(max_examples=100, deadline=None, database=None)
@given(st.dictionaries(st.sampled_from("abcdefgh"), st.floats(0.5, 0.500002), min_size=1, max_size=8))
def test_ranking_of_a_run_is_the_ranking_of_its_file(tmp_path_factory, docs):
    R.STATS["hypothesis_examples"] += 1
    p = tmp_path_factory.mktemp("r") / "r.trec"
    run = Run({"q": docs}, name="x")
    run.write(p)
    back = Run.read(p)
    assert run.docids("q") == back.docids("q") and run.canonical() == back


# ---------- issue 26 item 1: an output is written only as a regular file; nothing else at its path is ever replaced
def _stand_ins(d: Path) -> dict:
    "Things that are not regular files, made inside `d` (never a system path): a link to a file, a link to /dev/null, a FIFO, a folder, a device."
    (d / "precious.txt").write_text("keep")
    os.symlink(d / "precious.txt", d / "link.trec")
    # a link to /dev/null inside the tmp folder: refused as a link, never followed
    os.symlink(os.devnull, d / "devnull.trec")
    os.mkfifo(d / "fifo.trec")
    (d / "folder.trec").mkdir()
    out = {k: d / f"{k}.trec" for k in ("link", "devnull", "fifo", "folder")}
    try:  # a character device like /dev/null (1, 3), made here: root can, elsewhere skipped
        os.mknod(d / "chardev.trec", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        out["chardev"] = d / "chardev.trec"
    except (PermissionError, OSError):
        pass
    return out


def _intact(d: Path, kinds: dict):
    "Every stand-in is what it was."
    assert (d / "precious.txt").read_text() == "keep"
    assert os.path.islink(d / "link.trec") and os.readlink(d / "devnull.trec") == os.devnull
    assert (
        stat.S_ISFIFO(os.lstat(d / "fifo.trec").st_mode)
        and (d / "folder.trec").is_dir()
        and not any((d / "folder.trec").iterdir())
    )
    if "chardev" in kinds:
        assert stat.S_ISCHR(os.lstat(kinds["chardev"]).st_mode)


def test_outputs_are_regular_files_only(tmp_path):
    "check_outputs and atomic_write refuse a link (to a file or to /dev/null), a FIFO, a folder and a device, in one line; nothing changes."
    from clir_llm.core import atomic_write, check_outputs

    kinds = _stand_ins(tmp_path)
    for kind, p in kinds.items():
        for f in (lambda: check_outputs([p]), lambda: atomic_write(p, "x"), lambda: Run({"q": {"d": 1.0}}).write(p)):
            with pytest.raises(ClirError) as e:
                f()
            R.hostile(
                "outputs", f"{kind} as an output (core)", "an output is written only as a regular file" in str(e.value)
            )
            assert str(p) in str(e.value) and "\n" not in str(e.value), str(e.value)
    _intact(tmp_path, kinds)


def test_an_output_is_never_an_input(tmp_path):
    "An output that is an input of the same command, by path, by another spelling, through a link or a hard link, is refused."
    from clir_llm.core import check_outputs

    run = R.good_run(tmp_path)
    os.link(run, tmp_path / "hard.trec")
    os.symlink(run, tmp_path / "soft.trec")
    for out in (run, tmp_path / "." / "good.trec", tmp_path / "hard.trec"):
        with pytest.raises(ClirError, match="is also an input of this command"):
            check_outputs([out], [run])
        R.hostile("outputs", "--out equal to an input", True)
    with pytest.raises(ClirError, match="is a link"):
        check_outputs([tmp_path / "soft.trec"], [run])
    assert run.read_text() == R.GOOD_RUN
    # a folder made when written
    assert check_outputs([tmp_path / "new" / "out.trec"], [run]) == [tmp_path / "new" / "out.trec"]


def test_an_output_that_cannot_be_created_is_named_before_any_work(tmp_path):
    "A name too long for the file system (with the temporary name atomic_write uses), a parent that is a file: one line each."
    from clir_llm.core import check_outputs

    for out, says in (
        (tmp_path / ("r" * 250 + ".trec"), "file name too long"),
        (tmp_path / ("n" * 300), "cannot write there"),
        (tmp_path / "new" / ("r" * 250), "file name too long"),
    ):
        with pytest.raises(ClirError) as e:
            check_outputs([out])
        R.hostile("outputs", "an output name too long", says in str(e.value) and len(str(e.value)) < 400)
        assert says in str(e.value) and len(str(e.value)) < 400, str(e.value)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ClirError, match="Not a directory|is not a folder"):
        check_outputs([tmp_path / "file" / "out.trec"])
    assert not list(tmp_path.glob(".*.tmp")), "the probe leaves nothing behind"


def test_an_output_folder_that_is_read_only_is_named_before_any_work(tmp_path):
    "A read-only file system (a read-only tmpfs in a private mount namespace): one line naming the folder."
    if not R.unshare_ok():
        pytest.skip("needs a private mount namespace (root) for a read-only mount")
    code = (
        "import sys\nfrom clir_llm.core import ClirError, check_outputs, check_output_folder\n"
        "for f in (lambda: check_outputs([sys.argv[1] + '/out.trec']), lambda: check_output_folder(sys.argv[1] + '/sub')):\n"
        "    try: f(); print('accepted')\n    except ClirError as e: print(e)\n"
    )
    ro = tmp_path / "ro"
    ro.mkdir()
    p = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount -t tmpfs -o ro,size=64k tmpfs "$1" && exec "$2" -c "$3" "$1"',
            "sh",
            str(ro),
            sys.executable,
            code,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = p.stdout.strip().splitlines()
    R.hostile(
        "outputs",
        "an output in a read-only folder",
        p.returncode == 0 and len(lines) == 2 and "accepted" not in p.stdout,
    )
    assert len(lines) == 2 and all("Read-only file system" in l or "not writable" in l for l in lines), (
        p.stdout,
        p.stderr[-2000:],
    )


def test_output_folders(tmp_path):
    "check_output_folder: nothing yet or a folder (a link to one is followed unless the folder is replaced as a whole)."
    from clir_llm.core import check_output_folder

    (tmp_path / "a").mkdir()
    os.symlink(tmp_path / "a", tmp_path / "alink")
    (tmp_path / "f").write_text("x")
    os.mkfifo(tmp_path / "p")
    assert (
        check_output_folder(tmp_path / "a") == tmp_path / "a"
        and check_output_folder(tmp_path / "alink") == tmp_path / "alink"
    )
    assert check_output_folder(tmp_path / "new" / "sub") == tmp_path / "new" / "sub"
    for folder, kw, says in (
        (tmp_path / "alink", dict(replaced=True), "is a link"),
        (tmp_path / "f", {}, "not a folder"),
        (tmp_path / "p", {}, "named pipe"),
        (tmp_path / "a", dict(inputs=[tmp_path / "alink"]), "is also an input"),
    ):
        with pytest.raises(ClirError, match=says):
            check_output_folder(folder, **kw)
        R.hostile("outputs", "an output folder that is not one", True)


# ---------- issue 26 item 6: ids a TREC line can hold
BAD_IDS = [
    ("space", "d 1"),
    ("trailing space", "d1 "),
    ("empty", ""),
    ("newline", "d1\nt1 Q0 x 1 9.0 injected"),
    ("tab", "d\t1"),
    ("no-break space", "d\u00a01"),
]


@pytest.mark.parametrize("what, bad", BAD_IDS, ids=[b[0] for b in BAD_IDS])
def test_run_and_qrels_writers_refuse_ids_a_trec_line_cannot_hold(tmp_path, what, bad):
    "Run.write and Qrels.write never write a line an id breaks (a newline in an id would inject a whole TREC line)."
    from clir_llm.core import check_id

    for data in ({"q1": {bad: 1.0}}, {bad: {"d1": 1.0}}):
        with pytest.raises(ClirError) as e:
            Run(data, name="r").write(tmp_path / "r.trec")
        R.hostile("identifiers", f"id with {what} (Run.write)", "\n" not in str(e.value))
    with pytest.raises(ClirError):
        Qrels({"q1": {bad: 1}}).write(tmp_path / "q.txt")
    with pytest.raises(FormatError, match=r"ids\.txt:3: document id"):
        check_id(bad, "document id", "ids.txt", 3)
    assert not (tmp_path / "r.trec").exists() and not (tmp_path / "q.txt").exists()


# ---------- issue 26 item 5 and 11: the one YAML reader (configurations, regression files, prompt templates)
YAML_BAD = [
    ("duplicate key", "a: 1\nb: 2\na: 3\n", ":3: not valid YAML: key 'a' given twice (first on line 1)"),
    (
        "alias bomb",
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi")),
        "an alias bomb?",
    ),
    ("nesting 5000 deep", "x: " + "[" * 5000 + "]" * 5000 + "\n", "nesting deeper than 64 levels"),
    ("5000-digit integer", f"n: {'9' * 5000}\n", ":1: not valid YAML: an integer of 5,000 digits"),
    ("a 20,000-character value", f"s: {'x' * 20000}\n", "a value of 20,000 characters"),
]


@pytest.mark.parametrize("what, text, says", YAML_BAD, ids=[b[0] for b in YAML_BAD])
def test_yaml_is_read_strictly_and_within_bounds(tmp_path, what, text, says):
    "Each refused at once (no minutes, no hundreds of MB, no RecursionError) with file:line where there is one."
    import time
    from clir_llm.core import load_yaml

    p = tmp_path / "c.yaml"
    p.write_text(text)
    t0 = time.time()
    with pytest.raises(FormatError) as e:
        load_yaml(p)
    ok = says in str(e.value) and time.time() - t0 < 10 and "\n" not in str(e.value) and len(str(e.value)) < 400
    R.hostile("configs", f"YAML: {what}", ok)
    assert ok, str(e.value)[:500]


# ---------- issue 26 item 4: one redaction for every credential
def test_redact_knows_every_credential(monkeypatch):
    "Values of well-known, *_KEY/*_TOKEN-named and registered variables; URL user info and query keys; bearer tokens; sk- keys."
    from clir_llm.core import check_no_secret, redact, secret_env, SecretError

    monkeypatch.setenv("OPENAI_API_KEY", "canary-openai-0123456789")
    monkeypatch.setenv("MY_GATEWAY_TOKEN", "canary-gateway-0123456789")
    monkeypatch.setenv("RERANK_CREDS_VALUE", "canary-custom-0123456789")
    secret_env("RERANK_CREDS_VALUE")
    text = (
        "canary-openai-0123456789 canary-gateway-0123456789 canary-custom-0123456789 "
        "http://user:canary-url-pass@h:8000/v1 https://h/v1?api-key=canary-query-42&x=1 "
        "Authorization: Bearer canary-bearer-0123 sk-canaryABCDEFGHIJKLMNOP"
    )
    out = redact(text)
    for c in (
        "canary-openai",
        "canary-gateway",
        "canary-custom",
        "canary-url-pass",
        "canary-query",
        "canary-bearer",
        "sk-canary",
    ):
        assert c not in out, (c, out)
        R.hostile("secrets", f"redact: {c}", True)
    assert redact("https://example.org/v1 and user@example.org") == "https://example.org/v1 and user@example.org"
    with pytest.raises(SecretError):
        check_no_secret('{"note": "canary-custom-0123456789"}', "cache note")


# ---------- issue 39 item 2: redaction by shape: every credential held, in any form it takes in text
def test_redact_finds_a_held_key_in_every_form_and_any_query_value_of_a_server_url():
    "A held key literal, percent-encoded (any byte), JSON-escaped, in base64 at any alignment (std/URL-safe, padded or not), and its 8+ character prefixes."
    import base64 as b64, json as js, urllib.parse as up
    from clir_llm.core import _HELD, _HELD_PARAMS, check_no_secret, redact, secret_url, secret_value, SecretError

    key = "9c1d/e2f3+a4b5c6d7e8f9a0b1c2d3e4"  # with '/' and '+', which percent-encoding and base64 change
    secret_value(key)
    try:
        forms = {
            "literal": key,
            "quote": up.quote(key, safe=""),
            "every byte": "".join(f"%{b:02x}" for b in key.encode()),
            "json": js.dumps(key)[1:-1].replace("/", "\\/"),
            "base64": b64.b64encode(key.encode()).decode(),
            "urlsafe unpadded": b64.urlsafe_b64encode(key.encode()).decode().rstrip("="),
            "basic auth": b64.b64encode(f"me:{key}".encode()).decode(),
            "bearer+1": b64.b64encode(f"x{key}".encode()).decode(),
            "first 10": key[:10],
            "first 10 quoted": up.quote(key[:10], safe=""),
            "first 10 base64": b64.b64encode(key[:10].encode()).decode(),
        }
        for name, f in forms.items():
            out = redact(f"server said: <{f}> ok")
            ok = (
                out.startswith("server said: <")
                and out.endswith("> ok")
                and "***" in out
                and key[:8] not in out
                and f not in out
            )
            R.hostile("secrets", f"redact: a held key, {name}", ok)
            assert ok, (name, out)
            with pytest.raises(SecretError):
                check_no_secret(f"answer {f}")
        assert (
            redact("an ordinary sentence with 9c1d and e2f3 in it") == "an ordinary sentence with 9c1d and e2f3 in it"
        )
    finally:
        _HELD.discard(key)
    # a server URL's user info (a password with '/') and every query value, whatever the parameter's name
    q = {
        "subscription-key": "a1b2c3d4e5f6a7b8",
        "code": "c0dec0dec0dec0de",
        "zq": "shortkey",
        "api-version": "2024-06-01",
    }
    url = f"http://gw:pa/ss-w0rd-99@h:1/v1?{up.urlencode(q)}"
    secret_url(url)
    try:
        out = redact(
            f"POST {url} failed; echo {q['subscription-key'][:10]} {b64.b64encode(q['code'].encode()).decode()} pa/ss-w0rd-99"
        )
        assert not any(v in out for v in (*q.values(), "pa/ss-w0rd-99", "pa/ss")), out
        assert "http://***@h:1/v1" in out and "subscription-key=***" in out and "zq=***" in out, out
        # a URL the process does not hold: query values named like keys, or shaped like keys (16+ characters), whatever their name
        other = redact("GET https://x.org/v1?x-api-key=abc123&private_token=Z9y8X7w6V5u4T3s2R1&page=2&note=short")
        assert other == "GET https://x.org/v1?x-api-key=***&private_token=***&page=2&note=short", other
    finally:
        _HELD.difference_update([*q.values(), "pa/ss-w0rd-99", "gw:pa/ss-w0rd-99", "gw"])
        _HELD_PARAMS.difference_update(q)


# ---------- issue 39 items 5-6: TREC numbers as trec_eval reads them, ids without control characters, a full disk
@pytest.mark.parametrize(
    "line,says",
    [
        # Python read 1000, trec_eval's atof 1
        ("t1 Q0 de-1 1 1_000 x", "score '1_000' is not a number as trec_eval reads it"),
        # Arabic-Indic digits: Python read 12
        ("t1 Q0 de-1 1 \u0661\u0662 x", "is not a number as trec_eval reads it"),
        ("t1 Q0 de-1 1_0 1.5 x", "rank '1_0' is not a number as trec_eval reads it"),
        ("t1 Q0 d\x00e-1 1 1.5 x", "an id holds the control character '\\x00'"),
    ],
)
def test_run_numbers_and_ids_as_trec_eval_reads_them(tmp_path, line, says):
    p = tmp_path / "r.trec"
    p.write_text("t1 Q0 de-2 2 1.0 x\n" + line + "\n", encoding="utf-8")
    try:
        Run.read(p)
        err = None
    except FormatError as e:
        err = str(e)
    R.hostile("input files", f"a run line {line!r}", bool(err and says in err and f"{p}:2:" in err))
    assert err and says in err and err.startswith(f"{p}:2:"), err


@pytest.mark.parametrize("line", ["t1 0 de-1 1_0", "t1 0 de-1 \u0661", "t1 0 d\x01e-1 1"])
def test_qrels_numbers_and_ids_as_trec_eval_reads_them(tmp_path, line):
    p = tmp_path / "q.txt"
    p.write_text("t1 0 de-2 0\n" + line + "\n", encoding="utf-8")
    try:
        Qrels.read(p)
        err = None
    except FormatError as e:
        err = str(e)
    R.hostile("input files", f"a qrels line {line!r}", bool(err and f"{p}:2:" in err))
    assert err and err.startswith(f"{p}:2:"), err


def test_a_full_disk_is_one_line_and_leaves_no_partial_file(tmp_path, monkeypatch):
    "`--out` on a full disk (ENOSPC) was an OSError traceback: one line naming the file, no partial or temporary file."
    import errno

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "out" / "r.trec"
    try:
        Run({"t1": {"de-1": 1.0}}).write(out)
        err = None
    except ClirError as e:
        err = str(e)
    except OSError as e:
        err = f"traceback {e!r}"
    ok = (
        bool(err)
        and err.startswith(f"{out}: cannot write it: No space left on device")
        and "\n" not in err
        and not any(out.parent.iterdir())
    )
    R.hostile("outputs", "--out on a full disk (ENOSPC)", ok)
    assert ok, (err, list(out.parent.iterdir()))
    r = R.run_main(
        "retrieve",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--method",
        "bm25-og",
        "--cache",
        tmp_path / "cache",
        "--out",
        out,
    )
    # (the index's progress bar may come before it)
    last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    ok = (
        r.returncode == 1
        and "Traceback" not in r.stderr
        and last.startswith(f"clir-llm retrieve: error: {out}: cannot write it: No space")
    )
    R.hostile("outputs", "retrieve --out on a full disk (ENOSPC)", ok)
    assert ok, (r.returncode, r.stderr[-1500:])
    assert not any(out.parent.iterdir())


def test_redaction_hunts_keys_not_dates_or_shared_key_prefixes():
    """Review of issue 39 item 2: every query value of a held URL was hunted in free text with its 8-character prefixes,
    so with `?api-version=2024-06-01` any date '2024-06-..' in an answer was redacted and the cache refused it; and the
    prefix 'sk-proj-' shared by every such key was a secret. Now: query values named or shaped like keys are held
    (8+ character prefixes still caught), other values are hidden only where a URL is written, and a prefix counts
    from 8 characters after a key's public prefix. A URL's user name is no secret when a password follows it."""
    from clir_llm.core import _HELD, _HELD_PARAMS, check_no_secret, redact, secret_url, secret_value, SecretError

    url = "https://bob:pw-0123456789@res.example.org/openai?api-version=2024-06-01&subscription-key=k3y5ecret0000000"
    key = "sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2"
    secret_url(url)
    secret_value(key)
    try:
        assert redact("meeting on 2024-06-30 with bob") == "meeting on 2024-06-30 with bob"
        check_no_secret("Le rapport du 2024-06-12")  # stored: a date is no credential
        # still hidden in a URL
        assert "2024-06-01" not in redact(f"GET {url}") and "k3y5ecret" not in redact(f"GET {url}")
        assert redact("echo k3y5ecret0") == "echo ***"  # a held key's 10-character prefix
        assert redact("any sk-proj- key and sk-proj-A1b2C3") == "any sk-proj- key and sk-proj-A1b2C3"
        assert redact("leaked sk-proj-A1b2C3d4E5 here") == "leaked *** here"
        check_no_secret("keys look like sk-proj-...")
        with pytest.raises(SecretError):
            check_no_secret("sk-proj-A1b2C3d4E5f6")
        with pytest.raises(SecretError):
            check_no_secret("the password pw-0123456789")
    finally:
        _HELD.difference_update([key, "k3y5ecret0000000", "pw-0123456789", "bob:pw-0123456789"])
        _HELD_PARAMS.difference_update(["api-version", "subscription-key"])


def test_a_grade_with_an_exponent_is_refused_not_read_as_a_float(tmp_path):
    "Review of issue 39 item 6: Qrels.read read the grade '1e1' as 10 where trec_eval's atol reads 1: refused now, naming what trec_eval would read."
    from clir_llm.core import FormatError, Qrels

    (tmp_path / "q.txt").write_text("q1 0 d1 1e1\nq1 0 d2 2.0\n")
    with pytest.raises(FormatError, match=r"q.txt:1: grade '1e1' has an exponent: trec_eval reads it as 1"):
        Qrels.read(tmp_path / "q.txt")
    (tmp_path / "q.txt").write_text("q1 0 d2 2.0\n")
    assert Qrels.read(tmp_path / "q.txt") == {"q1": {"d2": 2}}  # atol reads 2 too


def test_redaction_finds_any_piece_of_a_key_json_unicode_escaped_and_hex_encoded():
    """Issue 39 item 2, the forms left: a piece from the middle of a held key (12 characters from anywhere in it), the
    key JSON-escaped as \\uXXXX, and the key hex-encoded (either case) were printed as they were; the prefix rule found
    only pieces that start the key. Each form of a canary key, alone and inside text, is redacted and refused by the
    cache's check; an 11-character piece, other hex and other escapes are left alone."""
    import base64 as b64, json as js
    from clir_llm.core import _HELD, check_no_secret, redact, secret_value, SecretError

    key = "sk-proj-7Qm2Zx9Lp4Wv8Nc3Rt6Yb1Hd5Kf0Gs"  # a canary: the public 'sk-proj-', then 30 secret characters
    mid = key[17:31]  # 14 characters from its middle
    secret_value(key)
    try:
        forms = {
            "a middle piece": mid,
            "12 characters at its end": key[-12:],
            "a middle piece percent-encoded": "".join(f"%{b:02x}" for b in mid.encode()),
            "\\u-escaped": "".join(f"\\u{ord(c):04x}" for c in key),
            "a middle piece \\u-escaped": "".join(f"\\u{ord(c):04X}" for c in mid),
            "json ensure_ascii of the key in a string": js.dumps({"k": "\u00e9" + key}).replace(
                key[9:], "".join(f"\\u{ord(c):04x}" for c in key[9:])
            ),
            "hex": key.encode().hex(),
            "HEX": key.encode().hex().upper(),
            "a middle piece in hex": mid.encode().hex(),
            "a middle piece in base64": b64.b64encode(mid.encode()).decode(),
            "base64 of text holding a middle piece": b64.b64encode(f"said {mid} ok".encode()).decode(),
        }
        for name, f in forms.items():
            out = redact(f"server said: <{f}> ok")
            ok = (
                out.startswith("server said: <")
                and out.endswith("> ok")
                and "***" in out
                and f not in out
                and mid[:12] not in out
            )
            try:
                check_no_secret(f"answer {f}")
                refused = False
            except SecretError:
                refused = True
            R.hostile("secrets", f"redact: a held key, {name}", ok and refused)
            assert ok and refused, (name, out, refused)
        # 11 characters, other hex, escapes
        for plain in (key[17:28], "deadbeef" * 4, "\\u0041\\u0042 and %41%42", "sk-proj-7Qm2Zx9"):
            assert redact(f"x {plain} y") == f"x {plain} y", plain
            check_no_secret(plain)
    finally:
        _HELD.discard(key)
