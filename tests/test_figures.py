"Figures: the cost figure draws the first stage and the oracle as reference lines (issue 31, item 4)."

import matplotlib

matplotlib.use("Agg")
import pandas as pd
from clir_llm.figures import cost_figure


def test_cost_figure_has_first_stage_and_oracle_lines():
    c = pd.DataFrame(
        [
            dict(
                row=f"BM25 » R {d}",
                reranker="R",
                first_stage="BM25",
                docs=d,
                pair="en-de",
                measure="MAP",
                score=v,
                first_stage_score=0.3,
                oracle_score=0.8,
                judged_at_20=0.05,
                top_k=6,
                calls_per_query=1,
                prompts_per_query=1,
                tokens_in_per_query=100,
                tokens_out_per_query=5,
            )
            for d, v in (("OG", 0.5), ("DT", 0.4))
        ]
    )
    fig = cost_figure(c, "MAP")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["BM25 » R OG", "BM25 » R DT", "BM25 (first stage)", "BM25 oracle top-6 (ceiling)"]
    lines = {
        tuple(l.get_ydata())
        for l in fig.axes[0].get_lines()
        if l.get_label().startswith("BM25 (") or "oracle" in l.get_label()
    }
    assert lines == {(0.3, 0.3), (0.8, 0.8)}
    lo, hi = fig.axes[0].get_ylim()
    assert lo <= 0.3 and hi >= 0.8  # both lines inside the axis
