"""`hf:` (clir_llm.llm_hf) on tiny random models built here: batched generation equals one prompt at a time, exact scores,
cache and replay, the token ids the authors' pipelines sent per model family (tokenizer folders in the upstream formats,
tests/fixtures/tokenizers), the model table's dtype, `quantize=int8`, and batches computed by an injected executor."""

import math, shutil
from pathlib import Path
import pytest, torch
from transformers import AutoConfig, AutoTokenizer
from clir_llm.cache import Cache, CacheMiss
from clir_llm.core import ClirError
from clir_llm.executor import LocalExecutor
import clir_llm.llm_hf as llm_hf
from clir_llm.llm import BackendSpec, LLMError, get_backend
from clir_llm.llm_hf import HF_MODELS, HFBackend, HFOptions, HFQuirks, model_card
from clir_llm.testing import make_tiny_hf_model

PROMPTS = [
    "the cat sat",
    "Passage A: ein Hund lief durch den Park",
    "Output Passage A or Passage B:",
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "kissa nukkuu sohvalla"}],
    "Rank the passages based on their relevance",
    "0 1 2 3 4 5",
    "il gatto dorme",
    "кошка спит",
]
FX = Path(__file__).parent / "fixtures" / "tokenizers"
USER = 'Given a query "wer?", which of the following two passages is more relevant to the query?\n\nPassage A: "the cat"\n\nPassage B: "ein Hund"\n\nOutput Passage A or Passage B:'
# llm-rankers appends " Passage:"
PRP = [{"role": "user", "content": USER}, {"role": "assistant", "content": " Passage:"}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny")
    return {"qwen2": make_tiny_hf_model(root / "qwen2", "qwen2"), "mt5": make_tiny_hf_model(root / "mt5", "mt5")}


# ---------------------------------------------------------------- generation, scoring, cache
@pytest.mark.parametrize("arch", ["qwen2", "mt5"])
def test_batched_generation_equals_one_at_a_time(tiny, arch, tmp_path):
    kw = {"decoder_prefix": "Passage"} if arch == "mt5" else {}
    b = get_backend(f"hf:{tiny[arch]}", Cache(tmp_path), batch_size=5, **kw)
    assert b.is_encoder_decoder == (arch == "mt5") and b.is_chat == (arch == "qwen2") and b.batch_size == 5
    batched = b.generate(PROMPTS, max_new_tokens=6, progress=False)
    assert batched == get_backend(f"hf:{tiny[arch]}", batch_size=1, **kw).generate(
        PROMPTS, max_new_tokens=6, progress=False
    )
    assert len(set(batched)) > 1  # the prompts do not all collapse to one answer
    assert b.usage.calls == len(PROMPTS) and b.usage.tokens_in > 0 and 0 < b.usage.tokens_out <= 6 * len(PROMPTS)


@pytest.mark.parametrize("arch", ["qwen2", "mt5"])
def test_score_prefers_the_models_own_greedy_continuation(tiny, arch):
    b = get_backend(f"hf:{tiny[arch]}", batch_size=4)
    tok, checked = b.tokenizer, 0
    for p in PROMPTS:
        greedy_ids = b.tokenizer(b.generate([p], max_new_tokens=3, progress=False)[0], add_special_tokens=False)[
            "input_ids"
        ]
        first = tok.decode(greedy_ids[:1])
        if not greedy_ids or tok(first, add_special_tokens=False)["input_ids"] != greedy_ids[:1]:
            continue
        checked += 1
        others = [tok.decode([t]) for t in range(5, 40) if t != greedy_ids[0]]
        others = [o for o in others if len(tok(o, add_special_tokens=False)["input_ids"]) == 1][:10]
        s = b.score([p], [first] + others, progress=False)[0]
        assert max(range(len(s)), key=s.__getitem__) == 0, (p, first, s)
        if len(greedy_ids) == 3 and len(tok(tok.decode(greedy_ids), add_special_tokens=False)["input_ids"]) == 3:
            alt = tok.decode(greedy_ids[:2] + [(greedy_ids[2] + 7) % 300 + 3])
            if len(tok(alt, add_special_tokens=False)["input_ids"]) == 3:
                g, a = b.score([p], [tok.decode(greedy_ids), alt], progress=False)[0]
                assert g > a
    assert checked >= 2


def test_score_single_token_batch_matches_unbatched(tiny):
    b = get_backend(f"hf:{tiny['qwen2']}", batch_size=8)
    batched = b.score(PROMPTS, ["A", "B"], progress=False)
    single = [
        get_backend(f"hf:{tiny['qwen2']}", batch_size=1).score([p], ["A", "B"], progress=False)[0] for p in PROMPTS[:3]
    ]
    for x, y in zip(batched, single):
        assert all(abs(u - v) < 1e-4 for u, v in zip(x, y))
    assert all(all(v < 0 for v in row) for row in batched) and all(math.exp(a) + math.exp(c) < 1 for a, c in batched)


def test_cache_warm_rerun_and_replay(tiny, tmp_path):
    b = get_backend(f"hf:{tiny['qwen2']}", Cache(tmp_path))
    out, scores = (
        b.generate(PROMPTS, max_new_tokens=4, progress=False),
        b.score(PROMPTS[:3], ["A", "B"], progress=False),
    )
    warm = get_backend(f"hf:{tiny['qwen2']}", Cache(tmp_path))
    assert (
        warm.generate(PROMPTS, max_new_tokens=4, progress=False) == out
        and warm.score(PROMPTS[:3], ["A", "B"], progress=False) == scores
    )
    # not even loaded
    assert warm.usage.calls == 0 and warm.usage.cache_hits == len(PROMPTS) + 3 and warm._model is None
    # hits counted apart
    assert warm.usage.tokens_in == 0 and warm.usage.counters["cached_tokens_in"] == b.usage.tokens_in
    # other params: other keys
    assert warm.generate(PROMPTS[:2], max_new_tokens=5, progress=False) and warm.usage.calls == 2
    rp = get_backend(f"hf:{tiny['qwen2']}", Cache(tmp_path, mode="replay"))
    assert rp.generate(PROMPTS, max_new_tokens=4, progress=False) == out
    with pytest.raises(CacheMiss, match="replay mode: 1 of 2"):
        rp.generate([PROMPTS[0], "never asked"], max_new_tokens=4)


def test_local_model_revision_changes_with_content(tiny, tmp_path):
    copy = shutil.copytree(tiny["qwen2"], tmp_path / "m")
    r0 = get_backend(f"hf:{copy}").revision
    make_tiny_hf_model(copy, "qwen2", seed=1, vocab_size=380)
    assert get_backend(f"hf:{copy}").revision != r0


def test_truncate_and_count(tiny):
    for arch in ("qwen2", "mt5"):
        b = get_backend(f"hf:{tiny[arch]}")
        text = "Passage A: the cat sat on the mat. Passage B: ein Hund lief durch den Park."
        n = b.count_tokens(text)
        for k in (1, 3, n - 1):
            cut = b.truncate(text, k)
            assert text.startswith(cut) and b.count_tokens(cut) <= k and len(cut) < len(text)
        assert b.truncate(text, n) == text


def test_bad_specs_and_params(tiny, tmp_path):
    with pytest.raises(LLMError, match="cannot load model config"):
        get_backend(f"hf:{tmp_path / 'missing'}")
    b = get_backend(f"hf:{tiny['qwen2']}")
    with pytest.raises(ClirError, match="unsupported generation parameters"):
        b.generate(["x"], frequency_penalty=1.0)
    with pytest.raises(ClirError, match="a list of prompts"):
        b.generate("x")
    with pytest.raises(ClirError, match="must be a str or a list"):
        b.generate([{"content": "no role"}])


def _greedy(folder, ids: list[int], steps: int):
    "Greedy token ids after `ids` and each step's log-probabilities, one token at a time, the whole sequence each time (a reference)."
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out, lps = [], []
    with torch.no_grad():
        for _ in range(steps):
            lp = torch.log_softmax(m(torch.tensor([ids + out])).logits[0, -1].float(), -1)
            lps.append(lp)
            out.append(int(lp.argmax()))
    return out, lps


@pytest.mark.parametrize("reuse", [True, False])
def test_stop_strings_end_generation_and_the_last_tokens_top_logprobs(tiny, reuse):
    """Issue 38 item 4 (Rank1's vLLM call): `stop` ends an answer at the token completing the first string met, its text cut
    before the string (the string met is the record's `stop`), the other prompts of the batch going on; `top_logprobs` k gives
    the k likeliest tokens at the last generated token (the answer token after a stop string, else the budget's last)."""
    b = HFBackend.create(str(tiny["qwen2"]), dtype="float32", chat=False, prefix_cache=reuse, batch_size=4)
    prompts, budget = ["the cat sat", "0 1 2 3 4 5"], 24
    refs = [_greedy(tiny["qwen2"], b._render(p)["ids"], budget) for p in prompts]
    dec = lambda g, m: b.tokenizer.decode(g[:m], skip_special_tokens=True)
    # the budget ends both (the reference does not stop at EOS)
    assert not set(refs[0][0] + refs[1][0]) & set(b._eos_ids())
    stop = dec(refs[0][0], 12)[-4:]
    first = min(m for m in range(1, budget + 1) if stop in dec(refs[0][0], m))
    assert first < budget and stop not in dec(refs[1][0], budget)
    recs = b.complete(prompts, max_new_tokens=budget, stop=["§never§", stop], top_logprobs=5, progress=False)
    assert (
        recs[0]["text"] == dec(refs[0][0], first).split(stop)[0]
        and recs[0]["stop"] == stop
        and recs[0]["tokens_out"] == first
    )
    assert recs[1]["text"] == dec(refs[1][0], budget) and "stop" not in recs[1] and recs[1]["tokens_out"] == budget
    for rec, (g, lps), n in zip(recs, refs, (first, budget)):
        v, i = lps[n - 1].topk(5)
        want: dict = {}
        for t, x in zip(i.tolist(), v.tolist()):
            want.setdefault(b.tokenizer.decode([t]), x)
        assert list(rec["top_logprobs"]) == list(want) and rec["top_logprobs"] == pytest.approx(want, abs=1e-4)
    # without the parameters the records are as before: no stop, no top_logprobs, the whole budget
    plain = b.complete(prompts, max_new_tokens=budget, progress=False)
    assert plain[0]["text"] == dec(refs[0][0], budget) and not {"stop", "top_logprobs"} & set(plain[0])


def test_chat_prefill_continues_the_assistant_turn(tiny):
    b = get_backend(f"hf:{tiny['qwen2']}")
    msgs = [{"role": "user", "content": "Output Passage A or Passage B:"}, {"role": "assistant", "content": "Passage"}]
    assert b.supports_prefill and b.render_text(msgs).endswith("<|im_start|>assistant\nPassage")
    tail = b.tokenizer("Passage", add_special_tokens=False)["input_ids"]
    assert b._ids(msgs)[-len(tail) :] == tail


# ---------------------------------------------------------------- options
def test_identity_gets_output_options_only(tiny):
    q = tiny["qwen2"]
    plain = get_backend(f"hf:{q}").identity()
    assert plain == {"kind": "hf", "model": str(q), "revision": plain["revision"]}
    assert get_backend({"spec": f"hf:{q}", "batch_size": 2, "device": "cpu"}).identity() == plain
    assert get_backend({"spec": f"hf:{q}", "dtype": "bfloat16"}).identity() == {**plain, "dtype": "bfloat16"}
    # a newer output option
    assert get_backend(f"hf:{q}[system_prompt=Be brief]").identity() == {**plain, "system_prompt": "Be brief"}
    assert BackendSpec.parse(f"hf:{q}[system_prompt=Be brief]").key() == f"hf:{q}[system_prompt=Be brief]"


def test_device_map_goes_to_accelerate(tiny, monkeypatch):
    import transformers

    seen, load = [], transformers.AutoModelForCausalLM.from_pretrained

    def spy(*a, **kw):
        seen.append(kw.get("device_map"))
        return load(*a, **kw)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    a = get_backend(f"hf:{tiny['qwen2']}")
    b = get_backend({"spec": f"hf:{tiny['qwen2']}", "device_map": "auto", "batch_size": 1})
    assert b.batch_size == 1
    assert a.generate(["the cat sat"], max_new_tokens=4, progress=False) == b.generate(
        ["the cat sat"], max_new_tokens=4, progress=False
    )
    assert seen == [None, "auto"]  # accelerate places the layers; without the option, one .to(device)


def test_options_hold_the_defaults_and_the_quirks():
    o = HFOptions()
    assert (o.batch_size, o.dtype, o.device, o.quirks) == (8, None, None, HFQuirks())
    assert (
        HFQuirks.paper(upstream="llm-rankers") == HFQuirks(double_bos=True, no_attention_mask=True)
        and HFQuirks.paper(upstream="rank_llm") == HFQuirks()
    )
    assert HFOptions.paper(upstream="llm-rankers").non_default() == {"double_bos": True, "no_attention_mask": True}
    assert set(HFOptions.flat_fields()) >= {
        "double_bos",
        "no_attention_mask",
        "dtype",
        "quantize",
        "device",
        "batch_size",
    }


# ---------------------------------------------------------------- execution injected
class TwoWorkers(LocalExecutor):
    "A stand-in executor: two workers' worth of batches per group, computed here, every call recorded."

    workers = 2

    def __init__(self, device=None):
        self.calls, self.device = [], device

    def map(self, owner, method, calls):
        self.calls.append((method, [len(c[0]) for c in calls]))
        return super().map(owner, method, calls)


def test_an_executor_gives_the_same_records_and_cache_entries_as_local(tiny, tmp_path):
    ex = TwoWorkers()
    local = get_backend(f"hf:{tiny['qwen2']}", Cache(tmp_path / "l"), batch_size=3)
    remote = get_backend(f"hf:{tiny['qwen2']}", Cache(tmp_path / "r"), batch_size=3, executor=ex)
    strip = lambda recs: [{k: v for k, v in r.items() if k not in ("seconds", "time")} for r in recs]
    assert strip(remote.complete(PROMPTS, max_new_tokens=5, progress=False)) == strip(
        local.complete(PROMPTS, max_new_tokens=5, progress=False)
    )
    assert remote.score(PROMPTS, ["A", "B", "A B"], progress=False) == local.score(
        PROMPTS, ["A", "B", "A B"], progress=False
    )
    assert ex.calls == [
        ("_generate_batch", [3, 3]),
        ("_generate_batch", [2]),
        ("_score_batch", [3, 3]),
        ("_score_batch", [2]),
    ]
    rows = lambda c: [(r["key"], r["meta"], strip([r["value"]])) for r in c.export_entries("llm")]
    assert rows(Cache(tmp_path / "r")) == rows(Cache(tmp_path / "l")) and len(rows(Cache(tmp_path / "l"))) == 2 * len(
        PROMPTS
    )
    u = lambda b: (b.usage.calls, b.usage.cache_hits, b.usage.tokens_in, b.usage.tokens_out)
    assert u(remote) == u(local)


def test_the_worker_recipe_rebuilds_the_backend_on_its_device(tiny, tmp_path):
    import pickle

    b = get_backend(
        f"hf:{tiny['qwen2']}[max_model_len=512]", Cache(tmp_path), executor=TwoWorkers(device="cpu"), double_bos=True
    )
    factory, args = pickle.loads(pickle.dumps(b.worker()))
    w = factory(*args)
    assert w.identity() == b.identity() and w.identity()["double_bos"] is True and w.options.device == "cpu"
    assert w.cache.mode == "off" and w.cache.root == b.cache.root and w._model is None and w.max_model_len == 512


def test_the_executors_device_decides_the_model_tables_dtype(monkeypatch):
    "A CPU driver whose workers are GPUs names the authors' GPU dtype (what the workers run); a CPU executor fp32."
    seen = _hub(monkeypatch, "llama31")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    gpu = get_backend("hf:meta-llama/Llama-3.1-8B-Instruct", executor=TwoWorkers(device="cuda"))
    assert gpu.identity()["dtype"] == "float16" and gpu._device == "cuda"
    assert (
        get_backend("hf:meta-llama/Llama-3.1-8B-Instruct", executor=TwoWorkers(device="cpu")).identity()["dtype"]
        == "float32"
    )
    assert (
        get_backend("hf:meta-llama/Llama-3.1-8B-Instruct", executor=TwoWorkers(device="cpu"), device="cuda").identity()[
            "dtype"
        ]
        == "float16"
    )
    factory, args = gpu.worker()
    assert args[2].device == "cuda"  # the worker builds on the executor's device


# ---------------------------------------------------------------- the token ids the authors' pipelines sent
def tok(name):
    return AutoTokenizer.from_pretrained(FX / name)


class FakeModel:
    "Records what `generate` is handed (and answers one pad token per row); `config` is the folder's."

    def __init__(self, config):
        self.config, self.calls, self.device, self.dtype = config, [], torch.device("cpu"), torch.float32

    def generate(self, input_ids, generation_config=None, **kw):
        self.calls.append({"input_ids": input_ids.tolist(), **kw, "gc": generation_config})
        start = kw["decoder_input_ids"] if "decoder_input_ids" in kw else input_ids
        return torch.cat(
            [
                start,
                torch.full(
                    (len(start), 1), self.config.eos_token_id if isinstance(self.config.eos_token_id, int) else 2
                ),
            ],
            1,
        )


def backend(name, **kw):
    "A backend on the fixture's tokenizer and config whose model only records its calls (the plain path: no prefix reuse)."
    kw.setdefault("prefix_cache", False)
    return HFBackend.create(str(FX / name), hf_model=FakeModel(AutoConfig.from_pretrained(FX / name)), **kw)


def fastchat_zephyr(system, user):
    "FastChat's 'zephyr' conversation (SeparatorStyle.CHATML, sep '</s>'), which rank_llm 0.21.0 builds for RankZephyr."
    return f"<|system|>\n{system}</s>\n" + f"<|user|>\n{user}</s>\n" + "<|assistant|>\n"


def test_rankzephyr_gets_one_bos_as_rank_llms_fastchat_path():
    t, b = tok("zephyr"), backend("zephyr")
    msgs = [
        {"role": "system", "content": "You are RankLLM"},
        {"role": "user", "content": "I will provide you with 2 passages"},
    ]
    ids = b._ids(msgs)
    assert ids == t(fastchat_zephyr("You are RankLLM", "I will provide you with 2 passages"))["input_ids"]
    assert ids[0] == 1 and ids[1] != 1 and ids.count(1) == 1 and t.bos_token_id == 1
    # the template has no <s>: one BOS either way
    assert b._ids(msgs) == backend("zephyr", double_bos=True)._ids(msgs)
    b.generate([msgs], max_new_tokens=3, progress=False)
    assert b.hf_model.calls[0]["input_ids"] == [ids] and b.hf_model.calls[0]["attention_mask"].tolist() == [
        [1] * len(ids)
    ]


def test_llama31_one_bos_by_default_two_with_double_bos_as_llm_rankers():
    t = tok("llama31")
    templated = t.apply_chat_template(PRP[:1], tokenize=False, add_generation_prompt=True) + " Passage:"
    # PairwiseLlmRanker.compare: tokenizer([prompt0, prompt1])
    llm_rankers = t([templated])["input_ids"][0]
    assert llm_rankers[:3] == [128000, 128000, 128006]
    one, two = backend("llama31"), backend("llama31", double_bos=True)
    assert one._ids(PRP) == llm_rankers[1:] and two._ids(PRP) == llm_rankers
    assert two.identity()["double_bos"] is True and "double_bos" not in one.identity()
    two.generate([PRP], max_new_tokens=1, progress=False)
    assert two.hf_model.calls[0]["input_ids"] == [llm_rankers]


def test_aya101_plain_prompt_decoder_prefix_and_no_attention_mask():
    t = tok("aya101")
    # llm-rankers' T5 path: specials added (</s> at the end)
    ref_ids = t([USER, USER], padding="longest")["input_ids"][0]
    ref_dec = t.encode("<pad> Passage", add_special_tokens=False)  # its decoder_input_ids
    plain, quirk = (
        backend("aya101", decoder_prefix="Passage"),
        backend("aya101", decoder_prefix="Passage", no_attention_mask=True),
    )
    item = plain._render(USER)
    assert item["ids"] == ref_ids and ref_ids[-1] == 1 and item["dec"] == ref_dec and ref_dec[0] == 0
    for b, masked in ((plain, True), (quirk, False)):
        b.generate([USER, "Passage A: kurz"], max_new_tokens=2, progress=False)
        calls = b.hf_model.calls  # without a mask, prompts of unequal length go in calls of their own (issue 27 A)
        assert all(("attention_mask" in c) == masked for c in calls) and len(calls) == (1 if masked else 2)
        assert sum(c["decoder_input_ids"].tolist() == [ref_dec] * len(c["input_ids"]) for c in calls) == len(calls)
    assert quirk.identity()["no_attention_mask"] is True and "no_attention_mask" not in plain.identity()


def test_qwen_as_is():
    t, b = tok("qwen25"), backend("qwen25")
    text = t.apply_chat_template(PRP[:1], tokenize=False, add_generation_prompt=True) + " Passage:"
    assert b._ids(PRP) == t(text)["input_ids"] == t(text, add_special_tokens=False)["input_ids"]
    assert b._ids(PRP)[0] == 151644 and backend("qwen25", double_bos=True)._ids(PRP) == b._ids(PRP)


def test_min_new_tokens_reaches_generate():
    b = backend("zephyr")
    b.generate(["x"], max_new_tokens=5, min_new_tokens=5, progress=False)
    gc = b.hf_model.calls[0]["gc"]
    assert (gc.max_new_tokens, gc.min_new_tokens) == (5, 5)


def _hub(monkeypatch, folder):
    "Stand the Hub in: every from_pretrained reads `folder` and records the revision it was asked for (the look-up before it answers)."
    import transformers

    seen = []
    # issue 26's one look-up of a Hub id: the stand-in Hub has the file
    monkeypatch.setattr(llm_hf, "_hub_lookup", lambda *a: None)

    def fake(orig):
        def f(name, *a, revision=None, **kw):
            if not str(name).startswith("/"):
                seen.append((name, revision))  # (the fixture's own loads are local)
            obj = orig(str(FX / folder), **{k: v for k, v in kw.items() if k in ("trust_remote_code",)})
            if hasattr(obj, "_commit_hash") or isinstance(obj, transformers.PretrainedConfig):
                obj._commit_hash = "c0ffee" + "0" * 34
            return obj

        return f

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", fake(AutoConfig.from_pretrained))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fake(AutoTokenizer.from_pretrained))

    def model(name, *a, revision=None, **kw):
        seen.append((name, revision))
        return torch.nn.Linear(1, 1)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model)
    return seen


