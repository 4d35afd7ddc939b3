"""Issue 14, the remaining findings: one canonical run (1), cache keys that name the server (2), secrets in URLs (3),
a dry run that rejects what fails later (8/9), leftovers of killed runs (10), accounting of cache hits (11)."""
from __future__ import annotations
import copy, io, os, subprocess, sys, time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings, strategies as st

import _reliability as R
from clir_llm.core import Retriever, Run, Usage, canonical_score
from clir_llm.retrieve import FIRST_STAGES, FirstStage, rrf
from clir_llm.testing import FakeOpenAIServer

DEMO = R.ROOT / "configs" / "demo.yaml"


# ---------- finding 1: what a pipeline returns, ranks and fuses is exactly what its run file holds
class _NearTies(Retriever):
    "Every document of every query within 1e-6 of 0.5: the raw order (docid ascending) is the opposite of the file's."
    def __init__(self, seed: int): self.seed, self.name, self.usage = seed, f"nearties:{seed}", Usage()
    def retrieve(self, collection, k=100):
        ids = sorted(d.docid for d in collection.iter_docs())
        step = 1e-7 * self.seed
        return Run({q: {d: 0.5 + 4e-7 - i * step for i, d in enumerate(ids)} for q in collection.queries}, name=self.name)


if "nearties:" not in FIRST_STAGES.names():
    @FIRST_STAGES.register("nearties:", example="nearties:<n>")
    class NearTiesMethod(FirstStage):
        "Test first stage: scores that differ below the precision of a run file."
        seed: int
        @classmethod
        def parse(cls, name, arg): return cls(seed=int(arg))
        def __str__(self): return f"nearties:{self.seed}"
        def label(self): return str(self)
        def describe(self, translator=None, dense_title=None): return "near ties"
        def build(self, translator=None, cache=None, dense_title=None, dt_source="auto", executor=None, **kw): return _NearTies(self.seed)


def _near_config(tmp_path) -> Path:
    cfg = dict(name="near", collection="fixture", pairs=["en-de"], measure="MAP", extra_measures=["nDCG@20"],
               first_stage=dict(methods=["nearties:1", "nearties:3", "rrf:nearties:1+nearties:3"], depth=4),
               experiments=["1_first_stage"])
    p = tmp_path / "near.yaml"; p.write_text(yaml.safe_dump(cfg)); return p


def test_cold_run_is_its_file_and_fusion_is_of_the_files(tmp_path):
    from clir_llm.cache import Cache
    from clir_llm.pipeline import Pipeline
    cfg = _near_config(tmp_path)
    cold = Pipeline(cfg, out_dir=tmp_path / "res", cache=Cache(tmp_path / "cache"), progress=False)
    runs = {m: cold.first_stage("en-de", m) for m in ("nearties:1", "nearties:3", "rrf:nearties:1+nearties:3")}
    for m, run in runs.items():
        back = Run.read(cold.first_stage_path("en-de", m))
        assert run == back and all(run.docids(q) == back.docids(q) for q in run), m   # cold == file round trip
    a, b = (Run.read(cold.first_stage_path("en-de", m)) for m in ("nearties:1", "nearties:3"))
    fused = rrf([a, b], depth=4, name="f")
    raw = [_NearTies(1).retrieve(cold.collection("en-de")), _NearTies(3).retrieve(cold.collection("en-de"))]
    fused_raw = rrf(raw, depth=4, name="f")
    for q in fused:   # fused from the files == fused now from the unrounded runs == the fused run's file
        assert fused.docids(q) == fused_raw.docids(q) == runs["rrf:nearties:1+nearties:3"].docids(q), q
    warm = Pipeline(cfg, out_dir=tmp_path / "res", cache=Cache(tmp_path / "cache"), progress=False)
    for m, run in runs.items():
        w = warm.first_stage("en-de", m)
        assert w == run and (warm.scores("en-de", w) == cold.scores("en-de", run)).all(), m
    raw_order = sorted(raw[0]["t1"], key=lambda d: -raw[0]["t1"][d])
    assert raw_order != a.docids("t1")   # the test has teeth: the order of the unrounded scores is not the file's


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
    run = Run({"q": docs}, name="x"); run.write(p)
    back = Run.read(p)
    assert run.docids("q") == back.docids("q") and run.canonical() == back


