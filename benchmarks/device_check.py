"""The CUDA paths the CPU suite cannot run (issue 38 item 7), on tiny random models only: a lent GPU machine has torch
and transformers but no model downloads and no vLLM, so every model here is made on the spot or ships in tests/fixtures.
It runs in well under 10 minutes on one H100 (the models have 2 layers; the slowest part is loading CUDA).

Each check prints one `target NAME: ...` line with what it measured and `ok` or `FAIL`, and the script exits 1 when a
check fails:

- `padded-attention-fp16`, `padded-attention-bf16`: the `hf:` backend's left-padded batches (prefix reuse off) against
  the same prompts one at a time: greedy answers and the max |Δ| of the candidates' log-probabilities; the bound is a
  few times what the CPU measured for batching noise in that dtype (nbs/10h_prefix_cache: bf16 0.017, fp16 0.0028).
- `prefix-reuse-cuda`: prefix reuse against the plain path in float32 (bound 1e-4: float rounding) and, reported, in
  bfloat16 with `prefix_cache=true` beside the plain path's own batching noise (the default reuses only in float32).
- `stop-strings-cuda`: Rank1's call (issue 38 item 4): greedy generation stopped by strings taken from the model's own
  answers, with the last generated token's top 20 log-probabilities, in a batch of 8 against one at a time: in float32
  (prefix reuse on, its default there) the same texts, strings met and token counts, top-20 |Δ| <= 1e-4; float16 reported.
- `crossencoder-padded`: the cross-encoder's padded attention (one masked call per batch, the GPU default) against
  per-pair attention one pair at a time, in float32 (bound 1e-4) and float16 (bound 2e-2).
- `nvembed-cuda`: NV-Embed-v2 without remote code (tests/fixtures/nvembed: the published code's float32 outputs) on the
  GPU in float32 (bound 1e-4) and bfloat16 (cosine >= 0.99), and a text's vector alone equal to it in a padded batch.
- `repllama-autocast`: the `repllama-tevatron` quirk's float16 autocast on the GPU against float32 (cosine >= 0.99).
- `nllb-device-string`: a tiny NLLB on `cuda:0` and on `cuda`: the same dtype (float16 on any CUDA device string) and
  the same translations.

    python benchmarks/device_check.py            # on the GPU machine (device cuda)
    python benchmarks/device_check.py --smoke    # on a CPU: the same code path, not a measurement (CI)
"""
import argparse, sys, tempfile, time
from pathlib import Path
import numpy as np
import torch
import _smoke

TARGETS = ["padded-attention-fp16", "padded-attention-bf16", "prefix-reuse-cuda", "stop-strings-cuda", "crossencoder-padded",
           "nvembed-cuda", "repllama-autocast", "nllb-device-string"]
ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [[{"role": "user", "content": f"Given a query \"{q}\", which of the following two passages is more relevant?\n\n"
             f"Passage A: \"{a}\"\n\nPassage B: \"{b}\"\n\nOutput Passage A or Passage B:"}]
           for q in ("where do cats sleep", "dogs in the park at night") for a, b in
           (("the cat sat on the mat", "ein Hund lief durch den Park und bellte laut"),
            ("kissa nukkuu sohvalla koko päivän", "il gatto"), ("кошка спит на диване", "a dog"))]
FAILED = []


def report(name: str, ok: bool, what: str):
    "One target line; a failed check is remembered for the exit status."
    if not ok: FAILED.append(name)
    print(f"target {name}: {'ok' if ok else 'FAIL'} ({what})", flush=True)


def maxdiff(a, b) -> float: return float(max(abs(x - y) for r, s in zip(a, b) for x, y in zip(r, s)))


def cos(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(((a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))).min())


def padded_attention(tmp: Path, device: str, dtype: str, bound: float):
    from clir_llm.llm import get_backend
    from clir_llm.testing import make_tiny_hf_model
    model = make_tiny_hf_model(tmp / "qwen2", "qwen2")
    kw = dict(device=device, dtype=dtype, prefix_cache=False)
    batched, alone = get_backend(f"hf:{model}", batch_size=8, **kw), get_backend(f"hf:{model}", batch_size=1, **kw)
    same = sum(x == y for x, y in zip(batched.generate(PROMPTS, max_new_tokens=4, progress=False),
                                      alone.generate(PROMPTS, max_new_tokens=4, progress=False)))
    d = maxdiff(batched.score(PROMPTS, [" A", " B"], progress=False), alone.score(PROMPTS, [" A", " B"], progress=False))
    report(f"padded-attention-{ {'float16': 'fp16', 'bfloat16': 'bf16'}[dtype]}", d <= bound,
           f"{dtype} on {device}: max |d logprob| batch 8 vs 1 {d:.3g} (bound {bound}); greedy answers equal {same}/{len(PROMPTS)}")


