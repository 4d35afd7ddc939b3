"""clir_llm.reasoning: Rank1-style pointwise reasoning (the published prompt as a prompt file, the trace within a thinking
budget, the judgement read after the closed trace or after the budget's forced close, traces kept in the cache with each
call and exported as `<run>.traces.jsonl`, cost counted with the trace), equal to Rank1's code (reimplemented) on a tiny
Qwen3 read as plain text."""

import json, math
import pytest
import torch
from clir_llm.cache import Cache
from clir_llm.core import ClirError, Document, FormatError, Query, Run
from clir_llm.llm_hf import HFBackend
from clir_llm.rerank import RerankerSpec, TextStats, get_reranker
from clir_llm.reasoning import ReasoningReranker, cut_trace, read_trace, read_traces, traces_path
from clir_llm.templates import PromptTemplate
from clir_llm.testing import QrelsOracle, TinyCollection, make_tiny_hf_model, tiny_setup

RANK1 = (
    "Determine if the following passage is relevant to the query. Answer only with 'true' or 'false'.\n"
    "Query: {query}\nPassage: {passage}\n<think>"
)


def test_the_published_prompt_and_labels():
    t = PromptTemplate.load("rank1")
    assert (t.method, t["prompt"], t["think_end"], t["choices"]) == (
        "reasoning",
        RANK1,
        "</think>",
        {"yes": " true", "no": " false"},
    )
    assert t["forced"].format(trace="x") == "\nx\n</think>" and t["closed"].format(trace="x") == "x</think>"


def test_trace_reading_as_rank1():
    assert cut_trace("It is relevant. It names a vac") == "It is relevant."
    assert cut_trace("no full stop") == "no full stop" and cut_trace("Done!  ") == "Done!"
    assert read_trace("Reasons.</think> true") == ("Reasons.", True)
    assert read_trace("Reasons. More") == ("Reasons.", False)
    # Rank1's stop strings are '</think> true' and '</think> false': a '</think>' followed by anything else is no answer
    assert read_trace("Reasons.</think>\nMaybe so") == ("Reasons.", False)
    assert read_trace("A.</think> maybe. B.</think> false. More</think> true") == ("A.</think> maybe. B.", True)


class Scripted(QrelsOracle):
    "A plain-text model writing the given generations in turn; every prompt it generates from or scores is recorded."

    is_chat = False

    def __init__(self, coll, texts):
        super().__init__(coll)
        self.texts, self.generated, self.scored = list(texts), [], []

    def generate(self, prompts, max_new_tokens=64, **kw):
        self.generated += prompts
        return [self.texts.pop(0) for _ in prompts]

    def score(self, prompts, candidates, **kw):
        self.scored += prompts
        return [[0.0, -1.0] for _ in prompts]


def test_answer_read_at_the_stop_string_else_the_forced_path():
    "The answer token is the one after the first '</think> true|false' (the generated text up to it); other traces take the forced path."
    coll, first = tiny_setup(1, 3)
    texts = [
        "A.</think> maybe. B.</think> false. Then</think> true",
        "Reasons.</think>\nMaybe so",
        "It is. Then it was not</think> true",
    ]
    b = Scripted(coll, texts)
    rr = get_reranker("reasoning-rank1", b, batch_size=3, progress=False)
    rr.rerank(coll, first, k=3)
    prompts = b.generated
    assert b.scored == [
        prompts[0] + "A.</think> maybe. B.</think>",
        prompts[1] + "\nReasons.\n</think>",
        prompts[2] + "It is. Then it was not</think>",
    ]
    assert [t["closed"] for t in rr.traces.values()] == [True, False, True]
    assert all(
        p.startswith(pr) and texts[i].startswith(p[len(pr) :])
        for i, (p, pr) in enumerate(zip(b.scored, prompts))
        if i != 1
    )
    assert rr.diagnostics["q0"]["traces_closed"] == 2 and rr.diagnostics["q0"]["traces_forced"] == 1


