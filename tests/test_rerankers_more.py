"""Issue 17 item 5: setwise, pointwise and single-token listwise rerankers. Each matches its reference algorithm
(llm-rankers' SetwiseLlmRanker / PointwiseLlmRanker, rank_llm's FIRST path, re-implemented here line for line with
the model call replaced by a plain comparator or scorer) in call counts and rankings; each runs through the hf:
backend (decoder-only chat and encoder-decoder) from the CLI on OG and DT documents, refuses a backend without the
capability it needs in one line, and appears in the rerank and cost tables of a configuration."""
import contextlib, io, json, random, re
import pytest
from clir_llm.core import ClirError, Run
from clir_llm.rerank import RERANKERS, QrelsOracle, RerankerSpec, get_reranker
from clir_llm.setwise import LABELS, SETWISE_SORTS, SetwiseReranker, run_setwise, setwise_judges
from clir_llm.pointwise import PointwiseReranker, pointwise_order
from clir_llm.singletoken import SingleTokenListwiseReranker, first_token_order
from clir_llm.templates import ALPHA, prompt_text, squash
from clir_llm.testing import make_tiny_hf_model, tiny_setup

NEW = ["setwise-heapsort", "setwise-bubblesort", "pointwise-yes-no", "pointwise-qlm", "listwise-first"]


# ---- the references, as llm-rankers and rank_llm write them (model calls replaced by plain functions) ----

