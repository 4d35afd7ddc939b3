"""Doubles shared by the reranker tests (test_rerank.py, test_listwise.py, test_pairwise.py, test_setwise.py,
test_pointwise.py, test_singletoken.py, test_testing.py): a minimal collection, backends built on the qrels oracle
(a fixed answer, a recorder of prompts and generate arguments), and tiny Hugging Face models made once per session."""

import functools, random, tempfile
from pathlib import Path
import pytest
from clir_llm.core import Document, Qrels, Query, Run
from clir_llm.templates import prompt_text
from clir_llm.testing import QrelsOracle, make_tiny_hf_model


class Coll:
    "A minimal collection: what rerankers use (queries, get_docs, qrels, doc_lang)."

    def __init__(self, queries, docs, qrels, doc_lang="de"):
        self.queries, self._docs, self.qrels, self.doc_lang, self.name, self.key = (
            queries,
            docs,
            qrels,
            doc_lang,
            "t",
            "t",
        )

    def get_docs(self, ids):
        return [self._docs[d] for d in ids]


def make(n_queries=3, n_docs=40, seed=0, words=30):
    "A `Coll` of random passages ('doc <id> ab cd ...') with random grades (0-3), and a shuffled first-stage run."
    rng = random.Random(seed)
    queries = {f"q{i}": Query(f"q{i}", f"query number {i} on topic {i * 7} and more", "en") for i in range(n_queries)}
    docs, qrels, run = {}, Qrels(), {}
    for i in range(n_queries):
        ids = [f"q{i}-d{j}" for j in range(n_docs)]
        for d in ids:
            docs[d] = Document(
                d, f"doc {d} " + " ".join(rng.choice("ab cd ef gh".split()) for _ in range(words)), lang="de"
            )
        qrels[f"q{i}"] = {d: rng.choice([0, 0, 0, 1, 2, 3]) for d in ids}
        rng.shuffle(ids)
        run[f"q{i}"] = ids
    return Coll(queries, docs, qrels), Run.from_ranked(run, name="bm25")


class Fixed(QrelsOracle):
    "Answers every prompt with the same text (and scores the first candidate higher)."

    def __init__(self, coll, answer):
        super().__init__(coll, name=f"fixed:{answer}")
        self.answer = answer

    def generate(self, prompts, max_new_tokens=64, **kw):
        self.usage.calls += 1
        return [self.answer] * len(prompts)

    def score(self, prompts, candidates):
        self.usage.calls += 1
        return [[0.0, -1.0] for _ in prompts]


class Recording(QrelsOracle):
    "The oracle, remembering the text of every generated prompt (`seen`) and the arguments of every generate call (`calls`)."

    def generate(self, prompts, max_new_tokens=64, **params):
        self.calls = getattr(self, "calls", []) + [dict(max_new_tokens=max_new_tokens, n=len(prompts), **params)]
        self.seen = getattr(self, "seen", []) + [prompt_text(p) for p in prompts]
        return super().generate(prompts, max_new_tokens, **params)


def top_grades(coll, run, q, k):
    return [coll.qrels[q].get(d, 0) for d in run.docids(q, k)]


def ideal(coll, q, k):
    return sorted(coll.qrels[q].values(), reverse=True)[:k]


@functools.lru_cache(maxsize=None)
def tiny_models() -> dict:
    "A tiny random qwen2 (chat) and mt5 (encoder-decoder) model, made once per test session."
    root = Path(tempfile.mkdtemp(prefix="clir-tiny-"))
    return {arch: make_tiny_hf_model(root / arch, arch) for arch in ("qwen2", "mt5")}


@pytest.fixture(scope="module")
def tiny():
    "The tiny models, with one torch thread (two threads on a shared 2-core machine thrash); restored afterwards."
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tiny_models()
    torch.set_num_threads(n)


class CatColl(Coll):
    "Two queries and passages in the tiny models' vocabulary (the tiny tokenizer was trained on such text)."

    def __init__(self, n_docs=8):
        queries = {"q1": Query("q1", "the cat sat on the mat", "en"), "q2": Query("q2", "ein Hund lief", "en")}
        docs = {
            f"{q}d{j}": Document(f"{q}d{j}", f"passage {j} the cat sat on the mat {'dog ' * j}", lang="de")
            for q in queries
            for j in range(n_docs)
        }
        super().__init__(queries, docs, Qrels({q: {f"{q}d{j}": j % 3 for j in range(n_docs)} for q in queries}))


def first_run(coll):
    "Each query's documents in the order they were made."
    return Run.from_ranked({q: [d for d in coll._docs if d.startswith(q)] for q in coll.queries}, name="first")
