"""Cross-encoder reranking throughput: the `ce:hf:` backend (`clir_llm.crossencoder`: the pairs of all queries in one
call, sorted by token length and cut into full batches) against `sentence_transformers.CrossEncoder.rank` (one call per
query, its documents sorted by length within the query), on the same model and the same (query, passage) pairs.

The model is a randomly initialised XLM-R cross-encoder (`XLMRobertaForSequenceClassification`, one label) of
mMiniLM's shape in the full run (12 layers, hidden 384) and smaller with `--quick` (4 layers, hidden 256), with a
word-level tokenizer (`tiny_cross_encoder`); no cross-encoder ships inside a registry package, and a random model costs
what a trained one of its shape costs. The queries' top-k passages have the varied lengths of news passages (10 to 300
words). fp32 on the CPU, torch threads as given; the cache off, so every pair reaches the model. Both sides must give
the same scores (max |Δ| < 1e-5) and the same rankings.

    python benchmarks/crossencoder.py --quick
"""
import argparse, random, tempfile, time
from pathlib import Path
import torch
from clir_llm.cache import Cache
from clir_llm.crossencoder import CrossEncoderBackend, CrossEncoderOptions, _TINY_WORDS, tiny_cross_encoder


def pairs_of(queries: int, k: int, seed: int = 0) -> list[list[tuple[str, str]]]:
    "For each query, its top-k (query, passage) pairs: passages of 10 to 300 words (news passages, cut or not)."
    rng = random.Random(seed)
    words = list(_TINY_WORDS)
    out = []
    for _ in range(queries):
        q = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        out.append([(q, " ".join(rng.choice(words) for _ in range(int(rng.triangular(10, 300, 60))))) for _ in range(k)])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smaller model and fewer queries (about a minute on 2 cores)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    from sentence_transformers import CrossEncoder   # the reference, imported here: only the benchmark needs it
    layers, hidden, queries, k, length = (4, 256, 8, 50, 256) if a.quick else (12, 384, 20, 100, 512)
    folder = tiny_cross_encoder("xlmr", Path(tempfile.mkdtemp()) / "ce", hidden_size=hidden, layers=layers, max_positions=length)
    data = pairs_of(queries, k)
    st = CrossEncoder(str(folder), max_length=length, activation_fn=torch.nn.Identity(), device="cpu")
    ours = CrossEncoderBackend(str(folder), CrossEncoderOptions(max_length=length, batch_size=a.batch_size, device="cpu"),
                               cache=Cache(mode="off"))
    ours.rank_pairs(data[0][:4], progress=False); st.rank(data[0][0][0], [d for _, d in data[0][:4]])   # load both, warm up

    t0 = time.perf_counter()
    ranked = [st.rank(qp[0][0], [d for _, d in qp], batch_size=a.batch_size, show_progress_bar=False) for qp in data]
    t_st = time.perf_counter() - t0
    t0 = time.perf_counter()
    flat = ours.rank_pairs([p for qp in data for p in qp], progress=False)
    t_ours = time.perf_counter() - t0

    ref = [[r["score"] for r in sorted(rs, key=lambda r: r["corpus_id"])] for rs in ranked]
    mine = [flat[i * k:(i + 1) * k] for i in range(queries)]
    delta = max(abs(x - y) for r, m in zip(ref, mine) for x, y in zip(r, m))
    same_rank = all([r["corpus_id"] for r in rs] == sorted(range(k), key=lambda i: -m[i]) for rs, m in zip(ranked, mine))
    n = queries * k
    print(f"model: random XLM-R cross-encoder, {layers} layers, hidden {hidden}, max length {length}; {queries} queries x top {k} "
          f"= {n} pairs; batch {a.batch_size}; {a.threads} CPU threads; fp32")
    print(f"sentence_transformers CrossEncoder.rank (per query): {t_st:.2f} s ({n / t_st:.0f} pairs/s)")
    print(f"clir-llm ce:hf: rank_pairs (all queries, length-sorted): {t_ours:.2f} s ({n / t_ours:.0f} pairs/s)")
    print(f"scores: max |delta| {delta:.2e}; rankings identical: {same_rank}")
    ratio = t_st / t_ours
    ok = ratio >= 1.2 and delta < 1e-5 and same_rank
    print(f"target crossencoder-rank: {ratio:.2f}x (goal 1.2x) {'met' if ok else 'short'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
