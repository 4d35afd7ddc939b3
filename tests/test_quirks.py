"""Issue 15, findings 4, 6, 7, 8: the reference implementations' behaviour as named switches, each checked against a
plain reimplementation of the reference (llm-rankers 0.0.2's heapsort, rank_llm 0.21.0's sliding windows) with pure
comparators; switches at their default stay out of run identities; the dense encoders' quirks by name; revisions."""
import random, re
import pytest
from clir_llm.core import ClirError, Run
from clir_llm.rerank import QrelsOracle, RerankerSpec, get_reranker
from clir_llm.pairwise import PairJudge, heapsort, run_sort
from clir_llm.listwise import sliding_window, window_spans
from clir_llm.specs import validated
from clir_llm.testing import tiny_setup
from clir_llm import dense as D


# ---- references, written from the upstream files (not imported: neither package is installed here)
def llmrankers_heapsort(docids, k, answer):
    """llm-rankers 0.0.2 `PairwiseLlmRanker` heapsort: `ComparableDoc.__gt__` is True only when the two orders answer
    ('Passage A', 'Passage B'); `heapify` compares left then right child against the largest; `heapSort` builds the heap
    from n // 2 down and pops until k are ranked. Every `>` is one `compare` (`total_compare`)."""
    calls = []
    def gt(a, b): calls.append((a, b)); return (answer(a, b), answer(b, a)) == ("A", "B")
    def heapify(arr, n, i):
        largest, l, r = i, 2 * i + 1, 2 * i + 2
        if l < n and gt(arr[l], arr[i]): largest = l
        if r < n and gt(arr[r], arr[largest]): largest = r
        if largest != i:
            arr[i], arr[largest] = arr[largest], arr[i]
            heapify(arr, n, largest)
    arr, n, ranked = list(docids), len(docids), 0
    for i in range(n // 2, -1, -1): heapify(arr, n, i)
    for i in range(n - 1, 0, -1):
        arr[i], arr[0] = arr[0], arr[i]
        ranked += 1
        if ranked == k: break
        heapify(arr, i, 0)
    top = list(reversed(arr))[:k]
    return top + [d for d in docids if d not in top], calls


def rank_llm_windows(rank_end, window_size, step, rank_start=0):
    "rank_llm 0.21.0 `ListwiseRankLLM.sliding_windows`: the (start_pos, end_pos) it hands to `permutation_pipeline`."
    out, end_pos, start_pos = [], rank_end, rank_end - window_size
    while end_pos > rank_start and start_pos + step != rank_start:
        start_pos = max(start_pos, rank_start)
        out.append((start_pos, end_pos))
        end_pos, start_pos = end_pos - step, start_pos - step
    return out


def ours_heapsort(docids, k, answer, ties):
    log, judge = [], PairJudge(lambda ps: [answer(a, b) for a, b in ps], cache=False)
    return run_sort(heapsort(docids, k, ties=ties), lambda ps: log.extend(ps) or judge(ps)), log


ANSWERS = {
    "random": lambda rng: (lambda memo: lambda a, b: memo.setdefault((a, b), rng.choice("AB")))({}),
    "always A": lambda rng: lambda a, b: "A",
    "garbage": lambda rng: lambda a, b: None,
    "graded oracle": lambda rng: (lambda g: lambda a, b: "B" if g[b] > g[a] else "A")(
        {f"d{i}": rng.choice([0, 0, 0, 1, 2]) for i in range(200)}),
    "strict order": lambda rng: (lambda v: lambda a, b: "A" if v[a] > v[b] else "B")({f"d{i}": rng.random() for i in range(200)}),
}


@pytest.mark.parametrize("kind", list(ANSWERS))
def test_heapsort_llm_rankers_ties_is_llm_rankers(kind):
    "Same comparisons in the same order and the same ranking as llm-rankers, for every list length and k."
    for n in (0, 1, 2, 3, 5, 10, 11, 17, 30, 100):
        for k in (1, 2, 10, 50):
            answer = ANSWERS[kind](random.Random(n * 1000 + k))
            docids = [f"d{i}" for i in range(n)]
            assert ours_heapsort(docids, k, answer, "llm-rankers") == llmrankers_heapsort(docids, k, answer), (kind, n, k)


def test_heapsort_default_tie_rule_differs_only_when_answers_tie():
    docids = [f"d{i}" for i in range(100)]
    strict = ANSWERS["strict order"](random.Random(0))
    assert ours_heapsort(docids, 10, strict, "first-stage") == ours_heapsort(docids, 10, strict, "llm-rankers")
    always_a = ANSWERS["always A"](None)
    ranked, calls = ours_heapsort(docids, 10, always_a, "first-stage")
    ref, ref_calls = llmrankers_heapsort(docids, 10, always_a)
    assert ranked == docids != ref and ref[:3] == ["d0", "d99", "d98"]   # llm-rankers shuffles an uninformative model's top k
    assert (len(calls), len(ref_calls)) == (203, 117)                     # +73.5 % comparisons, as the notebook states
    with pytest.raises(ClirError, match="heapsort ties must be one of"): next(heapsort(docids, ties="never"))


def test_heapsort_ties_switch_through_spec_and_reranker():
    coll, first = tiny_setup()
    class AlwaysA(QrelsOracle):
        def generate(self, prompts, max_new_tokens=64, **params): return ["Passage A"] * len(prompts)
    spec = validated(RerankerSpec, {"method": "pairwise-heapsort", "heapsort_ties": "llm-rankers"})
    rr = get_reranker(spec, AlwaysA(coll), progress=False)
    out = rr.rerank(coll, first, k=30)
    for q in first:
        expect, calls = llmrankers_heapsort(first.docids(q, 30), 10, lambda a, b: "A")
        assert out.docids(q) == expect + first.docids(q)[30:] and rr.diagnostics[q]["comparisons"] == len(calls)
    assert rr.name.endswith("[ties-llm-rankers]")
    plain = get_reranker("pairwise-heapsort", AlwaysA(coll), progress=False)
    assert all(plain.rerank(coll, first, k=30).docids(q) == first.docids(q) for q in first)
    assert "heapsort_ties" not in plain.params and "ties" not in plain.name
    with pytest.raises(ClirError, match="'pairwise-bubblesort' has no switch heapsort_ties"):
        validated(RerankerSpec, {"method": "pairwise-bubblesort", "heapsort_ties": "llm-rankers"})


@pytest.mark.parametrize("window,step", [(20, 10), (20, 5), (4, 2), (5, 5), (10, 3), (3, 1)])
def test_short_last_window_is_rank_llms(window, step):
    for n in range(0, 120):
        assert window_spans(n, window, step, "short") == rank_llm_windows(n, window, step), (n, window, step)
        full = window_spans(n, window, step, "full")
        assert full[-1:] in ([], [(0, min(window, n))]) and all(e - s == min(window, n) for s, e in full)
        if n == window or (n > window and (n - window) % step == 0): assert full == rank_llm_windows(n, window, step)
        seen = []
        sliding_window("q", list(range(n)), lambda q, ids: seen.append(len(ids)) or list(range(len(ids))), window, step, last="short")
        assert seen == [e - s for s, e in rank_llm_windows(n, window, step)]
    with pytest.raises(ClirError, match="last window must be one of full, short"): window_spans(5, last="half")


class Recording(QrelsOracle):
    def generate(self, prompts, max_new_tokens=64, **params):
        from clir_llm.templates import prompt_text
        self.seen = getattr(self, "seen", []) + [prompt_text(p) for p in prompts]
        return super().generate(prompts, max_new_tokens, **params)


def _passages(b): return [line for p in b.seen for line in p.splitlines() if re.match(r"\[\d+\] ", line)]


def test_listwise_last_window_switch_in_the_reranker():
    coll, first = tiny_setup()
    one = Run({"q0": first["q0"]})
    for last, sizes in (("full", [20, 20]), ("short", [20, 15])):
        b = Recording(coll)
        rr = get_reranker(RerankerSpec(method="listwise-rankgpt", last_window=last), b, progress=False)
        rr.rerank(coll, one, k=25)
        assert [len(re.findall(r"(?m)^\[\d+\] ", p)) for p in b.seen] == sizes
        assert rr.diagnostics["q0"]["prompts"] == len(sizes) and ("[last-short]" in rr.name) == (last == "short")


def test_listwise_cut_in_backend_tokens():
    coll, first = tiny_setup()
    class TwoTokenWords(Recording):
        def count_tokens(self, text): return 2 * super().count_tokens(text)
        def truncate(self, text, max_tokens): return " ".join(text.split()[:max_tokens // 2])
    shown = {}
    for cut in ("words", "tokens"):
        b = TwoTokenWords(coll)
        rr = get_reranker(RerankerSpec(method="listwise", cut=cut, max_words=64, passage_tokens=20), b, progress=False)
        rr.rerank(coll, first, k=30)
        shown[cut] = {len(line.split()) - 1 for line in _passages(b)}
        assert rr.params.get("cut", "words") == cut and rr.params.get("passage_tokens") == (20 if cut == "tokens" else None)
    assert shown["tokens"] == {10} and min(shown["words"]) > 10   # 20 tokens = 10 two-token words; words: uncut (< 64)
    assert rr.diagnostics["q0"]["truncated_docs"]["de"] == 30


def test_switches_stay_out_of_identities_at_their_default():
    from clir_llm.config import RerankerConfig
    from clir_llm.pipeline import rerank_params
    before = ["context", "doc_title", "k", "max_words", "passage_tokens", "prompt", "query_tokens", "scoring", "step", "window"]
    for m in ("listwise", "pairwise-heapsort", "pairwise-allpair"):
        s = RerankerSpec(method=m)
        assert sorted(s.model_dump(exclude={"method"})) == before and s.non_default_switches() == {}
        assert s.key() == m + "[" + ",".join(f"{f}={getattr(s, f)}" for f in before) + "]"
    base = dict(name="x", llm="openai:x", first_stages=["bm25-qt"])
    for method, switch, value in (("pairwise-heapsort", "heapsort_ties", "llm-rankers"), ("listwise", "last_window", "short"),
                                  ("listwise", "cut", "tokens")):
        plain = RerankerConfig(method=method, **base)
        on = validated(RerankerConfig, {"method": method, switch: value, **base})
        assert switch not in rerank_params(plain) and rerank_params(on)[switch] == value
        assert rerank_params(on) != rerank_params(plain) and RerankerConfig(**on.model_dump()) == on
        assert f"{switch} {value}" in on.describe() and switch not in plain.describe()


def test_switches_are_cli_flags():
    from clir_llm.rerank import _rerank_parser, RERANKERS
    from clir_llm.specs import spec_from_args
    common = ["--collection", "c", "--pair", "en-de", "--run", "r", "--out", "o"]
    a = _rerank_parser(RERANKERS.names()).parse_args(common + ["--method", "listwise", "--last-window", "short", "--cut", "tokens"])
    assert spec_from_args(RerankerSpec, a).non_default_switches() == {"last_window": "short", "cut": "tokens"}
    a = _rerank_parser(RERANKERS.names()).parse_args(common + ["--method", "pairwise-heapsort", "--heapsort-ties", "llm-rankers"])
    assert spec_from_args(RerankerSpec, a).heapsort_ties == "llm-rankers"
    a = _rerank_parser(RERANKERS.names()).parse_args(common + ["--method", "pairwise-heapsort", "--double-bos", "--omit-attention-mask",
                                                                 "--dtype", "bfloat16"])
    s = spec_from_args(RerankerSpec, a)
    assert s.backend_options() == {"double_bos": True, "no_attention_mask": True, "dtype": "bfloat16"} and "double_bos=True" in s.key()
    a = _rerank_parser(RERANKERS.names()).parse_args(common + ["--method", "listwise", "--answer-budget", "rank_llm", "--query-numbers",
                                                                 "rewrite", "--cl100k-budget"])
    assert spec_from_args(RerankerSpec, a).non_default_switches() == {"answer_budget": "rank_llm", "query_numbers": "rewrite", "cl100k_budget": True}


def test_dense_quirks_by_name_and_revisions(tmp_path):
    from clir_llm.cache import Cache
    assert set(D.encoder_quirks()) == {"e5-no-prefix", "repllama-128"}
    e5 = D.get_encoder_spec("e5", quirks=["e5-no-prefix"])
    assert (e5.query_prefix, e5.doc_prefix) == ("", "") and D.get_encoder_spec("e5").query_prefix == "query: "
    assert D.Dense("e5", quirks=("e5-no-prefix",), cache=Cache(tmp_path)).name == "dense:e5[e5-no-prefix]"
    assert D.Dense("repllama", quirks="repllama-128", cache=Cache(tmp_path)).encoder.spec.doc_max_length == 128
    with pytest.raises(ClirError, match="encoder m3 has no quirk 'repllama-128'"): D.get_encoder_spec("m3", quirks=("repllama-128",))
    for name, s in D.ENCODERS.items():
        if not s.stand_in and name != "nv-embed-v2": assert "revision not pinned" in s.revision_note(), name
    assert D.get_encoder_spec("nv-embed-v2").revision_note() == f"revision {D.NV_EMBED_REVISION}"   # no remote code any more
    plain = D.Encoder("repllama", cache=Cache(tmp_path)).namespace("doc").identity
    assert "base_revision" not in plain   # cache keys of unpinned specs are the ones made before the field existed
    pinned = D.Encoder(D.get_encoder_spec("repllama", base_revision="abc"), cache=Cache(tmp_path)).namespace("doc").identity
    assert pinned["base_revision"] == "abc" and {k: v for k, v in pinned.items() if k != "base_revision"} == plain


def test_dense_quirks_from_a_config_name_only_their_encoders_runs(tmp_path):
    import yaml
    from clir_llm.config import load_config
    from clir_llm.core import ClirError
    from clir_llm.pipeline import Pipeline
    cfg = dict(name="q", collection="fixture", pairs=["en-de"], measure="MAP", experiments=["1_first_stage"],
               first_stage=dict(methods=["dense:e5", "dense:e5-small", "rrf:bm25-og+dense:e5"]))
    paths = {}
    for quirks in ([], ["e5-no-prefix"]):
        (tmp_path / "q.yaml").write_text(yaml.safe_dump({**cfg, "first_stage": {**cfg["first_stage"], "dense_quirks": quirks}}))
        c = load_config(tmp_path / "q.yaml")
        p = Pipeline(c, tmp_path / "out", progress=False)
        paths[tuple(quirks)] = {m: p.first_stage_path("en-de", m) for m in cfg["first_stage"]["methods"]}
        assert c.first_stage.quirks_of("dense:e5-small") == ()
    on, off = paths[("e5-no-prefix",)], paths[()]
    assert on["dense:e5-small"] == off["dense:e5-small"]                      # another encoder's quirk does not rename its runs
    assert on["dense:e5"] != off["dense:e5"] and on["rrf:bm25-og+dense:e5"] != off["rrf:bm25-og+dense:e5"]
    (tmp_path / "q.yaml").write_text(yaml.safe_dump({**cfg, "first_stage": {**cfg["first_stage"], "dense_quirks": ["e5-typo"]}}))
    with pytest.raises(ClirError, match="unknown dense quirk 'e5-typo'"): load_config(tmp_path / "q.yaml")


# ---- issue 15 findings 3, 4, 6: the backend's and rank_llm's switches, paper_quirks in a configuration, document length in tokens
class Kwargs(QrelsOracle):
    "Records the keyword arguments of every generate call."
    def generate(self, prompts, max_new_tokens=64, **params):
        self.calls = getattr(self, "calls", []) + [dict(max_new_tokens=max_new_tokens, n=len(prompts), **params)]
        from clir_llm.templates import prompt_text
        self.seen = getattr(self, "seen", []) + [prompt_text(p) for p in prompts]
        return super().generate(prompts, max_new_tokens, **params)


def test_rank_llm_answer_budget_is_max_and_min_new_tokens_per_window_size():
    coll, first = tiny_setup()
    one = Run({"q0": first["q0"]})
    b = Kwargs(coll)
    rr = get_reranker(RerankerSpec(method="listwise", answer_budget="rank_llm", last_window="short"), b, progress=False)
    rr.rerank(coll, one, k=25)
    want = [b.count_tokens(" > ".join(f"[{i}]" for i in range(1, n + 1))) for n in (20, 15)]
    assert [(c["max_new_tokens"], c.get("min_new_tokens")) for c in b.calls] == [(w, w) for w in want]
    plain = Kwargs(coll)
    get_reranker(RerankerSpec(method="listwise"), plain, progress=False).rerank(coll, one, k=25)
    assert {(c["max_new_tokens"], c.get("min_new_tokens")) for c in plain.calls} == {(want[0] + 2, None)}
    assert "[answer_budget-rank_llm]" in rr.name and rr.params["answer_budget"] == "rank_llm"


def test_query_numbers_rewritten_as_rank_llm():
    from clir_llm.core import Query
    coll, first = tiny_setup()
    coll.queries["q0"] = Query("q0", "was ist [3] und [12]?")
    class Seen(Kwargs):
        def generate(self, prompts, max_new_tokens=64, **params):
            from clir_llm.templates import prompt_text
            self.seen = getattr(self, "seen", []) + [prompt_text(p) for p in prompts]; return ["[1] > [2]"] * len(prompts)
    for mode, shown in (("keep", "[3] und [12]"), ("rewrite", "(3) und (12)")):
        b = Seen(coll)
        get_reranker(RerankerSpec(method="listwise", query_numbers=mode), b, progress=False).rerank(coll, Run({"q0": first["q0"]}), k=5)
        assert all(f"query: was ist {shown}?" in p for p in b.seen), mode


def test_cl100k_budget_counts_like_rank_llm_and_sends_no_max_tokens(tmp_path):
    from clir_llm.llm_openai import OpenAIBackend
    from clir_llm.listwise import rank_llm_gpt_tokens, tiktoken_encoding
    from clir_llm.testing import FakeOpenAIServer
    coll, first = tiny_setup()
    one = Run({"q0": first["q0"]})
    with FakeOpenAIServer(responder=lambda m, b: "[2] > [1]") as s:
        for on in (False, True):
            api = OpenAIBackend.create("gpt-3.5-turbo", base_url=s.url, api_key="x")
            rr = get_reranker(RerankerSpec(method="listwise-rankgpt", cl100k_budget=on, context=900), api, progress=False)
            rr.rerank(coll, one, k=10)
        capped, uncapped = s.requests[0]["body"], s.requests[-1]["body"]
    assert "max_tokens" in capped and "max_tokens" not in uncapped
    assert rank_llm_gpt_tokens(uncapped["messages"], "gpt-3.5-turbo") <= 900 - (len(tiktoken_encoding().encode(" > ".join(f"[{i}]" for i in range(1, 21)))) - 1)
    with pytest.raises(ClirError, match="cl100k_budget is rank_llm's budgeting of OpenAI models"):
        get_reranker(RerankerSpec(method="listwise", cl100k_budget=True), QrelsOracle(coll), progress=False)


def test_backend_switches_reach_the_backend_and_the_identity(tmp_path):
    import yaml
    from clir_llm.config import load_config
    from clir_llm.pipeline import Pipeline, rerank_params
    import clir_llm.llm as L
    made = []
    class Fake:
        def __init__(self, **kw): made.append(kw)
    cfg = dict(name="q", collection="fixture", pairs=["en-de"], measure="MAP", experiments=["3_pairwise"],
               first_stage=dict(methods=["bm25-og"]),
               rerankers=[dict(name="P", llm="hf:meta-llama/Llama-3.1-8B-Instruct", method="pairwise-heapsort", first_stages=["bm25-og"])])
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(cfg))
    plain = load_config(tmp_path / "q.yaml").rerankers[0]
    (tmp_path / "q.yaml").write_text(yaml.safe_dump({**cfg, "paper_quirks": True}))
    c = load_config(tmp_path / "q.yaml")
    rc = c.rerankers[0]
    assert rc.non_default_switches() == {"heapsort_ties": "llm-rankers", "double_bos": True, "no_attention_mask": True}
    assert rc.backend_options() == {"double_bos": True, "no_attention_mask": True} and plain.backend_options() == {}
    assert c.first_stage.dense_quirks == ["e5-no-prefix", "repllama-128"]
    assert rerank_params(rc) != rerank_params(plain) and rerank_params(rc)["double_bos"] is True and "double_bos" not in rerank_params(plain)
    (tmp_path / "q.yaml").write_text(yaml.safe_dump({**cfg, "paper_quirks": True, "rerankers": [{**cfg["rerankers"][0], "double_bos": False}]}))
    assert load_config(tmp_path / "q.yaml").rerankers[0].backend_options() == {"no_attention_mask": True}   # the file's own value wins
    p = Pipeline(c, tmp_path / "out", progress=False)
    orig = L.get_backend
    try:
        L.get_backend = lambda spec, cache=None, **kw: Fake(**kw)
        p.backend(rc.llm, **rc.backend_options()); p.backend(rc.llm)
    finally: L.get_backend = orig
    assert made == [{"double_bos": True, "no_attention_mask": True}, {}]
    (tmp_path / "q.yaml").write_text(yaml.safe_dump({**cfg, "paper_quirks": "yes"}))
    with pytest.raises(ClirError): load_config(tmp_path / "q.yaml")


def test_paper_quirks_variant_configs_set_every_switch():
    from clir_llm.config import load_config
    for name in ("paper-clef", "paper-ciral"):
        base, quirks = load_config(f"configs/{name}.yaml"), load_config(f"configs/{name}-quirks.yaml")
        assert not base.paper_quirks and quirks.paper_quirks and quirks.name == f"{name}-quirks"
        assert all(r.non_default_switches() == {} for r in base.rerankers)
        got = {r.name: r.non_default_switches() for r in quirks.rerankers}
        assert got["RankZephyr"] == {"last_window": "short", "query_numbers": "rewrite", "answer_budget": "rank_llm"}
        assert got["RankGPT-4.1"] == got["RankGPT-3.5"] == {"last_window": "short", "cl100k_budget": True}
        assert got["Llama-3.1-8B"] == got["Aya-101"] == {"double_bos": True, "no_attention_mask": True}
        assert [str(m) for m in quirks.first_stage.methods] == [str(m) for m in base.first_stage.methods]
        assert (base.first_stage.nllb_output, quirks.first_stage.nllb_output) == ("256-new-tokens", "model-max-length")
        assert quirks.first_stage.translator_options() == {"max_new_tokens": None} and base.first_stage.translator_options() == {}


def test_nllb_output_cap_switch(tmp_path):
    import yaml
    from clir_llm.config import load_config
    from clir_llm.pipeline import Pipeline
    from clir_llm.translate import NLLBTranslator, tiny_nllb
    cfg = dict(name="q", collection="fixture", pairs=["en-de"], measure="MAP", experiments=["1_first_stage"],
               first_stage=dict(methods=["bm25-qt", "bm25-og"], translator="nllb:facebook/nllb-200-1.3B"))
    paths = {}
    for v in ("256-new-tokens", "model-max-length"):
        (tmp_path / "q.yaml").write_text(yaml.safe_dump({**cfg, "first_stage": {**cfg["first_stage"], "nllb_output": v}}))
        p = Pipeline(load_config(tmp_path / "q.yaml"), tmp_path / "out", progress=False)
        paths[v] = {m: p.first_stage_path("en-de", m) for m in ("bm25-qt", "bm25-og")}
        assert p.translator().max_new_tokens == (256 if v == "256-new-tokens" else None)
    assert paths["256-new-tokens"]["bm25-og"] == paths["model-max-length"]["bm25-og"]
    assert paths["256-new-tokens"]["bm25-qt"] != paths["model-max-length"]["bm25-qt"]
    (tmp_path / "q.yaml").write_text(yaml.safe_dump({**cfg, "first_stage": {**cfg["first_stage"], "translator": "dict:freedict", "nllb_output": "model-max-length"}}))
    with pytest.raises(ClirError, match="needs an nllb: translator"): load_config(tmp_path / "q.yaml")
    seen = []
    class M:   # what generate is handed
        def generate(self, **kw): seen.append(kw); import torch; return torch.zeros((len(kw["input_ids"]), 2), dtype=torch.long)
    for cap in (256, None):
        t = NLLBTranslator(str(tiny_nllb(tmp_path / "nllb")), max_new_tokens=cap, progress=False, device="cpu")
        t.load(); t._model = M()
        t._translate_batch(["Hallo Welt."], "de", "en")
    assert seen[0]["max_new_tokens"] == 256 and "max_new_tokens" not in seen[1]


def test_doc_length_cuts_listwise_passages_in_the_rerankers_tokens():
    from clir_llm.config import RerankerConfig
    from clir_llm.pipeline import doc_length_options, rerank_params
    lw = RerankerConfig(name="L", llm="hf:x", method="listwise", first_stages=["bm25-og"])
    prp = RerankerConfig(name="P", llm="hf:x", method="pairwise-bubblesort", first_stages=["bm25-og"])
    assert doc_length_options(lw, 64) == {"passage_tokens": 64, "max_words": 64, "cut": "tokens"}
    assert doc_length_options(prp, 64) == {"passage_tokens": 64, "max_words": 64}   # pairwise cuts in tokens already
    assert rerank_params(prp, 64) == {**rerank_params(prp), "passage_tokens": 64, "max_words": 64}   # the demo's runs keep their names
    coll, first = tiny_setup()
    class TwoTokenWords(Recording):
        def count_tokens(self, text): return 2 * super().count_tokens(text)
        def truncate(self, text, max_tokens): return " ".join(text.split()[:max_tokens // 2])
    b = TwoTokenWords(coll)
    get_reranker(lw, b, progress=False, **doc_length_options(lw, 16)).rerank(coll, first, k=20)
    assert {len(line.split()) - 1 for line in _passages(b)} <= {8}   # 16 tokens = 8 two-token words, not 16 words


def test_dense_dtypes_are_the_authors_and_name_the_runs(tmp_path):
    import yaml
    from clir_llm.config import load_config
    from clir_llm.pipeline import Pipeline
    from clir_llm.retrieve import parse_method
    assert {n: D.get_encoder_spec(n).half for n in ("mgte", "m3", "e5", "repllama", "nv-embed-v2")} == \
        {"mgte": "float32", "m3": "float16", "e5": "float16", "repllama": "float16", "nv-embed-v2": "float32"}
    cfg = dict(name="q", collection="fixture", pairs=["en-de"], measure="MAP", experiments=["1_first_stage"],
               first_stage=dict(methods=["dense:mgte", "dense:m3", "dense:e5-small"]))
    paths = {}
    for dd in ({}, {"mgte": "float16", "m3": "bfloat16"}):
        (tmp_path / "q.yaml").write_text(yaml.safe_dump({**cfg, "first_stage": {**cfg["first_stage"], "dense_dtype": dd}}))
        c = load_config(tmp_path / "q.yaml")
        paths[bool(dd)] = {m: Pipeline(c, tmp_path / "out", progress=False).first_stage_path("en-de", m) for m in cfg["first_stage"]["methods"]}
        if dd: assert c.first_stage.dtypes_of("dense:m3") == ("m3=bfloat16",) and c.first_stage.dtypes_of("dense:mgte") == ()
        else: assert c.first_stage.dtypes_of("dense:mgte") == ("mgte=float32",) and c.first_stage.dtypes_of("dense:e5-small") == ()
    assert paths[True]["dense:e5-small"] == paths[False]["dense:e5-small"]      # the stand-in's runs keep their names
    assert paths[True]["dense:mgte"] != paths[False]["dense:mgte"] and paths[True]["dense:m3"] != paths[False]["dense:m3"]
    from clir_llm.cache import Cache
    r = parse_method("dense:m3").build(cache=Cache(tmp_path / "c"), dense_dtype={"m3": "bfloat16"}, progress=False)
    assert r.encoder.spec.half == "bfloat16"
    (tmp_path / "q.yaml").write_text(yaml.safe_dump({**cfg, "first_stage": {**cfg["first_stage"], "dense_dtype": {"m4": "float16"}}}))
    with pytest.raises(ClirError, match="unknown dense encoder 'm4'"): load_config(tmp_path / "q.yaml")
