"""clir_llm.languages at the edge: unknown codes, pairs a collection or a translator lacks, a language name given for
its code (issue 14)."""

from __future__ import annotations

import pytest

import _reliability as R
from clir_llm.core import ClirError


def test_unknown_language_codes_and_unsupported_pairs(tmp_path):
    err = R.err_cli(
        "unknown language code", "evaluate", "--collection", "fixture", "--pair", "en-xx", "--run", R.good_run(tmp_path)
    )
    assert "unknown language code 'xx'; known codes: en, de" in err
    err = R.err_cli(
        "unsupported pair", "evaluate", "--collection", "fixture", "--pair", "de-en", "--run", R.good_run(tmp_path)
    )
    assert "collection 'fixture' has no pair 'de-en'; its pairs are: en-de" in err
    from clir_llm.translate import get_translator

    R.STATS["bad_input"].add("translator without the pair")
    with pytest.raises(ClirError, match=r"no FreeDict dictionary for en-ha \(English→Hausa\)"):
        get_translator("dict:freedict").translate(["water"], "en", "ha")


def test_language_name_given_for_a_code_suggests_the_code(tmp_path):
    err = R.err_cli(
        "language name for a code",
        "evaluate",
        "--collection",
        "fixture",
        "--pair",
        "en-German",
        "--run",
        R.good_run(tmp_path),
    )
    assert "unknown language code 'German' (did you mean 'de'?); known codes: en, de" in err, err
