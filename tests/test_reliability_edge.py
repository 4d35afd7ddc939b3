"""Input at the edge and clean exits (issue 14, findings 4-8, 10, 11): byte-order marks and CRLF, zero cutoffs and
measures ir-measures cannot compute, folders given as files, closed pipes, corrupt and read-only caches, SQLite under
load, damaged BM25 indexes and their leftovers, and a JVM that leaves signals to Python and crash files out of the
working directory. Plus property-based tests (hypothesis) of the TREC run and qrels readers and writers."""
from __future__ import annotations
import json, os, signal, sqlite3, subprocess, sys, textwrap, time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import _reliability as R
from clir_llm.core import ClirError, FormatError, Qrels, Run

FIX_QRELS = "t1 0 de-1 1\nt1 0 de-2 0\nt2 0 de-3 1\n"
FIX_RUN = "t1 Q0 de-2 1 3.0 x\nt1 Q0 de-1 2 2.0 x\nt2 Q0 de-3 1 1.5 x\nt2 Q0 de-1 2 1.0 x\n"


def _files(tmp_path, qrels=FIX_QRELS, run=FIX_RUN, bom=False, crlf=False):
    def enc(text):
        if crlf: text = text.replace("\n", "\r\n")
        return (b"\xef\xbb\xbf" if bom else b"") + text.encode()
    q, r = tmp_path / f"qrels{bom}{crlf}.txt", tmp_path / f"run{bom}{crlf}.trec"
    q.write_bytes(enc(qrels)); r.write_bytes(enc(run))
    return q, r


def _fail(kind, *args, env=None):
    "The CLI fails with exit 1 and one line on stderr, no traceback. Returns that line."
    return R.expect_one_line_error(kind, R.run_cli(*args, env=env, timeout=300))


# ---------- finding 4: byte-order mark and CRLF

def test_bom_and_crlf_read_like_plain_files(tmp_path):
    plain_q, plain_r = _files(tmp_path)
    for bom, crlf in [(True, False), (False, True), (True, True)]:
        q, r = _files(tmp_path, bom=bom, crlf=crlf)
        assert Qrels.read(q) == Qrels.read(plain_q) and Run.read(r) == Run.read(plain_r), (bom, crlf)
        assert "\ufeff" not in "".join(Run.read(r)) + "".join(Qrels.read(q))
    R.STATS["bad_input"].add("BOM/CRLF run and qrels")


def test_bom_files_score_the_same_via_the_cli(tmp_path):
    pq, pr = _files(tmp_path)
    plain = R.run_cli("evaluate", "--qrels", pq, "--run", pr, "--measures", "MAP")
    q, r = _files(tmp_path, bom=True, crlf=True)
    bom = R.run_cli("evaluate", "--qrels", q, "--run", r, "--measures", "MAP")
    assert plain.returncode == bom.returncode == 0 and plain.stdout == bom.stdout and float(plain.stdout.split()[1]) > 0, (plain, bom)


# ---------- finding 6: zero cutoffs and measures ir-measures cannot compute

@pytest.mark.parametrize("measure, what", [
    ("nDCG@0", "measure 'nDCG@0': its cutoff must be an integer >= 1"),
    ("P@0", "measure 'P@0': its cutoff must be an integer >= 1"),
    ("Judged@0", "measure 'Judged@0': its cutoff must be an integer >= 1"),
    ("alpha_nDCG@10", "measure 'alpha_nDCG@10' cannot be computed by ir-measures here"),  # ERR@20 is computed now (numbered topics for gdeval)
    ("RBP(p=0.8)", "measure 'RBP(p=0.8)' cannot be computed by ir-measures here"),
])
def test_bad_measures_are_one_line_errors(tmp_path, measure, what):
    from clir_llm.evaluate import parse_measures
    with pytest.raises(ClirError, match=__import__("re").escape(what)): parse_measures(measure)
    q, r = _files(tmp_path)
    err = _fail("bad measure", "evaluate", "--qrels", q, "--run", r, "--measures", f"MAP {measure}")
    assert what in err, err


# ---------- finding 8: folders, huge grades, closed pipes

def test_folder_as_run_or_qrels(tmp_path):
    q, r = _files(tmp_path)
    assert f"{tmp_path}: is a folder, not a file" in _fail("folder as --run", "evaluate", "--qrels", q, "--run", tmp_path)
    assert f"{tmp_path}: is a folder, not a file" in _fail("folder as --qrels", "evaluate", "--qrels", tmp_path, "--run", r)