def test_hub_revision_reaches_from_pretrained_and_the_resolved_commit_is_recorded(monkeypatch):
    seen = _hub(monkeypatch, "llama31")
    b = get_backend("hf:meta-llama/Llama-3.1-8B-Instruct@abc1234")
    b.tokenizer, b.hf_model
    # config, tokenizer, model
    assert b.revision == "abc1234" and seen == [("meta-llama/Llama-3.1-8B-Instruct", "abc1234")] * 3
    assert b.identity()["revision"] == "abc1234" and b.resolved_revision == "c0ffee" + "0" * 34
    u = get_backend("hf:meta-llama/Llama-3.1-8B-Instruct")
    assert u.revision is None and u.resolved_revision.startswith("c0ffee")


def test_dtype_of_the_model_table(monkeypatch):
    _hub(monkeypatch, "llama31")
    assert {m: c.dtype for m, c in HF_MODELS.items()} == {
        "castorini/rank_zephyr_7b_v1_full": "float16",
        "meta-llama/Llama-3.1-8B-Instruct": "float16",
        "CohereLabs/aya-101": "float16",
        "Qwen/Qwen3-Reranker-0.6B": "float16",
        "Qwen/Qwen3-Reranker-8B": "float16",
        # the last three: issue 29's rerankers
        "jhu-clsp/rank1-7b": "float16",
    }
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert get_backend("hf:meta-llama/Llama-3.1-8B-Instruct").identity()["dtype"] == "float16"
    assert get_backend("hf:meta-llama/Llama-3.1-8B-Instruct", dtype="bfloat16").identity()["dtype"] == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # the authors' code on a CPU
    assert get_backend("hf:meta-llama/Llama-3.1-8B-Instruct").identity()["dtype"] == "float32"
    # models outside the table keep their identity
    assert "dtype" not in HFBackend.create(str(FX / "qwen25")).identity()
    assert model_card("meta-llama/Llama-3.1-8B-Instruct").dtype == "float16" and model_card("org/other") is None


