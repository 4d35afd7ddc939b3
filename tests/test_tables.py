"Tables: the cost summary compares OG and DT rows over the same pairs and names its measure (issue 31, item 4)."
import pandas as pd
from clir_llm.tables import cost_summary, TIMING_COLUMNS


def _cost():
    rows = [("OG", "en-de", .5), ("OG", "de-ru", .1), ("DT", "en-de", .4)]
    return pd.DataFrame([dict(row=f"BM25 » R {d}", reranker="R", first_stage="BM25", docs=d, pair=p, measure="nDCG@10", score=v,
                              first_stage_score=.2 + (p == "de-ru"), oracle_score=.9, judged_at_20=.05, top_k=6,
                              calls_per_query=1, prompts_per_query=1, tokens_in_per_query=100, tokens_out_per_query=5,
                              seconds_per_query=1., usd_per_query=0., model_calls=3, cache_hits=0) for d, p, v in rows])


def test_og_and_dt_rows_are_averaged_over_the_same_pairs():
    s = cost_summary(_cost())
    assert s.loc["BM25 » R OG", "nDCG@10"] == .5 and s.loc["BM25 » R DT", "nDCG@10"] == .4   # OG was (.5 + .1) / 2 before
    assert list(s["pairs"]) == ["en-de", "en-de"]
    assert s.loc["BM25 » R OG", "nDCG@10 first stage"] == .2   # the reference on the same pairs


def test_the_measure_column_is_named_and_judged_has_no_gaps():
    s = cost_summary(_cost())
    assert "score" not in s.columns and {"nDCG@10", "nDCG@10 first stage", "nDCG@10 oracle", "Judged@20"} <= set(s.columns)
    assert not s["Judged@20"].isna().any()


def test_the_timing_summary_counts_the_same_pairs():
    assert cost_summary(_cost(), TIMING_COLUMNS).loc["BM25 » R OG", "model_calls"] == 3


def test_a_cost_frame_without_pairs_is_summarised_as_before():
    c = pd.DataFrame([dict(row="r", score=.5, prompts_per_query=2), dict(row="r", score=.3, prompts_per_query=4)])
    assert cost_summary(c, ["score", "prompts_per_query"]).loc["r"].tolist() == [.4, 3.0]