class Stopping(QrelsOracle):
    """A plain-text model with Rank1's vLLM call (`supports_stop`): each answer is a scripted record (the text cut before the
    stop string met, the top log-probabilities of the last generated token); the calls and the scored prompts are recorded."""

    is_chat, supports_stop = False, True

    def __init__(self, coll, recs):
        super().__init__(coll)
        self.recs, self.calls, self.scored = list(recs), [], []

    def complete(self, prompts, max_new_tokens=64, **kw):
        self.calls.append((list(prompts), max_new_tokens, kw))
        return [self.recs.pop(0) for _ in prompts]

    def score(self, prompts, candidates, **kw):
        self.scored += prompts
        return [[-1.0, 0.0] for _ in prompts]


def test_score_read_at_the_generated_answer_token_else_the_forced_path():
    """Issue 38 item 4: as rank1.py, the generation stops at '</think> true|false' and P(true) is read from the top 20 of
    the last generated token, normalised over the two labels, wherever both are there (after a stop string, or at the end
    of a trace that ran out); a trace whose top 20 lacks either label takes the forced path (cut, closed, scored next)."""
    coll, first = tiny_setup(1, 4)
    recs = [
        {
            "text": "It names it.",
            "stop": "</think> true",
            "tokens_out": 7,
            "top_logprobs": {" true": -0.1, " false": -2.5, "x": -3.0},
        },
        {"text": "Sure. It is", "stop": "</think> true", "tokens_out": 6, "top_logprobs": {" true": -0.01, "y": -5.0}},
        {"text": "No stop here. And the", "tokens_out": 9, "top_logprobs": {"z": -0.2}},
        {"text": "Ran out. So", "tokens_out": 9, "top_logprobs": {" false": -0.3, " true": -1.4}},
    ]
    b = Stopping(coll, recs)
    rr = get_reranker("reasoning-rank1", b, batch_size=4, think_tokens=9, progress=False)
    rr.rerank(coll, first, k=4)
    ((prompts, budget, kw),) = b.calls
    assert budget == 9 and kw["stop"] == ["</think> true", "</think> false"] and kw["top_logprobs"] == 20
    assert b.scored == [prompts[1] + "\nSure.\n</think>", prompts[2] + "\nNo stop here.\n</think>"]
    tr = [rr.traces["q0", d] for d in first.docids("q0", 4)]
    assert [t["closed"] for t in tr] == [True, False, False, True] and [t["trace_tokens"] for t in tr] == [7, 6, 9, 9]
    assert tr[0]["p_true"] == pytest.approx(math.exp(-0.1) / (math.exp(-0.1) + math.exp(-2.5)))
    assert tr[3]["p_true"] == pytest.approx(math.exp(-1.4) / (math.exp(-1.4) + math.exp(-0.3)))
    assert tr[1]["p_true"] == tr[2]["p_true"] == pytest.approx(1 / (1 + math.e)) and (
        tr[0]["trace"],
        tr[1]["trace"],
    ) == ("It names it.", "Sure.")
    d = rr.diagnostics["q0"]
    assert (d["calls"], d["prompts"], d["traces_closed"], d["traces_forced"], d["tokens_out"]) == (2, 6, 2, 2, 31)


