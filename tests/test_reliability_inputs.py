"""Bad input across the pipeline: every case ends in a clear error (exit 1, `clir-llm <cmd>: error: ...`) naming the
file, the line and the bad value where there is one, before any heavy work starts."""
from __future__ import annotations
import json, shutil, subprocess, sys
from pathlib import Path

import pytest, yaml

import _reliability as R
from clir_llm.core import ClirError, FormatError

FIX = R.ROOT / "clir_llm" / "data" / "fixture"


def _err(kind: str, *args, env=None):
    "Run the real CLI; it must fail with exit 1 and a one-line error (no traceback). Returns stderr."
    p = R.run_cli(*args, env=env, timeout=300)
    R.STATS["bad_input"].add(kind); R.STATS["hostile_tried"] += 1
    if p.returncode != 1 or "Traceback" in p.stderr: R.STATS["hostile_mishandled"] += 1
    assert p.returncode == 1, (p.returncode, p.stdout[-500:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    return p.stderr


def _good_run(tmp_path) -> Path:
    p = tmp_path / "good.trec"
    p.write_text("t1 Q0 de-1 1 3.0 x\nt1 Q0 de-2 2 2.0 x\nt2 Q0 de-2 1 1.5 x\nt2 Q0 de-3 2 1.0 x\n")
    return p


@pytest.mark.parametrize("line, what", [
    ("t1 Q0 de-3 3 1.0", "expected 6 columns 'qid Q0 docid rank score tag', got 5: 't1 Q0 de-3 3 1.0'"),
    ("t1 Q0 de-3 three 1.0 x", "rank must be an integer, got 'three'"),
    ("t1 Q0 de-3 3 high x", "score must be a number, got 'high'"),
    ("t1 Q0 de-3 3 nan x", "score must be finite, got 'nan'"),
    ("t1 Q0 de-1 3 0.5 x", "document 'de-1' appears twice for query 't1' (first on line 1)"),
])
def test_malformed_run_via_evaluate_and_rerank(tmp_path, line, what):
    run = _good_run(tmp_path)
    run.write_text(run.read_text() + line + "\n")     # line 5
    for cmd in (["evaluate", "--collection", "fixture", "--pair", "en-de", "--run", run],
                ["rerank", "--collection", "fixture", "--pair", "en-de", "--run", run, "--method", "listwise",
                 "--llm", "openai:never-called", "--out", tmp_path / "out.trec"]):
        err = _err("malformed TREC run", *cmd)
        assert f"{run}:5: {what}" in err, err
    assert not (tmp_path / "out.trec").exists()


@pytest.mark.parametrize("text, where, what", [
    ("t1 0 de-1 1\nt1 0 de-2\n", 2, "expected 4 columns 'qid iter docid grade', got 3"),
    ("t1 0 de-1 1\nt1 0 de-2 relevant\n", 2, "grade must be an integer, got 'relevant'"),
    ("t1 0 de-1 1\nt2 0 de-2 1\nt1 0 de-1 0\n", 3, "document 'de-1' judged twice for query 't1' (first on line 1)"),
    (b"t1 0 de-1 1\nt1 0 d\xe9-2 1\n", 2, "not UTF-8 (byte b'\\xe9' at column 7)"),
])
def test_malformed_qrels_via_evaluate(tmp_path, text, where, what):
    q = tmp_path / "qrels.txt"
    q.write_bytes(text if isinstance(text, bytes) else text.encode())
    err = _err("malformed qrels", "evaluate", "--qrels", q, "--run", _good_run(tmp_path))
    assert f"{q}:{where}: {what}" in err, err


def test_unknown_query_and_missing_document_in_a_run_to_rerank(tmp_path):
    run = _good_run(tmp_path)
    args = ["--collection", "fixture", "--pair", "en-de", "--method", "pairwise-bubblesort", "--llm", "openai:never-called",
            "--out", tmp_path / "out.trec"]
    run.write_text(run.read_text() + "t99 Q0 de-1 1 1.0 x\n")
    err = _err("unknown query id", "rerank", "--run", run, *args)
    assert f"{run}:5: query 't99' is not a query of collection 'fixture' en-de" in err, err
    run = _good_run(tmp_path)
    run.write_text(run.read_text() + "t2 Q0 de-404 3 0.5 x\n")
    err = _err("document missing from the collection", "rerank", "--run", run, *args)
    assert f"{run}:5: document 'de-404' (query 't2') is not in collection 'fixture' en-de" in err, err
    assert not (tmp_path / "out.trec").exists()


def test_empty_query_is_rejected_at_load(tmp_path):
    "An empty query text is a format error of the topic file (as CIRAL's TSV topics), not a silent empty run."
    from clir_llm.collections import load_collection
    shutil.copytree(FIX, tmp_path / "fx")
    qf = tmp_path / "fx" / "queries.en.jsonl"
    lines = qf.read_text().splitlines()
    rec = json.loads(lines[1]); rec["text"] = "   "; lines[1] = json.dumps(rec)
    qf.write_text("\n".join(lines) + "\n")
    R.STATS["bad_input"].add("empty query")
    with pytest.raises(FormatError, match=rf"{qf}:2: query '{rec['qid']}' has an empty text"):
        load_collection("fixture", "en-de", root=tmp_path / "fx")


def test_unknown_language_codes_and_unsupported_pairs(tmp_path):
    err = _err("unknown language code", "evaluate", "--collection", "fixture", "--pair", "en-xx", "--run", _good_run(tmp_path))
    assert "unknown language code 'xx'; known codes: en, de" in err
    err = _err("unsupported pair", "evaluate", "--collection", "fixture", "--pair", "de-en", "--run", _good_run(tmp_path))
    assert "collection 'fixture' has no pair 'de-en'; its pairs are: en-de" in err
    from clir_llm.translate import get_translator
    R.STATS["bad_input"].add("translator without the pair")
    with pytest.raises(ClirError, match=r"no FreeDict dictionary for en-ha \(English→Hausa\)"):
        get_translator("dict:freedict").translate(["water"], "en", "ha")


def test_non_utf8_clef_file(tmp_path):
    "A byte that is not UTF-8 in the (UTF-8) Izvestia collection: file, line and byte."
    from clir_llm.collections import load_collection
    src = R.ROOT / "tests" / "fixtures" / "clef2003"
    shutil.copytree(src, tmp_path / "clef")
    izv = tmp_path / "clef" / "DocumentData" / "DataCollections" / "Russian_data" / "xml" / "izv95_01.xml"
    lines = izv.read_bytes().split(b"\n")
    n = next(i for i, l in enumerate(lines) if "а".encode() in l or "о".encode() in l)
    lines[n] = lines[n] + b" \xff\xfe"
    izv.write_bytes(b"\n".join(lines))
    R.STATS["bad_input"].add("non-UTF-8 CLEF file")
    with pytest.raises(FormatError) as e:
        coll = load_collection("clef2003", "en-ru", root=tmp_path / "clef", check_counts=False)
        for _ in coll.iter_docs(): pass
    assert e.value.path == str(izv) and e.value.line == n + 1 and "0xff" in str(e.value), str(e.value)


def test_config_with_unknown_keys_or_wrong_types_fails_before_work(tmp_path):
    cfg = yaml.safe_load(R.reduced_config(tmp_path / "ok.yaml").read_text())
    cfg["rerankers"][1]["windw"] = 5                       # unknown key
    cfg["doc_length"]["tokens"] = [8, "long"]              # wrong type
    cfg["first_stage"]["depth"] = -3                       # out of range
    bad = tmp_path / "bad.yaml"; bad.write_text(yaml.safe_dump(cfg))
    err = _err("invalid configuration", "reproduce", bad, "--results", tmp_path / "results", "--figures", tmp_path / "figures")
    assert f"{bad}: rerankers.1: reranker 'pairwise-bubblesort' has no option 'windw'; its options: prompt, doc_title" in err
    assert f"{bad}: doc_length.tokens.1: Input should be a valid integer" in err and "'long'" in err
    assert f"{bad}: first_stage.depth: Input should be greater than 0 (got -3)" in err
    assert not (tmp_path / "results").exists() and not (tmp_path / "figures").exists()


# ---------- a cache that cannot be written

def _unshare_ok() -> bool:
    if not shutil.which("unshare"): return False
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True).returncode == 0


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
    cache = tmp_path / "cache"; cache.mkdir()
    if _unshare_ok():
        how = "tmpfs 256k"
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               f'mount -t tmpfs -o size=256k tmpfs "$1" && "$2" -c "$3" "$1"; r=$?; cp -a "$1"/. "$4"/ 2>/dev/null; exit $r', "sh",
               str(cache), sys.executable, FILL, str(tmp_path / "after")]
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
    ns.get_or_compute(texts, lambda b: asked.extend(b) or [np.full(512, float(len(t))) for t in b], batch_size=64, progress=False)
    assert len(asked) == 400 - len(have)


