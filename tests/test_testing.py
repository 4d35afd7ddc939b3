"""clir_llm.testing's qrels oracle (`QrelsOracle`): a backend that answers every shipped prompt template kind (listwise
RankGPT / RankZephyr / FIRST, PRP, setwise, relevance, query likelihood) from the qrels, reading the prompts' wording
from the prompt files (`templates`), so a reworded template is read only when the oracle is given it."""

import re
import pytest
import yaml
from clir_llm.core import ClirError, Qrels, Run
from clir_llm.rerank import get_reranker
from clir_llm.setwise import LABELS
from clir_llm.templates import PromptTemplate, prompts_dir
from clir_llm.testing import QrelsOracle, template_pattern, tiny_setup
from _rerankers import ideal, make, top_grades

SHIPPED = {
    "listwise": ["first", "rankgpt", "rankzephyr"],
    "pairwise": ["prp"],
    "pointwise": ["qlm", "qwen3-reranker", "relevance"],
    "reasoning": ["rank1"],
    "setwise": ["setwise"],
}
# each shipped template, and a method (with options) whose prompts are built from it
# (sorts that find the ideal top 10 with a perfect judge: windows moving 10 or fewer up; heapsorts; not llm-rankers' setwise
# bubblesort, which may stop early even then)
RUNS = [
    ("rankgpt", "listwise", {}),
    ("rankzephyr", "listwise", {}),
    ("rankzephyr", "listwise", dict(window=12, step=2)),
    ("first", "listwise-first", {}),
    ("prp", "pairwise-heapsort", {}),
    ("prp", "pairwise-bubblesort", dict(scoring="likelihood")),
    ("setwise", "setwise-heapsort", {}),
    ("setwise", "setwise-heapsort", dict(scoring="likelihood", num_child=5)),
    ("relevance", "pointwise-yes-no", {}),
    ("qlm", "pointwise-qlm", {}),
    ("qwen3-reranker", "pointwise-qwen3-reranker", {}),
    ("rank1", "reasoning-rank1", {}),
]


def test_templates_are_the_shipped_prompt_files_by_kind():
    coll, _ = tiny_setup(1, 3)
    o = QrelsOracle(coll)
    assert {kind: [t.name for t in ts] for kind, ts in o.templates.items()} == SHIPPED
    for ts in o.templates.values():
        for t in ts:
            assert t.path == str(prompts_dir() / f"{t.name}.yaml") and t == PromptTemplate.load(t.name)
    assert {t for ts in SHIPPED.values() for t in ts} == {t for t, _, _ in RUNS}


@pytest.mark.parametrize("template, method, options", RUNS)
def test_oracle_answers_every_shipped_template_kind(template, method, options):
    "(e) A reranker built on each shipped template, on the oracle: the ideal top k, no unreadable answer."
    coll, run = make(2, 30)
    rr = get_reranker(method, QrelsOracle(coll), prompt=template, progress=False, **options)
    out = rr.rerank(coll, run, k=30)
    assert rr.template.name == template
    for q in run:
        assert top_grades(coll, out, q, 10) == ideal(coll, q, 10), (template, method)
        assert rr.diagnostics[q]["parse_failures"] == 0 and rr.diagnostics[q]["prompts"] > 0


