"""clir_llm.rerank: the reranker contract and its options, `RerankerSpec` (parse, key, describe, errors), the one run
identity (`run_identity`, the first release's form: literal values captured from the code before the options moved to
their families), the registry and `get_reranker`, `check_run`, `check_scoring`, and `clir-llm rerank` (its parser,
each family's `--help`, runs on tiny models)."""

import contextlib, inspect, io, json, os, re, subprocess, sys, textwrap
from pathlib import Path
import pytest
from clir_llm.core import ClirError, FormatError, Run, stable_hash
from clir_llm.rerank import (
    RERANKERS,
    V1_OPTIONS,
    CallLoad,
    Reranker,
    RerankerOptions,
    RerankerSpec,
    TextStats,
    check_run,
    check_scoring,
    get_reranker,
    run_identity,
)
from clir_llm.cli_args import spec_from_args
from clir_llm.specs import validated
from clir_llm.listwise import ListwiseOptions, ListwiseReranker
from clir_llm.pairwise import HeapsortOptions, HeapsortQuirks, PairwiseOptions, PairwiseReranker
from clir_llm.testing import QrelsOracle, tiny_setup
from _rerankers import Fixed, ideal, make, tiny, top_grades  # noqa: F401  (tiny: a fixture)
import _reliability as R

METHODS = ["listwise", "listwise-rankgpt", "pairwise-allpair", "pairwise-heapsort", "pairwise-bubblesort"]
ALL = RERANKERS.names()
V1_METHODS = [
    "listwise",
    "listwise-rankzephyr",
    "listwise-rankgpt",
    "pairwise-allpair",
    "pairwise-heapsort",
    "pairwise-bubblesort",
    # before issue 29
    "setwise-heapsort",
    "setwise-bubblesort",
    "pointwise-yes-no",
    "pointwise-qlm",
    "listwise-first",
]


def _fields(method) -> list[str]:
    return list(RERANKERS[method].options_for(method).flat_fields())


# ---------- the contract


def test_class_without_rerank_is_refused_at_registration():
    with pytest.raises(
        ClirError, match=r"reranker 'no-rerank': Incomplete does not implement rerank \(required by Reranker\)"
    ):

        @RERANKERS.register("no-rerank")
        class Incomplete(Reranker):
            "Forgot the one required method."

    with pytest.raises(ClirError, match="must subclass clir_llm.rerank.Reranker"):
        RERANKERS.register("not-a-reranker", type("Plain", (), {"rerank": lambda self, c, r, k=100: r}))
    assert "no-rerank" not in RERANKERS and "not-a-reranker" not in RERANKERS


@pytest.mark.parametrize("method", ALL)
def test_families_take_options_and_collaborators_only(method):
    "Contract 1: the constructor is (options, backend, method, progress); without options it takes its Options' defaults."
    cls = RERANKERS[method]
    assert list(inspect.signature(cls.__init__).parameters)[1:] == ["options", "backend", "method", "progress"]
    assert issubclass(cls.Options, RerankerOptions) and issubclass(cls.options_for(method), cls.Options)
    coll, _ = tiny_setup(1, 3)
    rr = cls(None, QrelsOracle(coll), method=method, progress=False)
    assert (
        rr.method == method and rr.options == cls.options_for(method)() and type(rr.options) is cls.options_for(method)
    )
    # listwise records the answer budget it used
    used = {"max_new_tokens": rr.max_new_tokens} if rr.family == "listwise" else {}
    # a family without a prompt (cross-encoder) names none
    template = {"template": rr.template.name} if rr.template else {}
    assert rr.params.items() >= ({"method": method, **template, **rr.options.identity()} | used).items()


def test_reranker_options_every_family_reads():
    assert list(RerankerOptions.flat_fields()) == ["prompt", "doc_title", "batch_size", "batch_queries"]
    assert RerankerOptions().identity() == {"prompt": None, "doc_title": True}  # batch_*: speed only
    for m in ALL:
        assert _fields(m)[:4] == ["prompt", "doc_title", "batch_size", "batch_queries"], m
    with pytest.raises(ClirError, match="doc_title: Input should be a valid boolean"):
        RerankerSpec.parse("listwise", doc_title="no")


@pytest.mark.parametrize("method", ALL)
def test_engine_switches_are_not_identity(method):
    "batch_queries, batch_size and PRP's cache_comparisons / batch_orders change how, not what: no key, name or params change."
    coll, _ = tiny_setup(1, 3)
    speed = {"batch_size": 3, "batch_queries": False} | (
        {"cache_comparisons": False, "batch_orders": False} if method.startswith("pairwise") else {}
    )
    plain, fast = RerankerSpec.parse(method), RerankerSpec.parse(method, **speed)
    assert fast.key() == plain.key() and fast.options.identity() == plain.options.identity()
    assert run_identity(method, fast.options) == run_identity(method, plain.options)
    a, b = plain.build(QrelsOracle(coll), progress=False), fast.build(QrelsOracle(coll), progress=False)
    assert (a.name, a.params) == (b.name, b.params)
    assert all(type(fast.options).flat_fields()[f].json_schema_extra["identity"] is False for f in speed)


def test_a_reranker_with_a_model_needs_a_backend():
    with pytest.raises(ClirError, match=r"reranker 'listwise' needs an LLM backend \(--llm\)"):
        get_reranker("listwise")
    with pytest.raises(ClirError, match=r"reranker 'setwise-heapsort' needs an LLM backend"):
        RerankerSpec.parse("setwise-heapsort").build()


def test_unknown_query_and_bad_k():
    coll, run = make(1, 5)
    run["zz"] = {"x": 1.0}
    with pytest.raises(ClirError, match="does not know: zz"):
        get_reranker("listwise", QrelsOracle(coll), progress=False).rerank(coll, run)
    with pytest.raises(ClirError, match="k must be positive"):
        get_reranker("listwise", QrelsOracle(coll), progress=False).rerank(coll, Run(), k=0)
    with pytest.raises(ClirError, match="unknown reranker 'pairwise-quicksort'; accepted: listwise, "):
        get_reranker("pairwise-quicksort", QrelsOracle(coll))


@pytest.mark.parametrize(
    "cls,method",
    [
        (PairwiseReranker, "pairwise-quicksort"),
        (PairwiseReranker, "bubblesort"),
        (ListwiseReranker, "listwise-bogus"),
        (ListwiseReranker, "pairwise-allpair"),
    ],
)
def test_family_constructor_refuses_a_method_it_does_not_register(cls, method):
    """BUG (rerank.Reranker.__init__): a family built with a method it does not register fails with a KeyError (PRP:
    `self.variants[self.method]`) or runs silently under the wrong name (listwise); it should be a one-line ClirError."""
    coll, _ = tiny_setup(1, 3)
    with pytest.raises(ClirError, match=f"{cls.__name__} has no method {method!r}"):
        cls(None, QrelsOracle(coll), method=method)


