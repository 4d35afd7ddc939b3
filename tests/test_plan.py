"""The dry-run plan's counts (issue 15 finding 9) and GPU-hours (issue 18 item 6), checked against computations made
here from the configuration and the collection, not with the plan's own helpers."""

import math, random
from pathlib import Path
import pytest, yaml
from clir_llm.collections import load_collection
from clir_llm.config import load_config
from clir_llm.core import ClirError
from clir_llm.plan import plan, plan_counts, plan_data, llm_seconds, gpu_plan
from clir_llm.pairwise import max_comparisons as worst_comparisons

ROOT = Path(__file__).parents[1]


def _windows(n, window, step):
    "Sliding windows over n documents from the bottom, step by step, the last one at the top."
    return 1 if n <= window else math.ceil((n - window) / step) + 1


def _bubble_worst(n, k):
    "Drive the package's bubblesort with a judge that always says 'swap' and count what it asks."
    from clir_llm.pairwise import bubblesort

    g, asked = bubblesort(list(range(n)), k=k), 0
    try:
        pairs = next(g)
        while True:
            asked += len(pairs)
            pairs = g.send([1.0] * len(pairs))
    except StopIteration:
        return asked


@pytest.fixture(scope="module")
def demo():
    return load_config("demo"), yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())


def test_demo_counts_match_an_independent_count(demo):
    cfg, raw = demo
    fs, pairs = raw["first_stage"], raw["pairs"]
    runs_on = lambda m, p: p in fs.get("only_pairs", {}).get(m, pairs)
    first = sum(runs_on(m, p) for m in fs["methods"] for p in pairs)
    queries = {p: len(load_collection("demo", p).qrels) for p in pairs}
    per_run, rer = {}, 0
    for r in raw["rerankers"]:
        rp = r.get("pairs", pairs)
        n = min(r.get("top_k", 100), fs.get("depth", 100))
        per_q = (
            _windows(n, r.get("window", 20), r.get("step", 10))
            if r["method"].startswith("listwise")
            else 2 * _bubble_worst(n, r.get("k", 10))
        )
        runs = [(f, d, p) for f in r["first_stages"] for d in r.get("docs", ["og", "dt"]) for p in rp if runs_on(f, p)]
        rer += len(runs)
        per_run[r["name"]] = per_run.get(r["name"], 0) + sum(
            min(r.get("max_queries") or queries[p], queries[p]) * per_q for _, _, p in runs
        )
    dl = raw["doc_length"]
    doc = [
        (n_, f, d, p, t)
        for n_ in dl["rerankers"]
        for f in dl["first_stages"]
        for d in dl["docs"]
        for p in next(r for r in raw["rerankers"] if r["name"] == n_).get("pairs", pairs)
        if runs_on(f, p)
        for t in dl["tokens"]
    ]

    c = plan_counts(cfg)
    assert (
        [len(c["grid"][k]) for k in ("first stage", "reranked", "document length")]
        == [first, rer, len(doc)]
        == [27, 6, 4]
    )
    assert {p: t.queries for p, t in c["texts"].items()} == queries
    for name, calls in per_run.items():
        assert sum(r["calls"] for r in c["rows"]["reranked"] if r["reranker"] == name) == calls
    prp = next(r for r in raw["rerankers"] if r["name"] == dl["rerankers"][0])
    assert sum(r["calls"] for r in c["rows"]["document length"]) == len(doc) * prp["max_queries"] * 2 * _bubble_worst(
        prp["top_k"], prp["k"]
    )
    lines = plan(cfg)
    assert f"runs: first stage {first}, reranked {rer}, document length {len(doc)}" in lines


def test_demo_text_lengths_are_the_collections(demo):
    cfg, _ = demo
    coll = load_collection("demo", "en-fi")
    words = [len(d.full_text.split()) for d in coll.iter_docs()]
    t = plan_counts(cfg)["texts"]["en-fi"]
    assert t.measured and t.docs == len(words) and sum(t.og_words) == sum(words)
    q = [len(coll.queries[x].text.split()) for x in coll.qrels]
    assert t.query_words == pytest.approx(sum(q) / len(q))


