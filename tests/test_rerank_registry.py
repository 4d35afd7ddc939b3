"""The reranker registry and spec: a reranker written in a module of its own runs from `clir-llm rerank --plugin`,
a class without `rerank` is refused when it registers, and the spec checks its options before anything loads."""
import os, subprocess, sys, textwrap
import pytest
from clir_llm.core import ClirError, Run
from clir_llm.rerank import RERANKERS, Reranker, RerankerSpec, get_reranker
from clir_llm.specs import validated

PLUGIN = '''
from clir_llm.rerank import RERANKERS, Reranker

@RERANKERS.register("{name}")
class ReverseReranker(Reranker):
    "The top k in reverse first-stage order (a test reranker without a model)."
    needs_backend = False
    def __init__(self): self.name, self.params = "reverse", {{}}
    def rerank(self, collection, run, k=100):
        self._start(collection, run, k)
        return self._finish(run, {{q: run.docids(q, k)[::-1] for q in self.diagnostics}}, k)
'''


def _cli(*args, env=None):
    "`clir-llm` in a fresh interpreter (so only --plugin can register the test reranker)."
    return subprocess.run([sys.executable, "-c", "import sys; from clir_llm.cli import main; sys.exit(main())", *map(str, args)],
                          capture_output=True, text=True, timeout=300, env=env)


def test_plugin_reranker_runs_from_the_cli_in_a_subprocess(tmp_path):
    from clir_llm.collections import load_collection
    (tmp_path / "my_reranker_plugin.py").write_text(textwrap.dedent(PLUGIN.format(name="reverse-test")))
    fx = load_collection("fixture", "en-de")
    first = Run.from_ranked({q: [d.docid for d in fx.iter_docs()] for q in fx.queries}, name="order")
    first.write(tmp_path / "first.trec")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    args = ["rerank", "--collection", "fixture", "--pair", "en-de", "--run", tmp_path / "first.trec", "--method", "reverse-test",
            "--top-k", "3", "--out", tmp_path / "out.trec"]
    p = _cli(*args, env=env)                                   # without --plugin the method is unknown
    assert p.returncode == 2 and "invalid choice: 'reverse-test'" in p.stderr, p.stderr
    p = _cli(*args, "--plugin", "my_reranker_plugin", env=env)
    assert p.returncode == 0, p.stderr
    assert "reranked by reverse" in p.stdout and "0 model calls" in p.stdout
    out = Run.read(tmp_path / "out.trec")
    for q in first:
        ids = first.docids(q)
        assert out.docids(q) == ids[:3][::-1] + ids[3:]
    assert (tmp_path / "out.trec.rerank.json").exists() and (tmp_path / "out.trec.usage.json").exists()
    p = _cli(*args, "--plugin", "no_such_plugin_module", env=env)
    assert p.returncode == 1 and "plugin 'no_such_plugin_module' cannot be imported" in p.stderr and "Traceback" not in p.stderr


def test_llm_reranker_without_llm_is_one_clear_error(tmp_path):
    p = _cli("rerank", "--collection", "fixture", "--pair", "en-de", "--run", tmp_path / "none.trec", "--method", "listwise",
             "--out", tmp_path / "out.trec")
    assert p.returncode == 1 and "--llm is required: reranker 'listwise' uses an LLM" in p.stderr, p.stderr


def test_class_without_rerank_is_refused_at_registration():
    with pytest.raises(ClirError, match=r"reranker 'no-rerank': Incomplete does not implement rerank \(required by Reranker\)"):
        @RERANKERS.register("no-rerank")
        class Incomplete(Reranker):
            "Forgot the one required method."
    with pytest.raises(ClirError, match="must subclass clir_llm.rerank.Reranker"):
        RERANKERS.register("not-a-reranker", type("Plain", (), {"rerank": lambda self, c, r, k=100: r}))
    assert "no-rerank" not in RERANKERS and "not-a-reranker" not in RERANKERS


def test_registry_lists_the_shipped_methods_and_builds_each():
    assert RERANKERS.names()[:6] == ["listwise", "listwise-rankzephyr", "listwise-rankgpt",
                                     "pairwise-allpair", "pairwise-heapsort", "pairwise-bubblesort"]
    from clir_llm.listwise import ListwiseReranker
    from clir_llm.pairwise import PairwiseReranker
    from clir_llm.rerank import QrelsOracle
    from clir_llm.collections import load_collection
    coll = load_collection("fixture", "en-de")
    built = {m: get_reranker(m, QrelsOracle(coll), progress=False) for m in RERANKERS.names()[:6]}
    assert [r.template.name for m, r in built.items() if isinstance(r, ListwiseReranker)] == ["rankzephyr", "rankzephyr", "rankgpt"]
    assert [r.method for r in built.values() if isinstance(r, PairwiseReranker)] == ["allpair", "heapsort", "bubblesort"]