def test_spec_refuses_options_of_another_method_of_the_family():
    """BUG (RerankerSpec._consistent, and the constructors): HeapsortOptions is a PairwiseOptions, so an `isinstance`
    check lets bubblesort take heapsort's tie quirk: its key and run name then carry a rule bubblesort never applies."""
    ties = HeapsortOptions(quirks=HeapsortQuirks(heapsort_ties="llm-rankers"))
    # the other way round is refused today
    with pytest.raises(ClirError, match="takes HeapsortOptions, got PairwiseOptions"):
        validated(RerankerSpec, dict(method="pairwise-heapsort", options=PairwiseOptions()))
    with pytest.raises(ClirError, match="takes PairwiseOptions, got HeapsortOptions"):
        validated(RerankerSpec, dict(method="pairwise-bubblesort", options=ties))
    coll, _ = tiny_setup(1, 3)
    with pytest.raises(ClirError, match="takes PairwiseOptions, got HeapsortOptions"):
        PairwiseReranker(ties, QrelsOracle(coll), method="pairwise-bubblesort")


# ---------- RerankerSpec: parse, errors, key, describe


@pytest.mark.parametrize(
    "method, options, msg",
    [
        ("nope", {}, "unknown reranker 'nope'"),
        ("listwise", dict(window=5, step=6), "reranker 'listwise': step (6) larger than the window (5)"),
        (
            "listwise",
            dict(context=32),
            "reranker 'listwise': context: Input should be greater than or equal to 64 (got 32)",
        ),
        ("listwise", dict(prompt="prp"), "needs a listwise prompt; 'prp' is a pairwise prompt"),
        ("pairwise-allpair", dict(prompt="rankgpt"), "needs a pairwise prompt; 'rankgpt' is a listwise prompt"),
        ("pairwise-allpair", dict(prompt="missing.yaml"), "no such prompt template file"),
        ("listwise", dict(windw=5), "reranker 'listwise' has no option 'windw'; its options: prompt, doc_title, "),
        ("setwise-heapsort", dict(num_child=23), "num_child: Input should be less than 23"),
        (
            "pairwise-heapsort",
            dict(heapsort_ties="never"),
            "heapsort_ties: Input should be 'first-stage' or 'llm-rankers'",
        ),
        ("pairwise-bubblesort", dict(k=0), "k: Input should be greater than 0"),
    ],
)
def test_spec_refuses_bad_options(method, options, msg):
    with pytest.raises(ClirError) as e:
        RerankerSpec.parse(method, **options)
    assert msg in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("method", ALL)
def test_misspelt_option_names_the_family_options_in_one_line(method):
    "(c) The error names the option and every option of the method's family (its Options' flat fields), in one line."
    coll, _ = tiny_setup(1, 3)
    want = f"reranker {method!r} has no option 'num_chidl'; its options: " + ", ".join(_fields(method))
    for call in (
        lambda: RerankerSpec.parse(method, num_chidl=2),
        lambda: get_reranker(method, QrelsOracle(coll), num_chidl=2),
    ):
        with pytest.raises(ClirError) as e:
            call()
        assert str(e.value) == want


@pytest.mark.parametrize("old, new", [("template", "prompt"), ("sort_k", "k")])
def test_old_keyword_names_are_refused_with_the_new_ones(old, new):
    "The first release's keywords: `template=` is the option `prompt`, `sort_k` is `k` (and the sort is in the method's name)."
    with pytest.raises(ClirError) as e:
        RerankerSpec.parse("pairwise-heapsort", **{old: "x"})
    assert f"has no option {old!r}" in str(e.value) and f" {new}," in str(e.value)
    with pytest.raises(ClirError, match="unknown reranker 'heapsort'"):
        RerankerSpec.parse("heapsort")


# the first release's `RerankerSpec.key()` of these specs (captured at 7ce5228, before the options moved to their families)
V1_KEYS = [
    (
        "pairwise-heapsort",
        {},
        "pairwise-heapsort[context=4096,doc_title=True,k=10,max_words=300,passage_tokens=300,prompt=None,query_tokens=128,scoring=generation,step=10,window=20]",
    ),
    (
        "pairwise-heapsort",
        {"heapsort_ties": "llm-rankers"},
        "pairwise-heapsort[context=4096,doc_title=True,heapsort_ties=llm-rankers,k=10,max_words=300,passage_tokens=300,prompt=None,query_tokens=128,scoring=generation,step=10,window=20]",
    ),
    (
        "pairwise-bubblesort",
        {"k": 5, "scoring": "likelihood"},
        "pairwise-bubblesort[context=4096,doc_title=True,k=5,max_words=300,passage_tokens=300,prompt=None,query_tokens=128,scoring=likelihood,step=10,window=20]",
    ),
    (
        "pairwise-allpair",
        {"doc_title": False, "passage_tokens": 64, "query_tokens": 32},
        "pairwise-allpair[context=4096,doc_title=False,k=10,max_words=300,passage_tokens=64,prompt=None,query_tokens=32,scoring=generation,step=10,window=20]",
    ),
    (
        "listwise",
        {},
        "listwise[context=4096,doc_title=True,k=10,max_words=300,passage_tokens=300,prompt=None,query_tokens=128,scoring=generation,step=10,window=20]",
    ),
    (
        "listwise-rankgpt",
        {"window": 4, "step": 2, "doc_title": False},
        "listwise-rankgpt[context=4096,doc_title=False,k=10,max_words=300,passage_tokens=300,prompt=None,query_tokens=128,scoring=generation,step=2,window=4]",
    ),
    (
        "listwise",
        {"prompt": "rankgpt", "last_window": "short", "cl100k_budget": True},
        "listwise[cl100k_budget=True,context=4096,doc_title=True,k=10,last_window=short,max_words=300,passage_tokens=300,prompt=rankgpt,query_tokens=128,scoring=generation,step=10,window=20]",
    ),
    (
        "listwise",
        {"answer_budget": "rank_llm", "query_numbers": "rewrite", "last_window": "short"},
        "listwise[answer_budget=rank_llm,context=4096,doc_title=True,k=10,last_window=short,max_words=300,passage_tokens=300,prompt=None,query_numbers=rewrite,query_tokens=128,scoring=generation,step=10,window=20]",
    ),
    (
        "listwise",
        {"cut": "tokens", "passage_tokens": 64, "max_words": 64},
        "listwise[context=4096,cut=tokens,doc_title=True,k=10,max_words=64,passage_tokens=64,prompt=None,query_tokens=128,scoring=generation,step=10,window=20]",
    ),
    (
        "listwise",
        {"context": 8192, "max_words": 100},
        "listwise[context=8192,doc_title=True,k=10,max_words=100,passage_tokens=300,prompt=None,query_tokens=128,scoring=generation,step=10,window=20]",
    ),
    (
        "setwise-heapsort",
        {},
        "setwise-heapsort[context=4096,doc_title=True,k=10,max_words=300,passage_tokens=300,prompt=None,query_tokens=128,scoring=generation,step=10,window=20]",
    ),
    (
        "setwise-bubblesort",
        {"num_child": 5, "k": 3, "scoring": "likelihood"},
        "setwise-bubblesort[context=4096,doc_title=True,k=3,max_words=300,num_child=5,passage_tokens=300,prompt=None,query_tokens=128,scoring=likelihood,step=10,window=20]",
    ),
    (
        "pointwise-yes-no",
        {},
        "pointwise-yes-no[context=4096,doc_title=True,k=10,max_words=300,passage_tokens=300,prompt=None,query_tokens=128,scoring=generation,step=10,window=20]",
    ),
    (
        "pointwise-qlm",
        {"passage_tokens": 48},
        "pointwise-qlm[context=4096,doc_title=True,k=10,max_words=300,passage_tokens=48,prompt=None,query_tokens=128,scoring=generation,step=10,window=20]",
    ),
    (
        "listwise-first",
        {"window": 5, "step": 5},
        "listwise-first[context=4096,doc_title=True,k=10,max_words=300,passage_tokens=300,prompt=None,query_tokens=128,scoring=generation,step=5,window=5]",
    ),
]