def test_sort_worst_cases_are_the_sorts_own():
    from clir_llm.pairwise import heapsort, allpair

    assert worst_comparisons("bubblesort", 100, 10) == _bubble_worst(100, 10) == 945

    def count(gen, answer):
        asked = 0
        try:
            pairs = next(gen)
            while True:
                asked += len(pairs)
                pairs = gen.send([answer() for _ in pairs])
        except StopIteration:
            return asked

    rng = random.Random(1)
    seen = [count(heapsort(list(range(100)), k=10), lambda: rng.choice((0.0, 0.5, 1.0))) for _ in range(30)]
    seen += [count(heapsort(list(range(100)), k=10), lambda v=v: v) for v in (0.0, 0.5, 1.0)]
    assert max(seen) <= worst_comparisons("heapsort", 100, 10) and max(seen) >= 0.8 * worst_comparisons(
        "heapsort", 100, 10
    )
    assert count(allpair(list(range(100))), lambda: 1.0) == worst_comparisons("allpair", 100, 10) == 4950


@pytest.mark.parametrize(
    "config, runs, listwise, openai, prp",
    [
        ("paper-clef", "first stage 72, reranked 180, document length 216", "116.6k", "38.9k", "20.41M"),
        ("paper-ciral", "first stage 32, reranked 80, document length 0", "39.3k", "26.2k", "5.50M"),
    ],
)
def test_paper_plans_print_the_issue_counts(config, runs, listwise, openai, prp, monkeypatch):
    for v in ("CLEF_HOME", "CIRAL_HOME", "OPENAI_API_KEY"):
        monkeypatch.delenv(v, raising=False)
    lines = plan(load_config(config))
    text = "\n".join(lines)
    assert f"runs: {runs}" in lines
    assert f"calls in total: {listwise} listwise calls ({openai} to OpenAI), {prp} PRP prompts (worst case)" in text
    assert "missing: credentials: OPENAI_API_KEY is unset" in text
    assert ("$CLEF_HOME is unset" in text) == (config == "paper-clef") and ("$CIRAL_HOME is unset" in text) == (
        config == "paper-ciral"
    )
    assert (
        "GPU-hours total:" in text
        and "saves: prefix caching" in text
        and "saves: heapsort instead of bubblesort" in text
    )


def test_ciral_plan_reads_shipped_translations_unless_asked(monkeypatch):
    monkeypatch.delenv("CIRAL_HOME", raising=False)
    cfg = load_config("paper-ciral")
    text = "\n".join(plan(cfg, gpu=None))
    assert (
        "reads: first stage bm25-dt: original queries; documents: the translations shipped with the collection (no document translation)"
        in text
    )
    assert "translates queries (QT)\n" in text + "\n" and "documents: translated by" not in text
    own = cfg.model_copy(update=dict(first_stage=cfg.first_stage.model_copy(update=dict(dt_source="translator"))))
    text = "\n".join(plan(own, gpu=None))
    nllb = "nllb:facebook/nllb-200-1.3B[revision=b0de46b488af0cf31749cd8da5ed3171e11b2309]"  # pinned (issue 38 item 6)
    assert f"documents: translated by {nllb} on en-ha, en-so, en-sw, en-yo" in text
    assert "translates queries (QT) and documents (DT)" in text


def test_gpu_hours_follow_the_throughput_table():
    T = plan_data("throughput")
    assert T["as_of"] and all(g.get("source") for g in T["gpus"].values())
    rate = T["throughput"]["H200"]["8B"]["prefill"]
    # one-token answers: prefill only
    assert llm_seconds("meta-llama/Llama-3.1-8B-Instruct", 10, 10 * rate, 10) == pytest.approx(10.0)
    cfg = load_config("paper-ciral")
    c = plan_counts(cfg)
    h200, a100 = gpu_plan(cfg, c, "H200"), gpu_plan(cfg, c, "A100-80GB")
    assert 0 < h200["total"]["fast"] < h200["total"]["paper"] < a100["total"]["paper"]
    assert h200["gpus_under_8h"]["fast"] == math.ceil(h200["total"]["fast"] / 8)
    assert all(v >= 0 for v in h200["savings"].values()) and not h200["unknown"]
    with pytest.raises(ClirError, match="unknown GPU 'TPU'"):
        plan(cfg, gpu="TPU")


