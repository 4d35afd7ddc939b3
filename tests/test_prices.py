"The price table (clir_llm.prices): data, dated, overridable by a file; longest matching prefix; one-line errors."

import json
import pytest
from clir_llm.core import ClirError
from clir_llm.prices import PRICES, load_prices, price_of


def test_prices_are_data(tmp_path, monkeypatch):
    monkeypatch.delenv("CLIR_LLM_PRICES", raising=False)
    assert price_of("gpt-4.1-2025-04-14") == {"input": 2.00, "output": 8.00} and load_prices() is PRICES
    assert price_of("gpt-4.1-mini") == {"input": 0.40, "output": 1.60} and price_of("llama") is None
    assert price_of("gpt-4.1x") is None  # a prefix matches at a '-' only
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"as_of": "2030-01-01", "usd_per_million_tokens": {"llama": {"input": 1, "output": 2}}}))
    monkeypatch.setenv("CLIR_LLM_PRICES", str(f))
    assert price_of("llama") == {"input": 1, "output": 2} and load_prices()["as_of"] == "2030-01-01"
    assert price_of("x", {"usd_per_million_tokens": {"x": {"input": 3, "output": 4}}}) == {"input": 3, "output": 4}
    f.write_text("{}")
    with pytest.raises(ClirError, match="usd_per_million_tokens"):
        load_prices()
    with pytest.raises(ClirError, match="cannot read the price table"):
        load_prices(tmp_path / "missing.json")