def test_read_only_cache_fails_clearly(tmp_path):
    """`clir-llm rerank` against a cache folder that cannot be written: exit 1 naming the cache file and the remedy.
    Read-only is a read-only tmpfs in a private mount namespace where allowed, else a path under /proc (not creatable)."""
    run = _good_run(tmp_path)
    with __import__("clir_llm.testing", fromlist=["FakeOpenAIServer"]).FakeOpenAIServer(responder=R.fake_answer) as srv:
        env = R.env_for(tmp_path / "unused", srv.url)
        args = ["rerank", "--collection", "fixture", "--pair", "en-de", "--run", run, "--method", "listwise",
                "--llm", "openai:fake-ranker", "--out", tmp_path / "out.trec"]
        if _unshare_ok():
            ro = tmp_path / "ro"; ro.mkdir()
            p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                'mount -t tmpfs -o ro,size=64k tmpfs "$1" && shift && exec "$@"', "sh", str(ro),
                                R.CLI, *map(str, args), "--cache", str(ro)], capture_output=True, text=True, env=env, timeout=300)
            where, kind = ro, "read-only cache (ro tmpfs)"
        else:
            where = Path("/proc/self/clir-llm-cache")
            p = subprocess.run([R.CLI, *map(str, args), "--cache", str(where)], capture_output=True, text=True, env=env, timeout=300)
            kind = "unwritable cache (/proc)"
        R.STATS["bad_input"].add(kind)
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
        assert f"clir-llm rerank: error: cannot open cache {where}/llm.sqlite" in p.stderr, p.stderr
        assert "set CLIR_LLM_CACHE to a writable folder" in p.stderr
        assert not srv.requests, "no model call before the cache is known to work"
    assert not (tmp_path / "out.trec").exists()


