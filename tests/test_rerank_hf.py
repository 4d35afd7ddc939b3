"""Rerankers on the real `hf:` backend with tiny randomly initialised models (qwen2 chat, mt5 encoder-decoder),
and the `clir-llm rerank` command on the shipped fixture collection."""
import json, os, subprocess, sys
from pathlib import Path
import pytest
from clir_llm.core import Document, Qrels, Query, Run
from clir_llm.listwise import ListwiseReranker
from clir_llm.pairwise import PairwiseReranker
from clir_llm.templates import prompt_tokens

llm = pytest.importorskip("clir_llm.llm")
from clir_llm.cache import Cache
from clir_llm.testing import make_tiny_hf_model


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    "Two torch threads on a shared 2-core machine thrash (tens of times slower per call); restore afterwards."
    import torch
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {arch: make_tiny_hf_model(root / arch, arch) for arch in ("qwen2", "mt5")}


class Coll:
    def __init__(self, n_docs=8):
        self.queries = {"q1": Query("q1", "the cat sat on the mat", "en"), "q2": Query("q2", "ein Hund lief", "en")}
        self._docs = {f"{q}d{j}": Document(f"{q}d{j}", f"passage {j} the cat sat on the mat {'dog ' * j}", lang="de")
                      for q in self.queries for j in range(n_docs)}
        self.qrels = Qrels({q: {f"{q}d{j}": j % 3 for j in range(n_docs)} for q in self.queries})
        self.doc_lang, self.name, self.key = "de", "c", "c"
    def get_docs(self, ids): return [self._docs[d] for d in ids]


def first_run(coll):
    return Run.from_ranked({q: [d for d in coll._docs if d.startswith(q)] for q in coll.queries}, name="first")


@pytest.mark.parametrize("scoring", ["generation", "likelihood"])
def test_prp_on_tiny_qwen2_and_warm_rerun_makes_no_call(tiny, tmp_path, scoring):
    coll = Coll(); run = first_run(coll)
    outs = []
    for attempt in range(2):
        b = llm.get_backend(f"hf:{tiny['qwen2']}", cache=Cache(tmp_path / "cache"))
        rr = PairwiseReranker(b, method="bubblesort", sort_k=3, scoring=scoring, progress=False)
        outs.append(rr.rerank(coll, run, k=8))
        if attempt == 0: assert b.usage.calls > 0
        else: assert b.usage.calls == 0 and b.usage.cache_hits > 0
        for q in run: assert sorted(outs[-1].docids(q)) == sorted(run.docids(q))
    assert outs[0] == outs[1]
    d = rr.diagnostics["q1"]
    assert d["prompts"] == 2 * d["comparisons_asked"] and d["tokens_in"] > 0


def test_prp_prompt_prefill_through_chat_template(tiny):
    b = llm.get_backend(f"hf:{tiny['qwen2']}")
    rr = PairwiseReranker(b, progress=False)
    prompt, prefilled = rr._prompt("q", "x", "y")
    assert prefilled and b.render_text(prompt).endswith('Output Passage A or Passage B:<|im_end|>\n<|im_start|>assistant\n Passage:')


def test_prp_on_tiny_mt5_decoder_prefix(tiny):
    coll = Coll(5); run = first_run(coll)
    b = llm.get_backend(f"hf:{tiny['mt5']}")
    rr = PairwiseReranker(b, method="allpair", scoring="likelihood", progress=False)
    prompt, prefilled = rr._prompt("q", "x", "y")
    assert prefilled and prompt[-1] == {"role": "assistant", "content": "Passage"}
    out = rr.rerank(coll, run, k=5)
    assert all(sorted(out.docids(q)) == sorted(run.docids(q)) for q in run)


def test_listwise_on_tiny_qwen2_fits_context_exactly(tiny):
    coll = Coll(8); run = first_run(coll)
    b = llm.get_backend(f"hf:{tiny['qwen2']}")
    rr = ListwiseReranker(b, window=4, step=2, context=420, progress=False)
    texts = [d.text * 6 for d in coll.get_docs(run.docids("q1", 4))]
    prompt, n, w = rr.build_prompt(coll.queries["q1"].text, texts)
    assert n == b.count_tokens(b.render_text(prompt)) == prompt_tokens(b, prompt) and n <= 420 - rr.max_new_tokens
    assert w < 300
    out = rr.rerank(coll, run, k=8)
    assert all(sorted(out.docids(q)) == sorted(run.docids(q)) for q in run)
    assert rr.diagnostics["q1"]["prompts"] == 3  # windows start at 4, 2, 0


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def test_cli_rerank_in_process(tiny, tmp_path, capsys):
    from clir_llm.collections import load_collection
    from clir_llm.rerank import cli_rerank
    from clir_llm.core import ClirError
    coll = load_collection("fixture", "en-de")
    run = Run.from_ranked({q: [d.docid for d in coll.iter_docs()] for q in coll.queries}, name="bm25")
    run.write(tmp_path / "run.trec")
    args = ["--collection", "fixture", "--pair", "en-de", "--run", str(tmp_path / "run.trec"), "--method", "listwise",
            "--window", "3", "--step", "1", "--llm", f"hf:{tiny['qwen2']}", "--top-k", "4", "--out", str(tmp_path / "rr.trec"),
            "--cache", str(tmp_path / "cache")]
    assert cli_rerank(args) == 0
    out = Run.read(tmp_path / "rr.trec")
    assert all(sorted(out.docids(q)) == sorted(run.docids(q)) for q in run)
    assert json.loads((tmp_path / "rr.trec.rerank.json").read_text())["params"]["window"] == 3
    assert "model calls" in capsys.readouterr().out
    with pytest.raises(ClirError, match="ships no document translations"): cli_rerank(args + ["--docs", "dt"])


@pytest.mark.slow
def test_cli_rerank_on_fixture(tiny, tmp_path):
    from clir_llm.collections import load_collection
    coll = load_collection("fixture", "en-de")
    run = Run.from_ranked({q: [d.docid for d in coll.iter_docs()] for q in coll.queries}, name="bm25")
    run.write(tmp_path / "run.trec")
    cli = str(Path(sys.executable).parent / "clir-llm")
    args = [cli, "rerank", "--collection", "fixture", "--pair", "en-de", "--run", tmp_path / "run.trec",
            "--method", "pairwise-bubblesort", "--sort-k", "2", "--llm", f"hf:{tiny['qwen2']}", "--docs", "og",
            "--top-k", "4", "--out", tmp_path / "rr.trec", "--cache", tmp_path / "cache"]
    for attempt in range(2):
        p = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=300, env=ENV)
        assert p.returncode == 0, p.stderr
        usage = json.loads((tmp_path / "rr.trec.usage.json").read_text())
        assert (usage["calls"] > 0) if attempt == 0 else (usage["calls"] == 0 and usage["cache_hits"] > 0)
    out = Run.read(tmp_path / "rr.trec")
    assert all(sorted(out.docids(q)) == sorted(run.docids(q)) for q in run)
    diag = json.loads((tmp_path / "rr.trec.rerank.json").read_text())
    assert set(diag["per_query"]) == set(run)
    bad = subprocess.run(list(map(str, args[:-4] + ["--docs", "dt", "--out", tmp_path / "x.trec"])), capture_output=True,
                         text=True, timeout=300, env=ENV)
    assert bad.returncode == 1 and "ships no document translations" in bad.stderr
