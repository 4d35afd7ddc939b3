"`clir-llm methods`: every registry, printed as the exact strings the command line and configurations accept; each works."

import subprocess, sys
import pytest
from clir_llm.methods import registries


def _concrete(kind):
    return [s for k, rows in registries().items() if k.startswith(kind) for s, *_ in rows if "<" not in s]


def test_methods_lists_every_registry_from_the_cli():
    p = subprocess.run([sys.executable, "-m", "clir_llm.cli", "methods"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    for s in (
        "demo",
        "bm25-qt",
        "dense:e5-small",
        "rrf:<method>+<method>[+...]",
        "dict:freedict",
        "pairwise-bubblesort",
        "hf:<model>",
        "hf:qwen2.5-coder-0.5b-offline",
    ):
        assert f"  {s} " in p.stdout, s


def test_every_listed_first_stage_builds():
    from clir_llm.retrieve import get_retriever, parse_method

    for s in _concrete("first stages"):
        assert str(parse_method(s)) == s and get_retriever(s).name


def test_every_listed_backend_translator_and_collection_parses():
    from clir_llm.collections import collection_pairs
    from clir_llm.llm import BackendSpec
    from clir_llm.translate import TranslatorSpec

    assert all(str(BackendSpec.parse(s)) == s for s in _concrete("LLM backends"))
    assert all(str(TranslatorSpec.parse(s)) == s for s in _concrete("translators"))
    assert all(collection_pairs(s) for s in _concrete("collections"))


def test_a_plugin_method_is_listed(tmp_path):
    (tmp_path / "myrr.py").write_text(
        "from clir_llm.rerank import RERANKERS, Reranker\n"
        "@RERANKERS.register('reverse', summary='reverses the top k')\n"
        "class Reverse(Reranker):\n"
        "    needs_backend = False\n"
        "    def rerank(self, collection, run, k=100): return run\n"
    )
    p = subprocess.run(
        [sys.executable, "-m", "clir_llm.cli", "methods", "--plugin", "myrr"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:" + __import__("os").environ.get("PYTHONPATH", "")},
    )
    assert p.returncode == 0, p.stderr
    assert "  reverse  " in p.stdout.replace("reverse ", "reverse  ")