def test_the_context_shortens_a_long_prompts_budget_and_refuses_a_prompt_that_fills_it():
    """rank1.py's vLLM context (context_size 16,000, `context_tokens`): a trace gets at most what its prompt leaves of it
    (vLLM ends the generation there), and a prompt that fills it is one line naming the document (vLLM refuses it)."""
    long = " ".join(f"w{i}" for i in range(100))
    coll = TinyCollection(
        {"q0": Query("q0", "cat")}, {"d0": Document("d0", "short text."), "d1": Document("d1", long)}, {"q0": {"d0": 1}}
    )
    first = Run.from_ranked({"q0": ["d0", "d1"]})
    rec = lambda: {
        "text": "Done.",
        "stop": "</think> true",
        "tokens_out": 3,
        "top_logprobs": {" true": -0.1, " false": -2.0},
    }
    b = Stopping(coll, [rec(), rec()])
    n = [b.count_tokens(RANK1.format(query="cat", passage=p)) for p in ("short text.", long)]
    rr = get_reranker("reasoning-rank1", b, think_tokens=50, context_tokens=n[1] + 20, progress=False)
    rr.rerank(coll, first, k=2)
    assert sorted(budget for _, budget, _ in b.calls) == [20, 50]  # the long prompt's budget: what it leaves
    assert rr.diagnostics["q0"]["calls"] == 2  # a call per budget
    assert RerankerSpec.parse("reasoning-rank1").options.context_tokens == 16000
    b = Stopping(coll, [rec(), rec()])
    with pytest.raises(ClirError, match=rf"document 'd1' has {n[1]} tokens, context_tokens is {n[1]}"):
        get_reranker("reasoning-rank1", b, context_tokens=n[1], progress=False).rerank(coll, first, k=2)
    assert b.calls == []  # refused before any generation
    get_reranker("reasoning-rank1", b, think_tokens=50, context_tokens=None, progress=False).rerank(coll, first, k=2)
    assert [budget for _, budget, _ in b.calls] == [50]
    stats = TextStats(
        docs=10, query_tokens=20, doc_words=[100], tokens_per_word=1.0, template_tokens=lambda s: len(s) / 4
    )
    est = ReasoningReranker.estimate(
        RerankerSpec.parse("reasoning-rank1", think_tokens=1000, context_tokens=500).options, "reasoning-rank1", stats
    )
    assert est.calls * est.output_tokens == pytest.approx(
        10 * (500 - (len(RANK1.format(query="", passage="")) / 4 + 20 + 100))
    )


def _stop_prompt(tmp_path, think_end: str, yes: str, no: str) -> str:
    "A copy of Rank1's prompt file whose stop strings are `think_end` + `yes` / `no` (what a tiny random model does write)."
    t = PromptTemplate.load("rank1")
    path = tmp_path / "stops.yaml"
    path.write_text(
        json.dumps(
            {
                "name": "stops",
                "method": "reasoning",
                "source": "test",
                "prompt": RANK1,
                "think_end": think_end,
                "closed": "{trace}" + think_end,
                "forced": t["forced"],
                "choices": {"yes": yes, "no": no},
            }
        )
    )
    return str(path)


def test_a_tiny_qwen3_stops_at_the_string_and_is_read_at_its_answer_token(tmp_path):
    """End to end on `hf:`: stop strings chosen from the tiny model's own greedy trace, so generation stops there, and P(true)
    is the two labels' normalised probabilities at the generated answer token (a forward pass over prompt + trace)."""
    from transformers import AutoModelForCausalLM

    folder = make_tiny_hf_model(tmp_path / "q3", "qwen3")
    b = HFBackend.create(str(folder), dtype="float32", chat=False)
    q, d = "malaria vaccine", "Given a query, the cat sat on the mat."
    ids = b._render(RANK1.format(query=q, passage=d))["ids"]
    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    gen, lps = [], []
    with torch.no_grad():
        for _ in range(12):
            lps.append(torch.log_softmax(m(torch.tensor([ids + gen])).logits[0, -1], -1))
            gen.append(int(lps[-1].argmax()))
    dec = lambda a, z: b.tokenizer.decode(gen[a:z], skip_special_tokens=True)
    j = 8  # the answer token: the 9th generated; the think end: the three before it
    yes, no = b.tokenizer.decode([gen[j]]), b.tokenizer.decode([int(lps[j].topk(2).indices[1])])
    end = dec(j - 3, j)
    assert end + yes not in dec(0, j) and end + no not in dec(0, j + 1) and yes != no
    rr = get_reranker(
        "reasoning-rank1", b, prompt=_stop_prompt(tmp_path, end, yes, no), think_tokens=12, progress=False
    )
    coll = TinyCollection({"q0": Query("q0", q)}, {"d0": Document("d0", d)}, {"q0": {"d0": 1}})
    rr.rerank(coll, Run.from_ranked({"q0": ["d0"]}), k=1)
    t = rr.traces["q0", "d0"]
    want = torch.softmax(lps[j][[gen[j], int(lps[j].topk(2).indices[1])]], -1)[0].item()
    assert t["closed"] and t["trace_tokens"] == j + 1 and t["trace"] == dec(0, j + 1).split(end + yes)[0]
    assert abs(t["p_true"] - want) < 1e-5 and rr.diagnostics["q0"]["calls"] == 1 and b.usage.calls == 1