def test_demo_plan_one_line_per_reranker_pairs_of_only_pairs_and_singulars():
    "Review findings: a reranker named by two config entries had its (already summed) calls line twice; the reads of a method with only_pairs named every pair; '1 comparisons'."
    cfg = load_config("demo")
    lines = plan(cfg)
    names = list(dict.fromkeys(r.name for r in cfg.rerankers))
    assert len(names) < len(cfg.rerankers)  # the demo has entries sharing a name: the case of the finding
    for n in names:
        assert sum(l.startswith(f"calls: reranker {n} (") for l in lines) == 1, n
    assert len([l for l in lines if l.startswith("reads:")]) == len(set(l for l in lines if l.startswith("reads:")))
    only = cfg.first_stage.only_pairs["bm25-dt"]
    assert (
        f"reads: first stage bm25-dt: original queries; documents: translated by dict:freedict on {', '.join(only)}"
        in lines
    )
    rrf = next(l for l in lines if l.startswith("reads: first stage rrf:"))
    assert f"on {', '.join(cfg.first_stage.only_pairs[rrf.split()[3][:-1]])}]" in rrf and "en-it" not in rrf
    cache = next(l for l in lines if l.startswith("saves: the comparison cache"))
    assert "(2 comparisons," in cache and "asks 2 comparisons a query" in cache  # top 3, k 1
    top2 = cfg.model_copy(update={"rerankers": [r.model_copy(update={"top_k": 2}) for r in cfg.rerankers]})
    cache = next(l for l in plan(top2) if l.startswith("saves: the comparison cache"))
    assert "(1 comparison," in cache and "asks 1 comparison a query" in cache and "1 comparisons" not in cache


def test_dry_run_counts_prefill_reuse_from_the_schedules_and_the_flop_floor(monkeypatch):
    "Issue 30 item 3: per stage, prefill tokens with and without reuse (PRP: the sorts' simulated schedules, about half reused), and the FLOP floor beside the estimate."
    for v in ("CLEF_HOME", "CIRAL_HOME", "OPENAI_API_KEY"):
        monkeypatch.delenv(v, raising=False)
    cfg = load_config("paper-clef")
    gp = gpu_plan(cfg, plan_counts(cfg))
    # reuse counted only where an engine reuses: not for Aya-101 (an encoder-decoder), issue 38 item 5
    tk = gp["tokens"]["reranked"]
    rows = plan_counts(cfg)["rows"]["reranked"]
    dec = [r for r in rows if r["engine"] and r["serve"]]
    assert tk["reused"] == pytest.approx(sum(r["reused_tokens"] for r in dec)) and all(
        not r["serve"] for r in rows if r["reranker"] == "Aya-101"
    )
    assert (
        0.4 < sum(r["reused_tokens"] for r in dec) / sum(r["prompt_tokens"] for r in dec) < 0.7
        and 0 < tk["floor"] < gp["hours"]["reranked"]["fast"]
    )
    text = "\n".join(plan(cfg))
    line = next(l for l in text.splitlines() if l.startswith("floor reranked: "))
    assert (
        "without reuse" in line and "% reused" in line and "floor = tokens × 2 × parameters / peak (989 TFLOP/s" in text
    )
    assert "PRP prompts also passage A" in text