@pytest.mark.parametrize("fields, msg", [
    (dict(method="nope"), "unknown reranker 'nope'"),
    (dict(method="listwise", window=5, step=6), "step (6) larger than the window (5)"),
    (dict(method="listwise", context=32), "context: Input should be greater than or equal to 64"),
    (dict(method="listwise", prompt="prp"), "needs a listwise prompt"),
    (dict(method="pairwise-allpair", prompt="rankgpt"), "needs a pairwise prompt"),
    (dict(method="pairwise-allpair", prompt="missing.yaml"), "no such prompt template file"),
    (dict(method="listwise", windw=5), "windw: Extra inputs are not permitted"),
])
def test_spec_refuses_bad_options(fields, msg):
    with pytest.raises(ClirError) as e: validated(RerankerSpec, fields, where="config")
    assert msg in str(e.value)


def test_spec_defaults_are_the_run_identity_fields():
    "The defaults that name today's run files (RerankerConfig's) must not move."
    s = RerankerSpec(method="pairwise-bubblesort")
    assert s.model_dump() == dict(method="pairwise-bubblesort", prompt=None, window=20, step=10, k=10, passage_tokens=300,
                                  query_tokens=128, scoring="generation", max_words=300, context=4096, doc_title=True)
    from clir_llm.config import RerankerConfig
    rc = RerankerConfig(name="x", llm="openai:x", method="listwise", first_stages=["bm25-qt"])
    assert rc.model_dump(include=set(RerankerSpec.model_fields) - {"method"}) == RerankerSpec(method="listwise").model_dump(exclude={"method"})
    assert s.describe() == "pairwise-bubblesort (prompt prp, k 10, scoring generation, passage_tokens 300, query_tokens 128, doc_title True)"
    assert s.key() != RerankerSpec(method="pairwise-bubblesort", k=5).key()


def test_cli_options_come_from_the_spec():
    from clir_llm.rerank import _rerank_parser
    a = _rerank_parser(RERANKERS.names()).parse_args(
        ["--collection", "c", "--pair", "en-de", "--run", "r", "--method", "pairwise-heapsort", "--out", "o",
         "--sort-k", "3", "--no-doc-title", "--passage-tokens", "64", "--scoring", "likelihood"])
    from clir_llm.specs import spec_from_args
    s = spec_from_args(RerankerSpec, a)
    assert (s.k, s.doc_title, s.passage_tokens, s.scoring, s.window) == (3, False, 64, "likelihood", 20)


def test_plugin_reranker_runs_from_a_yaml_config(tmp_path, monkeypatch):
    "Issue 13: a reranker in a module of its own, named in a config's `plugins:`, runs in the pipeline and its table."
    import yaml
    from clir_llm.config import load_config
    from clir_llm.pipeline import Pipeline
    from clir_llm.tables import rerank_table
    (tmp_path / "yaml_reranker_plugin.py").write_text(textwrap.dedent(PLUGIN.format(name="reverse-yaml")))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = dict(name="plug", collection="fixture", pairs=["en-de"], measure="MAP", experiments=["1_first_stage"],
               plugins=["yaml_reranker_plugin"], first_stage=dict(methods=["bm25-og"]),
               rerankers=[dict(name="Reverse", method="reverse-yaml", first_stages=["bm25-og"], docs=["og"], top_k=3)])
    (tmp_path / "plug.yaml").write_text(yaml.safe_dump(cfg))
    pipe = Pipeline(load_config(tmp_path / "plug.yaml"), tmp_path / "out", progress=False)
    base = pipe.first_stage("en-de", "bm25-og")
    out = pipe.rerank("en-de", pipe.cfg.rerankers[0], "bm25-og", "og")
    assert all(out.docids(q) == base.docids(q)[:3][::-1] + base.docids(q)[3:] for q in base)
    table, _ = rerank_table(pipe, "reverse-yaml")
    assert "BM25-OG » Reverse OG" in table.means.index
    p = subprocess.run([sys.executable, "-m", "clir_llm.cli", "reproduce", tmp_path / "plug.yaml", "--dry-run"], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])})
    assert p.returncode == 0 and "reranker Reverse: reverse-yaml;" in p.stdout, p.stderr