def test_the_plan_warns_where_no_revision_is_pinned():
    # the paper's
    for m in ["castorini/rank_zephyr_7b_v1_full", "meta-llama/Llama-3.1-8B-Instruct", "CohereLabs/aya-101"]:
        d = BackendSpec.parse(f"hf:{m}").describe()
        assert "float16 on a GPU as the authors" in d and "WARNING revision not pinned" in d, d
    assert "WARNING" not in BackendSpec.parse("hf:meta-llama/Llama-3.1-8B-Instruct@0e9e39f").describe()
    # beyond the paper: the dtype is the model card's or the reference code's, not the authors'
    assert {m for m, c in HF_MODELS.items() if c.per == "the authors"} == {
        "castorini/rank_zephyr_7b_v1_full",
        "meta-llama/Llama-3.1-8B-Instruct",
        "CohereLabs/aya-101",
    }
    qwen, rank1 = (BackendSpec.parse(f"hf:{m}").describe() for m in ("Qwen/Qwen3-Reranker-8B", "jhu-clsp/rank1-7b"))
    assert "float16 on a GPU as its model card)" in qwen and "float16 on a GPU as its reference code;" in rank1
    assert "as the authors" not in qwen + rank1


# ---------------------------------------------------------------- quantize=int8
Q_PROMPTS = [
    "the cat sat",
    "Passage A: ein Hund",
    [{"role": "user", "content": "Output Passage A or Passage B:"}, {"role": "assistant", "content": " Passage:"}],
]