def test_backend_option_errors_name_the_option_without_pydantic_prefixes():
    "A bad backend option is one line naming the option and the value: no 'Value error,' prefix, no dumped input dict."
    from clir_llm.llm import BackendSpec
    for bad, says in (({"spec": "openai:x", "base_url": "ftp://host/v1"}, "llm: base_url: not an http:// or https:// URL"),
                      ({"spec": "openai:x", "base_url": "http://a:8000/v1,localhost:8001"}, "'localhost:8001' is not an http:// or https:// URL"),
                      ("hf:qwen[tensor_parallel_size=2]", "llm: hf: does not take option tensor_parallel_size (it takes: dtype,")):
        R.STATS["bad_input"].add("bad backend option"); R.STATS["hostile_tried"] += 1
        with pytest.raises(ClirError) as e: BackendSpec.parse(bad)
        assert says in str(e.value) and "Value error" not in str(e.value) and "'kind'" not in str(e.value), str(e.value)


def test_yaml_errors_name_file_and_line_not_pyyaml_stream(tmp_path):
    "A config that is not YAML: `file:line: not valid YAML: <problem> (column c)`, not PyYAML's '<unicode string>' block."
    bad = tmp_path / "bad.yaml"; bad.write_text("name: x\npairs: [en-de\n")
    err = _err("config not YAML", "check", str(bad))
    assert f"{bad}:3: not valid YAML: while parsing a flow sequence; expected ',' or ']'" in err and "unicode string" not in err, err


def test_language_name_given_for_a_code_suggests_the_code(tmp_path):
    err = _err("language name for a code", "evaluate", "--collection", "fixture", "--pair", "en-German", "--run", _good_run(tmp_path))
    assert "unknown language code 'German' (did you mean 'de'?); known codes: en, de" in err, err
