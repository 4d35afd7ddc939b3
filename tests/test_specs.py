"""Issue 15, findings 4, 6, 7, 8: the reference implementations' behaviour as named switches; switches at their default
stay out of run identities; the dense encoders' quirks by name; revisions. (The rerankers' quirks, each checked against
a plain reimplementation of llm-rankers 0.0.2 / rank_llm 0.21.0, are tested with their families: tests/test_pairwise.py,
tests/test_listwise.py; the `clir-llm rerank` flags in tests/test_rerank.py.)"""

import re
import pytest
from clir_llm.core import ClirError, Run
from clir_llm.rerank import get_reranker
from clir_llm.specs import validated
from clir_llm.testing import QrelsOracle, tiny_setup
from clir_llm import dense as D


class Recording(QrelsOracle):
    def generate(self, prompts, max_new_tokens=64, **params):
        from clir_llm.templates import prompt_text

        self.seen = getattr(self, "seen", []) + [prompt_text(p) for p in prompts]
        return super().generate(prompts, max_new_tokens, **params)


def _passages(b):
    return [line for p in b.seen for line in p.splitlines() if re.match(r"\[\d+\] ", line)]


def test_switches_stay_out_of_identities_at_their_default():
    from clir_llm.config import RerankerConfig

    base = dict(name="x", llm="openai:x", first_stages=["bm25-qt"])
    for method, switch, value in (
        ("pairwise-heapsort", "heapsort_ties", "llm-rankers"),
        ("listwise", "last_window", "short"),
        ("listwise", "cut", "tokens"),
    ):
        plain = RerankerConfig(method=method, **base)
        on = validated(RerankerConfig, {"method": method, switch: value, **base})
        assert switch not in plain.run_identity() and on.run_identity()[switch] == value
        assert on.run_identity() != plain.run_identity() and RerankerConfig(**on.model_dump()) == on
        assert f"{switch} {value}" in on.spec.describe() and f"{switch} {value}" not in plain.spec.describe()
        assert on.switches() == {switch: value} and plain.switches() == {}


def test_dense_quirks_by_name_and_revisions(tmp_path):
    from clir_llm.cache import Cache

    assert set(D.encoder_quirks()) == {"e5-no-prefix", "repllama-128", "repllama-tevatron"}
    e5 = D.get_encoder_spec("e5", quirks=["e5-no-prefix"])
    assert (e5.query_prefix, e5.doc_prefix) == ("", "") and D.get_encoder_spec("e5").query_prefix == "query: "
    assert D.Dense.create("e5", quirks=("e5-no-prefix",), cache=Cache(tmp_path)).name == "dense:e5[e5-no-prefix]"
    assert D.Dense.create("repllama", quirks="repllama-128", cache=Cache(tmp_path)).encoder.spec.doc_max_length == 128
    with pytest.raises(ClirError, match="encoder m3 has no quirk 'repllama-128'"):
        D.get_encoder_spec("m3", quirks=("repllama-128",))
    for name, s in D.ENCODERS.items():  # a pinned entry names its commit (and its base's); an unpinned one says so
        if not s.stand_in:
            want = f"revision {s.revision}" if s.revision else "revision not pinned"
            assert s.revision_note().startswith(want) and (
                ("base revision" in s.revision_note()) == bool(s.base_model)
            ), name
    # issue 38 item 6: pinned where public sources agree on one commit; E5 stays unpinned (they name three)
    assert {n for n, s in D.ENCODERS.items() if not s.stand_in and not s.revision} == {"e5"}
    assert D.get_encoder_spec("repllama").revisions() == {
        "castorini/repllama-v1-7b-lora-passage": "53f3ec543eafdc511092ade9de3f8b5a00155a3e",
        "meta-llama/Llama-2-7b-hf": "01c7f73d771dfac7d292323805ebc428287df4f9",
    }
    assert (
        D.get_encoder_spec("nv-embed-v2").revision_note() == f"revision {D.NV_EMBED_REVISION}"
    )  # no remote code any more
    plain = (
        D.Encoder.create(D.get_encoder_spec("repllama", base_revision=None), cache=Cache(tmp_path))
        .namespace("doc")
        .identity
    )
    assert (
        "base_revision" not in plain
    )  # cache keys of specs without a base commit are the ones made before the field existed
    pinned = (
        D.Encoder.create(D.get_encoder_spec("repllama", base_revision="abc"), cache=Cache(tmp_path))
        .namespace("doc")
        .identity
    )
    assert pinned["base_revision"] == "abc" and {k: v for k, v in pinned.items() if k != "base_revision"} == plain
    # a local folder in place of the entry's Hub model drops the entry's commit (it pins the Hub model, not the folder)
    assert (
        D.get_encoder_spec("m3", model="/models/m3").revision is None
        and D.get_encoder_spec("m3", model="BAAI/bge-m3").revision
    )
    assert D.get_encoder_spec("m3", model="/models/m3", revision="x").revision == "x"


