"""Issue 15 finding 3: the token ids the `hf:` backend sends, per model family, against what the authors' pipelines
sent (rank_llm 0.21.0's FastChat path for RankZephyr, llm-rankers 0.0.2 for Llama-3.1 and Aya-101), on tokenizer
folders in the upstream formats (tests/fixtures/tokenizers: the published chat templates and BOS settings, special
tokens at their real ids, a tiny vocabulary). Also the dtype of the model table and the revision of `hf:<id>@<rev>`."""
from pathlib import Path
from types import SimpleNamespace
import pytest, torch
from transformers import AutoConfig, AutoTokenizer
from clir_llm.llm import HFBackend, HF_MODELS, get_backend

FX = Path(__file__).parent / "fixtures" / "tokenizers"
USER = "Given a query \"wer?\", which of the following two passages is more relevant to the query?\n\nPassage A: \"the cat\"\n\nPassage B: \"ein Hund\"\n\nOutput Passage A or Passage B:"
PRP = [{"role": "user", "content": USER}, {"role": "assistant", "content": " Passage:"}]   # llm-rankers appends " Passage:"


def tok(name): return AutoTokenizer.from_pretrained(FX / name)


class FakeModel:
    "Records what `generate` is handed (and answers one pad token per row); `config` is the folder's."
    def __init__(self, config): self.config, self.calls, self.device, self.dtype = config, [], torch.device("cpu"), torch.float32
    def generate(self, input_ids, generation_config=None, **kw):
        self.calls.append({"input_ids": input_ids.tolist(), **kw, "gc": generation_config})
        start = kw["decoder_input_ids"] if "decoder_input_ids" in kw else input_ids
        return torch.cat([start, torch.full((len(start), 1), self.config.eos_token_id if isinstance(self.config.eos_token_id, int) else 2)], 1)


def backend(name, **kw):
    b = HFBackend(str(FX / name), **kw)
    b._model = FakeModel(b.config)
    return b


def fastchat_zephyr(system, user):
    "FastChat's 'zephyr' conversation (SeparatorStyle.CHATML, sep '</s>'), which rank_llm 0.21.0 builds for RankZephyr."
    return f"<|system|>\n{system}</s>\n" + f"<|user|>\n{user}</s>\n" + "<|assistant|>\n"


def test_rankzephyr_gets_one_bos_as_rank_llms_fastchat_path():
    t, b = tok("zephyr"), backend("zephyr")
    msgs = [{"role": "system", "content": "You are RankLLM"}, {"role": "user", "content": "I will provide you with 2 passages"}]
    ids = b._ids(msgs)
    assert ids == t(fastchat_zephyr("You are RankLLM", "I will provide you with 2 passages"))["input_ids"]   # rank_llm: self._tokenizer([prompt])
    assert ids[0] == 1 and ids[1] != 1 and ids.count(1) == 1 and t.bos_token_id == 1
    assert b._ids(msgs) == backend("zephyr", double_bos=True)._ids(msgs)      # the template has no <s>: one BOS either way
    b.generate([msgs], max_new_tokens=3)
    assert b.hf_model.calls[0]["input_ids"] == [ids] and b.hf_model.calls[0]["attention_mask"].tolist() == [[1] * len(ids)]


def test_llama31_one_bos_by_default_two_with_double_bos_as_llm_rankers():
    t = tok("llama31")
    templated = t.apply_chat_template(PRP[:1], tokenize=False, add_generation_prompt=True) + " Passage:"
    llm_rankers = t([templated])["input_ids"][0]                  # PairwiseLlmRanker.compare: tokenizer([prompt0, prompt1])
    assert llm_rankers[:3] == [128000, 128000, 128006]
    one, two = backend("llama31"), backend("llama31", double_bos=True)
    assert one._ids(PRP) == llm_rankers[1:] and two._ids(PRP) == llm_rankers
    assert two.identity()["double_bos"] is True and "double_bos" not in one.identity()
    two.generate([PRP], max_new_tokens=1)
    assert two.hf_model.calls[0]["input_ids"] == [llm_rankers]


