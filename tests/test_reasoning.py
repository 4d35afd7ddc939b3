"""clir_llm.reasoning: Rank1-style pointwise reasoning (the published prompt as a prompt file, the trace within a thinking
budget, the judgement read after the closed trace or after the budget's forced close, traces kept in the cache with each
call and exported as `<run>.traces.jsonl`, cost counted with the trace), equal to Rank1's code (reimplemented) on a tiny
Qwen3 read as plain text."""
import json
import pytest
import torch
from clir_llm.cache import Cache
from clir_llm.core import ClirError, Document, FormatError, Query, Run
from clir_llm.llm_hf import HFBackend
from clir_llm.rerank import RerankerSpec, TextStats, get_reranker
from clir_llm.reasoning import ReasoningReranker, cut_trace, read_trace, read_traces, traces_path
from clir_llm.templates import PromptTemplate
from clir_llm.testing import QrelsOracle, TinyCollection, make_tiny_hf_model, tiny_setup

RANK1 = ("Determine if the following passage is relevant to the query. Answer only with 'true' or 'false'.\n"
         "Query: {query}\nPassage: {passage}\n<think>")


def test_the_published_prompt_and_labels():
    t = PromptTemplate.load("rank1")
    assert (t.method, t["prompt"], t["think_end"], t["choices"]) == ("reasoning", RANK1, "</think>", {"yes": " true", "no": " false"})
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
        super().__init__(coll); self.texts, self.generated, self.scored = list(texts), [], []
    def generate(self, prompts, max_new_tokens=64, **kw):
        self.generated += prompts
        return [self.texts.pop(0) for _ in prompts]
    def score(self, prompts, candidates, **kw):
        self.scored += prompts
        return [[0.0, -1.0] for _ in prompts]


def test_answer_read_at_the_stop_string_else_the_forced_path():
    "The answer token is the one after the first '</think> true|false' (the generated text up to it); other traces take the forced path."
    coll, first = tiny_setup(1, 3)
    texts = ["A.</think> maybe. B.</think> false. Then</think> true", "Reasons.</think>\nMaybe so", "It is. Then it was not</think> true"]
    b = Scripted(coll, texts)
    rr = get_reranker("reasoning-rank1", b, batch_size=3, progress=False)
    rr.rerank(coll, first, k=3)
    prompts = b.generated
    assert b.scored == [prompts[0] + "A.</think> maybe. B.</think>", prompts[1] + "\nReasons.\n</think>",
                        prompts[2] + "It is. Then it was not</think>"]
    assert [t["closed"] for t in rr.traces.values()] == [True, False, True]
    assert all(p.startswith(pr) and texts[i].startswith(p[len(pr):]) for i, (p, pr) in enumerate(zip(b.scored, prompts)) if i != 1)
    assert rr.diagnostics["q0"]["traces_closed"] == 2 and rr.diagnostics["q0"]["traces_forced"] == 1


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
        assert [coll.qrels[q].get(d, 0) > 0 for d in out.docids(q, 10)] == [True] * min(10, sum(g > 0 for g in coll.qrels[q].values()))
        d = rr.diagnostics[q]
        assert d["traces_closed"] == 30 and d["prompts"] == 60 and d["calls"] == 2 and d["tokens_out"] > 0
    rr.save(tmp_path / "run.trec")
    traces = read_traces(traces_path(tmp_path / "run.trec"))
    assert len(traces) == 60 and set(traces[0]) == {"query", "docid", "trace", "closed", "trace_tokens", "p_true"}
    assert (tmp_path / "run.trec.rerank.json").exists() and rr.usage.counters["traces_closed"] == 60


def test_bad_traces_file_is_one_line(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"a": 1}\nnot json\n')
    with pytest.raises(FormatError, match="x.jsonl:2"): read_traces(tmp_path / "x.jsonl")


def test_thinking_budget_is_an_option_with_identity():
    a, b = RerankerSpec.parse("reasoning-rank1"), RerankerSpec.parse("reasoning-rank1", think_tokens=512)
    assert a.options.think_tokens == 8192 and "think_tokens=512" in b.key() and a.key() != b.key()
    with pytest.raises(ClirError, match="think_tokens"): RerankerSpec.parse("reasoning-rank1", think_tokens=0)