def llmrankers_setwise(method, docids, k, c, compare):
    "llmrankers/setwise.py SetwiseLlmRanker.rerank: heapSort/heapify or the bubblesort loop; `compare(docs) -> label`."
    CHARACTERS, asked, ranking = LABELS, [], list(docids)
    def cmp(docs): asked.append(list(docs)); return compare(list(docs))
    def heapify(arr, n, i):
        if c * i + 1 < n:
            docs = [arr[i]] + arr[c * i + 1: min((c * (i + 1) + 1), n)]
            inds = [i] + list(range(c * i + 1, min((c * (i + 1) + 1), n)))
            output = cmp(docs)
            try: best_ind = CHARACTERS.index(output)
            except ValueError: best_ind = 0
            try: largest = inds[best_ind]
            except IndexError: largest = i
            if largest != i:
                arr[i], arr[largest] = arr[largest], arr[i]
                heapify(arr, n, largest)
    if method == "heapsort":
        n, ranked = len(ranking), 0
        for i in range(n // c, -1, -1): heapify(ranking, n, i)
        for i in range(n - 1, 0, -1):
            ranking[i], ranking[0] = ranking[0], ranking[i]
            ranked += 1
            if ranked == k: break
            heapify(ranking, i, 0)
        ranking = list(reversed(ranking))
    else:
        last_start = len(ranking) - (c + 1)
        for i in range(k):
            start_ind, end_ind, is_change = last_start, last_start + (c + 1), False
            while True:
                if start_ind < i: start_ind = i
                output = cmp(ranking[start_ind:end_ind])
                try: best_ind = CHARACTERS.index(output)
                except ValueError: best_ind = 0
                if best_ind != 0:
                    ranking[start_ind], ranking[start_ind + best_ind] = ranking[start_ind + best_ind], ranking[start_ind]
                    if not is_change:
                        is_change = True
                        if last_start != len(ranking) - (c + 1) and best_ind == len(ranking[start_ind:end_ind]) - 1:
                            last_start += len(ranking[start_ind:end_ind]) - 1
                if start_ind == i: break
                if not is_change: last_start -= c
                start_ind -= c; end_ind -= c
    top = ranking[:k]
    return top + [d for d in docids if d not in top], asked


def rank_llm_first(docids, logprob, window=20, step=10):
    "rank_llm: ListwiseRankLLM.sliding_windows; per window _evaluate_logits (use_alpha) then receive_permutation."
    order, end, start, windows = list(docids), len(docids), len(docids) - window, []
    while end > 0 and start + step != 0:
        start = max(start, 0)
        ids = order[start:end]; windows.append(ids)
        evaluations = {}
        for i, d in enumerate(ids):
            idx = ord("A") + i
            if logprob(d) > evaluations.get(idx, float("-inf")): evaluations[idx] = logprob(d)
        result = ">".join(f"[{chr(x)}]" for x, _ in sorted(evaluations.items(), key=lambda x: -x[1]))
        resp = list(dict.fromkeys(ord(ch) - ord("A") for ch in re.findall(r"\[([A-Z])\]", result)))
        perm = resp + [i for i in range(len(ids)) if i not in resp]
        order[start:end] = [ids[i] for i in perm]
        end, start = end - step, start - step
    return order, windows


# ---- plain comparators and scorers as backends ----

class SetJudge(QrelsOracle):
    "A backend answering setwise prompts with a plain judge of the docids shown (`judge(ids) -> index`)."
    def __init__(self, coll, judge, by_text):
        super().__init__(coll, name="judge"); self.judge, self.by_text = judge, by_text
    def generate(self, prompts, max_new_tokens=64, **kw):
        self.usage.calls += 1
        out = []
        for p in prompts:
            ids = [self.by_text[t] for t in re.findall(r'Passage [A-W]: "(.*?)"(?=\n\nPassage [A-W]: "|\n\nOutput only)', prompt_text(p), re.S)]
            out.append(LABELS[self.judge(ids)])
        return out


@pytest.fixture(scope="module")
def small():
    coll, first = tiny_setup(n_queries=2, n_docs=30, seed=5)
    by_text = {squash(coll.get_doc(d).full_text): d for q in first for d in first.docids(q)}
    return coll, first, by_text


@pytest.mark.parametrize("method", list(SETWISE_SORTS))
@pytest.mark.parametrize("judge_name", ["oracle", "random", "first", "last"])
def test_setwise_generators_equal_llmrankers(method, judge_name):
    for n in list(range(0, 12)) + [20, 37]:
        for k in (1, 3, 10):
            for c in (1, 2, 3, 4):
                docids = [f"d{i}" for i in range(n)]
                grades = {d: random.Random(f"{d}{n}").choice([0, 0, 1, 2, 3]) for d in docids}
                judge = setwise_judges(random.Random(n * 100 + k * 10 + c), grades)[judge_name]
                asked = []
                ours = run_setwise(SETWISE_SORTS[method](docids, k, c), lambda ids: asked.append(ids) or judge(ids))
                ref, ref_asked = llmrankers_setwise(method, docids, k, c, lambda ids: LABELS[judge(ids)] if ids else "")
                assert (ours, asked) == (ref, ref_asked), (n, k, c)


@pytest.mark.parametrize("method", list(SETWISE_SORTS))
@pytest.mark.parametrize("judge_name", ["oracle", "random", "first", "last"])
def test_setwise_reranker_calls_and_ranking_equal_llmrankers(small, method, judge_name):
    coll, first, by_text = small
    for c in (2, 3):
        grades = {d: coll.qrels[q].get(d, 0) for q in first for d in first.docids(q)}
        judge = setwise_judges(random.Random(11), grades)[judge_name]
        b = SetJudge(coll, judge, by_text)
        rr = SetwiseReranker(b, method=method, sort_k=10, num_child=c, progress=False).rerank(coll, first, k=30)
        for q in first:   # the judge answers a set the same each time, so the reference sees the same answers
            ref, ref_asked = llmrankers_setwise(method, first.docids(q, 30), 10, c, lambda ids: LABELS[judge(ids)] if ids else "")
            assert rr.docids(q, 30) == ref
    # counts: the reranker's `sets` is llm-rankers' total_compare; prompts are the sets of two or more documents
    rk = SetwiseReranker(SetJudge(coll, judge, by_text), method=method, num_child=3, progress=False)
    rk.rerank(coll, first, k=30)
    for q in first:
        _, ref_asked = llmrankers_setwise(method, first.docids(q, 30), 10, 3, lambda ids: LABELS[judge(ids)] if ids else "")
        assert rk.diagnostics[q]["sets"] == len(ref_asked)
        assert rk.diagnostics[q]["prompts"] == sum(len(s) > 1 for s in ref_asked)


def test_pointwise_equals_llmrankers_sort(small):
    coll, first, _ = small
    class Scores(QrelsOracle):
        def __init__(self, coll, value): super().__init__(coll, name="scores"); self.value, self.given = value, []
        def score(self, prompts, candidates, **kw):
            self.usage.calls += 1
            out = [[self.value(), -0.5][:len(candidates)] for _ in prompts]; self.given += [s for s in out]; return out
    for template in ("relevance", "qlm"):
        for value in (random.Random(3).random, lambda: 1.0, lambda: float(random.Random(9).choice([0, 1]))):
            b = Scores(coll, value)
            pw = PointwiseReranker(b, template=template, progress=False)
            rr = pw.rerank(coll, first, k=30)
            for i, q in enumerate(first):
                given = b.given[30 * i:30 * (i + 1)]
                score = [1 / (1 + __import__("math").exp(s[1] - s[0])) if template == "relevance" else s[0] for s in given]
                ref = [d for d, _ in sorted(zip(first.docids(q, 30), score), key=lambda x: x[1], reverse=True)]   # llm-rankers' sorted(..., reverse=True)
                assert rr.docids(q, 30) == ref and rr.docids(q)[30:] == first.docids(q)[30:]
                assert pw.diagnostics[q]["prompts"] == 30 and pw.diagnostics[q]["calls"] == 1
    assert pointwise_order(["a", "b", "c"], {"a": 0.1, "b": 0.9, "c": 0.1}.get) == ["b", "a", "c"]


@pytest.mark.parametrize("scorer", ["random", "constant", "grades"])
@pytest.mark.parametrize("n,window,step", [(30, 20, 10), (25, 20, 10), (17, 5, 3), (9, 4, 2)])
def test_first_equals_rank_llm(small, scorer, n, window, step):
    coll, first, by_text = small
    q = list(first)[0]
    rng = random.Random(n * window)
    value = {"random": {d: rng.choice([-1.0, -2.0, rng.uniform(-9, 0)]) for d in first.docids(q)},
             "constant": {d: -1.0 for d in first.docids(q)},
             "grades": {d: float(coll.qrels[q].get(d, 0)) for d in first.docids(q)}}[scorer]
    class Logits(QrelsOracle):
        def __init__(self): super().__init__(coll, name="logits"); self.windows = []
        def score(self, prompts, candidates, **kw):
            self.usage.calls += 1
            out = []
            for p in prompts:
                ids = [by_text[t] for t in re.findall(r"(?m)^\[[A-Z]\] (.+)$", prompt_text(p))]
                self.windows.append(ids); out.append([value[d] for d in ids])
            assert candidates == ALPHA[:len(out[0])]
            return out
    b = Logits()
    fr = get_reranker(RerankerSpec(method="listwise-first", window=window, step=step, last_window="short"), b, progress=False)
    rr = fr.rerank(coll, Run({q: first[q]}), k=n)
    ref, ref_windows = rank_llm_first(first.docids(q, n), value.get, window, step)
    assert rr.docids(q, n) == ref and b.windows == ref_windows
    assert fr.diagnostics[q]["prompts"] == len(ref_windows) and fr.diagnostics[q]["tokens_out"] == 0
    assert first_token_order([-1.0, -0.5, -1.0]) == [1, 0, 2]


def test_every_new_method_is_registered_and_listed():
    from clir_llm.cli import cli_methods
    assert all(m in RERANKERS.names() for m in NEW)
    with contextlib.redirect_stdout(io.StringIO()) as out: cli_methods([])
    for m in NEW: assert re.search(rf"(?m)^\s+{m}\s", out.getvalue()), m
    fam = {m: RerankerSpec(method=m).family for m in NEW}
    assert fam == {"setwise-heapsort": "setwise", "setwise-bubblesort": "setwise", "pointwise-yes-no": "pointwise",
                   "pointwise-qlm": "pointwise", "listwise-first": "listwise"}
    # a new option does not rename the runs of the paper's rerankers: num_child is a switch, out of dumps at its default
    assert "num_child" not in RerankerSpec(method="listwise").model_dump() and "num_child=5" in RerankerSpec(method="setwise-heapsort", num_child=5).key()
    with pytest.raises(ClirError, match="has no switch num_child"): RerankerSpec(method="pairwise-heapsort", num_child=2)


def test_backends_without_the_capability_are_refused_in_one_line():
    from clir_llm.llm_openai import OpenAIBackend
    api = OpenAIBackend("gpt-4o-mini")             # top logprobs of the first token only, no prefill; no call is made
    for method, extra, msg in (("setwise-heapsort", dict(scoring="likelihood"), "cannot continue an assistant turn"),
                               ("pointwise-qlm", {}, "cannot score a continuation of several tokens"),
                               ("listwise-first", {}, "cannot continue an assistant turn")):
        with pytest.raises(ClirError, match=f"reranker '{method}' reads likelihoods, and backend 'openai:gpt-4o-mini' {msg}"):
            get_reranker(method, api, **extra)
    for method in ("setwise-heapsort", "setwise-bubblesort", "pointwise-yes-no"):   # generation, or Yes/No as the first token
        assert get_reranker(method, api).backend is api
    no_lp = OpenAIBackend.create("gpt-4o-mini", logprobs=False)
    with pytest.raises(ClirError, match="returns no log-probabilities"): get_reranker("pointwise-yes-no", no_lp)
    assert api.supports_logprobs and not api.scores_sequences


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import torch
    n = torch.get_num_threads(); torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny")
    yield {arch: make_tiny_hf_model(root / arch, arch) for arch in ("qwen2", "mt5")}
    torch.set_num_threads(n)


@pytest.mark.slow
@pytest.mark.parametrize("method,extra", [("setwise-heapsort", ["--sort-k", "2"]), ("setwise-bubblesort", ["--sort-k", "1", "--scoring", "likelihood", "--num-child", "2"]),
                                          ("pointwise-yes-no", []), ("pointwise-qlm", []), ("listwise-first", ["--window", "3", "--step", "1"])])
def test_cli_rerank_og_and_dt_on_tiny_hf(tiny, tmp_path, method, extra):
    from clir_llm.collections import load_collection
    from clir_llm.rerank import cli_rerank
    fx = load_collection("fixture", "en-de")
    run = Run.from_ranked({q: [d.docid for d in fx.iter_docs()] for q in fx.queries}, name="order")
    run.write(tmp_path / "run.trec")
    for docs in ("og", "dt"):
        out = tmp_path / f"{docs}.trec"
        args = ["--collection", "fixture", "--pair", "en-de", "--run", str(tmp_path / "run.trec"), "--method", method, *extra,
                "--llm", f"hf:{tiny['qwen2']}", "--top-k", "4", "--out", str(out), "--cache", str(tmp_path / "cache"),
                "--docs", docs] + (["--translator", "dict:freedict"] if docs == "dt" else [])
        with contextlib.redirect_stdout(io.StringIO()) as said: assert cli_rerank(args) == 0
        rr = Run.read(out)
        assert all(sorted(rr.docids(q)) == sorted(run.docids(q)) for q in run)
        diag = json.loads((tmp_path / f"{docs}.trec.rerank.json").read_text())
        assert sum(d["prompts"] for d in diag["per_query"].values()) > 0 and "model calls" in said.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("method,scoring", [("setwise-heapsort", "likelihood"), ("setwise-bubblesort", "generation"),
                                            ("pointwise-yes-no", None), ("pointwise-qlm", None)])
def test_encoder_decoder_backend(tiny, small, method, scoring):
    from clir_llm.llm import get_backend
    coll, first, _ = small
    b = get_backend(f"hf:{tiny['mt5']}")
    rr = get_reranker(RerankerSpec(method=method, **({"scoring": scoring} if scoring else {}), k=2), b, progress=False)
    one = Run({q: first[q] for q in list(first)[:1]})
    out = rr.rerank(coll, one, k=5)
    assert all(sorted(out.docids(q)) == sorted(one.docids(q)) for q in one) and b.usage.calls > 0


@pytest.mark.slow
def test_new_rerankers_in_the_rerank_and_cost_tables(tiny, tmp_path):
    "A config naming the new rerankers gets their rows, tested against the first stage, and their cost rows."
    import yaml
    from clir_llm.config import load_config
    from clir_llm.pipeline import Pipeline
    from clir_llm.tables import rerank_table, cost_summary
    llm = f"hf:{tiny['qwen2']}"
    rows = [dict(name="SW", method="setwise-heapsort", k=2), dict(name="PW", method="pointwise-yes-no"),
            dict(name="QLM", method="pointwise-qlm"), dict(name="FIRST", method="listwise-first", window=3, step=1)]
    cfg = dict(name="more", collection="fixture", pairs=["en-de"], measure="MAP", experiments=["1_first_stage"],
               first_stage=dict(methods=["bm25-og"]),
               rerankers=[dict(r, llm=llm, first_stages=["bm25-og"], docs=["og"], top_k=4) for r in rows])
    (tmp_path / "more.yaml").write_text(yaml.safe_dump(cfg))
    pipe = Pipeline(load_config(tmp_path / "more.yaml"), tmp_path / "out", progress=False)
    for fam, names in (("setwise", ["SW"]), ("pointwise", ["PW", "QLM"]), ("listwise", ["FIRST"])):
        table, cost = rerank_table(pipe, fam)
        for n in names:
            row = f"BM25-OG » {n} OG"
            assert row in table.means.index and any(c.row == row and c.baseline == "BM25-OG" for c in table.cells)   # tested against the first stage
            assert row in cost_summary(cost).index
            if fam != "setwise": assert cost_summary(cost).loc[row, "prompts_per_query"] > 0   # BM25-OG finds 1 fixture document a query: no set to ask


@pytest.mark.parametrize("encoder_decoder,chat,prefill,budget", [(False, True, True, 1), (True, False, True, 2), (False, True, False, 4)])
def test_setwise_generation_token_budget_follows_llmrankers(small, encoder_decoder, chat, prefill, budget):
    """llm-rankers' SetwiseLlmRanker.compare generates 1 token after the chat prompt + " Passage:" of a decoder-only
    model and 2 for T5; a 2-token budget on a chat model read " B" + "ES" as " BES", which no label matches."""
    coll, first, by_text = small
    seen = []
    class Chat(SetJudge):
        is_encoder_decoder, is_chat, supports_prefill = encoder_decoder, chat, prefill
        def generate(self, prompts, max_new_tokens=64, **kw):
            seen.append(max_new_tokens); return super().generate(prompts, max_new_tokens, **kw)
    b = Chat(coll, lambda ids: 0, by_text)
    SetwiseReranker(b, method="heapsort", sort_k=1, num_child=3, progress=False).rerank(coll, first, k=8)
    assert seen and set(seen) == {budget}