@pytest.mark.parametrize("method, options, key", V1_KEYS)
def test_spec_key_is_the_first_release_key(method, options, key):
    assert RerankerSpec.parse(method, **options).key() == key
    assert str(RerankerSpec.parse(method, **options)) == key


def test_pairwise_heapsort_key_is_the_first_release_key():
    assert RerankerSpec.parse("pairwise-heapsort").key() == (
        "pairwise-heapsort[context=4096,doc_title=True,k=10,max_words=300,"
        "passage_tokens=300,prompt=None,query_tokens=128,scoring=generation,step=10,window=20]"
    )
    assert RerankerSpec.parse("pairwise-bubblesort").key() != RerankerSpec.parse("pairwise-bubblesort", k=5).key()


def test_spec_describe_names_the_prompt_and_every_identity_option():
    """The dry run's line: the method, then its family's identity options in their declaration order (the first release
    listed them in its own order: "prompt prp, k 10, scoring generation, passage_tokens 300, query_tokens 128, doc_title True")."""
    assert (
        RerankerSpec.parse("pairwise-bubblesort").describe()
        == "pairwise-bubblesort (prompt prp, doc_title True, k 10, scoring generation, query_tokens 128, passage_tokens 300)"
    )
    assert (
        RerankerSpec.parse("pairwise-heapsort", heapsort_ties="llm-rankers", batch_orders=False).describe()
        == "pairwise-heapsort (prompt prp, doc_title True, k 10, scoring generation, query_tokens 128, passage_tokens 300, heapsort_ties llm-rankers)"
    )
    assert (
        RerankerSpec.parse("setwise-heapsort", num_child=2, batch_size=3).describe()
        == "setwise-heapsort (prompt setwise, doc_title True, k 10, num_child 2, scoring generation, query_tokens 128, passage_tokens 300)"
    )
    assert (
        RerankerSpec.parse("pointwise-yes-no").describe()
        == "pointwise-yes-no (prompt relevance, doc_title True, query_tokens 128, passage_tokens 300)"
    )
    lw = RerankerSpec.parse("listwise", last_window="short").describe()
    assert lw.startswith(
        "listwise (prompt rankzephyr, doc_title True, window 20, step 10, max_words 300, context 4096"
    ) and lw.endswith("last_window short)")
    assert (
        "answer_budget" not in lw
        and "listwise-first (prompt first," in RerankerSpec.parse("listwise-first", window=5, step=5).describe()
    )


def test_spec_parse_overrides_a_spec_and_knows_its_family():
    s = RerankerSpec.parse("pairwise-heapsort", k=3)
    t = RerankerSpec.parse(s, scoring="likelihood")
    assert t.method == "pairwise-heapsort" and t.options.flat(defaults=False) == {"k": 3, "scoring": "likelihood"}
    assert s.options.flat(defaults=False) == {"k": 3}  # frozen: the spec given is not changed
    fam = {m: RerankerSpec.parse(m).family for m in ALL}
    assert fam == {
        "listwise": "listwise",
        "listwise-rankzephyr": "listwise",
        "listwise-rankgpt": "listwise",
        "pairwise-allpair": "pairwise",
        "pairwise-heapsort": "pairwise",
        "pairwise-bubblesort": "pairwise",
        "setwise-heapsort": "setwise",
        "setwise-bubblesort": "setwise",
        "pointwise-yes-no": "pointwise",
        "pointwise-qlm": "pointwise",
        "listwise-first": "listwise",
        "pointwise-qwen3-reranker": "pointwise",
        "cross-encoder": "cross-encoder",
        "reasoning-rank1": "reasoning",
    }
    assert {
        m: type(RerankerSpec.parse(m).options).__name__
        for m in ("listwise-first", "pairwise-heapsort", "pairwise-allpair")
    } == {
        "listwise-first": "ListwiseOptions",
        "pairwise-heapsort": "HeapsortOptions",
        "pairwise-allpair": "PairwiseOptions",
    }


# ---------- the run identity (first-release form)


def test_run_identity_is_the_first_release_form():
    assert V1_OPTIONS == {
        "prompt": None,
        "window": 20,
        "step": 10,
        "k": 10,
        "passage_tokens": 300,
        "query_tokens": 128,
        "scoring": "generation",
        "max_words": 300,
        "context": 4096,
        "doc_title": True,
    }
    # every family of the first releases at its defaults: the first release's ten fields, whatever it reads
    for m in V1_METHODS:
        assert run_identity(m, RerankerSpec.parse(m).options) == {"method": m, **V1_OPTIONS}, m
    s = RerankerSpec.parse("listwise", window=4, step=2, last_window="short", batch_size=2)
    assert run_identity("listwise", s.options, {"double_bos": True}) == {
        "method": "listwise",
        **V1_OPTIONS,
        "window": 4,
        "step": 2,
        "last_window": "short",
        "double_bos": True,
    }
    assert "num_child" not in run_identity("setwise-heapsort", RerankerSpec.parse("setwise-heapsort").options)
    assert (
        run_identity("setwise-heapsort", RerankerSpec.parse("setwise-heapsort", num_child=5).options)["num_child"] == 5
    )


def test_switches_stay_out_of_keys_at_their_default():
    "(from test_quirks) A spec at its defaults has no option off its default and the first release's ten fields as its key."
    before = [
        "context",
        "doc_title",
        "k",
        "max_words",
        "passage_tokens",
        "prompt",
        "query_tokens",
        "scoring",
        "step",
        "window",
    ]
    for m in ("listwise", "pairwise-heapsort", "pairwise-allpair"):
        s = RerankerSpec.parse(m)
        assert s.options.non_default() == {} and sorted(V1_OPTIONS) == before
        assert s.key() == m + "[" + ",".join(f"{f}={V1_OPTIONS[f]}" for f in before) + "]"
    for m, switch, value in (
        ("pairwise-heapsort", "heapsort_ties", "llm-rankers"),
        ("listwise", "last_window", "short"),
        ("listwise", "cut", "tokens"),
    ):
        on = RerankerSpec.parse(m, **{switch: value})
        assert (
            on.options.non_default() == {switch: value}
            and f"{switch}={value}" in on.key()
            and f"{switch} {value}" in on.describe()
        )
        assert switch not in RerankerSpec.parse(m).key()


