"benchmarks/peers.py (a benchmark script, not a module; fast: the peers are not needed) without the peers installed: argument parsing, target lines, and the 'peer missing' path."

import importlib.util
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def peers():
    spec = importlib.util.spec_from_file_location("peers_bench", ROOT / "benchmarks" / "peers.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_quick_and_full_defaults(peers):
    q = peers.parse_args(["--quick"])
    assert (q.queries, q.depth, q.top, q.passage_tokens, q.device) == (2, 5, 2, 32, "cpu")
    f = peers.parse_args(["--device", "cuda", "--only", "bm25", "dense", "--queries", "7"])
    assert (f.queries, f.depth, f.top, f.passage_tokens, f.device, f.only) == (
        7,
        100,
        10,
        300,
        "cuda",
        ["bm25", "dense"],
    )
    with pytest.raises(SystemExit):
        peers.parse_args(["--device", "tpu"])
    with pytest.raises(SystemExit):
        peers.parse_args(["--only", "nothing"])


def test_target_lines(peers, capsys):
    assert peers.target("prp-heapsort", 2.5) is True
    assert peers.target("dense-encode", 0.9, "max |diff| 1e-06") is False
    assert peers.target("prp-heapsort-no-reuse", 1.2, "same rankings") is True
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "target peer-prp-heapsort: 2.50x (goal 1.6x) met"
    assert out[1] == "target peer-dense-encode: 0.90x (goal 1.0x) short  [max |diff| 1e-06]"
    assert (
        out[2]
        == "target peer-prp-heapsort-no-reuse: 1.20x (prefix reuse off; the goal is prp-heapsort's)  [same rankings]"
    )


def test_missing_peer_is_one_skipped_line(peers, capsys):
    assert peers.peer("no_such_peer_module_xyz", "prp-heapsort") is None
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith(
        "target peer-prp-heapsort: skipped (no_such_peer_module_xyz cannot be imported here"
    )


def test_missing_llm_rankers_skips_every_prp_line(peers, capsys, monkeypatch):
    real = peers.importlib.import_module

    def fake(name, *a):
        if name.startswith("llmrankers"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a)

    monkeypatch.setattr(peers.importlib, "import_module", fake)
    peers.compare_prp(inp=None)  # returns before touching the inputs
    lines = capsys.readouterr().out.splitlines()
    assert [l.split(":")[0] for l in lines] == [
        "target peer-prp-bubblesort",
        "target peer-prp-heapsort",
        "target peer-prp-bubblesort-likelihood",
        "target peer-prp-allpair",
    ]
    assert all("skipped (" in l for l in lines)


def test_rank_llm_missing_is_reported(peers, monkeypatch):
    monkeypatch.setattr(peers.importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ImportError, match="rank_llm"):
        peers.import_rank_llm()


def test_alternating_repeats_keep_the_least_time_and_reverse_the_order(peers):
    "The LLM comparisons run each side `--repeats` times, the order reversed each round (a load that drifts hits both sides)."
    order, times = [], {"a": iter([3.0, 1.0]), "b": iter([2.0, 5.0])}

    def run(n):
        order.append(n)
        return (n.upper(), next(times[n]), "extra")

    got = peers.alternating(2, {"a": lambda: run("a"), "b": lambda: run("b")})
    assert order == ["a", "b", "b", "a"] and got == {"a": ("A", 1.0, "extra"), "b": ("B", 2.0, "extra")}
    assert peers.parse_args(["--quick"]).repeats == 2 and peers.parse_args(["--repeats", "1"]).repeats == 1
