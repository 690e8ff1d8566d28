"""CTest's entry to the CLI contract tests (tests/tools/tests.cmake): pytest over tests/tools. Without
pytest or numpy it exits 77, which CTest reports as skipped, except under CI=true, where that fails."""

from __future__ import annotations

import os
import sys
from pathlib import Path

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

try:
    import numpy  # noqa: F401
    import pytest
except ImportError as e:
    print(f"cli_contract: {e} (scripts/setup.sh test installs it)", file=sys.stderr)
    sys.exit(1 if CI else 77)

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", str(Path(__file__).resolve().parent)]))
