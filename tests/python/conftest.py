"""pytest fixtures for the Python suites: the ferry binary, llama-cpp-python (tests that need it skip
without it locally; under CI=true tests/conftest.py turns every skip into a failure), and a session-wide
record of differential results printed at the end (and written as JSON to $FERRY_DIFF_REPORT when set)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ferry_ref  # noqa: E402

# case id -> summary dict, filled by test_differential.py; printed by pytest_terminal_summary.
DIFF_SUMMARY: dict[str, dict] = {}


@pytest.fixture(scope="session")
def ferry_bin() -> Path:
    path = ferry_ref.ferry_binary()
    if not path.is_file():
        pytest.skip(f"ferry binary not built at {path} (set FERRY_BUILD)")
    return path


@pytest.fixture(scope="session")
def llama_cpp():
    return pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")


@pytest.fixture(scope="session")
def diff_summary() -> dict[str, dict]:
    return DIFF_SUMMARY


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not DIFF_SUMMARY:
        return
    tr = terminalreporter
    tr.section("differential vs llama.cpp")
    ties = 0
    for case, s in sorted(DIFF_SUMMARY.items()):
        line = (f"{case:24s} rows {s.get('rows', 0):3d}  err/spread max {s.get('max_err', float('nan')):.3f} "
                f"rms {s.get('rms_err', float('nan')):.4f}  top-1 differs {s.get('top1_differs', '?')} "
                f"(gap <= {s.get('top1_max_gap', float('nan')):.3f})  greedy {s.get('greedy', '?')}")
        if s.get("route_ties"):
            line += f"  route ties {s['route_ties']}"
        if "route_tie_step" in s:
            line += f"  parted at a route tie (step {s['route_tie_step']})"
        if s.get("near_tie"):
            ties += 1
            line += f"  near tie ({s['near_tie_margin']:.3f} spreads)"
        tr.write_line(line)
    tr.write_line(f"greedy divergences accepted as near ties: {ties}")
    report = os.environ.get("FERRY_DIFF_REPORT")  # optional: the same table as JSON, for tracking
    if report:
        Path(report).write_text(json.dumps(DIFF_SUMMARY, indent=1, sort_keys=True))
