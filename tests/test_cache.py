"""clir_llm.cache under stress: corrupt rows and files, read-only media, a full disk, several processes on one SQLite
file, an unwritable cache folder (issue 14)."""

from __future__ import annotations
import os, sqlite3, subprocess, sys
from pathlib import Path

import pytest

import _reliability as R


def test_corrupt_cache_row_and_file(tmp_path):
    from clir_llm.cache import Cache, CacheError

    c = Cache(tmp_path / "c")
    ns = c.namespace("llm", model="m")
    ns.put("prompt", {"answer": "[1] > [2]"})
    with sqlite3.connect(tmp_path / "c" / "llm.sqlite") as con:
        con.execute("UPDATE entries SET value = ?", (b"\x00\xff garbage",))
    with pytest.raises(CacheError) as e:
        Cache(tmp_path / "c").namespace("llm", model="m").get("prompt")
    assert f"cache {tmp_path / 'c' / 'llm.sqlite'} is corrupt" in str(e.value) and "delete it or move it away" in str(
        e.value
    )
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "llm.sqlite").write_bytes(os.urandom(8192))
    for mode in ("readwrite", "readonly", "replay"):
        with pytest.raises(CacheError) as e:
            Cache(tmp_path / "d", mode=mode).namespace("llm", model="m").get("prompt")
        assert (
            "is corrupt" in str(e.value)
            and "delete it or move it away" in str(e.value)
            and "writable" not in str(e.value)
        ), (mode, str(e.value))
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
    ns = Cache(src).namespace("translate", model="m")
    ns.put_many([("a", "A"), ("b", "B")])
    con = Cache(src)._db("translate")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs a private mount namespace (root) for a read-only mount")
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
            'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && exec "$3" -c "$4" "$2"',
            "sh",
            str(src),
            str(ro),
            sys.executable,
            READ,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
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
        cmd = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount -t tmpfs -o size=128k tmpfs "$1" && exec "$2" -c "$3" "$1"',
            "sh",
            str(tmp_path),
            sys.executable,
            FULL,
        ]
    else:
        cmd = [sys.executable, "-c", FULL.replace("#LIMIT ", ""), str(tmp_path)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    R.STATS["bad_input"].add("cache on a full disk")
    assert p.returncode == 3 and "cannot write cache" in p.stdout and "is the disk full? free some space" in p.stdout, (
        p.stdout,
        p.stderr[-2000:],
    )


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
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", HAMMER, str(tmp_path), f"p{k}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.startswith("ok"), err[-2000:]
    assert not R.sqlite_integrity(tmp_path)


FILL = r"""
import sys, numpy as np
from clir_llm.cache import Cache, CacheError
c = Cache(sys.argv[1]); ns = c.namespace("embed", model="reliability")
try:
    ns.get_or_compute([f"text {i}" for i in range(400)], lambda b: [np.full(512, float(len(t))) for t in b], batch_size=8, progress=False)
except CacheError as e:
    print("CacheError:", e); sys.exit(3)
"""


def test_cache_full_fails_clearly_and_keeps_what_was_committed(tmp_path):
    """A cache whose disk fills up during a stage: a CacheError naming the SQLite file; the batches committed before
    stay readable (integrity_check ok) and a later run computes only the missing ones.
    'Full' is a 256 KiB tmpfs in a private mount namespace where that is allowed (root), else a file-size limit
    (RLIMIT_FSIZE: writes past it fail with EFBIG, as on a full disk); chmod cannot stop root from writing."""
    cache = tmp_path / "cache"
    cache.mkdir()
    if R.unshare_ok():
        how = "tmpfs 256k"
        cmd = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f'mount -t tmpfs -o size=256k tmpfs "$1" && "$2" -c "$3" "$1"; r=$?; cp -a "$1"/. "$4"/ 2>/dev/null; exit $r',
            "sh",
            str(cache),
            sys.executable,
            FILL,
            str(tmp_path / "after"),
        ]
        (tmp_path / "after").mkdir()
    else:
        how = "RLIMIT_FSIZE"
        pre = "import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))\n"
        cmd = [sys.executable, "-c", pre + FILL, str(cache)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    R.STATS["bad_input"].add(f"full cache ({how})")
    assert p.returncode == 3, (p.returncode, p.stdout, p.stderr[-2000:])
    assert "CacheError: cannot write cache" in p.stdout and "embed.sqlite" in p.stdout, p.stdout
    kept = tmp_path / "after" if how.startswith("tmpfs") else cache
    assert not R.sqlite_integrity(kept)
    from clir_llm.cache import Cache
    import numpy as np

    ns = Cache(kept).namespace("embed", model="reliability")
    texts = [f"text {i}" for i in range(400)]
    have = ns.get_many(texts)
    assert 0 < len(have) < 400 and all(float(v[0]) == len(texts[i]) for i, v in have.items())
    asked = []
    ns.get_or_compute(
        texts, lambda b: asked.extend(b) or [np.full(512, float(len(t))) for t in b], batch_size=64, progress=False
    )
    assert len(asked) == 400 - len(have)


def test_read_only_cache_fails_clearly(tmp_path):
    """`clir-llm rerank` against a cache folder that cannot be written: exit 1 naming the cache file and the remedy.
    Read-only is a read-only tmpfs in a private mount namespace where allowed, else a path under /proc (not creatable)."""
    run = R.good_run(tmp_path)
    with __import__("clir_llm.testing", fromlist=["FakeOpenAIServer"]).FakeOpenAIServer(responder=R.fake_answer) as srv:
        env = R.env_for(tmp_path / "unused", srv.url)
        args = [
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
            "openai:fake-ranker",
            "--out",
            tmp_path / "out.trec",
        ]
        if R.unshare_ok():
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
                    'mount -t tmpfs -o ro,size=64k tmpfs "$1" && shift && exec "$@"',
                    "sh",
                    str(ro),
                    R.CLI,
                    *map(str, args),
                    "--cache",
                    str(ro),
                ],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
            )
            where, kind = ro, "read-only cache (ro tmpfs)"
        else:
            where = Path("/proc/self/clir-llm-cache")
            p = subprocess.run(
                [R.CLI, *map(str, args), "--cache", str(where)], capture_output=True, text=True, env=env, timeout=300
            )
            kind = "unwritable cache (/proc)"
        R.STATS["bad_input"].add(kind)
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
        assert f"clir-llm rerank: error: cannot open cache {where}/llm.sqlite" in p.stderr, p.stderr
        assert "set CLIR_LLM_CACHE to a writable folder" in p.stderr
        assert not srv.requests, "no model call before the cache is known to work"
    assert not (tmp_path / "out.trec").exists()


def test_lone_surrogate_in_a_value_is_stored_and_read_back(tmp_path):
    "An LLM answer holding a lone surrogate ('cat \\ud800', issue 39 item 5) was a UnicodeEncodeError traceback in the cache."
    from clir_llm.cache import Cache

    rec = {"text": "cat \ud800 [1] > [2]", "tokens_in": 3}
    ns = Cache(tmp_path / "c").namespace("llm", model="m")
    try:
        ns.put("prompt", rec)
        ok = True
    except UnicodeEncodeError:
        ok = False
    R.hostile("servers", "an answer holding a lone surrogate (cache)", ok)
    assert ok
    assert Cache(tmp_path / "c").namespace("llm", model="m").get("prompt") == rec