@pytest.mark.parametrize("grade", ["9223372036854775808", "99999999999999999999999", "4294967296", "-2147483649"])
def test_grade_out_of_range(tmp_path, grade):
    q, r = _files(tmp_path, qrels=FIX_QRELS + f"t2 0 de-4 {grade}\n")
    err = _fail("qrels grade beyond int range", "evaluate", "--qrels", q, "--run", r)
    assert f"{q}:4: grade '{grade}' is out of range" in err, err


def test_closed_pipe_ends_quietly(tmp_path):
    "`clir-llm evaluate --per-query | head`: the reader closes the pipe early; no BrokenPipeError traceback."
    q, r = _files(tmp_path)
    p = subprocess.Popen([R.CLI, "evaluate", "--qrels", str(q), "--run", str(r), "--per-query"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()            # before the process writes anything: its first write fails with EPIPE
    err = p.stderr.read().decode(); p.wait(timeout=300)
    assert p.returncode == 141 and err == "", (p.returncode, err[-2000:])


# ---------- finding 11: no judged query, long lines cut

def test_no_judged_query_warns(tmp_path):
    q, r = _files(tmp_path, run="zz Q0 de-1 1 1.0 x\n")
    p = R.run_cli("evaluate", "--qrels", q, "--run", r, "--measures", "MAP")
    assert p.returncode == 0 and p.stdout.split() == ["MAP", "0.0000"], p
    assert p.stderr.strip().count("\n") == 0 and "warning: no query of the run (1 query, e.g. 'zz') is judged" in p.stderr, p.stderr


def test_long_bad_line_is_cut(tmp_path):
    "A CR-only file is read line by line; a very long malformed line is shown cut, not in full."
    q, r = _files(tmp_path, run=FIX_RUN.replace("\n", "\r") + "t3 " * 100_000 + "\r")
    err = _fail("very long malformed line", "evaluate", "--qrels", q, "--run", r)
    assert f"{r}:5: expected 6 columns" in err and len(err) < 400 and "(299,999 characters)" in err, err[:1000]


# ---------- property-based: TREC run and qrels readers and writers

TOKEN = st.text(st.characters(categories=["L", "N", "P", "S"]), min_size=1, max_size=12)
SCORE = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
PROPS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
EXAMPLES = {"n": 0}


@PROPS
@given(st.dictionaries(TOKEN, st.dictionaries(TOKEN, SCORE, min_size=1, max_size=6), min_size=1, max_size=5), TOKEN,
       st.booleans())
def test_run_round_trip(tmp_path, data, tag, bom):
    EXAMPLES["n"] += 1; R.STATS["hypothesis_examples"] += 1
    p = tmp_path / "r.trec"
    Run(data, name=tag).write(p)
    if bom: p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes().replace(b"\n", b"\r\n"))
    back = Run.read(p)
    assert back == {q: {d: round(s, 6) for d, s in docs.items()} for q, docs in data.items()} and back.name == tag


@PROPS
@given(st.dictionaries(TOKEN, st.dictionaries(TOKEN, st.integers(-2**31, 2**31 - 1), min_size=1, max_size=6), min_size=1, max_size=5))
def test_qrels_round_trip(tmp_path, data):
    EXAMPLES["n"] += 1; R.STATS["hypothesis_examples"] += 1
    p = tmp_path / "q.txt"
    Qrels(data).write(p)
    assert Qrels.read(p) == data


LINE = st.lists(st.one_of(TOKEN, st.sampled_from(["Q0", "0", "1", "-1", "1.5", "nan", "inf", "1e999", "99999999999999999999"])),
                max_size=8).map(" ".join)


@PROPS
@given(st.one_of(st.binary(max_size=300), st.lists(LINE, max_size=6).map(lambda ls: "\n".join(ls).encode()),
                 st.lists(st.text(max_size=40), max_size=6).map(lambda ls: "\r\n".join(ls).encode("utf-8", "surrogatepass"))))
def test_malformed_input_is_a_format_error(tmp_path, data):
    "Anything at all: either a valid run/qrels, or a FormatError (never another exception)."
    EXAMPLES["n"] += 1; R.STATS["hypothesis_examples"] += 1
    p = tmp_path / "any.txt"
    p.write_bytes(data)
    for reader in (Run.read, Qrels.read):
        try: reader(p)
        except FormatError: pass


def test_property_examples_were_run():
    R.STATS["bad_input"].add(f"hypothesis: {EXAMPLES['n']} generated runs/qrels")
    assert EXAMPLES["n"] >= 300 or EXAMPLES["n"] == 0   # 0 when run alone (-k)


# ---------- findings 8 and 11: the cache

def test_corrupt_cache_row_and_file(tmp_path):
    from clir_llm.cache import Cache, CacheError
    c = Cache(tmp_path / "c"); ns = c.namespace("llm", model="m"); ns.put("prompt", {"answer": "[1] > [2]"})
    with sqlite3.connect(tmp_path / "c" / "llm.sqlite") as con: con.execute("UPDATE entries SET value = ?", (b"\x00\xff garbage",))
    with pytest.raises(CacheError) as e: Cache(tmp_path / "c").namespace("llm", model="m").get("prompt")
    assert f"cache {tmp_path / 'c' / 'llm.sqlite'} is corrupt" in str(e.value) and "delete it or move it away" in str(e.value)
    (tmp_path / "d").mkdir(); (tmp_path / "d" / "llm.sqlite").write_bytes(os.urandom(8192))
    for mode in ("readwrite", "readonly", "replay"):
        with pytest.raises(CacheError) as e: Cache(tmp_path / "d", mode=mode).namespace("llm", model="m").get("prompt")
        assert "is corrupt" in str(e.value) and "delete it or move it away" in str(e.value) and "writable" not in str(e.value), (mode, str(e.value))
    R.STATS["bad_input"].update({"corrupt cache row", "corrupt cache file"})


READ = r"""
import sys
from clir_llm.cache import Cache
for mode in ("readonly", "replay"):
    ns = Cache(sys.argv[1], mode=mode).namespace("translate", model="m")
    assert ns.get_or_compute(["a", "b"], lambda b: 1 / 0) == ["A", "B"], mode
    assert Cache(sys.argv[1], mode=mode).namespace("absent").get("x") is None
print("read", sys.argv[1])
"""


def test_readonly_and_replay_open_a_cache_on_read_only_media(tmp_path):
    "A cache copied to read-only media (a read-only bind mount; its SQLite file in WAL mode, no -shm beside it)."
    from clir_llm.cache import Cache
    src = tmp_path / "cache"
    ns = Cache(src).namespace("translate", model="m"); ns.put_many([("a", "A"), ("b", "B")])
    con = Cache(src)._db("translate"); con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs a private mount namespace (root) for a read-only mount")
    ro = tmp_path / "ro"; ro.mkdir()
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && exec "$3" -c "$4" "$2"', "sh",
                        str(src), str(ro), sys.executable, READ], capture_output=True, text=True, timeout=120)
    R.STATS["bad_input"].add("read-only media cache (readonly/replay)")
    assert p.returncode == 0 and f"read {ro}" in p.stdout, p.stderr[-2000:]