def test_gpu_hours_follow_the_configured_batches():
    """Issue 27 G: the plan's first column is what the configuration runs: NLLB token-budgeted on a GPU (the default, the
    paper configs' batch_size=256) unless batch_tokens=0, and each transformers reranker at its own batch_size."""
    from clir_llm.plan import gpu_lines
    from clir_llm.translate import TranslatorSpec

    cfg = load_config("paper-clef")
    c = plan_counts(cfg)
    gp, fs = gpu_plan(cfg, c), cfg.first_stage
    assert gp["nllb"] == "serving" and gp["savings"]["batched NLLB"] == 0
    assert gp["hours"]["first stage"]["paper"] == gp["hours"]["first stage"]["fast"]
    fixed = cfg.model_copy(
        update=dict(
            first_stage=fs.model_copy(
                update=dict(translator=TranslatorSpec.parse("nllb:facebook/nllb-200-1.3B[batch_tokens=0]"))
            )
        )
    )
    gf = gpu_plan(fixed, c)
    assert (
        gf["nllb"] == "hf"
        and gf["savings"]["batched NLLB"] > 0
        and gf["hours"]["first stage"]["paper"] > gf["hours"]["first stage"]["fast"]
    )
    assert {r["reranker"]: r["batch"] for r in c["rows"]["reranked"]} == {
        "RankZephyr": 1,
        "RankGPT-3.5": None,
        "RankGPT-4.1": None,
        "Llama-3.1-8B": 2,
        "Aya-101": 2,
    }
    # fewer prompts per call: slower decoding on transformers; the serving engine ignores it
    m = "meta-llama/Llama-3.1-8B-Instruct"
    assert llm_seconds(m, 8, 0, 16, engine="hf", batch=2) == 4 * llm_seconds(m, 8, 0, 16, engine="hf") and llm_seconds(
        m, 8, 0, 16, batch=2
    ) == llm_seconds(m, 8, 0, 16)
    text = "\n".join(gpu_lines(cfg, c))
    assert (
        "RankZephyr transformers at batch 1, float16; Llama-3.1-8B transformers at batch 2, float16; "
        "Aya-101 transformers at batch 2, float16; NLLB token-budgeted"
    ) in text
    assert "token-budgeted NLLB batches instead" not in text and "token-budgeted NLLB batches instead" in "\n".join(
        gpu_lines(fixed, c)
    )


# ---------- issue 37 item 3 (the planner's collection branch): counts without the data come from the collection's own
# registration (`sizes`), not from a branch that took every collection but CIRAL for CLEF 2003
def test_assumed_counts_are_the_collections_own(monkeypatch):
    from types import SimpleNamespace
    from clir_llm import plan as P
    from clir_llm.collections import COLLECTIONS, register_collection

    lengths = {**plan_data("lengths")}
    lengths["collections"] = {
        **lengths["collections"],
        "sized-test": {"query_words": 9, "doc_words": {"de": 120}},
        "unsized-test": {"query_words": 9, "doc_words": {"de": 120}},
    }
    monkeypatch.setattr(P, "plan_data", lambda name: lengths if name == "lengths" else plan_data(name))
    loader = lambda pair, options, cache_root=None: None
    try:
        register_collection(
            "sized-test",
            loader,
            ["en-de"],
            "a test collection",
            env="CLIR_TEST_UNSET_HOME",
            sizes=lambda code: (7, 1234),
        )
        register_collection("unsized-test", loader, ["en-de"], "a test collection", env="CLIR_TEST_UNSET_HOME")
        p = P._assumed(SimpleNamespace(collection="sized-test"), "en-de")
        # CLEF's 60 topics and 294,809 German documents before
        assert (p.queries, p.docs, p.og_words, p.measured) == (7, 1234, [120], False)
        with pytest.raises(ClirError, match="registration gives no sizes"):
            P._assumed(SimpleNamespace(collection="unsized-test"), "en-de")
        clef, ciral = P._assumed(load_config("paper-clef"), "en-de"), P._assumed(load_config("paper-ciral"), "en-sw")
        # the shipped ones as before
        assert (clef.queries, clef.docs, ciral.queries, ciral.docs) == (60, 294_809, 85, 949_013)
    finally:
        for n in ("sized-test", "unsized-test"):
            COLLECTIONS._items.pop(n, None)