def test_int8_has_its_own_key_and_cache_entries(tiny, tmp_path):
    q, cache = tiny["qwen2"], Cache(tmp_path / "cache")
    fp, q8 = get_backend(f"hf:{q}", cache), get_backend(f"hf:{q}[quantize=int8]", cache)
    assert (
        BackendSpec.parse(f"hf:{q}[quantize=int8]").key() == f"hf:{q}[quantize=int8]"
        and BackendSpec.parse(f"hf:{q}").key() == f"hf:{q}"
    )
    assert q8.identity() == {**fp.identity(), "quantize": "int8"} and "quantize" not in fp.identity()
    a32, s32 = (
        fp.generate(Q_PROMPTS, max_new_tokens=4, progress=False),
        fp.score(Q_PROMPTS, [" A", " B"], progress=False),
    )
    a8, s8 = q8.generate(Q_PROMPTS, max_new_tokens=4, progress=False), q8.score(Q_PROMPTS, [" A", " B"], progress=False)
    assert q8.usage.calls == 2 * len(Q_PROMPTS) and q8.usage.cache_hits == 0  # nothing served from fp32's entries
    assert len(a8) == 3 and all(isinstance(t, str) for t in a8) and q8.usage.tokens_out > 0
    assert all(abs(x - y) < 0.5 and x < 0 for r8, r in zip(s8, s32) for x, y in zip(r8, r))
    assert all(
        "quantized" in type(m).__module__ for m in (q8.hf_model.lm_head, q8.hf_model.model.layers[0].self_attn.q_proj)
    )
    again = get_backend(f"hf:{q}[quantize=int8]", cache)
    assert (
        again.generate(Q_PROMPTS, max_new_tokens=4, progress=False) == a8
        and again.usage.cache_hits == 3
        and again.usage.calls == 0
    )
    assert fp.generate(Q_PROMPTS, max_new_tokens=4, progress=False) == a32 and fp.usage.cache_hits == 3