# ---------- finding 2: the LLM cache key names the server (openai:), and hf: keys stay as recorded
def test_cache_key_names_the_server(tmp_path, monkeypatch):
    from clir_llm.cache import Cache
    from clir_llm.llm import get_backend
    cache = Cache(tmp_path / "cache")
    with FakeOpenAIServer(responder=lambda m, b: "first") as s1, FakeOpenAIServer(responder=lambda m, b: "second") as s2:
        monkeypatch.setenv("OPENAI_BASE_URL", s1.url)
        assert get_backend("openai:same-model", cache=cache).generate(["q"], progress=False) == ["first"]
        monkeypatch.setenv("OPENAI_BASE_URL", s2.url)
        b2 = get_backend("openai:same-model", cache=cache)
        assert b2.generate(["q"], progress=False) == ["second"] and len(s2.requests) == 1 and b2.usage.cache_hits == 0
        monkeypatch.setenv("OPENAI_BASE_URL", s1.url + "/")   # the same server written differently: a hit
        b3 = get_backend("openai:same-model", cache=cache)
        assert b3.generate(["q"], progress=False) == ["first"] and len(s1.requests) == 1


def test_hf_and_default_api_keys_are_unchanged():
    "Recorded demo calls must still hit: hf: identities and the default API's carry no endpoint."
    from types import SimpleNamespace
    from clir_llm.llm_hf import HFBackend
    from clir_llm.llm_openai import OpenAIBackend
    fp32 = SimpleNamespace(config=SimpleNamespace(is_encoder_decoder=False), dtype="torch.float32")   # a loaded model: fp32, no switch
    hf = HFBackend("m", revision="abc", hf_model=fp32, hf_tokenizer=SimpleNamespace(chat_template=None))
    assert hf.identity() == {"kind": "hf", "model": "m", "revision": "abc"}
    os.environ.pop("OPENAI_BASE_URL", None)
    assert OpenAIBackend("gpt-4.1").identity() == {"kind": "openai", "model": "gpt-4.1", "revision": None}


# ---------- finding 3: credentials in URLs never reach a message, a log or a file
KEY, URLKEY = "sk-envkey-" + "7" * 20, "sk-urlkey-" + "9" * 20


def _scan(*dirs) -> list[str]:
    leaks = []
    for d in dirs:
        for p in Path(d).rglob("*"):
            if p.is_file():
                R.STATS["secret_files_scanned"] += 1
                data = p.read_bytes()
                if KEY.encode() in data or URLKEY.encode() in data: leaks.append(str(p))
    R.STATS["secret_leaks"] += len(leaks)
    return leaks


def _run_file(tmp_path) -> Path:
    p = tmp_path / "in.trec"
    p.write_text("t1 Q0 de-1 1 3.0 x\nt1 Q0 de-2 2 2.0 x\nt2 Q0 de-2 1 1.5 x\nt2 Q0 de-3 2 1.0 x\n")
    return p