# ---------- issue 38 item 5: the plan counts what the code runs. Each family's row recounted here from first principles:
# prompts per query (the sorts and windows driven here), tokens per prompt (the lengths file, the options' cuts, the
# template's characters / 4), answer tokens as the reranker's code asks for them, and the throughput table's rates,
# on the engine, dtype and prefix reuse the configured backend runs (transformers reuses nothing in float16, nor for
# an encoder-decoder; vLLM caches prefixes)
def _recount_hours(T, model, prompts, tokens, answer, engine, batch=None, dtype="float16", gpu="H200"):
    "GPU-hours of `prompts` prompts of `tokens` prompt tokens in all and `answer` new tokens each (the first comes out of the prefill)."
    cls = T["models"][model]
    tp, g, c = T["throughput"][gpu][cls], T["gpus"][gpu], T["classes"][cls]
    f32 = dtype == "float32"
    pre = tp["prefill"] * (g["fp32_tflops"] / g["bf16_tflops"] if f32 else 1.0)
    if engine == "hf":
        e = T["engines"]["hf"]
        pre *= e["prefill_fraction"]
        dec = min(batch or e["batch"], e["batch"]) / (
            (4 if f32 else 2) * c["decode_params_b"] * 1e9 / (g["hbm_tb_s"] * 1e12) + e["step_overhead_s"]
        )
    else:
        dec = tp["decode"] * (0.5 if f32 else 1.0)
    return (tokens / pre + prompts * max(answer - 1, 0) / dec) / 3600


def _template(text):
    return len(text) / 4.0  # characters per token (the lengths file's rule of thumb, OpenAI's)


@pytest.fixture()
def no_data(monkeypatch):
    for v in ("CLEF_HOME", "CIRAL_HOME", "OPENAI_API_KEY", "NEUCLIR_MT_HOME"):
        monkeypatch.delenv(v, raising=False)


def _row(counts, name, stage="reranked", docs="og", pair=None, tokens=None):
    return next(
        r
        for r in counts["rows"][stage]
        if r["reranker"] == name and r["docs"] == docs and (pair is None or r["pair"] == pair) and r["tokens"] == tokens
    )


def _plan_hours(r):
    from clir_llm import plan as P

    return P._row_seconds(r, "H200", r["engine"], r["reuse"]) / 3600


def test_recount_listwise_and_prp_rows_from_first_principles(no_data):
    "RankZephyr on vLLM (serving rate), Llama-3.1 PRP on transformers (2 new tokens, no reuse in float16), Aya-101 (T5: 2 tokens, no reuse)."
    T, L = plan_data("throughput"), plan_data("lengths")
    cfg = load_config("paper-clef-gpu")
    c, a = plan_counts(cfg), L["collections"]["clef2003"]
    tpw = L["tokens_per_word"]
    q_tok, d_tok = a["query_words"] * tpw["en"], a["doc_words"]["de"] * tpw["de"]
    # listwise: 9 windows of 20 (top 100, step 10), each at most the context less its answer (20 ids of 4 tokens)
    rz = cfg.reranker("RankZephyr")
    prompt = yaml.safe_load((ROOT / "clir_llm" / "prompts" / "rankzephyr.yaml").read_text())
    frame = _template(prompt["system"] + prompt["prefix"] + prompt["suffix"]) + 2 * q_tok + 20 * 2
    per = min(frame + 20 * min(a["doc_words"]["de"], rz.options.max_words) * tpw["de"], rz.options.context - 20 * 4)
    n = 60 * _windows(100, 20, 10)
    r = _row(c, "RankZephyr", pair="en-de")
    assert r["engine"] == "serving" and r["reuse"] and r["calls"] == n
    want = _recount_hours(T, rz.llm.model, n, n * per, 20 * 4, "serving")
    assert _plan_hours(r) == pytest.approx(want, rel=0.05)
    # PRP: both orders of bubblesort's worst case; query cut at 128, passages at 300 tokens; 2 new tokens (answers: parse)
    prp = yaml.safe_load((ROOT / "clir_llm" / "prompts" / "prp.yaml").read_text())
    per = (
        _template(prp["prompt"].format(query="", a="", b="") + prp["answer_prefix"])
        + min(q_tok, 128)
        + 2 * min(d_tok, 300)
    )
    n = 60 * 2 * _bubble_worst(100, 10)
    for name in ("Llama-3.1-8B", "Aya-101"):
        r = _row(c, name, pair="en-de")
        assert (
            r["calls"] == n
            and r["output_tokens"] == 2 * n
            and not r["reuse"]
            and r["engine"] == "hf"
            and r["dtype"] == "float16"
        )
        want = _recount_hours(T, cfg.reranker(name).llm.model, n, n * per, 2, "hf")
        assert _plan_hours(r) == pytest.approx(want, rel=0.05), name
    # the quirks configuration: llm-rankers' exact answers, 1 new token on Llama (decoder-only), still 2 on Aya-101 (T5)
    cq = plan_counts(load_config("paper-clef-quirks"))
    assert (
        _row(cq, "Llama-3.1-8B", pair="en-de")["output_tokens"] == n
        and _row(cq, "Aya-101", pair="en-de")["output_tokens"] == 2 * n
    )