@pytest.mark.parametrize(
    "spec, msg",
    [("[quantize=int4]", "quantize"), ("[quantize=int8,dtype=bfloat16]", "quantize=int8 needs float32 weights")],
)
def test_invalid_quantize_is_one_line(tiny, spec, msg):
    with pytest.raises(ClirError) as e:
        get_backend(f"hf:{tiny['qwen2']}{spec}").hf_model
    assert msg in str(e.value) and "\n" not in str(e.value).strip()


def test_missing_quantisation_engine_is_one_line(tiny, monkeypatch):
    monkeypatch.setattr(llm_hf, "_quant_engine", lambda: None)
    b = get_backend(f"hf:{tiny['qwen2']}[quantize=int8]")
    with pytest.raises(LLMError) as e:
        b.hf_model
    assert "quantised CPU kernels" in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------- the offline model
@pytest.mark.slow
def test_offline_qwen_generates(tmp_path):
    b = get_backend("hf:qwen2.5-coder-0.5b-offline", Cache(tmp_path))
    assert b.label == "Qwen2.5-Coder-0.5B (stand-in)" and b.name == "hf:qwen2.5-coder-0.5b-offline" and b.is_chat
    assert b.batch_size == 32 and b.dtype_name == "float32" and "dtype" not in b.identity()
    prompts = ["Translate to English: Guten Morgen", "What is 2 + 3? Answer with one number."]
    out = b.generate(prompts, max_new_tokens=8, progress=False)
    assert "morning" in out[0].lower() and "5" in out[1], out
    s = b.score(
        [[{"role": "user", "content": "Answer with one letter, A or B: which letter comes first in the alphabet?"}]],
        ["A", "B"],
        progress=False,
    )[0]
    assert s[0] > s[1]
    again = get_backend("hf:qwen2.5-coder-0.5b-offline", Cache(tmp_path))
    assert (Path(again._source) / "model.safetensors").is_file()
    assert (
        again.generate(prompts, max_new_tokens=8, progress=False) == out
        and again.usage.calls == 0
        and again._model is None
    )
    fresh = get_backend("hf:qwen2.5-coder-0.5b-offline", Cache(tmp_path, mode="off"), batch_size=1)
    assert (
        fresh.batch_size == 1
        and fresh.generate(prompts, max_new_tokens=8, progress=False) == out
        and fresh.usage.calls == 2
    )