def test_dense_quirks_from_a_config_name_only_their_encoders_runs(tmp_path):
    import yaml
    from clir_llm.config import load_config
    from clir_llm.core import ClirError
    from clir_llm.pipeline import Pipeline

    cfg = dict(
        name="q",
        collection="fixture",
        pairs=["en-de"],
        measure="MAP",
        experiments=["1_first_stage"],
        first_stage=dict(methods=["dense:e5", "dense:e5-small", "rrf:bm25-og+dense:e5"]),
    )
    paths = {}
    for quirks in ([], ["e5-no-prefix"]):
        (tmp_path / "q.yaml").write_text(
            yaml.safe_dump({**cfg, "first_stage": {**cfg["first_stage"], "dense_quirks": quirks}})
        )
        c = load_config(tmp_path / "q.yaml")
        p = Pipeline(c, tmp_path / "out", progress=False)
        paths[tuple(quirks)] = {m: p.first_stage_path("en-de", m) for m in cfg["first_stage"]["methods"]}
        assert c.first_stage.quirks_of("dense:e5-small") == ()
    on, off = paths[("e5-no-prefix",)], paths[()]
    assert on["dense:e5-small"] == off["dense:e5-small"]  # another encoder's quirk does not rename its runs
    assert on["dense:e5"] != off["dense:e5"] and on["rrf:bm25-og+dense:e5"] != off["rrf:bm25-og+dense:e5"]
    (tmp_path / "q.yaml").write_text(
        yaml.safe_dump({**cfg, "first_stage": {**cfg["first_stage"], "dense_quirks": ["e5-typo"]}})
    )
    with pytest.raises(ClirError, match="unknown dense quirk 'e5-typo'"):
        load_config(tmp_path / "q.yaml")


