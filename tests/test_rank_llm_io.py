"""clir_llm.rank_llm_io (issue 28 item 3): `clir-llm rerank --input requests.jsonl` reads rank_llm's Request JSONL and
`--output-format rank_llm` writes its Result JSONL with `invocations_history`; both files load with rank_llm 0.21.0's
own dataclasses, and the rankings are the CLI's on the same collection and run."""

import contextlib, io, json
from pathlib import Path
import pytest
from clir_llm.core import ClirError, FormatError, Qrels, Run
from clir_llm.collections import load_collection
from clir_llm.rank_llm_io import RecordingBackend, invocations, read_requests, results, write_results
from clir_llm.cli_stages import cli_rerank
from clir_llm.rerank import get_reranker
from clir_llm.testing import QrelsOracle
from _rerankers import tiny  # noqa: F401  (a fixture)

RANK_LLM = "rank_llm 0.21.0 is not installed here: pip install --no-deps rank_llm==0.21.0 dacite (its own requirements, fschat[model_worker], do not install beside the package)"


def _rank_llm():
    "rank_llm's data module (its dataclasses) and dacite, or a skip saying how to install them."
    data = pytest.importorskip("rank_llm.data", reason=RANK_LLM)
    return data, pytest.importorskip("dacite", reason=RANK_LLM)


def _fixture_requests(tmp_path):
    "The fixture's en-de queries over all its documents (file order) as a Request file, and the same as a collection and TREC run."
    fx = load_collection("fixture", "en-de")
    order = [d.docid for d in fx.iter_docs()]
    run = Run.from_ranked({q: order for q in fx.queries}, name="order")
    run.write(tmp_path / "run.trec")
    lines = [
        {
            "query": {"text": fx.queries[q].text, "qid": q},
            "candidates": [
                {
                    "docid": d,
                    "score": float(len(order) - i),
                    "doc": {"title": fx.get_doc(d).title, "text": fx.get_doc(d).text},
                }
                for i, d in enumerate(order)
            ],
        }
        for q in sorted(fx.queries)
    ]
    (tmp_path / "requests.jsonl").write_text(
        "".join(json.dumps(l, ensure_ascii=False) + "\n" for l in lines), encoding="utf-8"
    )
    return fx, run


def _rerank(*args) -> str:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli_rerank([str(a) for a in args]) == 0
    return out.getvalue()


def test_request_file_in_result_file_out_as_rank_llm_reads_them(tiny, tmp_path):
    data, dacite = _rank_llm()
    fx, run = _fixture_requests(tmp_path)
    common = [
        "--pair",
        "en-de",
        "--method",
        "listwise",
        "--window",
        3,
        "--step",
        1,
        "--llm",
        f"hf:{tiny['qwen2']}",
        "--top-k",
        4,
        "--cache",
        tmp_path / "cache",
    ]
    _rerank("--collection", "fixture", "--run", tmp_path / "run.trec", *common, "--out", tmp_path / "cli.trec")
    said = _rerank(
        "--input",
        tmp_path / "requests.jsonl",
        *common,
        "--output-format",
        "rank_llm",
        "--out",
        tmp_path / "results.jsonl",
    )
    assert "0 model calls" in said  # the same prompts as the TREC run's: every call a cache hit
    requests = data.read_requests_from_file(str(tmp_path / "requests.jsonl"))  # rank_llm reads the request file
    assert [r.query.qid for r in requests] == sorted(fx.queries) and requests[0].candidates[0].doc[
        "title"
    ] == fx.get_doc("de-1").title
    got = [dacite.from_dict(data.Result, json.loads(l)) for l in (tmp_path / "results.jsonl").read_text().splitlines()]
    cli = Run.read(tmp_path / "cli.trec")
    # the CLI's rankings
    assert {r.query.qid: [c.docid for c in r.candidates] for r in got} == {q: cli.docids(q) for q in cli}
    diag = json.loads((tmp_path / "results.jsonl.rerank.json").read_text())["per_query"]
    for r in got:
        h = r.invocations_history
        # every call of that query, no other
        assert len(h) == diag[r.query.qid]["prompts"] > 0
        assert all(
            isinstance(i, data.InferenceInvocation) and i.input_token_count > 0 and i.output_token_count > 0 for i in h
        )
        assert (
            r.query.text in h[0].prompt[-1]["content"] if isinstance(h[0].prompt, list) else r.query.text in h[0].prompt
        )
        # scores by position, as rank_llm
        assert [c.score for c in r.candidates] == sorted((c.score for c in r.candidates), reverse=True)