# rows of the shipped configurations: (method, flat options, document length, the backend's quirks, the row's own fields)
# -> the params and the 10-character hash that named their runs in the first release (captured at 7ce5228)
CONFIG_ROWS = [
    (
        "setwise-heapsort",
        dict(k=1, passage_tokens=48),
        None,
        {},
        dict(llm="hf:qwen2.5-coder-0.5b-offline", pairs=None, top_k=5),
        "bfba697cc2",
    ),  # demo-rerankers.yaml, Qwen-0.5B setwise heapsort
    (
        "listwise",
        dict(prompt="rankzephyr", window=2, step=2, max_words=16),
        None,
        {},
        # demo.yaml, Qwen-0.5B listwise en-de
        dict(llm="hf:qwen2.5-coder-0.5b-offline", pairs=["en-de"], top_k=2),
        "230607a5a0",
    ),
    (
        "pairwise-bubblesort",
        dict(k=1, scoring="likelihood", passage_tokens=16),
        8,
        {},
        # demo.yaml, Qwen-0.5B PRP at 8 tokens
        dict(llm="hf:qwen2.5-coder-0.5b-offline", pairs=["en-de"], top_k=2),
        "f97c95ecde",
    ),
    (
        "listwise",
        dict(prompt="rankzephyr", last_window="short", answer_budget="rank_llm", query_numbers="rewrite"),
        64,
        {},
        # paper-clef-quirks.yaml RankZephyr 64
        dict(llm="hf:castorini/rank_zephyr_7b_v1_full", pairs=None, top_k=100),
        "a6138c70b9",
    ),
    (
        "listwise",
        dict(prompt="rankgpt", doc_title=False, last_window="short", cl100k_budget=True),
        None,
        {},
        dict(llm="openai:gpt-3.5-turbo", pairs=None, top_k=100),
        "ea5cc1da05",
    ),  # paper-ciral-quirks.yaml RankGPT-3.5
    (
        "pairwise-bubblesort",
        dict(doc_title=False),
        None,
        {"double_bos": True, "no_attention_mask": True},
        # paper-ciral-quirks.yaml Llama-3.1-8B
        dict(llm="hf:meta-llama/Llama-3.1-8B-Instruct", pairs=None, top_k=100),
        "e2bb806c30",
    ),
    (
        "pairwise-heapsort",
        dict(doc_title=False),
        None,
        {},
        dict(llm="hf:meta-llama/Llama-3.1-8B-Instruct", pairs=None, top_k=100),
        "7176468abb",
    ),  # neuclir-2022.yaml Llama-3.1-8B PRP
    (
        "listwise-first",
        dict(window=5, step=5, max_words=40),
        None,
        {},
        dict(llm="hf:qwen2.5-coder-0.5b-offline", pairs=None, top_k=5),
        "8c8562ec69",
    ),  # demo-rerankers.yaml Qwen-0.5B FIRST
]


@pytest.mark.parametrize("method, options, tokens, backend_quirks, row, hashed", CONFIG_ROWS)
def test_run_identity_of_shipped_rows_hashes_as_the_first_release(method, options, tokens, backend_quirks, row, hashed):
    """`run_identity` (with the family's `at_length` for a document-length run) is the reranker's part of a row's run
    name; the row adds its backend, pairs and depth, and (the config's first-release rule) `doc_title` only when false
    and, at a length, that length as `max_words` too."""
    s = RerankerSpec.parse(method, **options)
    opts = s.options if tokens is None else s.reranker.at_length(s.options, tokens)
    ident = run_identity(method, opts, backend_quirks) | row
    if tokens is not None:
        ident |= {"passage_tokens": tokens, "max_words": tokens}
    if ident.get("doc_title") is True:
        del ident["doc_title"]
    assert stable_hash(ident, n=10) == hashed


# ---------- (a) names and runs on the oracle: the first release's (captured at 7ce5228 by running the same calls on that commit)

_R0 = {
    "q0": {
        "q0d00": 1.0,
        "q0d01": 5.0,
        "q0d02": 7.0,
        "q0d03": 8.0,
        "q0d04": 6.0,
        "q0d05": 2.0,
        "q0d06": 4.0,
        "q0d07": 3.0,
    },
    "q1": {
        "q1d00": 4.0,
        "q1d01": 6.0,
        "q1d02": 3.0,
        "q1d03": 8.0,
        "q1d04": 7.0,
        "q1d05": 5.0,
        "q1d06": 1.0,
        "q1d07": 2.0,
    },
}
V1_RUNS = [
    ("listwise", {}, "rankzephyr-w20s10[oracle:qrels]", _R0),
    ("listwise-rankgpt", {"step": 2, "window": 4}, "rankgpt-w4s2[oracle:qrels]", _R0),
    (
        "listwise",
        {"cut": "tokens", "doc_title": False, "last_window": "short", "passage_tokens": 64},
        "rankzephyr-w20s10[oracle:qrels][no-title][last-short][tokens64]",
        _R0,
    ),
    (
        "listwise",
        {"answer_budget": "rank_llm", "query_numbers": "rewrite"},
        "rankzephyr-w20s10[oracle:qrels][answer_budget-rank_llm][query_numbers-rewrite]",
        _R0,
    ),
    ("pairwise-bubblesort", {}, "prp-bubblesort10-gen[oracle:qrels]", _R0),
    (
        "pairwise-heapsort",
        {"heapsort_ties": "llm-rankers", "k": 5},
        "prp-heapsort5-gen[oracle:qrels][ties-llm-rankers]",
        {
            "q0": {
                "q0d00": 1.0,
                "q0d01": 4.0,
                "q0d02": 7.0,
                "q0d03": 8.0,
                "q0d04": 6.0,
                "q0d05": 2.0,
                "q0d06": 5.0,
                "q0d07": 3.0,
            },
            "q1": {
                "q1d00": 4.0,
                "q1d01": 7.0,
                "q1d02": 3.0,
                "q1d03": 8.0,
                "q1d04": 6.0,
                "q1d05": 5.0,
                "q1d06": 1.0,
                "q1d07": 2.0,
            },
        },
    ),
    (
        "pairwise-allpair",
        {"doc_title": False, "scoring": "likelihood"},
        "prp-allpair10-lik[oracle:qrels][no-title]",
        _R0,
    ),
    (
        "setwise-heapsort",
        {"k": 3, "num_child": 2},
        "setwise-heapsort3c2-gen[oracle:qrels]",
        {
            "q0": _R0["q0"],
            "q1": {
                "q1d00": 4.0,
                "q1d01": 7.0,
                "q1d02": 3.0,
                "q1d03": 8.0,
                "q1d04": 6.0,
                "q1d05": 5.0,
                "q1d06": 1.0,
                "q1d07": 2.0,
            },
        },
    ),
    (
        "setwise-bubblesort",
        {"scoring": "likelihood"},
        "setwise-bubblesort10c3-lik[oracle:qrels]",
        {
            "q0": {
                "q0d00": 1.0,
                "q0d01": 4.0,
                "q0d02": 7.0,
                "q0d03": 8.0,
                "q0d04": 6.0,
                "q0d05": 2.0,
                "q0d06": 5.0,
                "q0d07": 3.0,
            },
            "q1": _R0["q1"],
        },
    ),
    ("pointwise-yes-no", {}, "pointwise-relevance[oracle:qrels]", _R0),
    ("pointwise-qlm", {"passage_tokens": 48}, "pointwise-qlm[oracle:qrels]", _R0),
    ("listwise-first", {"step": 5, "window": 5}, "first-w5s5[oracle:qrels]", _R0),
]


