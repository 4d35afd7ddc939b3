"""Reliability against a faulty OpenAI-compatible server (a real HTTP server on 127.0.0.1, `FakeOpenAIServer`):
transport faults (429 with and without Retry-After, 500, timeouts, dropped connections, malformed JSON, empty
choices) and bad answers (rankings with duplicated, missing, out-of-range ids, answers in the wrong language) during a
listwise and a pairwise reranking with `openai:<model>`. The runs complete, every fault is counted in the saved
usage/diagnostics, the output is always a permutation of the input; a call failing for good stops the run loudly and a
re-run asks only what had not been answered."""
from __future__ import annotations
import json, re
from collections import Counter
from pathlib import Path

import pytest

import _reliability as R
from clir_llm.cache import Cache
from clir_llm.collections import load_collection
from clir_llm.core import Run, usage_path
from clir_llm.llm import LLMError, get_backend
from clir_llm.testing import FakeOpenAIServer
from clir_llm.rerank import get_reranker

# every transport fault once, each followed by a healthy answer (the retry); requests are sequential (concurrency=1)
TRANSPORT = ["429", "429:0.4", "500", "slow:2", "drop", "malformed", "empty"]
COUNTER_OF = {"429": "errors_http_429", "429:0.4": "errors_http_429", "500": "errors_http_500", "slow:2": "errors_timeout",
              "drop": "errors_connection", "malformed": "errors_malformed", "empty": "errors_empty_choices"}
LISTWISE_KINDS = ["ok", "duplicate", "out_of_range", "missing", "wrong_language", "zero"]
PRP_KINDS = ["A", "B", "wrong_language", "B", "unknown_letter", "A"]


class BadRanker:
    """A scripted model whose answers cycle through bad kinds; it records, per prompt, what its answer should cost
    the parser (a prompt asked twice, e.g. after a client timeout, gets the same answer)."""
    def __init__(self):
        self.n, self.answers = 0, {}

    @property
    def expect(self) -> Counter:
        return sum((c for _, c, _ in self.answers.values()), Counter())

    def count_faults(self):
        for kind, *_ in self.answers.values():
            if kind not in ("ok", "A", "B"): R.STATS["faults"]["bad answer: " + kind.replace("_", " ")] += 1

    def __call__(self, msgs, body):
        text = "\n".join(m["content"] for m in msgs)
        if text in self.answers: k = self.answers[text][2]     # asked again (the client timed out): the same answer
        else: k = self.n; self.n += 1
        exp = Counter()
        if "Output Passage A or Passage B" in text:
            kind = PRP_KINDS[k % len(PRP_KINDS)]
            exp["parse_failures"] += kind not in "AB"
            self.answers[text] = (kind, exp, k)
            return {"A": "Passage A", "B": "Passage B", "wrong_language": "Durchgang A ist relevanter",
                    "unknown_letter": "Passage C"}[kind]
        n = int(re.search(r"provide you with (\d+) passages", text).group(1))
        kind = LISTWISE_KINDS[k % len(LISTWISE_KINDS)]
        self.answers[text] = (kind, exp, k)
        ids = list(range(1, n + 1))[::-1]
        if kind == "duplicate": ids = [ids[0]] + ids; exp["repair_duplicates"] += 1
        if kind == "out_of_range": ids = [n + 7] + ids; exp["repair_out_of_range"] += 1
        if kind == "zero": ids = [0] + ids; exp["repair_out_of_range"] += 1
        if kind == "missing": ids = ids[:1]; exp["repair_missing"] += n - 1
        if kind == "wrong_language":
            exp["repair_missing"] += n; exp["repair_unparsed"] += 1; exp["parse_failures"] += 1
            return "Die erste Passage ist die relevanteste, dann die anderen."
        return " > ".join(f"[{i}]" for i in ids)


def _faults():
    return [x for f in TRANSPORT for x in (f, None)]


def _first_stage(coll) -> Run:
    docs = sorted(d.docid for d in coll.iter_docs())
    return Run.from_ranked({q: docs[i:] + docs[:i] for i, q in enumerate(sorted(coll.queries))}, name="first")


def _backend(srv, cache):
    # endpoint=: every test server gets a new port; the recovered server of a resume test is "the same server"
    return get_backend("openai:fake-ranker", cache=cache, base_url=srv.url, endpoint="fake-server", concurrency=1, timeout=0.5,
                       backoff=0.01, max_wait=1.0, max_retries=4)