# ---------------------------------------------------------------- no attention mask: equal lengths only (issue 27 A)
def tiny_llama(path: Path) -> Path:
    """A tiny Llama (causal LM) with a chat template whose tokenizer has no pad token, as Llama-3.1's: the pad id falls
    back to the EOS id, so transformers cannot infer a mask from the padding."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tk = AutoTokenizer.from_pretrained(make_tiny_hf_model(path / "bpe", "qwen2"))
    tk.pad_token = None
    cfg = LlamaConfig(
        vocab_size=len(tk),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=tk.eos_token_id,
        pad_token_id=None,
        bos_token_id=None,
        tie_word_embeddings=True,
        initializer_range=0.2,
    )
    torch.manual_seed(3)
    m = LlamaForCausalLM(cfg)
    m.generation_config.eos_token_id, m.generation_config.pad_token_id = tk.eos_token_id, None
    m.save_pretrained(path / "llama")
    tk.save_pretrained(path / "llama")
    return path / "llama"


def test_a_padded_row_without_the_mask_differs_an_equal_length_batch_does_not(tmp_path):
    "Why issue 27 A matters (transformers' behaviour, on the tiny Llama): the pad id is an EOS id, so nothing masks the padding."
    b = get_backend(f"hf:{tiny_llama(tmp_path)}", prefix_cache=False)
    assert b._pad_id() in b._eos_ids() and b.tokenizer.pad_token_id is None
    short, long_, long2 = (b._ids(p) for p in ("kissa nukkuu", PROMPTS[1], PROMPTS[4]))
    assert len(long_) > len(short)

    def last(seqs, masked):
        ids, mask = b._batch(seqs, left=True)
        with torch.inference_mode():
            return b.hf_model(input_ids=ids, **({"attention_mask": mask} if masked else {})).logits[:, -1]

    alone = last([short], False)[0]
    assert (last([long_, short], False)[1] - alone).abs().max() > 1e-3  # padded, unmasked: another answer
    assert (last([long_, short], True)[1] - alone).abs().max() < 1e-4  # padded, masked: the same
    same = [s for s in (long2, b._ids(PROMPTS[0] + " x")) if len(s) == len(long_)] or [list(long_)]
    # equal lengths, unmasked: the same
    assert (last([long_, same[0]], False)[0] - last([long_], False)[0]).abs().max() < 1e-4


@pytest.mark.parametrize("reuse", [False, True])
def test_no_attention_mask_batches_only_prompts_of_equal_length(tmp_path, reuse):
    "llm-rankers sent the two prompts of a comparison (equal length) without a mask; a padded batch must not change an answer."
    path, kw = tiny_llama(tmp_path), dict(no_attention_mask=True, prefix_cache=reuse)
    prompts = [p for p in PROMPTS if isinstance(p, str)] + ["kissa", "il gatto dorme " * 3]
    b = get_backend(f"hf:{path}", batch_size=8, **kw)
    assert len({len(b._ids(p)) for p in prompts}) > 3
    batched = b.generate(prompts, max_new_tokens=6, progress=False)
    alone = [
        get_backend(f"hf:{path}", batch_size=1, **kw).generate([p], max_new_tokens=6, progress=False)[0]
        for p in prompts
    ]
    assert batched == alone


# ---------------------------------------------------------------- prefix reuse (issue 30)
def prp_prompts(n_docs=5, queries=("where do cats sleep", "dogs in parks")):
    "PRP prompts of two queries in both orders: every prompt shares the instruction and query, many the passage in position A."
    docs = [
        "the cat sat on the mat and looked at the birds",
        "ein Hund lief durch den Park",
        "kissa nukkuu sohvalla",
        "il gatto dorme sul divano tutto il giorno",
        "кошка спит на диване",
        "Rank the passages 0 1 2 3",
    ][:n_docs]
    text = (
        'Given a query "{q}", which of the following two passages is more relevant to the query?\n\nPassage A: "{a}"'
        '\n\nPassage B: "{b}"\n\nOutput Passage A or Passage B:'
    )
    return [
        [{"role": "user", "content": text.format(q=q, a=a, b=b)}, {"role": "assistant", "content": " Passage:"}]
        for q in queries
        for a in docs
        for b in docs
        if a != b
    ]


def test_prefix_reuse_gives_the_answers_and_scores_of_the_plain_path(tiny):
    "Greedy answers identical, scores within 1e-4 (fp32; measured: about 1e-6 on the tiny model, 1e-5 on the stand-in)."
    prompts = prp_prompts()
    plain = get_backend(f"hf:{tiny['qwen2']}", prefix_cache=False, batch_size=4)
    reuse = get_backend(f"hf:{tiny['qwen2']}", batch_size=4)
    assert plain.generate(prompts, max_new_tokens=4, progress=False) == reuse.generate(
        prompts, max_new_tokens=4, progress=False
    )
    c = reuse.usage.counters
    assert c["prefix_cache_hits"] > len(prompts) // 2 and c["prefill_tokens"] < 0.6 * c["prefill_tokens_without_reuse"]
    assert "prefix_cache_hits" not in plain.usage.counters
    for cands in ([" A", " B"], [" Passage A", " Passage B C"]):  # single-token and multi-token candidates
        a, b = plain.score(prompts, cands, progress=False), reuse.score(prompts, cands, progress=False)
        assert max(abs(x - y) for r, s in zip(a, b) for x, y in zip(r, s)) < 1e-4
        assert [r[0] > r[1] for r in a] == [r[0] > r[1] for r in b]


def test_prefix_reuse_within_a_small_memory_budget(tiny):
    "A budget of a few blocks: blocks are dropped least recently used first, the answers do not change."
    prompts = prp_prompts()
    small = get_backend(f"hf:{tiny['qwen2']}", batch_size=3, prefix_cache_gb=2e-5)  # 20 kB: a few dozen blocks
    plain = get_backend(f"hf:{tiny['qwen2']}", prefix_cache=False, batch_size=3)
    assert small.generate(prompts, max_new_tokens=3, progress=False) == plain.generate(
        prompts, max_new_tokens=3, progress=False
    )
    st = small.kv_store
    assert st.used <= st.capacity == 2e4 and st.stats["evicted"] > 0 and st.stats["hits"] > 0


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_prefix_reuse_is_off_by_default_in_reduced_precision(tiny, dtype):
    """Issue 38 item 3: reuse is exact only in float32 (bfloat16 moved a logit by 0.195 and changed a setwise ranking in
    the review; 10h_prefix_cache has the measured drift), so the default reuses only there; `prefix_cache=True` still
    turns it on in any dtype. Before the fix the default reused in bfloat16 and float16 too."""
    q, prompts = tiny["qwen2"], prp_prompts()[:6]
    default = get_backend(f"hf:{q}", dtype=dtype, batch_size=3)
    default.generate(prompts, max_new_tokens=2, progress=False)
    assert not default._reuses() and "prefix_cache_hits" not in default.usage.counters
    forced = get_backend(f"hf:{q}", dtype=dtype, batch_size=3, prefix_cache=True)
    forced.generate(prompts, max_new_tokens=2, progress=False)
    assert forced._reuses() and forced.usage.counters["prefix_cache_hits"] > 0
    assert get_backend(f"hf:{q}", dtype="float32")._reuses()  # float32: reuse on by default
    # int8 weights: not float32 arithmetic although the first parameter (the embeddings) is (review: 0.21 logprob drift)
    assert (
        not get_backend(f"hf:{q}", quantize="int8")._reuses()
        and get_backend(f"hf:{q}", quantize="int8", prefix_cache=True)._reuses()
    )
    quirk = get_backend(f"hf:{q}", dtype="float32", no_attention_mask=True)
    assert quirk.prefix_cache is False and not quirk._reuses()  # llm-rankers' unmasked calls: never reused


def test_prefix_reuse_is_a_speed_option_and_applies_where_states_are_a_prefix(tiny):
    q = tiny["qwen2"]
    assert get_backend(f"hf:{q}", prefix_cache=False).identity() == get_backend(f"hf:{q}").identity()
    assert HFOptions().prefix_cache is None and not HFOptions.model_fields["prefix_cache"].json_schema_extra.get(
        "identity", True
    )
    assert get_backend(f"hf:{q}")._reuses() and not get_backend(f"hf:{q}", prefix_cache=False)._reuses()
    mt5 = get_backend(f"hf:{tiny['mt5']}", decoder_prefix="Passage")
    assert not mt5._reuses()  # a bidirectional encoder: no prefix has states of its own
    mt5.generate(PROMPTS[:3], max_new_tokens=2, progress=False)
    assert "prefix_cache_hits" not in mt5.usage.counters
    zephyr = backend("zephyr", prefix_cache=True)  # Mistral's sliding window: states depend on the window
    assert zephyr.config.sliding_window and not zephyr._reuses() and backend("llama31", prefix_cache=True)._reuses()


def test_prefix_reuse_through_an_executor_counts_in_the_owners_usage(tiny, tmp_path):
    class TwoAtATime(LocalExecutor):
        def groups(self, batches):
            return [batches[i : i + 2] for i in range(0, len(batches), 2)]

    prompts = prp_prompts(4)
    b = get_backend(f"hf:{tiny['qwen2']}", Cache(tmp_path), batch_size=2, executor=TwoAtATime())
    assert b.generate(prompts, max_new_tokens=3, progress=False) == get_backend(
        f"hf:{tiny['qwen2']}", prefix_cache=False
    ).generate(prompts, max_new_tokens=3, progress=False)
    assert b.usage.counters["prefix_cache_hits"] > 0


def test_prefix_reuse_to_the_token(tiny):
    """issue 30: a prompt reuses its longest common prefix with the prompts before it to the token (whole 16-token
    blocks gave up to 15 tokens per prompt back): one prompt at a time, the tokens computed are what a token-exact
    simulation of the same stream computes."""
    from clir_llm.prefix_cache import prefix_hit_share

    prompts = prp_prompts(4)[:8]
    b = get_backend(f"hf:{tiny['qwen2']}", batch_size=1)
    answers = [b.generate([p], max_new_tokens=2, progress=False)[0] for p in prompts]
    assert answers == get_backend(f"hf:{tiny['qwen2']}", prefix_cache=False, batch_size=4).generate(
        prompts, max_new_tokens=2, progress=False
    )
    ids = [b._ids(p) for p in prompts]
    total, c = sum(map(len, ids)), b.usage.counters
    assert c["prefill_tokens_without_reuse"] == total
    assert c["prefill_tokens"] == round(total * (1 - prefix_hit_share(ids, float("inf"), block=1)))
    assert c["prefill_tokens"] < round(total * (1 - prefix_hit_share(ids, float("inf"))))  # fewer than whole blocks


@pytest.mark.parametrize("cost", [0, 10_000])
def test_prefix_reuse_computes_the_longest_rests_first(tiny, cost):
    """issue 30: rows of a batch that hold prefixes of unequal length have unequal rests; padding them to the longest
    costs as much as tokens. With passes free (`stage_cost=0`) the long rests are computed first and nothing is padded;
    with costly passes one pass pads (counted). The answers are the plain path's either way."""
    docs = [
        "the cat sat on the mat and looked at the birds in the garden for a very long time " * 2,
        "kissa nukkuu",
        "il gatto dorme",
    ]
    text = 'Given a query "{q}", which passage is more relevant?\n\nPassage A: "{a}"\n\nPassage B: "{b}"\n\nOutput:'
    prp = lambda a, b: [
        {"role": "user", "content": text.format(q="cats", a=a, b=b)},
        {"role": "assistant", "content": " Passage:"},
    ]
    first, batch = [prp(docs[0], docs[1])], [prp(docs[0], docs[2]), prp(docs[2], docs[0]), prp(docs[1], docs[0])]
    b = get_backend(f"hf:{tiny['qwen2']}", batch_size=4)
    b.stage_cost = cost
    b.generate(first, max_new_tokens=3, progress=False)
    before = dict(b.usage.counters)
    got = b.generate(batch, max_new_tokens=3, progress=False)
    assert got == get_backend(f"hf:{tiny['qwen2']}", prefix_cache=False).generate(
        batch, max_new_tokens=3, progress=False
    )
    padded = b.usage.counters.get("prefill_padding_tokens", 0) - before.get("prefill_padding_tokens", 0)
    assert (padded == 0) if cost == 0 else padded > 20


