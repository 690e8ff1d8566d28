"""What the CLI contract tests share: the ferry binary under test and the one-error-line check."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BUILD = Path(os.environ.get("FERRY_BUILD", "/work/main/build"))
FERRY = BUILD / "ferry"


def ferry(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(FERRY), *args], capture_output=True, text=True, timeout=timeout)


def assert_error(res: subprocess.CompletedProcess, code: int) -> None:
    """Exit `code` (not a signal), exactly one non-empty stderr line, starting `error:`."""
    assert res.returncode >= 0, f"killed by signal {-res.returncode}: {res.stderr}"
    assert res.returncode == code, f"exit {res.returncode}, wanted {code}; stderr: {res.stderr!r}"
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, f"want one stderr line, got {lines!r}"
    assert lines[0].startswith("error:"), lines[0]