def test_aya101_plain_prompt_decoder_prefix_and_no_attention_mask():
    t = tok("aya101")
    ref_ids = t([USER, USER], padding="longest")["input_ids"][0]    # llm-rankers' T5 path: specials added (</s> at the end)
    ref_dec = t.encode("<pad> Passage", add_special_tokens=False)    # its decoder_input_ids
    plain, quirk = backend("aya101", decoder_prefix="Passage"), backend("aya101", decoder_prefix="Passage", no_attention_mask=True)
    item = plain._render(USER)
    assert item["ids"] == ref_ids and ref_ids[-1] == 1 and item["dec"] == ref_dec and ref_dec[0] == 0
    for b, masked in ((plain, True), (quirk, False)):
        b.generate([USER, "Passage A: kurz"], max_new_tokens=2)
        call = b.hf_model.calls[0]
        assert ("attention_mask" in call) == masked and call["decoder_input_ids"].tolist() == [ref_dec] * 2
    assert quirk.identity()["no_attention_mask"] is True and "no_attention_mask" not in plain.identity()


def test_qwen_as_is():
    t, b = tok("qwen25"), backend("qwen25")
    text = t.apply_chat_template(PRP[:1], tokenize=False, add_generation_prompt=True) + " Passage:"
    assert b._ids(PRP) == t(text)["input_ids"] == t(text, add_special_tokens=False)["input_ids"]
    assert b._ids(PRP)[0] == 151644 and backend("qwen25", double_bos=True)._ids(PRP) == b._ids(PRP)


def test_min_new_tokens_reaches_generate():
    b = backend("zephyr")
    b.generate(["x"], max_new_tokens=5, min_new_tokens=5)
    gc = b.hf_model.calls[0]["gc"]
    assert (gc.max_new_tokens, gc.min_new_tokens) == (5, 5)


def _hub(monkeypatch, folder):
    "Stand the Hub in: every from_pretrained reads `folder` and records the revision it was asked for."
    import transformers
    seen = []
    def fake(orig):
        def f(name, *a, revision=None, **kw):
            if not str(name).startswith("/"): seen.append((name, revision))   # (the fixture's own loads are local)
            obj = orig(str(FX / folder), **{k: v for k, v in kw.items() if k in ("trust_remote_code",)})
            if hasattr(obj, "_commit_hash") or isinstance(obj, transformers.PretrainedConfig): obj._commit_hash = "c0ffee" + "0" * 34
            return obj
        return f
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", fake(AutoConfig.from_pretrained))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fake(AutoTokenizer.from_pretrained))
    def model(name, *a, revision=None, **kw):
        seen.append((name, revision)); return torch.nn.Linear(1, 1)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model)
    return seen


def test_hub_revision_reaches_from_pretrained_and_the_resolved_commit_is_recorded(monkeypatch):
    seen = _hub(monkeypatch, "llama31")
    b = get_backend("hf:meta-llama/Llama-3.1-8B-Instruct@abc1234")
    b.tokenizer, b.hf_model
    assert b.revision == "abc1234" and seen == [("meta-llama/Llama-3.1-8B-Instruct", "abc1234")] * 3   # config, tokenizer, model
    assert b.identity()["revision"] == "abc1234" and b.resolved_revision == "c0ffee" + "0" * 34
    u = get_backend("hf:meta-llama/Llama-3.1-8B-Instruct")
    assert u.revision is None and u.resolved_revision.startswith("c0ffee")


def test_dtype_of_the_model_table(monkeypatch):
    _hub(monkeypatch, "llama31")
    assert {m: c.dtype for m, c in HF_MODELS.items()} == {"castorini/rank_zephyr_7b_v1_full": "float16",
                                                            "meta-llama/Llama-3.1-8B-Instruct": "float16", "CohereLabs/aya-101": "float16"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert get_backend("hf:meta-llama/Llama-3.1-8B-Instruct").identity()["dtype"] == "float16"
    assert get_backend("hf:meta-llama/Llama-3.1-8B-Instruct", dtype="bfloat16").identity()["dtype"] == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert get_backend("hf:meta-llama/Llama-3.1-8B-Instruct").identity()["dtype"] == "float32"   # the authors' code on a CPU
    local = HFBackend(str(FX / "qwen25"))
    assert "dtype" not in local.identity()        # models outside the table keep their identity (and cache keys)


def test_the_plan_warns_where_no_revision_is_pinned():
    from clir_llm.llm import BackendSpec
    for m in HF_MODELS:
        d = BackendSpec.parse(f"hf:{m}").describe()
        assert "float16 on a GPU as the authors" in d and "WARNING revision not pinned" in d, d
    assert "WARNING" not in BackendSpec.parse("hf:meta-llama/Llama-3.1-8B-Instruct@0e9e39f").describe()