@pytest.mark.parametrize("method, options, name, run", V1_RUNS)
def test_names_and_oracle_runs_are_the_first_release(method, options, name, run):
    coll, first = tiny_setup(n_queries=2, n_docs=8)
    rr = get_reranker(method, QrelsOracle(coll), progress=False, **options)
    out = rr.rerank(coll, first, k=6)
    assert rr.name == name and out.name == name
    assert {q: dict(s) for q, s in out.items()} == run


# ---------- the registry and get_reranker


def test_registry_lists_the_shipped_methods_and_builds_each():
    assert ALL[:6] == [
        "listwise",
        "listwise-rankzephyr",
        "listwise-rankgpt",
        "pairwise-allpair",
        "pairwise-heapsort",
        "pairwise-bubblesort",
    ]
    from clir_llm.collections import load_collection

    coll = load_collection("fixture", "en-de")
    built = {m: get_reranker(m, QrelsOracle(coll), progress=False) for m in ALL[:6]}
    assert [r.template.name for m, r in built.items() if isinstance(r, ListwiseReranker)] == [
        "rankzephyr",
        "rankzephyr",
        "rankgpt",
    ]
    assert [r.sort for r in built.values() if isinstance(r, PairwiseReranker)] == ["allpair", "heapsort", "bubblesort"]
    assert [r.method for r in built.values()] == ALL[:6]


def test_every_listed_reranker_builds():
    from clir_llm.methods import registries
    from clir_llm.collections import load_collection

    coll = load_collection("fixture", "en-de")
    listed = [s for k, rows in registries().items() if k.startswith("rerankers") for s, *_ in rows if "<" not in s]
    assert set(listed) >= set(ALL)
    for s in listed:
        assert RerankerSpec.parse(s).method == s and get_reranker(s, QrelsOracle(coll), progress=False)


def test_every_method_is_registered_and_listed():
    from clir_llm.cli_experiments import cli_methods

    new = ["setwise-heapsort", "setwise-bubblesort", "pointwise-yes-no", "pointwise-qlm", "listwise-first"]
    assert all(m in ALL for m in new)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        cli_methods([])
    for m in ALL:
        assert re.search(rf"(?m)^\s+{m}\s", out.getvalue()), m
    # a new option does not rename the runs of the paper's rerankers: num_child is setwise's, out of keys at its default
    assert (
        "num_child" not in RerankerSpec.parse("listwise").key()
        and "num_child" not in RerankerSpec.parse("setwise-heapsort").key()
    )
    assert "num_child=5" in RerankerSpec.parse("setwise-heapsort", num_child=5).key()
    with pytest.raises(ClirError, match="reranker 'pairwise-heapsort' has no option 'num_child'"):
        RerankerSpec.parse("pairwise-heapsort", num_child=2)


def test_get_reranker_is_the_spec_built():
    coll, first = tiny_setup(2, 8)
    a = get_reranker("pairwise-heapsort", QrelsOracle(coll), k=3, progress=False)
    b = RerankerSpec.parse("pairwise-heapsort", k=3).build(QrelsOracle(coll), progress=False)
    c = get_reranker(RerankerSpec.parse("pairwise-heapsort"), QrelsOracle(coll), k=3, progress=False)
    assert (
        a.options == b.options == c.options
        and a.options.k == 3
        and a.name == b.name == c.name == "prp-heapsort3-gen[oracle:qrels]"
    )
    assert a.rerank(coll, first, k=8) == b.rerank(coll, first, k=8)
    assert not a.progress and get_reranker("listwise", QrelsOracle(coll)).progress


@pytest.mark.parametrize("method", ALL)
def test_every_family_estimates_itself(method):
    "The dry run asks each family; none answers None (the base class's 'cannot estimate')."
    stats = TextStats(
        docs=12, query_tokens=9, doc_words=[30, 60], tokens_per_word=1.5, template_tokens=lambda s: len(s.split())
    )
    est = RERANKERS[method].estimate(RerankerSpec.parse(method).options, method, stats)
    assert isinstance(est, CallLoad) and est.calls > 0 and est.prompt_tokens > 0
    assert Reranker.estimate(RerankerOptions(), method, stats) is None
    assert (
        stats.passage_tokens() == 67.5
        and stats.passage_tokens(max_words=40) == 52.5
        and stats.passage_tokens(max_tokens=50) == 47.5
    )


# ---------- contract over the families, with the oracle: a perfect judge, only the top k, engine switches


@pytest.mark.parametrize(
    "method", METHODS + ["setwise-heapsort", "pointwise-yes-no", "pointwise-qlm", "listwise-first"]
)
def test_oracle_gives_ideal_top10(method):
    "A perfect judge gives the ideal top 10 (not llm-rankers' setwise bubblesort: its pass-skipping may stop early even then)."
    coll, run = make()
    rr = get_reranker(method, QrelsOracle(coll), progress=False)
    out = rr.rerank(coll, run, k=40)
    for q in run:
        assert sorted(out.docids(q)) == sorted(run.docids(q))
        assert top_grades(coll, out, q, 10) == ideal(coll, q, 10)


def test_only_top_k_is_touched():
    coll, run = make(2, 40)
    for method in ALL:
        out = get_reranker(method, QrelsOracle(coll), progress=False).rerank(coll, run, k=15)
        for q in run:
            assert out.docids(q)[15:] == run.docids(q)[15:], method
            assert sorted(out.docids(q, 15)) == sorted(run.docids(q, 15)), method


def test_batching_and_caching_do_not_change_results():
    coll, run = make(3, 30)
    for method in ALL:
        a = get_reranker(method, QrelsOracle(coll), progress=False).rerank(coll, run, k=30)
        kw = dict(batch_queries=False) | (
            dict(batch_orders=False, cache_comparisons=False) if method.startswith("pairwise") else {}
        )
        for more in ({}, dict(batch_size=1), dict(batch_size=3, batch_queries=True)):
            b = get_reranker(method, QrelsOracle(coll), progress=False, **(kw | more)).rerank(coll, run, k=30)
            assert a == b, (method, more)