def test_key_in_url_and_env_never_leaks(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "out"
    out.mkdir()
    args = ["rerank", "--collection", "fixture", "--pair", "en-de", "--run", _run_file(tmp_path), "--method", "listwise",
            "--llm", "openai:fake-ranker", "--top-k", "2"]
    with FakeOpenAIServer(responder=R.fake_answer, faults=["500"] * 40) as srv:
        env = R.env_for(cache, srv.url.replace("http://", f"http://user:{URLKEY}@"), OPENAI_API_KEY=KEY)
        bad = R.run_cli(*args, "--out", out / "bad.trec", env=env, timeout=300)
        srv.faults.clear()
        good = R.run_cli(*args, "--out", out / "good.trec", env=env, timeout=300)
    assert bad.returncode == 1 and "call failed after" in bad.stderr and "***@127.0.0.1" in bad.stderr, bad.stderr[-2000:]
    assert good.returncode == 0, good.stderr[-2000:]
    for p in (bad, good):
        R.STATS["secret_files_scanned"] += 1
        if KEY in p.stdout + p.stderr or URLKEY in p.stdout + p.stderr: R.STATS["secret_leaks"] += 1
        assert KEY not in p.stdout + p.stderr and URLKEY not in p.stdout + p.stderr
    assert not _scan(out, cache)


def test_failed_notebook_is_redacted(tmp_path, monkeypatch):
    "The executed notebook a failed experiment leaves (`.<nb>.<pid>.running.ipynb`) holds no credential."
    import papermill as pm
    from clir_llm import reproduce as rp
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://user:{URLKEY}@127.0.0.1:9/v1"); monkeypatch.setenv("OPENAI_API_KEY", KEY)
    def fail(nb, out, **kw):
        Path(out).write_text('{"cells": [{"outputs": ["LLMError: call failed after 7 attempts at '
                             f'{os.environ["OPENAI_BASE_URL"]} with {KEY}"]}}]}}')
        raise pm.PapermillExecutionError(0, 3, "", "LLMError", f"call failed at {os.environ['OPENAI_BASE_URL']}", [])
    monkeypatch.setattr(pm, "execute_notebook", fail)
    cfg = _near_config(tmp_path)
    with pytest.raises(Exception) as e: rp.reproduce(cfg, results_root=tmp_path / "res", figures_dir=tmp_path / "fig", progress=False, log=lambda *a: None)
    assert URLKEY not in str(e.value) and ".running.ipynb" in str(e.value)
    assert list((tmp_path / "res").rglob("*.running.ipynb")) and not _scan(tmp_path / "res")


# ---------- findings 8/9: the dry run rejects, in one line naming the file and value, what would fail later
def _demo(**top):
    "The demo's configuration, to be written outside configs/: without its recorded responses and regression file (paths beside the config)."
    c = yaml.safe_load(DEMO.read_text())
    c.pop("regression"); c.pop("recorded")
    for k, v in top.items():
        if callable(v): v(c)
        else: c[k] = v
    return c


def _rr(i=0, **kw): return lambda c: c["rerankers"][i].update(kw)


BAD_CONFIGS = [
    ("unknown measure", dict(measure="nosuch@3"), "unknown measure 'nosuch@3'"),
    ("zero cutoff in extra_measures", dict(extra_measures=["P@0"]), "'P@0': its cutoff must be an integer >= 1"),
    ("unknown prompt", dict(x=_rr(prompt="nosuch")), "unknown prompt template 'nosuch'"),
    ("context 3", dict(x=_rr(context=3)), "context: Input should be greater than or equal to 64"),
    ("doc_length tokens -5, 0", dict(x=lambda c: c["doc_length"].update(tokens=[-5, 0])), "doc_length.tokens.0"),
    ("missing gguf file", dict(x=_rr(llm="gguf:/nonexistent/model.gguf")), "no such GGUF file '/nonexistent/model.gguf'"),
    ("root that does not exist", dict(root="../../nonexistent"), "root: no such folder '../../nonexistent'"),
    ("missing regression file", dict(regression="nonexistent/reg.yaml"), "nonexistent/reg.yaml: regression file not found"),
    ("regression file outside the config's folder", dict(regression="/nonexistent/reg.yaml"), "must be a file in the configuration's folder"),
    ("recorded responses outside the config's folder", dict(recorded="../../elsewhere.jsonl"), "must be a file in the configuration's folder"),
    ("top_k: true", dict(x=_rr(top_k=True)), "rerankers.0.top_k: Input should be a valid integer (got True)"),
    ("window: '5'", dict(x=_rr(window="5")), "window: Input should be a valid integer"),
    ("sort k 0", dict(x=_rr(2, k=0)), "k: Input should be greater than 0"),
    ("name with ../", dict(name="../evil"), "name must be a plain file name"),
    ("absolute name", dict(name="/tmp/evil"), "name must be a plain file name"),
]


def _dry_run(path) -> tuple[int, str]:
    from clir_llm.cli import main
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try: rc = main(["reproduce", str(path), "--dry-run"])
        except SystemExit as e: rc = e.code
    return rc, err.getvalue()


def _expect_one_line(kind, rc, err, what):
    R.STATS["hostile_tried"] += 1; R.STATS["bad_input"].add(kind)
    ok = rc == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1 and what in err
    if not ok: R.STATS["hostile_mishandled"] += 1
    assert ok, (kind, rc, err[-2000:])


@pytest.mark.parametrize("kind, change, what", BAD_CONFIGS, ids=[b[0] for b in BAD_CONFIGS])
def test_dry_run_rejects_in_one_line(tmp_path, kind, change, what):
    p = tmp_path / "c.yaml"; p.write_text(yaml.safe_dump(_demo(**change)))
    rc, err = _dry_run(p)
    _expect_one_line(f"config: {kind}", rc, err, what)
    if "regression" not in kind and "measure" not in what: assert str(p) in err or "c.yaml" in err


def test_dry_run_file_level_errors(tmp_path):
    good = yaml.safe_dump(_demo())
    (tmp_path / "dir.yaml").mkdir()
    (tmp_path / "latin1.yaml").write_bytes(good.replace("Demo", "D\xe9mo").encode("latin-1"))
    for name, what in (("dir.yaml", "not a folder"), ("latin1.yaml", "latin1.yaml: not UTF-8 text")):
        rc, err = _dry_run(tmp_path / name); _expect_one_line(f"config: {name}", rc, err, what)
    for name, text, what in (("badyaml", b"a: [\n", "regression file is not valid YAML"), ("empty", b"", "got nothing"),
                             ("list", b"- 1\n- 2\n", "got list")):
        (tmp_path / f"{name}.reg.yaml").write_bytes(text)
        p = tmp_path / f"{name}.yaml"; p.write_text(yaml.safe_dump(_demo(regression=f"{name}.reg.yaml")))
        rc, err = _dry_run(p); _expect_one_line(f"regression file: {name}", rc, err, what)
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbf" + good.replace("\n", "\r\n").encode())
    rc, err = _dry_run(tmp_path / "bom.yaml")
    R.STATS["hostile_tried"] += 1; R.STATS["bad_input"].add("config with BOM and CRLF")
    if rc != 0: R.STATS["hostile_mishandled"] += 1
    assert rc == 0, err


def test_check_reads_damaged_tables_in_one_line(tmp_path):
    from clir_llm.regression import check
    cfg = tmp_path / "t.yaml"
    cfg.write_text(yaml.safe_dump(dict(name="t", collection="fixture", pairs=["en-de"], measure="MAP", experiments=["1_first_stage"],
                                       first_stage=dict(methods=["bm25-og"]), regression="reg.yaml")))
    (tmp_path / "reg.yaml").write_text(yaml.safe_dump(dict(cells=[dict(table="first_stage", row="BM25-OG", col="en-de", expected=0.5)])))
    tables = tmp_path / "results" / "t" / "tables"; tables.mkdir(parents=True)
    for kind, text, what in (("table cut mid-quote", 'row,en-de\nBM25-OG,"0.5', "first_stage.csv: not a readable table"),
                             ("table not UTF-8", b"row,en-de\nBM25-OG,\xff\xfe\n", "first_stage.csv: not a readable table")):
        (tables / "first_stage.csv").write_bytes(text if isinstance(text, bytes) else text.encode())
        p = R.run_cli("check", cfg, "--results", tmp_path / "results")
        _expect_one_line(kind, p.returncode, p.stderr, what)
    (tables / "first_stage.csv").write_text("row,en-de\nBM25-OG,n/a?\n")
    p = R.run_cli("check", cfg, "--results", tmp_path / "results")
    R.STATS["hostile_tried"] += 1; R.STATS["bad_input"].add("hand-edited table cell")
    assert p.returncode == 1 and "Traceback" not in p.stderr and "en-de: not one number" in p.stdout, (p.stdout, p.stderr)


# ---------- finding 10: leftovers of dead processes; `check` says where it looked
def test_stale_running_notebooks_removed_at_start(tmp_path, monkeypatch):
    import papermill as pm
    from clir_llm import reproduce as rp
    out = tmp_path / "res" / "near"; out.mkdir(parents=True)
    dead = subprocess.Popen(["true"]); dead.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        (out / f".1_first_stage.{dead.pid}.running.ipynb").write_text("{}")
        (out / f".1_first_stage.{live.pid}.running.ipynb").write_text("{}")
        monkeypatch.setattr(pm, "execute_notebook", lambda nb, o, **kw: Path(o).write_text("{}"))
        rp.reproduce(_near_config(tmp_path), results_root=tmp_path / "res", figures_dir=tmp_path / "fig", progress=False, log=lambda *a: None)
        left = sorted(p.name for p in out.glob(".*.running.ipynb"))
        assert left == [f".1_first_stage.{live.pid}.running.ipynb"], left
    finally:
        live.kill(); live.wait()


def test_check_from_another_folder_says_where_it_looked(tmp_path):
    p = R.run_cli("check", DEMO, cwd=tmp_path)
    assert p.returncode == 1 and "MISSING" in p.stdout
    assert f"no tables in {(tmp_path / 'results' / 'demo' / 'tables').resolve()}" in p.stdout, p.stdout[-500:]


# ---------- finding 11: a fully cached rerank spends nothing now; --sort-k 0 refused
def test_cached_rerank_reports_work_done_now(tmp_path):
    from clir_llm.cache import Cache
    from clir_llm.collections import load_collection
    from clir_llm.llm import get_backend
    from clir_llm.rerank import get_reranker
    coll = load_collection("fixture", "en-de")
    run = Run.read(_run_file(tmp_path))
    with FakeOpenAIServer(responder=R.slow_answer(0.3)) as srv:
        usages = []
        for _ in range(2):
            b = get_backend("openai:gpt-4.1", cache=Cache(tmp_path / "cache"), base_url=srv.url, concurrency=1)
            rr = get_reranker("listwise-rankzephyr", b, window=2, step=1, progress=False)
            rr.rerank(coll, run, k=2); usages.append(rr.usage)
    cold, warm = usages
    assert cold.calls > 0 and cold.cost_usd > 0 and cold.seconds >= 0.3 * cold.calls
    assert warm.calls == 0 and warm.cache_hits == cold.calls and warm.cost_usd == 0 and warm.tokens_in == 0
    assert warm.seconds < 0.3, warm.seconds                          # not the recorded 0.3 s per call
    assert abs(warm.counters["cached_usd"] - cold.cost_usd) < 1e-12   # what the hits would have cost, kept apart
    assert warm.counters["cached_seconds"] >= 0.3 * cold.calls and warm.counters["cached_tokens_in"] == cold.tokens_in


@pytest.mark.parametrize("k", ["0", "-3"])
def test_sort_k_must_be_positive(tmp_path, k):
    p = R.run_cli("rerank", "--collection", "fixture", "--pair", "en-de", "--run", _run_file(tmp_path), "--method", "pairwise-bubblesort",
                  "--llm", "openai:x", "--sort-k", k, "--out", tmp_path / "o.trec", env=R.env_for(tmp_path / "cache"))
    _expect_one_line(f"--sort-k {k}", p.returncode, p.stderr, "greater than 0")


# ---------- summary: JVM crash files of this session
def test_no_jvm_crash_files():
    n = R.jvm_crash_files()
    assert n == 0, f"{n} hs_err_pid*.log files appeared during this session"