def test_recount_cross_encoder_and_pointwise_rows_from_first_principles(no_data):
    "NeuCLIR (no data here): counts from ir_datasets' metadata, default lengths; one forward pass per pair."
    T, L = plan_data("throughput"), plan_data("lengths")
    cfg = load_config("neuclir-2022-extended")
    c, a = plan_counts(cfg), L["collections"]["neuclir22"]
    tpw = L["tokens_per_word"]
    q_tok, d_tok = a["query_words"] * tpw["en"], a["doc_words"]["fa"] * tpw["fa"]
    n = 46 * 100  # neuclir/1/fa/trec-2022: 46 topics (ir_datasets' metadata); top 100
    ce = _row(c, "bge-reranker-v2-m3", pair="en-fa")
    assert ce["calls"] == n and ce["output_tokens"] == 0
    want = _recount_hours(T, "BAAI/bge-reranker-v2-m3", n, n * (q_tok + min(d_tok, 512 - q_tok - 4) + 4), 0, "serving")
    assert _plan_hours(ce) == pytest.approx(want, rel=0.05)
    pw = _row(c, "Qwen3-Reranker-0.6B", pair="en-fa")
    t = yaml.safe_load((ROOT / "clir_llm" / "prompts" / "qwen3-reranker.yaml").read_text())
    frame = _template(
        "".join(str(t.get(f) or "") for f in ("system", "prefill", "answer_prefix"))
        + t["prompt"].format(query="", passage="")
    )
    o = cfg.reranker("Qwen3-Reranker-0.6B").options
    per = frame + min(q_tok, o.query_tokens or q_tok) + min(d_tok, o.passage_tokens or d_tok)
    assert pw["calls"] == n and pw["engine"] == "hf" and not pw["reuse"]
    assert _plan_hours(pw) == pytest.approx(
        _recount_hours(T, "Qwen/Qwen3-Reranker-0.6B", n, n * per, 0, "hf"), rel=0.05
    )
    assert any(l.startswith("GPU-hours total: ") for l in plan(cfg)) and not any(
        "counts: not available" in l for l in plan(cfg)
    )


def test_recount_setwise_row_and_reuse_in_float32():
    "Setwise on the demo's stand-in (float32: transformers reuses prefixes by default there): one new token after the prefill."
    T = plan_data("throughput")
    cfg = load_config("demo-rerankers")
    c = plan_counts(cfg)
    r = next(r for r in c["rows"]["reranked"] if r["family"] == "setwise" and r["calls"])
    # one token each: the first comes from the prefill
    assert r["dtype"] == "float32" and r["reuse"] and r["output_tokens"] == r["calls"]
    want = _recount_hours(T, r["model"], r["calls"], r["prompt_tokens"] - r["reused_tokens"], 1, "hf", dtype="float32")
    assert _plan_hours(r) == pytest.approx(want, rel=0.05)


def test_fastest_column_does_not_reuse_for_an_encoder_decoder(no_data):
    "Aya-101: transformers reuses nothing for encoder-decoders and vLLM does not serve it: its fastest hours are its configured ones."
    cfg = load_config("paper-clef-gpu")
    c = plan_counts(cfg)
    aya = cfg.model_copy(update={"rerankers": [r for r in cfg.rerankers if r.name == "Aya-101"], "doc_length": None})
    ca = plan_counts(aya)
    gp = gpu_plan(aya, ca)
    assert (
        gp["hours"]["reranked"]["fast"] == pytest.approx(gp["hours"]["reranked"]["paper"])
        and gp["savings"]["prefix caching"] == 0
    )
    assert gp["tokens"]["reranked"]["reused"] == 0