def test_diagnostics_and_usage_saved(tmp_path):
    "`save` writes the per-query diagnostics and the usage (params: the registered method, e.g. 'pairwise-bubblesort')."
    coll, run = make(2, 20)
    rr = get_reranker("pairwise-bubblesort", QrelsOracle(coll), progress=False)
    out = rr.rerank(coll, run, k=20)
    out.write(tmp_path / "r.trec")
    rr.save(tmp_path / "r.trec")
    diag = json.loads((tmp_path / "r.trec.rerank.json").read_text())
    usage = json.loads((tmp_path / "r.trec.usage.json").read_text())
    assert (
        set(diag["per_query"]) == {"q0", "q1"}
        and diag["params"]["method"] == "pairwise-bubblesort"
        and diag["reranker"] == rr.name
    )
    assert diag["params"]["template"] == "prp" and diag["params"]["k"] == 10
    assert usage["counters"]["comparisons"] == sum(d["comparisons"] for d in diag["per_query"].values()) > 0
    assert usage["calls"] == sum(d["calls"] for d in diag["per_query"].values()) or usage["calls"] > 0


def test_backends_without_the_capability_are_refused_in_one_line():
    from clir_llm.llm_openai import OpenAIBackend

    # top logprobs of the first token only, no prefill; no call is made
    api = OpenAIBackend.create("gpt-4o-mini")
    for method, extra, msg in (
        ("setwise-heapsort", dict(scoring="likelihood"), "cannot continue an assistant turn"),
        ("pointwise-qlm", {}, "cannot score a continuation of several tokens"),
        ("listwise-first", {}, "cannot continue an assistant turn"),
    ):
        with pytest.raises(
            ClirError, match=f"reranker '{method}' reads likelihoods, and backend 'openai:gpt-4o-mini' {msg}"
        ):
            get_reranker(method, api, **extra)
    # generation, or Yes/No as the first token
    for method in ("setwise-heapsort", "setwise-bubblesort", "pointwise-yes-no"):
        assert get_reranker(method, api).backend is api
    no_lp = OpenAIBackend.create("gpt-4o-mini", logprobs=False)
    with pytest.raises(ClirError, match="returns no log-probabilities"):
        get_reranker("pointwise-yes-no", no_lp)
    assert api.supports_logprobs and not api.scores_sequences
    with pytest.raises(ClirError, match="needs must be one of first, prefixed, sequence"):
        check_scoring(api, "x", "all")


# ---------- check_run


def test_check_run_names_the_file_line_and_value(tmp_path):
    coll, _ = tiny_setup(2, 5)
    coll.name = "tiny"
    good = tmp_path / "good.trec"
    good.write_text("q0 Q0 q0d00 1 2.0 x\nq0 Q0 q0d01 2 1.0 x\nq1 Q0 q1d03 1 1.0 x\n")
    check_run(good, Run.read(good), coll)
    bad = tmp_path / "bad.trec"
    bad.write_text("q0 Q0 q0d00 1 2.0 x\nq9 Q0 q0d01 1 1.0 x\n")
    with pytest.raises(FormatError, match=r"bad.trec:2: query 'q9' is not a query of collection 'tiny' en-de"):
        check_run(bad, Run.read(bad), coll)
    bad.write_text("q0 Q0 q0d00 1 3.0 x\nq0 Q0 nosuchdoc 2 2.0 x\nq0 Q0 q0d01 3 1.0 x\n")

    # a collection's get_doc: a ClirError for an unknown document (the test double's: KeyError)
    class Strict(type(coll)):
        def get_doc(self, d):
            if d not in self._docs:
                raise ClirError(f"no document {d}")
            return self._docs[d]

    strict = Strict(coll.queries, coll._docs, coll.qrels, name="tiny")
    with pytest.raises(
        FormatError, match=r"bad.trec:2: document 'nosuchdoc' \(query 'q0'\) is not in collection 'tiny'"
    ):
        check_run(bad, Run.read(bad), strict)
    check_run(bad, Run.read(bad), strict, k=1)  # below the top k nothing is read


# ---------- `clir-llm rerank`: the parser from the family's options, --help per family

COMMON = ["--collection", "c", "--pair", "en-de", "--run", "r", "--out", "o"]


def _parser(method, llm=None):
    from clir_llm.cli_stages import _rerank_parser

    return _rerank_parser(ALL, method, llm)


def test_cli_options_come_from_the_family():
    a = _parser("pairwise-heapsort").parse_args(
        COMMON
        + [
            "--method",
            "pairwise-heapsort",
            "--sort-k",
            "3",
            "--no-doc-title",
            "--passage-tokens",
            "64",
            "--scoring",
            "likelihood",
        ]
    )
    s = spec_from_args(HeapsortOptions, a)
    assert (s.k, s.doc_title, s.passage_tokens, s.scoring) == (3, False, 64, "likelihood")
    # the first release gave every family every option (PRP's spec had window 20); now --window is listwise's alone
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as err:
        _parser("pairwise-heapsort").parse_args(COMMON + ["--method", "pairwise-heapsort", "--window", "4"])
    assert "unrecognized arguments: --window 4" in err.getvalue()


def test_quirks_are_cli_flags_of_their_family():
    from clir_llm.cli_stages import _first_parse

    a = _parser("listwise").parse_args(COMMON + ["--method", "listwise", "--last-window", "short", "--cut", "tokens"])
    assert spec_from_args(ListwiseOptions, a).non_default() == {"last_window": "short", "cut": "tokens"}
    a = _parser("pairwise-heapsort").parse_args(
        COMMON + ["--method", "pairwise-heapsort", "--heapsort-ties", "llm-rankers"]
    )
    assert spec_from_args(HeapsortOptions, a).quirks.heapsort_ties == "llm-rankers"
    a = _parser("listwise").parse_args(
        COMMON
        + ["--method", "listwise", "--answer-budget", "rank_llm", "--query-numbers", "rewrite", "--cl100k-budget"]
    )
    assert spec_from_args(ListwiseOptions, a).non_default() == {
        "answer_budget": "rank_llm",
        "query_numbers": "rewrite",
        "cl100k_budget": True,
    }
    # the backend's quirks are the backend's options now (--llm KIND:MODEL --help), not a reranker's
    for method in ("pairwise-heapsort", "listwise"):
        with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
            _parser(method).parse_args(COMMON + ["--method", method, "--double-bos"])
    assert vars(_first_parse(["--method", "setwise-heapsort", "--llm", "hf:x", "--num-child", "2"])) == {
        "plugin": [],
        "method": "setwise-heapsort",
        "llm": "hf:x",
    }


_BASE = None


def _own_dests(method) -> set[str]:
    "The destinations the parser of `method` has beyond the common ones (no method)."
    global _BASE
    if _BASE is None:
        _BASE = {a.dest for a in _parser(None)._actions}
    return {a.dest for a in _parser(method)._actions} - _BASE


def _flags(method) -> set[str]:
    out = set()
    for name, f in RERANKERS[method].options_for(method).flat_fields().items():
        extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        out.add(extra.get("flag") or "--" + name.replace("_", "-"))
    return out


@pytest.mark.parametrize("method", ALL)
def test_help_lists_exactly_the_family_options(method):
    "(b) `--method M --help` lists M's options (its Options' flat fields, quirks included) and no other family's."
    assert _own_dests(method) == set(_fields(method))
    text = _parser(method).format_help()
    others = set().union(*(_flags(m) for m in ALL)) - _flags(method)
    shown = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", text))
    assert _flags(method) <= shown and not (others & shown), sorted(others & shown)
    assert f"{method} options:" in text