def _reworded_prp(tmp_path):
    "A copy of the shipped PRP template with other wording around the same placeholders."
    with open(PromptTemplate.load("prp").path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    data["name"] = "prp-reworded"
    data["prompt"] = (
        'For the search query "{query}", decide which passage answers it better.\n\nFirst (A): "{a}"\n\n'
        'Second (B): "{b}"\n\nReply Passage A or Passage B:'
    )
    p = tmp_path / "prp-reworded.yaml"
    p.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return p


@pytest.mark.parametrize("scoring", ["generation"])
def test_oracle_reads_a_reworded_template_only_when_given_it(tmp_path, scoring):
    """(e) The oracle reads prompts by the templates it holds: a reworded PRP template (a temporary YAML) is read only
    when the oracle is given it (`templates=`); a prompt it cannot read is a one-line ClirError naming the prompt."""
    path = _reworded_prp(tmp_path)
    custom = PromptTemplate.load(path)
    assert custom.method == "pairwise" and custom.name == "prp-reworded"
    coll, run = make(2, 30)
    plain = QrelsOracle(coll)
    rr = get_reranker("pairwise-heapsort", plain, prompt=str(path), scoring=scoring, progress=False)
    assert "For the search query" in rr._prompt("q", "a", "b")[0][0]["content"]
    with pytest.raises(ClirError, match="no prompt template it knows matches the prompt") as e:
        rr.rerank(coll, run, k=30)
    assert "\n" not in str(e.value).split("prompt")[0]
    given = QrelsOracle(coll, templates=[path])
    rr = get_reranker("pairwise-heapsort", given, prompt=str(path), scoring=scoring, progress=False)
    out = rr.rerank(coll, run, k=30)
    for q in run:
        assert rr.diagnostics[q]["parse_failures"] == 0 and top_grades(coll, out, q, 10) == ideal(coll, q, 10)
    # the shipped wording still read
    shipped = get_reranker("pairwise-heapsort", given, progress=False).rerank(coll, run, k=30)
    assert all(top_grades(coll, shipped, q, 10) == ideal(coll, q, 10) for q in run)


# ---------- answers to prompts built by hand from the templates


@pytest.fixture(scope="module")
def graded():
    "One query, its documents graded 3, 0, 2, 0 (passages 'doc q0-d<j> ...')."
    coll, _ = make(1, 4)
    coll.qrels = Qrels({"q0": {"q0-d0": 3, "q0-d1": 0, "q0-d2": 2, "q0-d3": 0}})
    return coll


def _text(coll, d):
    return coll._docs[d].full_text


def test_prp_answers_and_scores(graded):
    o, t, q = QrelsOracle(graded), PromptTemplate.load("prp"), graded.queries["q0"].text
    p = lambda a, b: t["prompt"].format(query=q, a=_text(graded, a), b=_text(graded, b))
    # a tie: A
    assert o.generate([p("q0-d0", "q0-d1"), p("q0-d1", "q0-d0"), p("q0-d1", "q0-d3")]) == [
        "Passage A",
        "Passage B",
        "Passage A",
    ]
    assert o.score([p("q0-d2", "q0-d0")], [" A", " B"]) == [[-1.0, 0.0]]
    assert o.usage.calls == 2 and o.usage.tokens_in > 0


def test_setwise_answers_the_label_of_the_best(graded):
    o, t, q = QrelsOracle(graded), PromptTemplate.load("setwise"), graded.queries["q0"].text

    def prompt(ids):
        return t["prompt"].format(
            query=q,
            passages=t["separator"].join(
                t["passage"].format(label=LABELS[i], passage=_text(graded, d)) for i, d in enumerate(ids)
            ),
        )

    assert o.generate([prompt(["q0-d1", "q0-d2", "q0-d0"]), prompt(["q0-d1", "q0-d3"])]) == ["Passage C", "Passage A"]
    assert o.score([prompt(["q0-d2", "q0-d0", "q0-d1"])], [" A", " B", " C"]) == [[-1.0, 0.0, -1.0]]


def test_pointwise_answers_yes_no_and_query_likelihood(graded):
    o, q = QrelsOracle(graded), graded.queries["q0"].text
    rel, qlm = PromptTemplate.load("relevance"), PromptTemplate.load("qlm")
    yes = rel["prompt"].format(query=q, passage=_text(graded, "q0-d2"))
    no = rel["prompt"].format(query=q, passage=_text(graded, "q0-d1"))
    assert o.generate([yes, no]) == ["Yes", "No"] and o.score([yes, no], ["Yes", "No"]) == [[2.0, 0.0], [0.0, 0.0]]
    assert o.score([qlm["prompt"].format(passage=_text(graded, "q0-d0"))], [q]) == [[3.0]]


def test_listwise_answers_the_window_by_grade(graded):
    o, q = QrelsOracle(graded), graded.queries["q0"].text
    rr = get_reranker("listwise-rankgpt", o, window=4, step=2)
    prompt, _, _ = rr.build_prompt(q, [_text(graded, d) for d in ("q0-d1", "q0-d2", "q0-d0", "q0-d3")])
    assert o.generate([prompt]) == ["[3] > [2] > [1] > [4]"]  # ties (grade 0) in input order
    first = get_reranker("listwise-first", o, window=4, step=2)
    prompt, _, _ = first.build_prompt(q, [_text(graded, d) for d in ("q0-d1", "q0-d2", "q0-d0", "q0-d3")])
    assert o.score([prompt], ["A", "B", "C", "D"]) == [[0.0, 2.0, 3.0, 0.0]]


def test_grades_from_given_qrels_cut_passages_and_unknown_queries(graded):
    o = QrelsOracle(graded, qrels=Qrels({"q0": {"q0-d1": 3}}), name="other")
    t, q = PromptTemplate.load("prp"), graded.queries["q0"].text
    words = _text(graded, "q0-d1").split()
    assert o.name == "other" and o.generate(
        [t["prompt"].format(query=q, a=" ".join(words[:5]), b=_text(graded, "q0-d0"))]
    ) == ["Passage A"]
    # a passage cut to a few words
    assert o._grade("q0", "nothing like it") == 0 and o._grade("q0", " ".join(words[:3])) == 3
    with pytest.raises(ClirError, match=r"other: no known query in prompt 'Given a query \"what\""):
        o.generate([t["prompt"].format(query="what", a="x", b="y")])
    assert (
        o.count_tokens([{"role": "user", "content": "a b"}, {"role": "assistant", "content": "c"}]) == 3
        and o.truncate("a b c", 2) == "a b"
    )


def test_template_pattern():
    m = template_pattern('Given "{query}" A: {a} B: {b}, again {query}.').fullmatch('Given "q x" A: 1 B: 2, again q x.')
    assert (m["query"], m["a"], m["b"]) == ("q x", "1", "2")
    assert (
        template_pattern("{query}-{a}").fullmatch("x-y-z")["query"] == "x"
        and template_pattern("[{rank}] {passage}", last_greedy=True).search("[3] a b c")["passage"] == "a b c"
    )
    assert template_pattern("{query} and {query}").fullmatch("a and b") is None
    assert re.escape("(") in template_pattern("({x})").pattern