@pytest.mark.parametrize("method", ["listwise-rankzephyr", "pairwise-bubblesort"])
def test_faulty_server_run_completes_and_counts_every_fault(method, tmp_path):
    coll = load_collection("fixture", "en-de")
    run = _first_stage(coll)
    bot = BadRanker()
    with FakeOpenAIServer(responder=bot, faults=_faults()) as srv:
        backend = _backend(srv, Cache(tmp_path / "cache"))
        kw = dict(window=2, step=1) if method.startswith("listwise") else dict(k=3, passage_tokens=60)
        rr = get_reranker(method, backend, progress=False, **kw)
        out = rr.rerank(coll, run, k=4)
        reqs = list(srv.requests)
    path = tmp_path / "run.trec"
    out.write(path); rr.save(path)
    served = [r["fault"] for r in reqs if r["fault"]]
    assert served == TRANSPORT, "every scripted fault was served once"
    for f in served: R.STATS["faults"]["server: " + {"429:0.4": "429 Retry-After", "slow:2": "timeout"}.get(f, f)] += 1
    # every fault counted, in the files written beside the run
    usage = json.loads(usage_path(path).read_text())
    diag = json.loads(Path(str(path) + ".rerank.json").read_text())
    want = Counter(COUNTER_OF[f] for f in TRANSPORT)
    assert {k: v for k, v in usage["counters"].items() if k.startswith("errors_")} == dict(want)
    assert diag["usage"]["counters"] == usage["counters"]
    assert usage["calls"] == len(reqs) - len(TRANSPORT) == len(bot.answers)   # one answered call per prompt, none lost
    bot.count_faults()
    assert {k for k, *_ in bot.answers.values()} == set(LISTWISE_KINDS if method.startswith("listwise") else PRP_KINDS)
    totals = Counter()
    for d in diag["per_query"].values():
        for k, v in d.items():
            if isinstance(v, int): totals[k] += v
    for k, v in bot.expect.items():
        assert totals[k] == v, (k, totals[k], v)
        assert usage["counters"].get(k, 0) == v
    assert bot.expect["parse_failures"] > 0
    # the Retry-After header is honoured (0.4 s), the plain 429 and the other faults back off briefly
    i = next(j for j, r in enumerate(reqs) if r["fault"] == "429:0.4")
    assert reqs[i + 1]["time"] - reqs[i]["time"] >= 0.39
    # the output is a permutation of the input, query by query
    assert sorted(out) == sorted(run)
    for q in run:
        assert sorted(out.docids(q)) == sorted(run.docids(q)) and len(set(out.docids(q))) == len(run.docids(q))


def test_call_failing_for_good_stops_loudly_and_resumes(tmp_path):
    """A call that still fails after all retries raises LLMError naming the attempts (no half-made run), and a re-run
    after the server recovers asks only the calls that never got an answer."""
    coll = load_collection("fixture", "en-de")
    run = _first_stage(coll)
    cache = Cache(tmp_path / "cache")
    faults = [None, None, None] + ["500"] * 5      # three answers, then one call fails on all 5 attempts
    with FakeOpenAIServer(responder=R.fake_answer, faults=faults) as srv:
        rr = get_reranker("listwise-rankzephyr", _backend(srv, cache), window=2, step=1, progress=False)
        with pytest.raises(LLMError, match=r"after 5 attempts \(http_500, http_500, http_500, http_500, http_500\)"):
            rr.rerank(coll, run, k=4)
        R.STATS["faults"]["server: 500 (for good)"] += 5
        assert rr.backend.usage.counters["failed_calls"] == 1
        first = [r["prompt"] for r in srv.requests if r["fault"] is None]
    with FakeOpenAIServer(responder=R.fake_answer) as srv:
        rr = get_reranker("listwise-rankzephyr", _backend(srv, cache), window=2, step=1, progress=False)
        out = rr.rerank(coll, run, k=4)
        again = [r["prompt"] for r in srv.requests]
    assert len(first) == 3 and not set(first) & set(again), "an answered call was asked again"
    assert rr.usage.cache_hits == 3 and rr.usage.calls == len(again)
    for q in run: assert sorted(out.docids(q)) == sorted(run.docids(q))
