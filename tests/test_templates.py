"""clir_llm.templates: the shipped prompt templates cite their sources; a template's placeholders, fields and YAML are
checked with file and line; the answer parsers (listwise permutations, PRP labels) never fail."""

import json, random, re
import pytest
from clir_llm.core import FormatError
from clir_llm.templates import PromptTemplate, parse_permutation, parse_prp


def test_templates_load_and_cite_sources():
    for name, method in (("rankgpt", "listwise"), ("rankzephyr", "listwise"), ("prp", "pairwise")):
        t = PromptTemplate.load(name)
        assert t.method == method and "arXiv" in t.source and "github.com/" in t.source


@pytest.mark.parametrize(
    "field,bad,msg",
    [
        ("prompt", "Given {query} {a}", "lacks placeholder(s) {b}"),
        ("prompt", "Given {query} {a} {b} {c}", "unknown placeholder(s) {c}"),
        ("prompt", "Given {query {a} {b}", "bad braces"),
        # issue 26 item 10: a conversion or a format spec was a traceback when rendered ({a:>999999999999}: MemoryError)
        ("prompt", "Given {query!z} {a} {b}", "has a conversion or format spec"),
        ("prompt", "Given {query} {a:>999999999999} {b}", "has a conversion or format spec"),
        ("prompt", "Given {query} {a[0]} {b}", "is not a plain name"),
    ],
)
def test_template_placeholder_errors_name_file_and_line(tmp_path, field, bad, msg):
    src = PromptTemplate.load("prp").path
    lines = open(src).read().splitlines()
    i = next(n for n, l in enumerate(lines) if l.startswith(f"{field}:"))
    lines[i] = f"{field}: {json.dumps(bad)}"
    p = tmp_path / "x.yaml"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(FormatError) as e:
        PromptTemplate.load(p)
    assert f"x.yaml:{i + 1}:" in str(e.value) and msg in str(e.value)


def test_template_missing_field_and_bad_yaml(tmp_path):
    (tmp_path / "a.yaml").write_text("method: listwise\nsource: me\nprefix: '{query}'\n")
    with pytest.raises(FormatError, match="missing field 'system'"):
        PromptTemplate.load(tmp_path / "a.yaml")
    (tmp_path / "b.yaml").write_text("method: [unclosed\n")
    with pytest.raises(FormatError, match="b.yaml:.*not valid YAML"):
        PromptTemplate.load(tmp_path / "b.yaml")
    (tmp_path / "c.yaml").write_text("method: cardwise\nsource: me\n")
    with pytest.raises(FormatError, match="method must be one of"):
        PromptTemplate.load(tmp_path / "c.yaml")


def test_parse_permutation_always_yields_a_permutation():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 25)
        ans = " > ".join(f"[{rng.randint(-3, n + 5)}]" for _ in range(rng.randint(0, 30))) + rng.choice(
            ["", "junk", "[]"]
        )
        perm, rep = parse_permutation(ans, n)
        assert sorted(perm) == list(range(n))
        assert rep["missing"] == n - len({int(x) for x in re.findall(r"\d+", ans) if 1 <= int(x) <= n})


def test_parse_permutation_keeps_order_and_appends_missing_in_input_order():
    assert parse_permutation("[5] > [2] > [2] > [9]", 5)[0] == [4, 1, 0, 2, 3]


def test_parse_prp():
    assert (
        parse_prp("Passage B") == "B"
        and parse_prp(" a") == "A"
        and parse_prp("Passage C") is None
        and parse_prp("Apple") is None
    )
