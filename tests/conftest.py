"""Shared pytest hooks: the reliability suite's summary table (tests/test_reliability*.py) at the end of the session."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    mod = sys.modules.get("_reliability")
    lines = mod.summary_lines() if mod else []
    if lines:
        terminalreporter.write_sep("=", "reliability summary (observed by tests/test_reliability*.py)")
        for line in lines: terminalreporter.write_line(line)