def test_estimate_counts_every_trace_at_its_budget():
    stats = TextStats(docs=10, query_tokens=20, doc_words=[100], tokens_per_word=1.0, template_tokens=lambda s: len(s) / 4)
    est = ReasoningReranker.estimate(RerankerSpec.parse("reasoning-rank1", think_tokens=1000).options, "reasoning-rank1", stats)
    assert est.calls == 20 and est.calls * est.output_tokens == 10 * 1000
    prompt = len(RANK1.format(query="", passage="")) / 4 + 20 + 100
    assert est.calls * est.prompt_tokens == pytest.approx(10 * (2 * prompt + 1000 + len("\n\n</think>") / 4))


def test_a_prompt_without_labels_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nmethod: reasoning\nsource: me\nprompt: \"{query} {passage}\"\nthink_end: \"</think>\"\n"
                   "closed: \"{trace}</think>\"\nforced: \"{trace}</think>\"\n")
    with pytest.raises(FormatError, match="choices must map yes and no"): ReasoningReranker.load_prompt(str(bad))


def _rank1_reference(folder, pairs, budget):
    "Rank1's transformers path, written again: greedy trace, cut and closed at the budget, softmax of the first tokens of ' true'/' false'."
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    true, false = tok(" true", add_special_tokens=False).input_ids[0], tok(" false", add_special_tokens=False).input_ids[0]
    out = []
    for q, d in pairs:
        prompt = RANK1.format(query=q, passage=d)
        ids = tok(prompt).input_ids
        with torch.no_grad():
            gen = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), max_new_tokens=budget,
                                 do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)[0, len(ids):].tolist()
        if tok.eos_token_id in gen: gen = gen[:gen.index(tok.eos_token_id)]
        text = tok.decode(gen, skip_special_tokens=True)
        trace = cut_trace(text)
        with torch.no_grad(): last = model(torch.tensor([tok(f"{prompt}\n{trace}\n</think>").input_ids])).logits[0, -1]
        out.append((ids, trace, torch.softmax(last[[true, false]], -1)[0].item()))
    return out


def test_equal_to_rank1_code_on_a_tiny_qwen3(tmp_path):
    folder = make_tiny_hf_model(tmp_path / "q3", "qwen3")
    pairs = [("malaria vaccine", "Given a query, the cat sat on the mat."), ("кошка", "кошка спит на диване."), ("true or false", "Answer yes or no.")]
    b = HFBackend.create(str(folder), dtype="float32", chat=False, cache=Cache(tmp_path / "c"))
    rr = get_reranker("reasoning-rank1", b, think_tokens=10, progress=False)
    coll = TinyCollection({f"q{i}": Query(f"q{i}", q) for i, (q, _) in enumerate(pairs)},
                          {f"d{i}": Document(f"d{i}", d) for i, (_, d) in enumerate(pairs)}, {f"q{i}": {f"d{i}": 1} for i in range(len(pairs))})
    rr.rerank(coll, Run.from_ranked({f"q{i}": [f"d{i}"] for i in range(len(pairs))}), k=1)
    for i, (ids, trace, p) in enumerate(_rank1_reference(str(folder), pairs, 10)):
        mine = rr.traces[f"q{i}", f"d{i}"]
        assert b._render(RANK1.format(query=pairs[i][0], passage=pairs[i][1]))["ids"] == ids
        assert (mine["trace"], mine["closed"]) == (trace, False) and abs(mine["p_true"] - p) < 1e-5
    assert rr.usage.tokens_out == sum(t["trace_tokens"] for t in rr.traces.values()) == b.usage.tokens_out
    # the traces are in the cache with their calls: a second run computes nothing and gives the same traces
    again = get_reranker("reasoning-rank1", HFBackend.create(str(folder), dtype="float32", chat=False, cache=Cache(tmp_path / "c")),
                         think_tokens=10, progress=False)
    again.rerank(coll, Run.from_ranked({f"q{i}": [f"d{i}"] for i in range(len(pairs))}), k=1)
    assert again.traces == rr.traces and again.backend.usage.calls == 0 and again.backend.usage.cache_hits == 6


def test_chat_backend_without_prefill_is_refused():
    coll, _ = tiny_setup(1, 3)
    class ChatAPI(QrelsOracle): supports_prefill = scores_sequences = False
    with pytest.raises(ClirError, match="reasoning-rank1' reads likelihoods"): get_reranker("reasoning-rank1", ChatAPI(coll))