# ---- issue 15 findings 3, 4, 6: the backend's switches, paper_quirks in a configuration, document length in tokens
def test_backend_switches_reach_the_backend_and_the_identity(tmp_path):
    import yaml
    from clir_llm.config import load_config
    from clir_llm.pipeline import Pipeline

    cfg = dict(
        name="q",
        collection="fixture",
        pairs=["en-de"],
        measure="MAP",
        experiments=["3_pairwise"],
        first_stage=dict(methods=["bm25-og"]),
        rerankers=[
            dict(
                name="P",
                llm="hf:meta-llama/Llama-3.1-8B-Instruct",
                method="pairwise-heapsort",
                first_stages=["bm25-og"],
            )
        ],
    )
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(cfg))
    plain = load_config(tmp_path / "q.yaml").rerankers[0]
    (tmp_path / "q.yaml").write_text(yaml.safe_dump({**cfg, "paper_quirks": True}))
    c = load_config(tmp_path / "q.yaml")
    rc = c.rerankers[0]
    assert rc.switches() == {
        "heapsort_ties": "llm-rankers",
        "tsv_round_trip": True,
        "answers": "exact",
        "double_bos": True,
        "no_attention_mask": True,
    }
    assert rc.llm.quirks() == {"double_bos": True, "no_attention_mask": True} and plain.llm.quirks() == {}
    assert str(rc.llm) == str(plain.llm)  # the backend's quirks never rename its spec (identity v1)
    assert c.first_stage.dense_quirks == ["e5-no-prefix", "repllama-128", "repllama-tevatron"]
    assert (
        rc.run_identity() != plain.run_identity()
        and rc.run_identity()["double_bos"] is True
        and "double_bos" not in plain.run_identity()
    )
    cfg_off = {
        **cfg,
        "paper_quirks": True,
        "rerankers": [{**cfg["rerankers"][0], "llm": "hf:meta-llama/Llama-3.1-8B-Instruct[double_bos=false]"}],
    }
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(cfg_off))
    assert load_config(tmp_path / "q.yaml").rerankers[0].llm.quirks() == {
        "no_attention_mask": True
    }  # the file's own value wins
    from clir_llm.llm import BackendSpec
    from clir_llm.testing import make_tiny_hf_model

    tiny = BackendSpec.parse(
        f"hf:{make_tiny_hf_model(tmp_path / 'tiny')}"
    )  # the quirks reach the built backend and its cache identity
    on, off = tiny.with_paper_quirks("llm-rankers").build(), tiny.build()
    assert on.identity() == {**off.identity(), "double_bos": True, "no_attention_mask": True}
    p = Pipeline(c, tmp_path / "out", progress=False)
    assert (
        p.backend(tiny.with_paper_quirks("llm-rankers"))
        is p.backend(tiny.with_paper_quirks("llm-rankers"))
        is not p.backend(tiny)
    )
    (tmp_path / "q.yaml").write_text(yaml.safe_dump({**cfg, "paper_quirks": "yes"}))
    with pytest.raises(ClirError):
        load_config(tmp_path / "q.yaml")


def test_paper_quirks_variant_configs_set_every_switch():
    from clir_llm.config import load_config

    for name in ("paper-clef", "paper-ciral"):
        base, quirks = load_config(f"configs/{name}.yaml"), load_config(f"configs/{name}-quirks.yaml")
        assert not base.paper_quirks and quirks.paper_quirks and quirks.name == f"{name}-quirks"
        assert all(r.switches() == {} for r in base.rerankers)
        got = {r.name: r.switches() for r in quirks.rerankers}
        every = {
            "last_window": "short",
            "shrink": "rank_llm",
            "position_scores": True,
        }  # issue 27 C, F: rank_llm's inputs
        assert got["RankZephyr"] == every | {
            "query_numbers": "rewrite",
            "answer_budget": "rank_llm",
            "ftfy": "prompt",
            "rank_llm_prefix": True,
            "count_bos": True,
        }
        assert got["RankGPT-4.1"] == got["RankGPT-3.5"] == every | {"ftfy": "passages", "cl100k_budget": True}
        assert (
            got["Llama-3.1-8B"]
            == got["Aya-101"]
            == {"tsv_round_trip": True, "answers": "exact", "double_bos": True, "no_attention_mask": True}
        )  # issue 27 B, F: the authors' TSV, exact answers
        assert [str(m) for m in quirks.first_stage.methods] == [str(m) for m in base.first_stage.methods]
        assert (base.first_stage.nllb_output, quirks.first_stage.nllb_output) == ("256-new-tokens", "model-max-length")
        assert (
            quirks.first_stage.translator_spec.view_options() == {"max_new_tokens": None}
            and base.first_stage.translator_spec.view_options() == {}
        )