def test_a_trec_run_can_be_written_as_rank_llm_results(tiny, tmp_path):
    "`--output-format rank_llm` from `--collection` and `--run`: the run's ranking, documents as {title, text}."
    fx, run = _fixture_requests(tmp_path)
    _rerank(
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        tmp_path / "run.trec",
        "--method",
        "pairwise-allpair",
        "--llm",
        f"hf:{tiny['qwen2']}",
        "--top-k",
        3,
        "--cache",
        tmp_path / "cache",
        "--output-format",
        "rank_llm",
        "--out",
        tmp_path / "r.jsonl",
    )
    _rerank(
        "--collection",
        "fixture",
        "--pair",
        "en-de",
        "--run",
        tmp_path / "run.trec",
        "--method",
        "pairwise-allpair",
        "--llm",
        f"hf:{tiny['qwen2']}",
        "--top-k",
        3,
        "--cache",
        tmp_path / "cache",
        "--out",
        tmp_path / "r.trec",
    )
    rows = [json.loads(l) for l in (tmp_path / "r.jsonl").read_text().splitlines()]
    trec = Run.read(tmp_path / "r.trec")
    assert {r["query"]["qid"]: [c["docid"] for c in r["candidates"]] for r in rows} == {q: trec.docids(q) for q in trec}
    assert rows[0]["candidates"][0]["doc"].keys() <= {"title", "text"} and all(r["invocations_history"] for r in rows)


def test_the_request_file_rank_llms_writer_writes_is_read(tmp_path):
    "Requests built with rank_llm's dataclasses and written by its DataWriter read back: ids keep their type in the Results."
    data, _ = _rank_llm()
    reqs = [
        data.Request(
            data.Query("where did the cat sit", 7),
            [
                data.Candidate(11, 2.5, {"contents": "the cat sat on the mat"}),
                data.Candidate("x", 1.0, {"title": "Hund", "segment": "ein Hund lief"}),
            ],
        )
    ]
    data.DataWriter(reqs).write_in_jsonl_format(str(tmp_path / "req.jsonl"))
    req = read_requests(tmp_path / "req.jsonl", "en-de")
    assert req.run.docids("7") == ["11", "x"] and req.collection.get_doc("x").full_text == "Hund\nein Hund lief"
    out = Run.from_ranked({"7": ["x", "11"]})
    row = results(out, req.collection, req.run, {"7": []}, req)[0]
    assert row["query"] == {"text": "where did the cat sit", "qid": 7}
    assert [(c["docid"], c["score"]) for c in row["candidates"]] == [("x", 2.5), (11, 1.0)] and row["candidates"][1][
        "doc"
    ] == {"contents": "the cat sat on the mat"}


@pytest.mark.parametrize(
    "line,match",
    [
        ("{", r":1: invalid JSON"),
        ('{"query": {"text": "q", "qid": 1}}', r":1: record lacks field\(s\) candidates"),
        ('{"query": {"text": "", "qid": 1}, "candidates": []}', r":1: query must be \{\"text\": a non-empty string"),
        ('{"query": {"text": "q", "qid": true}, "candidates": []}', r":1: query must be"),
        ('{"query": {"text": "q", "qid": 1}, "candidates": {}}', r":1: query '1': candidates must be a list"),
        (
            '{"query": {"text": "q", "qid": 1}, "candidates": [{"docid": "a", "score": 1}]}',
            r":1: query '1': a candidate needs docid, score and doc",
        ),
        (
            '{"query": {"text": "q", "qid": 1}, "candidates": [{"docid": "a", "score": "1", "doc": {"text": "t"}}]}',
            r"has score '1' \(a finite number",
        ),
        (
            '{"query": {"text": "q", "qid": 1}, "candidates": [{"docid": "a", "score": 1, "doc": {"url": "t"}}]}',
            r"doc needs a text \(text, segment",
        ),
        (
            '{"query": {"text": "q", "qid": 1}, "candidates": [{"docid": "a", "score": 1, "doc": {"text": "t"}}, {"docid": "a", "score": 0, "doc": {"text": "t"}}]}',
            r"document 'a' is a candidate twice",
        ),
        (
            '{"query": {"text": "q", "qid": 1}, "candidates": []}\n{"query": {"text": "r", "qid": 1}, "candidates": []}',
            r":2: query '1' appears twice \(first on line 1\)",
        ),
        (
            '{"query": {"text": "q", "qid": 1}, "candidates": [{"docid": "a", "score": 1, "doc": {"text": "t"}}]}\n'
            '{"query": {"text": "r", "qid": 2}, "candidates": [{"docid": "a", "score": 1, "doc": {"text": "u"}}]}',
            r":2: document 'a' has another text than on line 1",
        ),
        ("\n", r"no requests in file"),
    ],
)
def test_malformed_requests_are_one_line_errors(tmp_path, line, match):
    (tmp_path / "r.jsonl").write_text(line + "\n")
    with pytest.raises(FormatError, match=match) as e:
        read_requests(tmp_path / "r.jsonl", "en-de")
    assert "\n" not in str(e.value) and str(e.value).startswith(str(tmp_path / "r.jsonl"))


