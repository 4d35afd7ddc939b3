"""Cross-encoder reranking throughput: the `ce:hf:` backend (`clir_llm.crossencoder`: the pairs of all queries in one
call, sorted by token length and cut into full batches, each pair attending over its own tokens) against
`sentence_transformers.CrossEncoder.rank` (one call per query, its documents sorted by length within the query, batches
of 32), on the same model and the same (query, passage) pairs.

The model is a randomly initialised XLM-R cross-encoder (`XLMRobertaForSequenceClassification`, one label) of
mMiniLM's shape in the full run (12 layers, hidden 384) and smaller with `--quick` (4 layers, hidden 256), with a
word-level tokenizer (`tiny_cross_encoder`); no cross-encoder ships inside a registry package, and a random model costs
what a trained one of its shape costs. The queries' top-k passages have the varied lengths of news passages (10 to 300
words). fp32 on the CPU, one torch thread by default (then the times are CPU times, which the machine's other load
changes least; with more threads, wall times); the cache off, so every pair reaches the model.

Scores: a padded batch changes a pair's fp32 score by rounding (the attention over a padded row is another kernel
call), so `CrossEncoder.rank` itself gives scores apart from the same pairs scored alone (3e-5 with `--quick`, 3e-4 on
the 12-layer model, where near-ties then swap places in its rankings); the run prints that noise. The reference is
therefore `CrossEncoder` scoring each pair alone (batch size 1, no padding), which the backend's per-pair attention
reproduces whatever batch a pair falls in: the target is met when the backend is 1.2x faster than
`CrossEncoder.rank`, its scores within 1e-5 of the reference's and its rankings the reference's. The backend with
`attention=padded` (one masked call per batch, the GPU default) is timed beside it.

    python benchmarks/crossencoder.py --quick
"""
import argparse, random, tempfile, time
from pathlib import Path
import torch
from clir_llm.cache import Cache
from clir_llm.crossencoder import CrossEncoderBackend, CrossEncoderOptions, _TINY_WORDS, tiny_cross_encoder
import _smoke

TARGETS = ["crossencoder-rank"]


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
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: CPU times; more: wall times)")
    ap.add_argument("--batch-size", type=int, default=32)
    _smoke.add_flag(ap)
    a = ap.parse_args(argv)
    with _smoke.marked(a.smoke): return run(a)


def run(a):
    torch.set_num_threads(a.threads)
    clock = time.process_time if a.threads == 1 else time.perf_counter
    from sentence_transformers import CrossEncoder   # the reference, imported here: only the benchmark needs it
    layers, hidden, queries, k, length = (1, 32, 2, 5, 64) if a.smoke else (4, 256, 8, 50, 256) if a.quick else (12, 384, 20, 100, 512)
    folder = tiny_cross_encoder("xlmr", Path(tempfile.mkdtemp()) / "ce", hidden_size=hidden, layers=layers, max_positions=length)
    data = pairs_of(queries, k)
    st = CrossEncoder(str(folder), max_length=length, activation_fn=torch.nn.Identity(), device="cpu")
    backend = {att: CrossEncoderBackend(str(folder), CrossEncoderOptions(max_length=length, batch_size=a.batch_size, device="cpu",
                                                                         attention=att), cache=Cache(mode="off"))
               for att in ("per-pair", "padded")}
    for b in backend.values(): b.rank_pairs(data[0][:4], progress=False)   # load, warm up
    st.rank(data[0][0][0], [d for _, d in data[0][:4]])

    t0 = clock()
    ranked = [st.rank(qp[0][0], [d for _, d in qp], batch_size=a.batch_size, show_progress_bar=False) for qp in data]
    t_st = clock() - t0
    times, flat = {}, {}
    for att, b in backend.items():
        t0 = clock()
        flat[att] = b.rank_pairs([p for qp in data for p in qp], progress=False)
        times[att] = clock() - t0
    alone = [st.predict(qp, batch_size=1, show_progress_bar=False).tolist() for qp in data]   # the reference: each pair unpadded

    rank_scores = [[r["score"] for r in sorted(rs, key=lambda r: r["corpus_id"])] for rs in ranked]
    def delta(xs, ys): return max(abs(x - y) for r, m in zip(xs, ys) for x, y in zip(r, m))
    def per_query(scores): return [scores[i * k:(i + 1) * k] for i in range(queries)]
    def order(scores): return [sorted(range(k), key=lambda i: -s[i]) for s in scores]
    def same_ranking(mine): return order(mine) == order(alone)
    n, unit = queries * k, "CPU s" if a.threads == 1 else "s"
    print(f"model: random XLM-R cross-encoder, {layers} layers, hidden {hidden}, max length {length}; {queries} queries x top {k} "
          f"= {n} pairs; batch {a.batch_size}; {a.threads} CPU thread{'s' * (a.threads > 1)}; fp32")
    print(f"sentence_transformers CrossEncoder.rank (per query): {t_st:.2f} {unit} ({n / t_st:.0f} pairs/s)")
    swapped = sum(x != y for x, y in zip([[r["corpus_id"] for r in rs] for rs in ranked], order(alone)))
    print(f"reference noise: CrossEncoder.rank (batches of {a.batch_size}) vs CrossEncoder each pair alone: max |delta| "
          f"{delta(rank_scores, alone):.2e}, rankings differ in {swapped} of {queries} queries")
    for att in backend:
        mine = per_query(flat[att])
        print(f"clir-llm ce:hf: rank_pairs attention={att} (all queries, length-sorted): {times[att]:.2f} {unit} "
              f"({n / times[att]:.0f} pairs/s, {t_st / times[att]:.2f}x); max |delta| to each pair alone {delta(mine, alone):.2e}, "
              f"to CrossEncoder.rank {delta(mine, rank_scores):.2e}; rankings as CrossEncoder per pair: {same_ranking(mine)}")
    mine = per_query(flat["per-pair"])
    ratio, d = t_st / times["per-pair"], delta(mine, alone)
    ok = ratio >= 1.2 and d < 1e-5 and same_ranking(mine)
    print(f"target crossencoder-rank: {ratio:.2f}x (goal 1.2x), max |delta| {d:.1e} to CrossEncoder per pair (goal < 1e-5), "
          f"rankings identical: {same_ranking(mine)} {'met' if ok else 'short'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