def test_the_cache_argument_is_read_from_the_model_class(tiny):
    """issue 30 item 3: transformers 5 deprecates `past_key_values` for `cache`; a wrapper put on the model instance (a
    benchmark's call counter) hid the forward's parameters, so the deprecated name was passed (a FutureWarning each call)."""
    import inspect, warnings
    from clir_llm.prefix_cache import kv_arg

    b = get_backend(f"hf:{tiny['qwen2']}", batch_size=4)
    m = b.hf_model
    expected = "cache" if "cache" in inspect.signature(type(m).forward).parameters else "past_key_values"
    fwd = m.forward
    m.forward = lambda *a, **k: fwd(*a, **k)
    try:
        assert kv_arg(m) == expected
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            b.generate(prp_prompts(3), max_new_tokens=2, progress=False)
            b.score(prp_prompts(3)[:4], [" A", " B"], progress=False)
    finally:
        del m.forward
    assert b.usage.counters["prefix_cache_hits"] > 0


def test_truncate_counts_the_text_it_cut(tiny):
    "A reranker cuts a passage and then counts the whole of it: one tokenization of the text, not two."
    b = get_backend(f"hf:{tiny['qwen2']}")
    tok, calls = b.tokenizer, []

    class Counting:
        def __getattr__(self, name):
            return getattr(tok, name)

        def __call__(self, text, **kw):
            calls.append(text)
            return tok(text, **kw)

    b._tok = Counting()
    text = "the cat sat on the mat " * 20
    cut = b.truncate(text, 7)
    assert b.count_tokens(text) == len(tok(text, add_special_tokens=False)["input_ids"]) and b.count_tokens(cut) == 7
    assert calls.count(text) == 1


