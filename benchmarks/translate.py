"""Translation benchmark: the per-document loop against unique-sentence, length-sorted batches with the sentence cache.

Both sides run in this process on the same documents with the same NLLB model and must give the same output:

* per-document loop (`NLLBTranslator.translate_per_document`): each document's sentences in order, in batches of
  `--batch-size`, no de-duplication, no cache (the straightforward script);
* `NLLBTranslator.translate`: the unique sentences of all documents, longest first, in batches of as many sentences
  as fit in `--batch-tokens` padded source tokens (the translator's default, 2048; `--batch-tokens 0`: batches of
  `--batch-size`), each batch stored in the content-addressed cache (a fresh cache folder, so the first pass
  translates everything).

The model is warmed up (one call, outside both timings) before the per-document loop is timed.

Then a warm re-run (a new translator on the same cache) must make no model call.

Documents: the demo collection's German manual pages (DT direction de->en; titles and texts, as `translate_documents`
sends them), the first `--docs`; the fixture collection when the demo is not built. Model: `--model` (a local NLLB
checkpoint folder) or, by default and offline, a tiny randomly initialised NLLB-architecture model built here: its
"translations" are gibberish and its speed is not NLLB's; the run says so. Model loading is outside the timings.

    python benchmarks/translate.py --quick
    python benchmarks/translate.py --docs 200
    python benchmarks/translate.py --model /path/to/nllb-200-distilled-600M --docs 100
"""
import argparse, itertools, sys, tempfile, time
from pathlib import Path
from clir_llm.cache import Cache
from clir_llm.core import Usage
from clir_llm.collections import load_collection, collection_pairs
from clir_llm.translate import NLLBOptions, NLLBTranslator, tiny_nllb
import _smoke

TARGETS = ["decoder-sentences", "wall-time", "warm-rerun-model-calls"]


def target(name, ratio, goal):
    print(f"target {name}: {ratio:.2f}x (goal {goal:.1f}x) {'met' if ratio >= goal else 'short'}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 documents, 16 new tokens per sentence (< 1 minute)")
    ap.add_argument("--docs", type=int, default=200, help="number of German documents (0: all)")
    ap.add_argument("--model", default=None, help="local NLLB checkpoint folder (default: tiny random NLLB stand-in)")
    ap.add_argument("--batch-size", type=int, default=32, help="sentences per batch of the per-document loop")
    ap.add_argument("--batch-tokens", type=int, default=2048, help="padded source tokens per batch of the fast path (0: --batch-size sentences)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: 16 with --quick, 32 otherwise (tiny model), 256 (--model)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: tiny matrices gain nothing from more, and a shared machine adds noise)")
    _smoke.add_flag(ap)
    a = ap.parse_args(argv)
    with _smoke.marked(a.smoke): run(a)


def run(a):
    import torch; torch.set_num_threads(a.threads)
    n_docs = 3 if a.smoke else 20 if a.quick else a.docs
    max_new = a.max_new_tokens or (256 if a.model else 4 if a.smoke else 16 if a.quick else 32)

    name = "demo" if "en-de" in collection_pairs("demo") else "fixture"
    coll = load_collection(name, "en-de")
    docs = list(itertools.islice(coll.iter_docs(), n_docs or None))
    texts = [x for d in docs for x in (d.title, d.text)]          # per document: title then text
    tmp = Path(tempfile.mkdtemp(prefix="bench-translate-"))
    model = a.model or str(tiny_nllb(tmp / "tiny-nllb"))
    label = f"NLLB checkpoint {a.model}" if a.model else "tiny random NLLB-architecture model (offline stand-in: not NLLB's quality or speed)"
    print(f"collection: {name} (German documents: {len(docs)}, texts: {len(texts)}); model: {label}; "
          f"per-document loop: {a.batch_size} sentences per batch; fast path: "
          f"{f'{a.batch_tokens} padded source tokens per batch' if a.batch_tokens else f'{a.batch_size} sentences per batch'}; max new tokens {max_new}")

    opts = NLLBOptions(batch_size=a.batch_size, max_new_tokens=max_new, batch_tokens=a.batch_tokens or 0)
    naive = NLLBTranslator(model, opts, cache=Cache(tmp / "unused", mode="off"), progress=False); naive.load()
    naive.translate_per_document(texts[:4], "de", "en"); naive.usage = Usage()   # first-call costs, outside both timings
    t0 = time.perf_counter(); out_naive = naive.translate_per_document(texts, "de", "en"); t_naive = time.perf_counter() - t0

    fast = NLLBTranslator(model, opts, cache=Cache(tmp / "cache"), progress=False); fast._model, fast._tok = naive._model, naive._tok
    t0 = time.perf_counter(); out_fast = fast.translate(texts, "de", "en"); t_fast = time.perf_counter() - t0
    if out_fast != out_naive:
        bad = next(i for i, (x, y) in enumerate(zip(out_naive, out_fast)) if x != y)
        sys.exit(f"outputs differ (first at text {bad}): {out_naive[bad][:80]!r} vs {out_fast[bad][:80]!r}")

    warm = NLLBTranslator(model, opts, cache=Cache(tmp / "cache"), progress=False)
    t0 = time.perf_counter(); out_warm = warm.translate(texts, "de", "en"); t_warm = time.perf_counter() - t0
    assert out_warm == out_naive and warm._model is None          # the model was never even loaded

    s_naive, s_fast = naive.usage.counters["translated_sentences"], fast.usage.counters["translated_sentences"]
    print(f"per-document loop:   {s_naive} decoder sentences, {naive.usage.calls} generate calls, {t_naive:.2f} s")
    print(f"unique+sorted+cache: {s_fast} decoder sentences ({fast.usage.counters['sentences']} sentences, "
          f"{fast.usage.counters['unique_sentences']} unique), {fast.usage.calls} generate calls, {t_fast:.2f} s")
    print(f"warm re-run:         {warm.usage.counters.get('translated_sentences', 0)} decoder sentences, {warm.usage.calls} model calls, "
          f"{t_warm:.2f} s; outputs identical on all three")
    n_sent, n_uniq = fast.usage.counters["sentences"], fast.usage.counters["unique_sentences"]
    print(f"bound: a method that gives the same output decodes every unique sentence at least once, so on these "
          f"documents no method can do better than {n_sent} / {n_uniq} = {n_sent / max(n_uniq, 1):.2f}x fewer decoder sentences")
    target("decoder-sentences", s_naive / max(s_fast, 1), 2.0)
    target("wall-time", t_naive / t_fast, 2.0)
    print(f"target warm-rerun-model-calls: {warm.usage.calls} calls (goal 0) {'met' if warm.usage.calls == 0 else 'short'}")


if __name__ == "__main__":
    main()