def test_invocations_are_each_querys_calls_of_the_batched_run():
    "The recorded calls of one batched run, told apart per query by a replay that calls no model."
    coll = load_collection("fixture", "en-de")
    run = Run.from_ranked({q: [d.docid for d in coll.iter_docs()] for q in coll.queries})
    oracle = QrelsOracle(coll)
    rec = RecordingBackend(oracle)
    rr = get_reranker("pairwise-heapsort", rec, progress=False)
    out = rr.rerank(coll, run, k=4)
    calls_made = oracle.usage.calls
    per_query = invocations(lambda b: get_reranker("pairwise-heapsort", b, progress=False), rec, coll, run, 4)
    assert oracle.usage.calls == calls_made  # the replay asked the model nothing
    assert {q: len(c) for q, c in per_query.items()} == {q: d["prompts"] for q, d in rr.diagnostics.items()}
    assert sum(map(len, per_query.values())) == len(rec.calls) and out == get_reranker(
        "pairwise-heapsort", oracle, progress=False
    ).rerank(coll, run, k=4)
    assert all(coll.queries[q].text in c["prompt"][0]["content"] for q, cs in per_query.items() for c in cs)


def test_input_and_collection_are_exclusive(tmp_path):
    _fixture_requests(tmp_path)
    base = ["--pair", "en-de", "--method", "listwise", "--llm", "hf:x", "--out", str(tmp_path / "o")]
    for extra in (
        ["--input", str(tmp_path / "requests.jsonl"), "--collection", "fixture"],
        ["--collection", "fixture"],
        [],
    ):
        with pytest.raises(
            ClirError, match=r"give --collection and --run, or --input \(a rank_llm Request file\) alone"
        ):
            cli_rerank(base + extra)


_ONE = '{"query": {"text": "q", "qid": %s}, "candidates": [{"docid": "d1", "score": 1.0, "doc": {"text": "t"}}]%s}'


@pytest.mark.parametrize(
    "kind,text,match",
    [
        (
            "a request nested 200,000 deep",
            _ONE % ('"a"', ', "x": ' + "[" * 200_000 + "]" * 200_000),
            r":1: JSON nested too deeply",
        ),
        ("a 5,000-digit qid", _ONE % ("9" * 5000, ""), r":1: not a request: Exceeds the limit"),
    ],
)
def test_hostile_request_lines_are_one_line_errors(tmp_path, kind, text, match):
    "A request line nested 200k deep (RecursionError) or with a 5,000-digit qid (ValueError) was a traceback (issue 39 item 5)."
    import _reliability as R

    (tmp_path / "r.jsonl").write_text(text + "\n")
    try:
        read_requests(tmp_path / "r.jsonl", "en-de")
        err = None
    except FormatError as e:
        err = str(e)
    except (RecursionError, ValueError) as e:
        err = f"traceback: {type(e).__name__}"
    import re

    R.hostile("input files", f"rank_llm requests: {kind}", bool(err and re.search(match, err) and "\n" not in err))
    assert err and re.search(match, err) and err.startswith(str(tmp_path / "r.jsonl")) and len(err) < 300, err


def test_a_request_file_with_a_utf8_bom_is_read_as_topics_are(tmp_path):
    "Runs and topics accept a UTF-8 byte-order mark; rank_llm request files refused it (issue 39 item 6)."
    import _reliability as R

    (tmp_path / "r.jsonl").write_bytes(b"\xef\xbb\xbf" + (_ONE % ('"q1"', "")).encode() + b"\n")
    try:
        reqs = read_requests(tmp_path / "r.jsonl", "en-de")
        ok = list(reqs.run) == ["q1"]
    except FormatError:
        ok = False
    R.hostile("input files", "rank_llm requests with a UTF-8 BOM", ok)
    assert ok