def test_hf_identity_is_unchanged():
    "Recorded demo calls must still hit: hf: identities carry no endpoint (issue 14 finding 2; its openai: half is in test_llm_openai)."
    from types import SimpleNamespace

    # a loaded model: fp32, no switch
    fp32 = SimpleNamespace(config=SimpleNamespace(is_encoder_decoder=False), dtype="torch.float32")
    hf = HFBackend("m", revision="abc", hf_model=fp32, hf_tokenizer=SimpleNamespace(chat_template=None))
    assert hf.identity() == {"kind": "hf", "model": "m", "revision": "abc"}


def test_an_unknown_hub_id_fails_in_seconds(tmp_path):
    """issue 26 item 13: an id that is not in the local Hugging Face cache and that the Hub does not answer (here: nothing
    listens at HF_ENDPOINT) is one LLMError naming it, after one look-up (7ce5228: the Hub client retried for 30 s)."""
    import os, subprocess, sys

    code = (
        "import time, torch, transformers, huggingface_hub, clir_llm.llm_hf\nfrom clir_llm.llm import get_backend\nt = time.monotonic()\n"
        "try: get_backend('hf:no-such-org/no-such-model-26')\nexcept Exception as e: print(type(e).__name__, e)\n"
        "print(round(time.monotonic() - t, 1))\n"
    )
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:1", "HF_HOME": str(tmp_path / "hf")}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    *said, seconds = p.stdout.strip().splitlines()
    assert said and said[0].startswith(
        "LLMError hf:no-such-org/no-such-model-26: not in the local Hugging Face cache"
    ), p.stdout + p.stderr[-2000:]
    assert "thrown while requesting" not in p.stderr and float(seconds) < 20, (seconds, p.stderr[-2000:])


# ---------------------------------------------------------------- a wrapped forward (issue 36)
def _wrap_forward(model, how):
    "Put a call-counting wrapper on the instance's forward, as a benchmark, accelerate's hooks or PEFT do."
    import functools

    fwd, calls = model.forward, []

    def counting(*a, **k):
        calls.append(1)
        return fwd(*a, **k)

    model.forward = functools.wraps(fwd)(counting) if how == "functools.wraps" else counting
    return calls, fwd


@pytest.mark.parametrize("how", ["plain", "functools.wraps"])
@pytest.mark.parametrize("reuse", [True, False])
def test_a_wrapped_forward_gives_the_same_answers(tiny, how, reuse):
    """A wrapper on the model's `forward` (without functools.wraps it hides the forward's parameters from transformers'
    `generate`, which then leaves the positions of left-padded rows to the model) changes no answer or score, batched
    or one at a time, with prefix reuse on and off. Before the fix, the plain wrapper changed batched answers."""
    prompts = PROMPTS[:3] + prp_prompts()[:5]
    ref = get_backend(f"hf:{tiny['qwen2']}", prefix_cache=reuse, batch_size=8)
    want, want_scores = (
        ref.generate(prompts, max_new_tokens=6, progress=False),
        ref.score(prompts, [" A", " B"], progress=False),
    )
    b = get_backend(f"hf:{tiny['qwen2']}", prefix_cache=reuse, batch_size=8)
    calls, fwd = _wrap_forward(b.hf_model, how)
    try:
        assert b.generate(prompts, max_new_tokens=6, progress=False) == want
        got = b.score(prompts, [" A", " B"], progress=False)
        assert max(abs(x - y) for r, s in zip(got, want_scores) for x, y in zip(r, s)) < 1e-5
        assert b._keeps_logits() == ref._keeps_logits()  # the last position's logits only, wrapper or not
        assert calls  # the wrapper was called: the model ran through it
    finally:
        b.hf_model.forward = fwd


class AnsweringModel(FakeModel):
    "Answers row i of each call with the token ids `answers[i]` after its decoder input (then EOS)."

    def __init__(self, config, answers):
        super().__init__(config)
        self.answers = answers

    def generate(self, input_ids, generation_config=None, **kw):
        self.calls.append({"input_ids": input_ids.tolist(), **kw, "gc": generation_config})
        new = torch.tensor([a + [self.config.eos_token_id] for a in self.answers[: len(input_ids)]])
        return torch.cat([kw["decoder_input_ids"], new], 1)


def test_t5_exact_answers_decode_the_decoder_prefix_as_llm_rankers():
    """Issue 38 item 4a: llm-rankers' T5 path decodes its decoder input ('<pad> Passage') with the 2 new tokens
    (`batch_decode(output_ids, skip_special_tokens=True)`) and takes only 'Passage A' / 'Passage B': a first token without
    its word-start marker ('A', not '▁A') reads 'PassageA', no answer. Before: the new tokens alone ('A'), a win."""
    from clir_llm.core import Document, Qrels, Query, Run
    from clir_llm.rerank import get_reranker
    from clir_llm.testing import TinyCollection

    t = tok("aya101")
    bare_a, bare_b, marked_a = t.convert_tokens_to_ids(["A", "B", "▁A"])
    dec = t.encode("<pad> Passage", add_special_tokens=False)  # llm-rankers' decoder_input_ids
    upstream = lambda new: t.batch_decode([dec + new + [1]], skip_special_tokens=True)[0]
    assert (upstream([bare_a]), upstream([marked_a])) == ("PassageA", "Passage A")
    coll = TinyCollection(
        {"q": Query("q", "wer?", "en")},
        {d: Document(d, f"text {d}", "", "de") for d in ("d1", "d2")},
        Qrels({"q": {"d1": 1, "d2": 0}}),
    )
    run = Run.from_ranked({"q": ["d2", "d1"]}, name="bm25")
    for answers, failures in (([[bare_a], [bare_b]], 2), ([[marked_a], [marked_a]], 0), ([[marked_a], [bare_b]], 1)):
        want = sum(upstream(a) not in ("Passage A", "Passage B") for a in answers)
        b = HFBackend.create(
            str(FX / "aya101"),
            decoder_prefix="Passage",
            hf_model=AnsweringModel(AutoConfig.from_pretrained(FX / "aya101"), answers),
        )
        rr = get_reranker("pairwise-allpair", b, answers="exact", batch_size=2, doc_title=False, progress=False)
        rr.rerank(coll, run, k=2)
        assert b.hf_model.calls[0]["decoder_input_ids"].tolist() == [dec, dec]
        assert rr.diagnostics["q"]["parse_failures"] == want == failures, answers
    # without the parameter: the new tokens alone
    assert b.generate(["x"], max_new_tokens=2, progress=False) == ["A"]
    assert b.generate(["x"], max_new_tokens=2, decode_prefix=True, progress=False) == ["Passage A"]
