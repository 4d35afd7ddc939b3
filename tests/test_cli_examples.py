"""Issue 16 item 7: the README's command-line examples finish in minutes on 2 cores and print the demo table's
numbers: `retrieve --doc-max-length` (the demo table's 256 tokens), `rerank --max-queries` with a progress bar that
knows its total (n of N and an estimate), and the strings `clir-llm models list` prints are the ones `--llm` and
`--method` accept."""
import json, os, subprocess, sys, textwrap
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "clir-llm")


def test_retrieve_doc_max_length_reaches_the_encoder(monkeypatch, tmp_path):
    import clir_llm.retrieve as R
    from clir_llm.core import ClirError
    seen = {}
    class Stop(Exception): pass
    def fake(method, **kw): seen.update(kw); raise Stop
    monkeypatch.setattr(R, "get_retriever", fake)
    with pytest.raises(Stop):
        R.cli_retrieve(["--collection", "fixture", "--pair", "en-de", "--method", "dense:e5-small", "--doc-max-length", "256",
                        "--out", str(tmp_path / "r.trec")])
    assert seen["doc_max_length"] == 256
    with pytest.raises(ClirError, match="--doc-max-length must be at least 1, got 0"):
        R.cli_retrieve(["--collection", "fixture", "--pair", "en-de", "--method", "dense:e5-small", "--doc-max-length", "0",
                        "--out", str(tmp_path / "r.trec")])
    monkeypatch.undo()   # and the Dense retriever gets it (the cut the demo table used)
    d = R.get_retriever("dense:e5-small", doc_max_length=256)
    assert d.encoder.spec.doc_max_length == 256 and R.get_retriever("dense:e5-small").encoder.spec.doc_max_length == 512


PLUGIN = '''
from clir_llm.rerank import RERANKERS, Reranker

@RERANKERS.register("reverse-mq")
class ReverseReranker(Reranker):
    "The top k in reverse first-stage order (a test reranker without a model)."
    needs_backend = False
    def rerank(self, collection, run, k=100):
        self._start(collection, run, k)
        return self._finish(run, {q: run.docids(q, k)[::-1] for q in self.diagnostics}, k)
'''


def test_rerank_max_queries(tmp_path):
    from clir_llm.collections import load_collection
    from clir_llm.core import Run
    (tmp_path / "mq_plugin.py").write_text(PLUGIN)
    fx = load_collection("fixture", "en-de")
    first = Run.from_ranked({q: [d.docid for d in fx.iter_docs()] for q in fx.queries}, name="order")
    first.write(tmp_path / "first.trec")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    args = [CLI, "rerank", "--collection", "fixture", "--pair", "en-de", "--run", str(tmp_path / "first.trec"), "--method", "reverse-mq",
            "--plugin", "mq_plugin", "--top-k", "3", "--out", str(tmp_path / "out.trec")]
    p = subprocess.run([*args, "--max-queries", "2"], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    assert sorted(Run.read(tmp_path / "out.trec")) == sorted(first)[:2] and len(first) > 2
    p = subprocess.run([*args, "--max-queries", "0"], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 1 and "--max-queries must be at least 1, got 0" in p.stderr


def test_pairwise_progress_has_a_total(tmp_path, monkeypatch):
    "PRP's bar counts comparisons against their upper bound (n of N and an estimate), and ends at 100 %."
    from clir_llm.pairwise import PairwiseReranker, max_comparisons
    from clir_llm.progress import CHANNEL
    from clir_llm.rerank import get_reranker
    from clir_llm.testing import QrelsOracle
    from clir_llm.testing import tiny_setup
    coll, run = tiny_setup(n_queries=3, n_docs=8)
    ch = tmp_path / "p.jsonl"
    monkeypatch.setenv(CHANNEL, str(ch))
    rr = get_reranker("pairwise-bubblesort", QrelsOracle(coll))
    assert isinstance(rr, PairwiseReranker)
    rr.rerank(coll, run, k=8)
    evs = [json.loads(l) for l in ch.read_text().splitlines() if "prp" in l]
    assert evs[0]["total"] == 3 * max_comparisons("bubblesort", 8, rr.options.k) and evs[0]["n"] == 0
    assert evs[-1]["closed"] and evs[-1]["n"] == evs[-1]["total"] > 0


def test_models_list_names_are_accepted():
    from clir_llm.assets import OFFLINE_MODELS
    from clir_llm.llm import BackendSpec
    from clir_llm.retrieve import parse_method
    p = subprocess.run([CLI, "models", "list"], capture_output=True, text=True, timeout=120)
    names = [l.split(": ")[0] for l in p.stdout.splitlines() if l and not l.startswith(" ")]
    assert names == list(OFFLINE_MODELS)
    for n in names:
        if n.startswith("dense:"): assert str(parse_method(n)) == n            # retrieve --method
        else: assert f"{BackendSpec.parse(n).kind}:{BackendSpec.parse(n).model}" == n   # rerank --llm


@pytest.mark.slow
def test_readme_cli_example_prints_the_demo_table_number(tmp_path):
    "The README's `retrieve` + `evaluate` example on the demo gives the first-stage table's mE5-small en-de cell."
    import pandas as pd
    out = tmp_path / "e5.trec"
    p = subprocess.run([CLI, "retrieve", "--collection", "demo", "--pair", "en-de", "--method", "dense:e5-small",
                        "--doc-max-length", "256", "--out", str(out)], capture_output=True, text=True, timeout=3600)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([CLI, "evaluate", "--collection", "demo", "--pair", "en-de", "--run", str(out), "--measures", "MAP"],
                       capture_output=True, text=True, timeout=600)
    got = float(p.stdout.split()[1])
    table = pd.read_csv(ROOT / "results" / "demo" / "tables" / "first_stage.csv", index_col=0)
    assert f"{got:.3f}" == f"{table.loc['mE5-small', 'en-de']:.3f}"