def test_whole_passages_by_default_a_cut_as_an_option():
    "Rank1's code sends whole passages (a 16k context): no cut unless passage_tokens is given."
    long = " ".join(f"w{i}" for i in range(700))
    coll = TinyCollection({"q0": Query("q0", "cat")}, {"d0": Document("d0", long)}, {"q0": {"d0": 1}})
    first = Run.from_ranked({"q0": ["d0"]})
    b = Scripted(coll, ["Done.</think> true"] * 2)
    rr = get_reranker("reasoning-rank1", b, progress=False)
    rr.rerank(coll, first, k=1)
    assert rr.options.passage_tokens is None and long in b.generated[0]
    cut = get_reranker("reasoning-rank1", b, passage_tokens=300, progress=False)
    cut.rerank(coll, first, k=1)
    assert long not in b.generated[1] and " ".join(long.split()[:300]) + "\n<think>" in b.generated[1]
    assert sum(cut.diagnostics["q0"]["truncated_docs"].values()) == 1


def test_oracle_ranks_ideally_and_traces_go_beside_the_run(tmp_path):
    coll, first = tiny_setup(2, 30)
    rr = get_reranker("reasoning-rank1", QrelsOracle(coll), progress=False)
    out = rr.rerank(coll, first, k=30)
    for q in first:
        assert [coll.qrels[q].get(d, 0) > 0 for d in out.docids(q, 10)] == [True] * min(
            10, sum(g > 0 for g in coll.qrels[q].values())
        )
        d = rr.diagnostics[q]
        assert d["traces_closed"] == 30 and d["prompts"] == 60 and d["calls"] == 2 and d["tokens_out"] > 0
    rr.save(tmp_path / "run.trec")
    traces = read_traces(traces_path(tmp_path / "run.trec"))
    assert len(traces) == 60 and set(traces[0]) == {"query", "docid", "trace", "closed", "trace_tokens", "p_true"}
    assert (tmp_path / "run.trec.rerank.json").exists() and rr.usage.counters["traces_closed"] == 60


def test_bad_traces_file_is_one_line(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"a": 1}\nnot json\n')
    with pytest.raises(FormatError, match="x.jsonl:2"):
        read_traces(tmp_path / "x.jsonl")


def test_thinking_budget_is_an_option_with_identity():
    a, b = RerankerSpec.parse("reasoning-rank1"), RerankerSpec.parse("reasoning-rank1", think_tokens=512)
    assert a.options.think_tokens == 8192 and "think_tokens=512" in b.key() and a.key() != b.key()
    with pytest.raises(ClirError, match="think_tokens"):
        RerankerSpec.parse("reasoning-rank1", think_tokens=0)


def test_estimate_counts_every_trace_at_its_budget():
    stats = TextStats(
        docs=10, query_tokens=20, doc_words=[100], tokens_per_word=1.0, template_tokens=lambda s: len(s) / 4
    )
    est = ReasoningReranker.estimate(
        RerankerSpec.parse("reasoning-rank1", think_tokens=1000).options, "reasoning-rank1", stats
    )
    assert est.calls == 20 and est.calls * est.output_tokens == 10 * 1000
    prompt = len(RANK1.format(query="", passage="")) / 4 + 20 + 100
    assert est.calls * est.prompt_tokens == pytest.approx(10 * (2 * prompt + 1000 + len("\n\n</think>") / 4))


def test_a_prompt_without_labels_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        'name: bad\nmethod: reasoning\nsource: me\nprompt: "{query} {passage}"\nthink_end: "</think>"\n'
        'closed: "{trace}</think>"\nforced: "{trace}</think>"\n'
    )
    with pytest.raises(FormatError, match="choices must map yes and no"):
        ReasoningReranker.load_prompt(str(bad))