def test_nllb_output_cap_switch(tmp_path):
    import yaml
    from clir_llm.config import load_config
    from clir_llm.pipeline import Pipeline
    from clir_llm.translate import NLLBOptions, NLLBTranslator, tiny_nllb

    cfg = dict(
        name="q",
        collection="fixture",
        pairs=["en-de"],
        measure="MAP",
        experiments=["1_first_stage"],
        first_stage=dict(methods=["bm25-qt", "bm25-og"], translator="nllb:facebook/nllb-200-1.3B"),
    )
    paths = {}
    for v in ("256-new-tokens", "model-max-length"):
        (tmp_path / "q.yaml").write_text(
            yaml.safe_dump({**cfg, "first_stage": {**cfg["first_stage"], "nllb_output": v}})
        )
        p = Pipeline(load_config(tmp_path / "q.yaml"), tmp_path / "out", progress=False)
        paths[v] = {m: p.first_stage_path("en-de", m) for m in ("bm25-qt", "bm25-og")}
        assert p.translator().max_new_tokens == (256 if v == "256-new-tokens" else None)
    assert paths["256-new-tokens"]["bm25-og"] == paths["model-max-length"]["bm25-og"]
    assert paths["256-new-tokens"]["bm25-qt"] != paths["model-max-length"]["bm25-qt"]
    (tmp_path / "q.yaml").write_text(
        yaml.safe_dump(
            {
                **cfg,
                "first_stage": {**cfg["first_stage"], "translator": "dict:freedict", "nllb_output": "model-max-length"},
            }
        )
    )
    with pytest.raises(ClirError, match="needs an nllb: translator"):
        load_config(tmp_path / "q.yaml")
    seen = []

    class M:  # what generate is handed
        def generate(self, **kw):
            seen.append(kw)
            import torch

            return torch.zeros((len(kw["input_ids"]), 2), dtype=torch.long)

    for cap in (256, None):
        t = NLLBTranslator(
            str(tiny_nllb(tmp_path / "nllb")), NLLBOptions(max_new_tokens=cap, device="cpu"), progress=False
        )
        t.load()
        t._model = M()
        t.translate_batch(["Hallo Welt."], "de", "en")
    assert seen[0]["max_new_tokens"] == 256 and "max_new_tokens" not in seen[1]