def test_encoders_cost_at_the_dtype_they_run_in(no_data):
    "E5 and mGTE run in float32 on a GPU (the authors'): the GPU's FP32 rate, about 15 times slower on an H200 than 16-bit."
    from clir_llm.plan import encoder_dtype, encode_seconds

    cfg = load_config("paper-clef-gpu")
    assert [encoder_dtype(cfg, e) for e in ("mgte", "e5", "m3", "nv-embed-v2")] == [
        "float32",
        "float32",
        "float16",
        "float16",
    ]
    g = plan_data("throughput")["gpus"]["H200"]
    assert encode_seconds("intfloat/multilingual-e5-large", 1000, 512, dtype="float32") == pytest.approx(
        encode_seconds("intfloat/multilingual-e5-large", 1000, 512) * g["bf16_tflops"] / g["fp32_tflops"]
    )


def test_measured_lengths_are_kept_once_under_the_cache_root(tmp_path, monkeypatch):
    "Issue 38 item 5: what the plan measured on a collection that is not shipped is read back, not measured again (keyed by its data root)."
    import dataclasses, json
    from clir_llm import plan as P

    monkeypatch.setenv("CLIR_LLM_CACHE", str(tmp_path / "cache"))
    # here as far as the plan can tell; loading it would fail
    monkeypatch.setenv("CIRAL_HOME", str(tmp_path / "ciral"))
    cfg = load_config("paper-ciral")
    f = P._lengths_cache(cfg, "en-sw", 2000)
    # shipped: none
    assert (
        f.parent == tmp_path / "cache" / "plan-lengths" and P._lengths_cache(load_config("demo"), "en-de", 2000) is None
    )
    with pytest.raises(ClirError):
        P.load_collection(cfg.collection, "en-sw", root=cfg.root)
    kept = P.PairText(11, 22, 3.0, [4, 5], [6], True, "measured on ciral en-sw (first 2 documents)")
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps(dataclasses.asdict(kept)))
    assert P.pair_text(cfg, "en-sw") == kept
    monkeypatch.setenv("CIRAL_HOME", str(tmp_path / "other"))  # another copy of the data: another file
    assert P._lengths_cache(cfg, "en-sw", 2000) != f


def test_int8_weights_are_counted_without_prefix_reuse():
    "Review of issue 38 items 3/5: int8 weights (quantize) do not compute in float32, so the backend does not reuse by default; the plan follows."
    from clir_llm.plan import runs_as

    cfg = load_config("demo-rerankers")
    rc = next(r for r in cfg.rerankers if r.llm is not None and r.llm.backend_class.kind == "hf")
    assert runs_as(rc)["reuse"]
    q = rc.model_copy(
        update=dict(
            llm=type(rc.llm).parse(
                str(rc.llm) + "[quantize=int8]" if "[" not in str(rc.llm) else str(rc.llm)[:-1] + ",quantize=int8]"
            )
        )
    )
    assert q.llm.options.quantize == "int8" and not runs_as(q)["reuse"]


def test_lengths_that_assume_the_translations_are_not_kept(tmp_path, monkeypatch):
    """Review of issue 38 item 5: without translations the DT lengths are taken from the original documents; kept, they
    stayed after the translations existed (the key does not say whether they did). Such lengths are measured, not kept."""
    from clir_llm import plan as P

    monkeypatch.setenv("CLIR_LLM_CACHE", str(tmp_path / "cache"))
    d = Path(__file__).parent / "fixtures" / "zhfa"
    (tmp_path / "c.yaml").write_text(
        f"name: zh\ncollection: 'files:{d}?topics=queries.en.jsonl&qrels=qrels.en-zh.txt&corpus=docs.zh.jsonl'\n"
        "pairs: [en-zh]\nmeasure: MAP\nfirst_stage: {methods: [bm25-og]}\nexperiments: [1_first_stage]\n"
    )
    cfg = load_config(tmp_path / "c.yaml")
    f = P._lengths_cache(cfg, "en-zh", 2000)
    t = P.pair_text(cfg, "en-zh")
    assert t.measured and t.dt_words == t.og_words and f is not None and not f.exists()