def _rank1_reference(folder, pairs, budget):
    """Rank1's vLLM path, written again: a greedy trace; P(true) from the top 20 of its last token when both labels are there,
    else the trace cut and closed (the forced path); softmax of the first tokens of ' true'/' false'."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok, model = (
        AutoTokenizer.from_pretrained(folder),
        AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(),
    )
    true, false = (
        tok(" true", add_special_tokens=False).input_ids[0],
        tok(" false", add_special_tokens=False).input_ids[0],
    )
    out = []
    for q, d in pairs:
        prompt = RANK1.format(query=q, passage=d)
        ids = tok(prompt).input_ids
        with torch.no_grad():
            gen = model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=budget,
                do_sample=False,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )[0, len(ids) :].tolist()
        if tok.eos_token_id in gen:
            gen = gen[: gen.index(tok.eos_token_id) + 1]  # vLLM's token_ids keep the EOS
        text = tok.decode(gen, skip_special_tokens=True)
        # the last generated token's step
        with torch.no_grad():
            last = model(torch.tensor([ids + gen[:-1]])).logits[0, -1]
        if not {true, false} <= set(torch.log_softmax(last, -1).topk(20).indices.tolist()):  # rank1.py's forced path
            text = cut_trace(text)
            with torch.no_grad():
                last = model(torch.tensor([tok(f"{prompt}\n{text}\n</think>").input_ids])).logits[0, -1]
        out.append((ids, text, torch.softmax(last[[true, false]], -1)[0].item()))
    return out


def test_equal_to_rank1_code_on_a_tiny_qwen3(tmp_path):
    folder = make_tiny_hf_model(tmp_path / "q3", "qwen3")
    pairs = [
        ("malaria vaccine", "Given a query, the cat sat on the mat."),
        ("кошка", "кошка спит на диване."),
        ("true or false", "Answer yes or no."),
    ]
    b = HFBackend.create(str(folder), dtype="float32", chat=False, cache=Cache(tmp_path / "c"))
    rr = get_reranker("reasoning-rank1", b, think_tokens=10, progress=False)
    coll = TinyCollection(
        {f"q{i}": Query(f"q{i}", q) for i, (q, _) in enumerate(pairs)},
        {f"d{i}": Document(f"d{i}", d) for i, (_, d) in enumerate(pairs)},
        {f"q{i}": {f"d{i}": 1} for i in range(len(pairs))},
    )
    rr.rerank(coll, Run.from_ranked({f"q{i}": [f"d{i}"] for i in range(len(pairs))}), k=1)
    for i, (ids, trace, p) in enumerate(_rank1_reference(str(folder), pairs, 10)):
        mine = rr.traces[f"q{i}", f"d{i}"]
        assert b._render(RANK1.format(query=pairs[i][0], passage=pairs[i][1]))["ids"] == ids
        assert (mine["trace"], mine["closed"]) == (trace, False) and abs(mine["p_true"] - p) < 1e-5
    assert rr.usage.tokens_out == sum(t["trace_tokens"] for t in rr.traces.values()) == b.usage.tokens_out
    # the traces are in the cache with their calls: a second run computes nothing and gives the same traces
    again = get_reranker(
        "reasoning-rank1",
        HFBackend.create(str(folder), dtype="float32", chat=False, cache=Cache(tmp_path / "c")),
        think_tokens=10,
        progress=False,
    )
    again.rerank(coll, Run.from_ranked({f"q{i}": [f"d{i}"] for i in range(len(pairs))}), k=1)
    assert again.traces == rr.traces and again.backend.usage.calls == 0 and again.backend.usage.cache_hits == 6


def test_chat_backend_without_prefill_is_refused():
    coll, _ = tiny_setup(1, 3)

    class ChatAPI(QrelsOracle):
        supports_prefill = scores_sequences = False

    with pytest.raises(ClirError, match="reasoning-rank1' reads likelihoods"):
        get_reranker("reasoning-rank1", ChatAPI(coll))