def prefix_reuse(tmp: Path, device: str):
    from clir_llm.llm import get_backend
    from clir_llm.testing import make_tiny_hf_model
    model, c = make_tiny_hf_model(tmp / "qwen2r", "qwen2", seed=1), [" A", " B"]
    def scores(dtype, reuse, bs=8):
        return get_backend(f"hf:{model}", device=device, dtype=dtype, batch_size=bs, prefix_cache=reuse).score(PROMPTS, c, progress=False)
    f32 = maxdiff(scores("float32", True), scores("float32", False))
    plain = scores("bfloat16", False)
    drift, noise = maxdiff(scores("bfloat16", True), plain), maxdiff(scores("bfloat16", False, 1), plain)
    report("prefix-reuse-cuda", f32 <= 1e-4, f"float32 reuse vs plain max |d| {f32:.3g} (bound 1e-4); bfloat16 (reported, "
           f"reuse off by default there): reuse vs plain {drift:.3g}, plain batch 8 vs 1 {noise:.3g}")


def crossencoder(tmp: Path, device: str):
    from clir_llm.crossencoder import CrossEncoderBackend, CrossEncoderOptions, tiny_cross_encoder
    folder = tiny_cross_encoder("xlmr", tmp / "ce")
    words = "the cat sat on a mat near the big old house while dogs ran in the park".split()
    pairs = [(" ".join(words[i:i + 3]), " ".join(words[j:j + 2 + 3 * j])) for i in range(3) for j in range(4)]
    out = []
    for dtype, bound in (("float32", 1e-4), ("float16", 2e-2)):
        def run(attention, bs):
            o = CrossEncoderOptions(device=device, dtype=dtype, attention=attention, batch_size=bs)
            return CrossEncoderBackend(str(folder), o).rank_pairs(pairs, progress=False)
        d = float(np.abs(np.array(run("padded", 8)) - np.array(run("per-pair", 1))).max())
        out.append((d <= bound, f"{dtype} padded batch 8 vs per-pair alone max |d| {d:.3g} (bound {bound})"))
    report("crossencoder-padded", all(ok for ok, _ in out), f"on {device}: " + "; ".join(w for _, w in out))


def nvembed(device: str):
    import json
    from safetensors.torch import load_file
    from clir_llm import nvembed as N
    fx = ROOT / "tests" / "fixtures" / "nvembed"
    case = json.loads((fx / "expected.json").read_text())["cases"]["queries"]
    want = load_file(fx / "expected.safetensors")
    out, ok = [], True
    for dtype in ("float32", "bfloat16"):
        m = N.load_nvembed(fx, dtype=dtype).to(device)
        got = m.encode(case["texts"], case["instruction"], case["max_length"]).float().cpu()
        alone = torch.cat([m.encode([t], case["instruction"], case["max_length"]) for t in case["texts"]]).float().cpu()
        ref = want["queries.embeddings"].float()
        if dtype == "float32":
            d = float((got - ref).abs().max()); ok &= d <= 1e-4
            out.append(f"float32 vs the published outputs max |d| {d:.3g} (bound 1e-4)")
        else:
            c = cos(got.numpy(), ref.numpy()); ok &= c >= 0.99
            out.append(f"bfloat16 cosine to them {c:.4f} (bound 0.99)")
        p = float((got - alone).abs().max()); ok &= p <= (1e-4 if dtype == "float32" else 5e-2)
        out.append(f"{dtype} alone vs batched {p:.3g}")
    report("nvembed-cuda", ok, f"on {device}: " + "; ".join(out))