def test_doc_length_cuts_listwise_passages_in_the_rerankers_tokens():
    from clir_llm.config import RerankerConfig
    from clir_llm.rerank import RerankerSpec

    lw = RerankerConfig(name="L", llm="hf:x", method="listwise", first_stages=["bm25-og"])
    prp = RerankerConfig(name="P", llm="hf:x", method="pairwise-bubblesort", first_stages=["bm25-og"])
    assert lw.options_at(64).non_default() == {"passage_tokens": 64, "max_words": 64, "cut": "tokens"}
    assert prp.options_at(64).non_default() == {"passage_tokens": 64}  # pairwise cuts in tokens already
    assert prp.run_identity(64) == {
        **prp.run_identity(),
        "passage_tokens": 64,
        "max_words": 64,
    }  # the demo's runs keep their names
    coll, first = tiny_setup()

    class TwoTokenWords(Recording):
        def count_tokens(self, text):
            return 2 * super().count_tokens(text)

        def truncate(self, text, max_tokens):
            return " ".join(text.split()[: max_tokens // 2])

    b = TwoTokenWords(coll)
    RerankerSpec(method=lw.method, options=lw.options_at(16)).build(b, progress=False).rerank(coll, first, k=20)
    assert {len(line.split()) - 1 for line in _passages(b)} <= {8}  # 16 tokens = 8 two-token words, not 16 words


def test_dense_dtypes_are_the_authors_and_name_the_runs(tmp_path):
    import yaml
    from clir_llm.config import load_config
    from clir_llm.pipeline import Pipeline
    from clir_llm.retrieve import parse_method

    assert {n: D.get_encoder_spec(n).half for n in ("mgte", "m3", "e5", "repllama", "nv-embed-v2")} == {
        "mgte": "float32",
        "m3": "float16",
        "e5": "float32",
        "repllama": "float16",
        "nv-embed-v2": "float32",
    }  # issue 27 D: E5 fp32
    cfg = dict(
        name="q",
        collection="fixture",
        pairs=["en-de"],
        measure="MAP",
        experiments=["1_first_stage"],
        first_stage=dict(methods=["dense:mgte", "dense:m3", "dense:e5-small"]),
    )
    paths = {}
    for dd in ({}, {"mgte": "float16", "m3": "bfloat16"}):
        (tmp_path / "q.yaml").write_text(
            yaml.safe_dump({**cfg, "first_stage": {**cfg["first_stage"], "dense_dtype": dd}})
        )
        c = load_config(tmp_path / "q.yaml")
        paths[bool(dd)] = {
            m: Pipeline(c, tmp_path / "out", progress=False).first_stage_path("en-de", m)
            for m in cfg["first_stage"]["methods"]
        }
        if dd:
            assert (
                c.first_stage.dtypes_of("dense:m3") == ("m3=bfloat16",) and c.first_stage.dtypes_of("dense:mgte") == ()
            )
        else:
            assert (
                c.first_stage.dtypes_of("dense:mgte") == ("mgte=float32",)
                and c.first_stage.dtypes_of("dense:e5-small") == ()
            )
    assert paths[True]["dense:e5-small"] == paths[False]["dense:e5-small"]  # the stand-in's runs keep their names
    assert (
        paths[True]["dense:mgte"] != paths[False]["dense:mgte"] and paths[True]["dense:m3"] != paths[False]["dense:m3"]
    )
    from clir_llm.cache import Cache

    r = parse_method("dense:m3").build(cache=Cache(tmp_path / "c"), dense_dtype={"m3": "bfloat16"}, progress=False)
    assert r.encoder.spec.half == "bfloat16"
    (tmp_path / "q.yaml").write_text(
        yaml.safe_dump({**cfg, "first_stage": {**cfg["first_stage"], "dense_dtype": {"m4": "float16"}}})
    )
    with pytest.raises(ClirError, match="unknown dense encoder 'm4'"):
        load_config(tmp_path / "q.yaml")


def test_quirks_configs_use_the_papers_avg_and_its_reference_rows():
    "Issue 27 F: the *-quirks configurations average as the paper (rounded per-pair values) and carry its copied rows."
    from clir_llm.config import load_config
    from clir_llm.regression import load_regression, regression_path
    from clir_llm.tables import references

    for name in ("paper-clef", "paper-ciral"):
        base, quirks = load_config(f"configs/{name}.yaml"), load_config(f"configs/{name}-quirks.yaml")
        assert (base.avg_rule, quirks.avg_rule) == ("unrounded", "rounded")
        copied = {c.row for c in load_regression(regression_path(quirks)).cells if "copied" in c.row}
        assert (
            copied
            == {r.row for r in references(quirks, "first_stage", quirks.measure)}
            == {r.row for r in references(base, "first_stage", base.measure)}
        )


# ---------- issue 37 item 4: an outside package adds a reranker family and a backend through the registries' entry-point
# groups (clir_llm.reranker, clir_llm.backend), with no edit to clir_llm. tests/fixtures/outside_plugin holds the package
# `clir_outside` and its `clir_outside-0.1.dist-info/` (METADATA, entry_points.txt): on PYTHONPATH it is installed as far
# as importlib.metadata is concerned, without pip. Each check runs clir-llm in a fresh process.
import json, os, socket, subprocess, sys, time
from pathlib import Path

OUTSIDE = Path(__file__).parent / "fixtures" / "outside_plugin"
CLI = str(Path(sys.executable).parent / "clir-llm")


def _outside_env(with_plugin: bool = True) -> dict:
    paths = [str(OUTSIDE)] if with_plugin else []
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        "HF_HUB_OFFLINE": "1",
    }


def _outside(*args, with_plugin=True, timeout=300):
    return subprocess.run(
        [CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=_outside_env(with_plugin)
    )


def _outside_run(tmp_path) -> tuple[Path, dict]:
    "A first-stage run of two demo en-de queries (each with its relevant page) and each document's length in words."
    from clir_llm.collections import load_collection

    c = load_collection("demo", "en-de")
    qs, docs = sorted(c.queries)[:2], [d.docid for d in c.iter_docs()][:4]
    lines, words = [], {}
    for q in qs:
        ids = docs + [d for d in c.qrels[q] if d not in docs]
        lines += [f"{q} Q0 {d} {i + 1} {10 - i} bm25" for i, d in enumerate(ids)]
        words |= {d.docid: len(d.full_text.split()) for d in c.get_docs(ids)}
    (tmp_path / "first.trec").write_text("\n".join(lines) + "\n")
    return tmp_path / "first.trec", words


OUTSIDE_CONFIG = """name: outside
description: a reranker family and a backend of an outside package
collection: demo
pairs: [en-de]
measure: MAP
first_stage: {methods: [bm25-og]}
rerankers:
  - {name: "Echo length", llm: "echo:x", method: pointwise-length, answer_words: 1000, first_stages: [bm25-og], docs: [og],
     top_k: 3, max_queries: 2}
experiments: [6_more_rerankers]   # one table per family that no other notebook draws: this one's too
"""


def test_the_outside_package_is_not_named_in_clir_llm():
    "Zero edits: nothing in the package names the outside package, its family or its backend kind."
    src = Path(__file__).parents[1] / "clir_llm"
    hits = [
        p.name
        for p in src.rglob("*")
        if p.is_file()
        and p.suffix in (".py", ".yaml", ".json", ".txt")
        and any(s in p.read_text(errors="replace") for s in ("clir_outside", "pointwise-length", "EchoBackend"))
    ]
    assert hits == []


def test_an_outside_package_shows_in_clir_llm_methods():
    "On the path, `clir-llm methods` lists its family and backend kind with their own options; off it, neither."
    p = _outside("methods")
    assert p.returncode == 0, p.stderr[-2000:]
    fam = p.stdout.split("pointwise-length", 1)[1].splitlines()
    assert "(clir_outside)" in fam[0] and "answer_words=64, passage_words=200" in fam[1]
    assert "echo:<name>" in p.stdout and "reverse=True, batch_size=8" in p.stdout.split("echo:<name>", 1)[1]
    off = _outside("methods", with_plugin=False)
    assert off.returncode == 0 and "pointwise-length" not in off.stdout and "echo:<name>" not in off.stdout


def test_an_outside_family_and_backend_rerank_from_the_cli(tmp_path):
    """`clir-llm rerank --method pointwise-length --llm echo:x`: its prompt template (found in the family's `prompt_dir`),
    its options as flags, the backend's answers; the top 3 come out longest passage first (the echo backend retells the
    whole prompt: its length orders them), the rest keep their order."""
    first, words = _outside_run(tmp_path)
    out = tmp_path / "out" / "length.trec"
    p = _outside(
        "rerank",
        "--method",
        "pointwise-length",
        "--llm",
        "echo:x",
        "--collection",
        "demo",
        "--pair",
        "en-de",
        "--run",
        first,
        "--top-k",
        3,
        "--answer-words",
        1000,
        "--out",
        out,
    )
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    from clir_llm.core import Run

    got, before = Run.read(out), Run.read(first)
    for q in before:
        top = before.docids(q, 3)
        cut = lambda d: min(words[d], 200)  # the family's passage cut (passage_words 200)
        assert got.docids(q)[:3] == sorted(top, key=lambda d: -cut(d)) and got.docids(q)[3:] == before.docids(q)[3:]
    meta = json.loads(Path(str(out) + ".rerank.json").read_text())
    assert (
        meta["params"]["template"] == "length"
        and meta["params"]["answer_words"] == 1000
        and meta["backend"]["kind"] == "echo"
    )
    assert sum(d["prompts"] for d in meta["per_query"].values()) == 6


def test_an_outside_family_in_a_config_dry_run(tmp_path):
    "A config row of the outside family on the outside backend passes `reproduce --dry-run`, costed by the family's own `estimate`."
    (tmp_path / "outside.yaml").write_text(OUTSIDE_CONFIG)
    p = _outside("reproduce", tmp_path / "outside.yaml", "--dry-run")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "reranker Echo length: pointwise-length with echo:x = EchoBackend model x" in p.stdout
    assert "calls: reranker Echo length (pointwise-length, echo:x): reranked: 1 runs, 2 queries, 6 calls" in p.stdout
    assert "6 length calls" in p.stdout.split("calls in total:", 1)[1].splitlines()[0]
    assert "cannot count" not in p.stdout
    off = _outside("reproduce", tmp_path / "outside.yaml", "--dry-run", with_plugin=False)
    assert off.returncode != 0 and "pointwise-length" in off.stderr and "Traceback" not in off.stderr


def test_an_outside_family_served(tmp_path):
    "`clir-llm serve` on that config answers a rerank request with the outside family on the outside backend, then stops."
    import httpx

    (tmp_path / "outside.yaml").write_text(OUTSIDE_CONFIG)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen(
        [CLI, "serve", str(tmp_path / "outside.yaml"), "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
        env=_outside_env(),
    )
    try:
        for _ in range(600):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
            if p.poll() is not None:
                break
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/rerank",
            timeout=60,
            json={"model": "Echo length", "query": "what", "documents": ["a b", "a b c d e f", "a b c d"]},
        )
        assert r.status_code == 200, r.text
        assert [x["index"] for x in r.json()["results"]] == [1, 2, 0]  # longest first
    finally:
        p.terminate()
        err = p.communicate(timeout=60)[1]
    assert f"Echo length on http://127.0.0.1:{port}" in err and "Traceback" not in err, err[-2000:]


ORACLE_SCRIPT = """
from clir_llm.rerank import get_reranker
from clir_llm.testing import QrelsOracle, tiny_setup
coll, first = tiny_setup(n_queries=2, n_docs=12)
out = get_reranker("pointwise-length", QrelsOracle(coll), progress=False).rerank(coll, first, k=12)
print([[coll.qrels[q][d] for d in out.docids(q)] for q in out])
"""


def test_the_qrels_oracle_answers_an_outside_family_through_its_hook(tmp_path):
    "The test oracle answers the outside family's prompts through the family's `oracle_answer`: graded passages first, by grade."
    p = subprocess.run(
        [sys.executable, "-c", ORACLE_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        env=_outside_env(),
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    grades = json.loads(p.stdout.strip().splitlines()[-1])
    assert all(g == sorted(g, reverse=True) for g in grades) and any(len(set(g)) > 1 for g in grades)


@pytest.mark.slow
def test_an_outside_family_gets_its_table_from_reproduce(tmp_path):
    "`clir-llm reproduce` of that config runs the family in the pipeline and 6_more_rerankers draws its table (about a minute)."
    (tmp_path / "outside.yaml").write_text(OUTSIDE_CONFIG)
    env = {**_outside_env(), "CLIR_LLM_CACHE": str(tmp_path / "cache")}
    p = subprocess.run(
        [
            CLI,
            "reproduce",
            str(tmp_path / "outside.yaml"),
            "--results",
            str(tmp_path / "results"),
            "--figures",
            str(tmp_path / "figures"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    import pandas as pd

    table = pd.read_csv(tmp_path / "results" / "outside" / "tables" / "length.csv", index_col=0)
    assert "BM25-OG » Echo length OG" in table.index and 0 <= table.loc["BM25-OG » Echo length OG", "en-de"] <= 1


def test_a_plugin_that_raises_while_imported_is_one_error_naming_it(tmp_path, monkeypatch):
    """A plugin whose module code raises (AttributeError, ValueError, ...) gave a traceback from every command that
    imports plugins (serve, reproduce, prepare); only ImportError was one line. Now any error is one line naming it."""
    from clir_llm.specs import import_plugins

    (tmp_path / "plug_broken.py").write_text("raise AttributeError('no attribute PLUG_ORDER')\n")
    (tmp_path / "plug_own.py").write_text(
        "from clir_llm.core import ClirError\nraise ClirError('plug_own: already registered')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ClirError, match=r"^plugin 'plug_broken' failed while it was imported: AttributeError: no attribute PLUG_ORDER$"
    ):
        import_plugins(["plug_broken"])
    with pytest.raises(ClirError, match="^plug_own: already registered$"):
        import_plugins(["plug_own"])
