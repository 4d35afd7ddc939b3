"""What every benchmark's `--smoke` shares (issue 36): a run of a few seconds that imports the script, takes its real code
path on tiny inputs and prints each of its `target ...` lines, so a renamed import or a changed constructor fails in CI
(tests/test_benchmarks.py) instead of on the next measuring day.

A ratio measured on tiny inputs means nothing, so in a smoke run every target line that carries one is marked
`[smoke: tiny inputs, not a measurement]` (by `marked()`, on the script's own printing); a side that needs what CI
cannot have (a fetched upstream repository, ray, a browser) prints `target NAME: not measured (WHAT IS MISSING)`,
never a ratio. Each script lists its target names in a module-level `TARGETS` (a literal: the test reads it without
importing the script)."""
import contextlib, sys

MARK = "  [smoke: tiny inputs, not a measurement]"


def add_flag(ap):
    "The `--smoke` flag of a benchmark's parser."
    ap.add_argument("--smoke", action="store_true", help="a few seconds on tiny inputs: the code path and every target line "
                                                         "(marked: not a measurement), for CI (tests/test_benchmarks.py)")


def not_measured(name: str, why: str):
    "The target line of a side that cannot run here."
    print(f"target {name}: not measured ({why})", flush=True)


class _Marking:
    "A stdout that appends `MARK` to each `target ...` line that carries a ratio."
    def __init__(self, out): self.out, self.buf = out, ""
    def write(self, s):
        self.buf += s
        *lines, self.buf = self.buf.split("\n")
        for line in lines:
            self.out.write(line + (MARK if line.startswith("target ") and "not measured (" not in line and ": skipped (" not in line else "") + "\n")
        return len(s)
    def flush(self): self.out.flush()     # a line not ended yet waits for its newline (or the end of `marked`)
    def __getattr__(self, name): return getattr(self.out, name)


@contextlib.contextmanager
def marked(on: bool = True):
    "While on: target lines printed to stdout carry the smoke mark."
    if not on:
        yield; return
    old = sys.stdout; sys.stdout = m = _Marking(old)
    try: yield
    finally:
        if m.buf: old.write(m.buf)
        old.flush(); sys.stdout = old