def repllama(tmp: Path, device: str):
    from clir_llm import dense as D
    from clir_llm.cache import Cache
    from clir_llm.core import Document
    folder = D.tiny_random_model("llama-lora", tmp / "rl")
    spec = D.get_encoder_spec("repllama", model=str(folder), base_model=str(folder / "base"), revision=None, base_revision=None)
    docs = [Document(str(i), t) for i, t in enumerate(["the cat sat", "a dog ran in the park at night", "house"])]
    vec = {dt: D.Encoder.create(spec, cache=Cache(tmp / f"c-{dt}"), device=device, dtype=dt, paper_quirks=True, progress=False,
                                batch_size=2).encode_docs(docs) for dt in ("float32", "float16")}
    c = cos(vec["float16"], vec["float32"])
    report("repllama-autocast", c >= 0.99, f"float16 autocast vs float32 on {device}: min cosine {c:.4f} (bound 0.99)")


def nllb(tmp: Path, device: str):
    from clir_llm.translate import get_translator, tiny_nllb
    model = tiny_nllb(tmp / "nllb")
    names = [device, f"{device}:0"] if device == "cuda" else [device, device]
    ts = [get_translator(f"nllb:{model}", device=d, progress=False) for d in names]
    dtypes = [t.dtype for t in ts]
    outs = [t.translate(["the cat sat on the mat.", "where is the dog?"], "en", "de") for t in ts]
    gpu_half = device != "cuda" or dtypes == ["float16", "float16"]   # NLLB runs in float16 on any CUDA device (its default)
    report("nllb-device-string", dtypes[0] == dtypes[1] and gpu_half and outs[0] == outs[1],
           f"{names[0]} -> {dtypes[0]}, {names[1]} -> {dtypes[1]}; translations equal: {outs[0] == outs[1]}")


def stop_strings(tmp: Path, device: str):
    from clir_llm.llm import get_backend
    from clir_llm.testing import make_tiny_hf_model
    model, prompts = make_tiny_hf_model(tmp / "qwen2s", "qwen2", seed=2), [p[0]["content"] for p in PROMPTS]
    def run(dtype, bs, **kw):
        return get_backend(f"hf:{model}", device=device, dtype=dtype, batch_size=bs, chat=False).complete(prompts, max_new_tokens=16,
                                                                                                          progress=False, **kw)
    stop = sorted({r["text"][6:10] for r in run("float32", 1) if len(r["text"]) >= 10})   # strings the answers write
    line = []
    for dtype in ("float32", "float16"):
        a, b = run(dtype, 8, stop=stop, top_logprobs=20), run(dtype, 1, stop=stop, top_logprobs=20)
        same = [x["text"] == y["text"] and x.get("stop") == y.get("stop") and x["tokens_out"] == y["tokens_out"] for x, y in zip(a, b)]
        d = max((abs(x["top_logprobs"][t] - y["top_logprobs"][t]) for x, y, s in zip(a, b, same) if s
                 for t in set(x["top_logprobs"]) & set(y["top_logprobs"])), default=0.0)
        line.append((dtype, sum(same), sum("stop" in x for x in a), d))
    _, eq, met, d = line[0]   # float32 decides; float16 is reported
    report("stop-strings-cuda", eq == len(prompts) and met > 0 and d <= 1e-4, "; ".join(
        f"{t}: batch 8 vs 1 equal {e}/{len(prompts)}, stopped {m}, top-20 max |d| {x:.3g}" for t, e, m, x in line) + " (float32 bound 1e-4)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="cuda (default when there is one) or cpu")
    _smoke.add_flag(ap)
    a = ap.parse_args()
    device = a.device or ("cpu" if a.smoke or not torch.cuda.is_available() else "cuda")
    if device == "cpu" and not a.smoke:
        print("no CUDA device here: the checks need one (--smoke runs their code path on the CPU)", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    t0 = time.time()
    with _smoke.marked(a.smoke), tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print(f"device {device}" + (f" ({torch.cuda.get_device_name(0)})" if device.startswith("cuda") else ""), flush=True)
        padded_attention(tmp, device, "float16", 1e-2)
        padded_attention(tmp, device, "bfloat16", 6e-2)
        prefix_reuse(tmp, device)
        stop_strings(tmp, device)
        crossencoder(tmp, device)
        nvembed(device)
        repllama(tmp, device)
        nllb(tmp, device)
    print(f"{len(TARGETS) - len(FAILED)} of {len(TARGETS)} checks ok in {time.time() - t0:.0f} s" + (f"; failed: {', '.join(FAILED)}" if FAILED else ""))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
