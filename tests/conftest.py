"""Shared by every pytest suite under tests/ (tests/python, tests/tools): with CI=true in the environment
(.ci/run sets it) a skipped test is a failure. Locally a test skips when a prerequisite is missing —
llama-cpp-python (the reference of the differential tests), the ferry binary, a bundled model, gguf-py —
but CI has every one of them (scripts/setup.sh test), so there a skip means a check that did not run and
must not pass as green. A test whose skip is legitimate on the CI machine too says so with
`@pytest.mark.may_skip_in_ci("why")`.
"""

from __future__ import annotations

import os

import pytest

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_configure(config):
    config.addinivalue_line("markers", "may_skip_in_ci(reason): a skip of this test is not a failure under CI=true")


def _reason(longrepr) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (file, line, "Skipped: reason")
        return str(longrepr[2])
    return str(longrepr)


def _fail_skip(report, where: str) -> None:
    report.outcome = "failed"
    report.longrepr = f"{where} skipped under CI=true, where a missing prerequisite is a failure: {_reason(report.longrepr)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if CI and report.skipped and not hasattr(report, "wasxfail") and item.get_closest_marker("may_skip_in_ci") is None:
        _fail_skip(report, item.nodeid)


# A module skipped whole at collection (a module-level pytest.importorskip): failing its collection
# report would stop the session, so it is recorded and fails the session at the end instead.
_SKIPPED_MODULES: list[str] = []


def pytest_collectreport(report):
    if CI and report.skipped:
        _SKIPPED_MODULES.append(f"{report.nodeid}: {_reason(report.longrepr)}")


def pytest_sessionfinish(session, exitstatus):
    if _SKIPPED_MODULES and exitstatus in (0, 5):  # 5: nothing else was collected
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _SKIPPED_MODULES:
        terminalreporter.section("skipped under CI=true (failures)", red=True)
        for line in _SKIPPED_MODULES:
            terminalreporter.write_line(line)


def pytest_report_header(config):
    return "CI=true: skipped tests count as failures" if CI else None
