"""How much of the paper's PRP and listwise prefill a serving engine's prefix cache of a given size keeps (issue 30).

The plan (`clir-llm reproduce configs/paper-clef.yaml --dry-run`) counts the prompt tokens a prefix cache could reuse
on the sorts' own schedules, and the cache one query in flight needs to keep all of it ("a cache of N tokens per
query in flight"). A serving engine keeps many queries in flight at once (PRP's comparisons of one query depend on
each other, so a full batch needs many queries), and its cache is a fixed number of bytes. This script builds the
token stream such an engine sees and runs it through the package's block-hash LRU (`clir_llm.prefix_cache`, 16-token
blocks, the structure of vLLM's automatic prefix caching):

- the prompts of each query come from the sort's own code (`prp_schedule`: llm-rankers' bubblesort or heapsort over
  the first stage's top 100, k 10, a consistent judge, the comparison cache on), both orders of each comparison;
  listwise: RankZephyr's sliding window (window 20, step 10, top 100), one prompt per window;
- tokens are synthetic ids laid out as the real prompts are (instruction and query, passage A, passage B and the rest;
  listwise: instruction and query, then 20 passages), with the lengths the plan estimates for paper-clef's PRP and
  listwise rows (printed);
- `--in-flight Q` queries are interleaved one comparison (two prompts) or one window at a time, round robin, as
  continuous batching admits them;
- the cache holds `--gb` GB of key/value states at the model's bytes per token (Llama-3.1-8B and RankZephyr's
  Mistral-7B: 32 layers x 8 key/value heads x 128 dims x 2 (key, value) x 2 bytes (bf16) = 131,072 bytes a token).

It prints, for each in-flight count, the share of prefill tokens the cache gives ("hit") beside the share an unbounded
cache gives ("all"): their ratio is how much of the reuse the cache size keeps. Pure Python, CPU, no model.

    python benchmarks/prefix_hit.py --quick          # PRP bubblesort and listwise, 1 and 8 queries in flight
    python benchmarks/prefix_hit.py                  # also heapsort, and 1, 8, 32 queries in flight
"""
import argparse, sys, time
from pathlib import Path
from clir_llm.pairwise import prp_schedule
from clir_llm.prefix_cache import prefix_hit_share
import _smoke

TARGETS = ["prefix-hit-64gb prp-bubblesort", "prefix-hit-64gb listwise"]    # each then ` in-flight Q: ...` (and prp-heapsort in a full run)

KV_BYTES = 32 * 8 * 128 * 2 * 2   # Llama-3.1-8B / Mistral-7B (RankZephyr) in bf16, per token


def paper_lengths(config: str) -> dict:
    "Per-prompt token counts of the paper's PRP and listwise rows, as the plan estimates them for `config`."
    from clir_llm.config import load_config
    from clir_llm.plan import plan_counts
    cfg = load_config(config)
    rows = [r for r in plan_counts(cfg)["rows"]["reranked"] if r["calls"] and r["queries"]]
    out = {}
    for fam in ("pairwise", "listwise"):
        rs = [r for r in rows if r["family"] == fam]
        if not rs: continue
        calls = sum(r["calls"] for r in rs)
        per = sum(r["prompt_tokens"] for r in rs) / calls
        head = sum(r["prefix_tokens"] for r in rs) / max(sum(r["calls"] - r["queries"] for r in rs), 1)
        out[fam] = dict(per=round(per), head=round(head), rows=len(rs), calls=calls)
    return out


def _ids(q: int, part: int, n: int) -> list[int]:
    "n synthetic token ids of one part (0: the head, d + 1: document d) of query q, distinct from any other part's."
    base = (q * 1000 + part) * 100_000
    return list(range(base, base + n))


def prp_prompts(q: int, sort: str, n: int, k: int, head: int, per: int) -> list[list[list[int]]]:
    "Query q's PRP prompts, grouped per comparison (both orders), in the sort's order."
    p = (per - head) // 2       # passage A with its label, then passage B with its label and the answer prefix
    h, sched = _ids(q, 0, head), prp_schedule(sort, n, k, seed=q)
    prompts = [h + _ids(q, a + 1, p) + _ids(q, b + 1, per - head - p) for a, b in sched]
    return [prompts[i:i + 2] for i in range(0, len(prompts), 2)]


def listwise_prompts(q: int, n: int, window: int, step: int, head: int, per: int) -> list[list[list[int]]]:
    "Query q's sliding-window prompts (the window's passages in their current order: first-stage order here)."
    p, h, out = max((per - head) // window, 1), _ids(q, 0, head), []
    for end in range(n, 0, -step):
        start = max(end - window, 0)
        out.append([h + [t for d in range(start, end) for t in _ids(q, d + 1, p)]])
        if start == 0: break
    return out


def interleave(groups_per_query: list[list[list[list[int]]]]):
    "One group (a comparison's two prompts, or a window) of each query in flight in turn, round robin."
    i = 0
    while True:
        any_left = False
        for groups in groups_per_query:
            if i < len(groups):
                any_left = True
                yield from groups[i]
        if not any_left: return
        i += 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gb", type=float, default=64.0, help="prefix cache size in GB (1e9 bytes) of key/value states")
    ap.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "configs" / "paper-clef.yaml"))
    _smoke.add_flag(ap)
    a = ap.parse_args(argv)
    with _smoke.marked(a.smoke): run(a)


def run(a):
    lengths = paper_lengths(a.config)
    cap = a.gb * 1e9 / KV_BYTES
    flights = [1] if a.smoke else [1, 8] if a.quick else [1, 8, 32]
    sorts = ["bubblesort"] if a.quick or a.smoke else ["bubblesort", "heapsort"]
    print(f"prefix cache of {a.gb:g} GB = {cap:,.0f} tokens at {KV_BYTES:,} bytes a token (Llama-3.1-8B / Mistral-7B, bf16); "
          f"16-token blocks, LRU; prompt lengths from the plan of {Path(a.config).name}: "
          + "; ".join(f"{f} {v['per']} tokens a prompt, {v['head']} of them instruction and query" for f, v in lengths.items()),
          flush=True)
    for Q in flights:
        for sort in sorts if "pairwise" in lengths else []:
            L, t0 = lengths["pairwise"], time.time()
            groups = [prp_prompts(q, sort, 100, 10, L["head"], L["per"]) for q in range(Q)]
            stream = list(interleave(groups))
            hit, every = prefix_hit_share(stream, cap), prefix_hit_share(stream, float("inf"))
            print(f"target prefix-hit-{a.gb:g}gb prp-{sort} in-flight {Q}: hit {hit:.1%} of prefill tokens, all {every:.1%} "
                  f"with an unbounded cache ({hit / every:.0%} of the reuse kept; {len(stream):,} prompts, {time.time() - t0:.0f} s)",
                  flush=True)
        if "listwise" in lengths:
            L, t0 = lengths["listwise"], time.time()
            stream = list(interleave([listwise_prompts(q, 100, 20, 10, L["head"], L["per"]) for q in range(Q)]))
            hit, every = prefix_hit_share(stream, cap), prefix_hit_share(stream, float("inf"))
            print(f"target prefix-hit-{a.gb:g}gb listwise in-flight {Q}: hit {hit:.1%} of prefill tokens, all {every:.1%} "
                  f"with an unbounded cache ({hit / every if every else 1:.0%} of the reuse kept; {len(stream):,} prompts, "
                  f"{time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