FULL = r"""
import resource, signal, sys
#LIMIT signal.signal(signal.SIGXFSZ, signal.SIG_IGN); resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
from clir_llm.cache import Cache, CacheError
try: Cache(sys.argv[1]).namespace("llm", model="m").put_many([(f"p{i}", "x" * 2000) for i in range(400)])
except CacheError as e: print(e); sys.exit(3)
"""


def test_full_disk_says_so(tmp_path):
    "A full disk (a 128 KiB tmpfs where a private mount namespace is allowed, else a file-size limit) is named as such."
    if subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True).returncode == 0:
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               'mount -t tmpfs -o size=128k tmpfs "$1" && exec "$2" -c "$3" "$1"', "sh", str(tmp_path), sys.executable, FULL]
    else: cmd = [sys.executable, "-c", FULL.replace("#LIMIT ", ""), str(tmp_path)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    R.STATS["bad_input"].add("cache on a full disk")
    assert p.returncode == 3 and "cannot write cache" in p.stdout and "is the disk full? free some space" in p.stdout, (p.stdout, p.stderr[-2000:])


HAMMER = r"""
import sys, time
from clir_llm.cache import Cache
root, me = sys.argv[1], sys.argv[2]
for i in range(150):
    c = Cache(root)                          # a new connection each round: opening races the other process too
    ns = c.namespace("llm", model="m")
    ns.put_many([(f"{me}-{i}-{j}", {"v": j}) for j in range(5)])
    assert ns.get(f"{me}-{i}-4") == {"v": 4}
    ns.get_many([f"other-{i}-{j}" for j in range(5)])
    for con in c._local.conns.values(): con.close()
print("ok", me)
"""


@pytest.mark.parametrize("attempt", range(5))
def test_two_processes_share_one_cache(tmp_path, attempt):
    "Two processes opening, writing and reading one SQLite cache as fast as they can: never 'database is locked'."
    procs = [subprocess.Popen([sys.executable, "-c", HAMMER, str(tmp_path), f"p{k}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for k in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.startswith("ok"), err[-2000:]
    assert not R.sqlite_integrity(tmp_path)


# ---------- findings 5 and 10: damaged BM25 indexes, work folders of killed builds

def test_damaged_index_is_rebuilt_with_a_warning(tmp_path, caplog):
    "The warning goes through logging (the command line prints it; a library user decides)."
    from clir_llm import bm25 as B
    from clir_llm.cache import Cache
    from clir_llm.collections import load_collection
    coll = load_collection("fixture", "en-de")
    before = B.BM25(cache=Cache(tmp_path), progress=False).retrieve(coll)
    idx = B.index_dir(coll, Cache(tmp_path))
    caplog.clear()
    target = next(iter(idx.glob("*.nvd")), None) or max((f for f in idx.iterdir() if f.name != "meta.json"), key=lambda f: f.stat().st_size)
    data = bytearray(target.read_bytes()); n = min(600, len(data) // 2)
    data[:n] = os.urandom(n); target.write_bytes(bytes(data))
    killed = idx.parent / f".{idx.name}.{2**22 + 12345}.tmpabc"; (killed / "input").mkdir(parents=True)   # a killed build's work folder
    legacy = idx.parent / f".{idx.name}.oldtmp"; legacy.mkdir()                                          # one of an older version
    alive = idx.parent / f".otherindex.{os.getpid()}.tmpxyz"; alive.mkdir()                               # a live build of another index
    after = B.BM25(cache=Cache(tmp_path), progress=False).retrieve(coll)
    err = caplog.text
    warnings = [r.getMessage() for r in caplog.records if r.name == "clir_llm.bm25" and r.levelname == "WARNING"]
    assert after == before and len(warnings) == 1 and f"BM25 index {idx} is damaged ({target.name}" in warnings[0], err
    assert not killed.exists() and not legacy.exists() and alive.exists()
    assert json.loads((idx / "meta.json").read_text())["files"] and B._damage(idx) is None
    caplog.clear()
    assert B.BM25(cache=Cache(tmp_path), progress=False).retrieve(coll) == before and "warning" not in caplog.text


# ---------- finding 7: the JVM leaves signals to Python and crash files out of the working directory

JVM = r"""
import os, signal, sys, threading, time
# SIGINT as a terminal would give it, whatever this process inherited (a blocked or ignored SIGINT from the test
# runner's process, left by a native library loaded in it, is not what is tested here): the JVM loaded below must leave it to Python
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT]); signal.signal(signal.SIGINT, signal.default_int_handler)
from clir_llm.collections import load_collection
from clir_llm.bm25 import BM25
import jnius_config
run = BM25(progress=False).retrieve(load_collection("fixture", "en-de"))
print("options", jnius_config.get_options())
try:
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT); time.sleep(20)   # to Python's thread: os.kill may wake a JVM thread
    print("SIGINT lost")
except KeyboardInterrupt:
    print("KeyboardInterrupt reached Python")
print("run", sum(map(len, run.values())))
"""


def test_jvm_leaves_sigint_to_python_and_no_crash_file_in_cwd(tmp_path):
    cwd = tmp_path / "cwd"; cwd.mkdir()
    cache = tmp_path / "cache"
    p = subprocess.run([sys.executable, "-c", JVM], cwd=cwd, capture_output=True, text=True, timeout=400,
                       env=R.env_for(cache))
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr[-3000:])
    assert "KeyboardInterrupt reached Python" in p.stdout and "run " in p.stdout, p.stdout
    assert "-Xrs" in p.stdout and f"-XX:ErrorFile={cache / 'jvm' / 'hs_err_pid%p.log'}" in p.stdout, p.stdout
    assert not list(cwd.glob("hs_err_pid*.log")) and not list(cache.glob("jvm/hs_err_pid*.log"))