def test_setwise_heapsort_help_from_the_command_line():
    "The issue's check, as a user runs it: setwise's options, no listwise option."
    p = subprocess.run(
        [sys.executable, "-m", "clir_llm.cli", "rerank", "--method", "setwise-heapsort", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    for flag in (
        "--num-child",
        "--sort-k",
        "--scoring",
        "--query-tokens",
        "--passage-tokens",
        "--prompt",
        "--doc-title",
    ):
        assert re.search(rf"(?<![\w-]){flag}(?![\w-])", p.stdout), flag
    for flag in (
        "--window",
        "--last-window",
        "--step",
        "--max-words",
        "--context",
        "--cut",
        "--answer-budget",
        "--heapsort-ties",
        "--batch-orders",
        "--cache-comparisons",
    ):
        assert not re.search(rf"(?<![\w-]){flag}(?![\w-])", p.stdout), flag


# ---------- plugins: a reranker in a module of its own

PLUGIN = """
from clir_llm.rerank import RERANKERS, Reranker

@RERANKERS.register("{name}")
class ReverseReranker(Reranker):
    "The top k in reverse first-stage order (a test reranker without a model)."
    needs_backend = False
    @property
    def name(self): return "reverse"
    def rerank(self, collection, run, k=100):
        self._start(collection, run, k)
        return self._finish(run, {{q: run.docids(q, k)[::-1] for q in self.diagnostics}}, k)
"""


def _cli(*args, env=None):
    "`clir-llm` in a fresh interpreter (so only --plugin can register the test reranker)."
    return subprocess.run(
        [sys.executable, "-c", "import sys; from clir_llm.cli import main; sys.exit(main())", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_plugin_reranker_runs_from_the_cli_in_a_subprocess(tmp_path):
    from clir_llm.collections import load_collection

    (tmp_path / "my_reranker_plugin.py").write_text(textwrap.dedent(PLUGIN.format(name="reverse-test")))
    fx = load_collection("fixture", "en-de")
    first = Run.from_ranked({q: [d.docid for d in fx.iter_docs()] for q in fx.queries}, name="order")
    first.write(tmp_path / "first.trec")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    args = [
        "rerank",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        tmp_path / "first.trec",
        "--method",
        "reverse-test",
        "--top-k",
        "3",
        "--out",
        tmp_path / "out.trec",
    ]
    p = _cli(*args, env=env)  # without --plugin the method is unknown
    assert p.returncode == 2 and "invalid choice: 'reverse-test'" in p.stderr, p.stderr
    p = _cli(*args, "--plugin", "my_reranker_plugin", env=env)
    assert p.returncode == 0, p.stderr
    assert "reranked by reverse" in p.stdout and "0 model calls" in p.stdout
    out = Run.read(tmp_path / "out.trec")
    for q in first:
        ids = first.docids(q)
        assert out.docids(q) == ids[:3][::-1] + ids[3:]
    assert (tmp_path / "out.trec.rerank.json").exists() and (tmp_path / "out.trec.usage.json").exists()
    p = _cli(*args, "--plugin", "no_such_plugin_module", env=env)
    assert (
        p.returncode == 1
        and "plugin 'no_such_plugin_module' cannot be imported" in p.stderr
        and "Traceback" not in p.stderr
    )


def test_llm_reranker_without_llm_is_one_clear_error(tmp_path):
    p = _cli(
        "rerank",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        tmp_path / "none.trec",
        "--method",
        "listwise",
        "--out",
        tmp_path / "out.trec",
    )
    assert p.returncode == 1 and "--llm is required: reranker 'listwise' uses an LLM" in p.stderr, p.stderr


def test_plugin_reranker_runs_from_a_yaml_config(tmp_path, monkeypatch):
    "Issue 13: a reranker in a module of its own, named in a config's `plugins:`, runs in the pipeline and its table."
    import yaml
    from clir_llm.config import load_config
    from clir_llm.pipeline import Pipeline
    from clir_llm.tables import rerank_table

    (tmp_path / "yaml_reranker_plugin.py").write_text(textwrap.dedent(PLUGIN.format(name="reverse-yaml")))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = dict(
        name="plug",
        collection="fixture",
        pairs=["en-de"],
        measure="MAP",
        experiments=["1_first_stage"],
        plugins=["yaml_reranker_plugin"],
        first_stage=dict(methods=["bm25-og"]),
        rerankers=[dict(name="Reverse", method="reverse-yaml", first_stages=["bm25-og"], docs=["og"], top_k=3)],
    )
    (tmp_path / "plug.yaml").write_text(yaml.safe_dump(cfg))
    pipe = Pipeline(load_config(tmp_path / "plug.yaml"), tmp_path / "out", progress=False)
    base = pipe.first_stage("en-de", "bm25-og")
    out = pipe.rerank("en-de", pipe.cfg.rerankers[0], "bm25-og", "og")
    assert all(out.docids(q) == base.docids(q)[:3][::-1] + base.docids(q)[3:] for q in base)
    table, _ = rerank_table(pipe, "reverse-yaml")
    assert "BM25-OG » Reverse OG" in table.means.index
    p = subprocess.run(
        [sys.executable, "-m", "clir_llm.cli", "reproduce", tmp_path / "plug.yaml", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]),
        },
    )
    assert p.returncode == 0 and "reranker Reverse: reverse-yaml;" in p.stdout, p.stderr


def test_a_config_row_carries_its_family_options():
    "A configuration row's reranker is the spec of the same method and options (the first release compared the flat dumps)."
    from clir_llm.config import RerankerConfig

    rc = RerankerConfig(name="x", llm="openai:x", method="listwise", first_stages=["bm25-qt"])
    assert rc.spec == RerankerSpec.parse("listwise") and rc.spec.key() == RerankerSpec.parse("listwise").key()
    rc = RerankerConfig(name="x", llm="openai:x", method="setwise-heapsort", num_child=2, first_stages=["bm25-qt"])
    assert rc.spec == RerankerSpec.parse("setwise-heapsort", num_child=2)


# ---------- `clir-llm rerank` on tiny models

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def _fixture_run(tmp_path):
    from clir_llm.collections import load_collection

    coll = load_collection("fixture", "en-de")
    run = Run.from_ranked({q: [d.docid for d in coll.iter_docs()] for q in coll.queries}, name="bm25")
    run.write(tmp_path / "run.trec")
    return run


def test_cli_rerank_in_process(tiny, tmp_path, capsys):
    from clir_llm.cli_stages import cli_rerank

    run = _fixture_run(tmp_path)
    args = [
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        str(tmp_path / "run.trec"),
        "--method",
        "listwise",
        "--window",
        "3",
        "--step",
        "1",
        "--llm",
        f"hf:{tiny['qwen2']}",
        "--top-k",
        "4",
        "--out",
        str(tmp_path / "rr.trec"),
        "--cache",
        str(tmp_path / "cache"),
    ]
    assert cli_rerank(args) == 0
    out = Run.read(tmp_path / "rr.trec")
    assert all(sorted(out.docids(q)) == sorted(run.docids(q)) for q in run)
    assert json.loads((tmp_path / "rr.trec.rerank.json").read_text())["params"]["window"] == 3
    assert "model calls" in capsys.readouterr().out
    with pytest.raises(ClirError, match="ships no document translations"):
        cli_rerank(args + ["--docs", "dt"])


@pytest.mark.slow
def test_cli_rerank_on_fixture(tiny, tmp_path):
    run = _fixture_run(tmp_path)
    cli = str(Path(sys.executable).parent / "clir-llm")
    args = [
        cli,
        "rerank",
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        tmp_path / "run.trec",
        "--method",
        "pairwise-bubblesort",
        "--sort-k",
        "2",
        "--llm",
        f"hf:{tiny['qwen2']}",
        "--docs",
        "og",
        "--top-k",
        "4",
        "--out",
        tmp_path / "rr.trec",
        "--cache",
        tmp_path / "cache",
    ]
    for attempt in range(2):
        p = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=300, env=ENV)
        assert p.returncode == 0, p.stderr
        usage = json.loads((tmp_path / "rr.trec.usage.json").read_text())
        assert (usage["calls"] > 0) if attempt == 0 else (usage["calls"] == 0 and usage["cache_hits"] > 0)
    out = Run.read(tmp_path / "rr.trec")
    assert all(sorted(out.docids(q)) == sorted(run.docids(q)) for q in run)
    diag = json.loads((tmp_path / "rr.trec.rerank.json").read_text())
    assert set(diag["per_query"]) == set(run)
    bad = subprocess.run(
        list(map(str, args[:-4] + ["--docs", "dt", "--out", tmp_path / "x.trec"])),
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert bad.returncode == 1 and "ships no document translations" in bad.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "method,extra",
    [
        ("setwise-heapsort", ["--sort-k", "2"]),
        ("setwise-bubblesort", ["--sort-k", "1", "--scoring", "likelihood", "--num-child", "2"]),
        ("pointwise-yes-no", []),
        ("pointwise-qlm", []),
        ("listwise-first", ["--window", "3", "--step", "1"]),
    ],
)
def test_cli_rerank_og_and_dt_on_tiny_hf(tiny, tmp_path, method, extra):
    from clir_llm.cli_stages import cli_rerank

    run = _fixture_run(tmp_path)
    for docs in ("og", "dt"):
        out = tmp_path / f"{docs}.trec"
        args = [
            "--collection",
            "fixture",
            "--pair",
            "en-de",
            "--run",
            str(tmp_path / "run.trec"),
            "--method",
            method,
            *extra,
            "--llm",
            f"hf:{tiny['qwen2']}",
            "--top-k",
            "4",
            "--out",
            str(out),
            "--cache",
            str(tmp_path / "cache"),
            "--docs",
            docs,
        ] + (["--translator", "dict:freedict"] if docs == "dt" else [])
        with contextlib.redirect_stdout(io.StringIO()) as said:
            assert cli_rerank(args) == 0
        rr = Run.read(out)
        assert all(sorted(rr.docids(q)) == sorted(run.docids(q)) for q in run)
        diag = json.loads((tmp_path / f"{docs}.trec.rerank.json").read_text())
        assert sum(d["prompts"] for d in diag["per_query"].values()) > 0 and "model calls" in said.getvalue()


@pytest.mark.slow
def test_new_rerankers_in_the_rerank_and_cost_tables(tiny, tmp_path):
    "A config naming the setwise, pointwise and FIRST rerankers gets their rows, tested against the first stage, and their cost rows."
    import yaml
    from clir_llm.config import load_config
    from clir_llm.pipeline import Pipeline
    from clir_llm.tables import rerank_table, cost_summary

    llm = f"hf:{tiny['qwen2']}"
    rows = [
        dict(name="SW", method="setwise-heapsort", k=2),
        dict(name="PW", method="pointwise-yes-no"),
        dict(name="QLM", method="pointwise-qlm"),
        dict(name="FIRST", method="listwise-first", window=3, step=1),
    ]
    cfg = dict(
        name="more",
        collection="fixture",
        pairs=["en-de"],
        measure="MAP",
        experiments=["1_first_stage"],
        first_stage=dict(methods=["bm25-og"]),
        rerankers=[dict(r, llm=llm, first_stages=["bm25-og"], docs=["og"], top_k=4) for r in rows],
    )
    (tmp_path / "more.yaml").write_text(yaml.safe_dump(cfg))
    pipe = Pipeline(load_config(tmp_path / "more.yaml"), tmp_path / "out", progress=False)
    for fam, names in (("setwise", ["SW"]), ("pointwise", ["PW", "QLM"]), ("listwise", ["FIRST"])):
        table, cost = rerank_table(pipe, fam)
        for n in names:
            row = f"BM25-OG » {n} OG"
            # tested against the first stage
            assert row in table.means.index and any(c.row == row and c.baseline == "BM25-OG" for c in table.cells)
            assert row in cost_summary(cost).index
            # BM25-OG finds 1 fixture document a query: no set to ask
            if fam != "setwise":
                assert cost_summary(cost).loc[row, "prompts_per_query"] > 0


# ---------- reliability (issue 14; moved from the test_reliability_* files)
def test_unknown_query_and_missing_document_in_a_run_to_rerank(tmp_path):
    run = R.good_run(tmp_path)
    args = [
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--method",
        "pairwise-bubblesort",
        "--llm",
        "openai:never-called",
        "--out",
        tmp_path / "out.trec",
    ]
    run.write_text(run.read_text() + "t99 Q0 de-1 1 1.0 x\n")
    err = R.err_cli("unknown query id", "rerank", "--run", run, *args)
    assert f"{run}:5: query 't99' is not a query of collection 'fixture' en-de" in err, err
    run = R.good_run(tmp_path)
    run.write_text(run.read_text() + "t2 Q0 de-404 3 0.5 x\n")
    err = R.err_cli("document missing from the collection", "rerank", "--run", run, *args)
    assert f"{run}:5: document 'de-404' (query 't2') is not in collection 'fixture' en-de" in err, err
    assert not (tmp_path / "out.trec").exists()


@pytest.mark.parametrize(
    "method,option",
    [
        ("pairwise-bubblesort", "k"),
        ("setwise-heapsort", "k"),
        ("pairwise-heapsort", "passage_tokens"),
        ("pointwise-yes-no", "query_tokens"),
        ("pointwise-qwen3-reranker", "max_length"),
        ("reasoning-rank1", "think_tokens"),
    ],
)
def test_every_family_bounds_its_counts(method, option):
    """Issue 39 item 6 (the families the listwise bounds left out): a sort depth or token budget of 10^11 is one line
    naming the option, not a loop or an allocation that runs until memory ends."""
    from clir_llm.rerank import RerankerSpec

    with pytest.raises(ClirError, match=option):
        RerankerSpec.parse(method, **{option: 10**11})
    RerankerSpec.parse(method, **{option: 1000})  # a large but sane value is taken
