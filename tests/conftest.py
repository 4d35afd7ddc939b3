"""Shared pytest hooks: the reliability summary (hostile inputs, faults, kills, secrets: tests/_reliability.py) at the end of the session."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    mod = sys.modules.get("_reliability")
    lines = mod.summary_lines() if mod else []
    if lines:
        terminalreporter.write_sep("=", "reliability summary (observed by the tests through tests/_reliability.py)")
        for line in lines: terminalreporter.write_line(line)
