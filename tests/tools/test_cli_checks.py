"""The CLI's checks a newcomer meets first (issue 27): non-finite or negative sampling values are bad
usage (exit 2); `--version` names the build (version, git describe, CUDA or not); `profile -o` fails on
an unwritable path before measuring; `--chat` says once on stderr when it guesses the chat format (a
file without a template whose architecture has a known format) and is an error when there is nothing
to guess from; `synth` never leaves a partial file under the final name, nor any file after SIGINT /
SIGTERM.

Needs the ferry binary ($FERRY_BUILD/ferry, default /work/main/build/ferry); the --chat tests need gguf-py
(to copy a synthetic model without its template).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_helpers import FERRY, assert_error, ferry



@pytest.fixture(scope="session", autouse=True)
def _binary():
    if not FERRY.is_file():
        pytest.skip(f"ferry binary not built at {FERRY} (set FERRY_BUILD)")


def synth(tmp: Path, preset: str, dtype: str = "Q8_0") -> Path:
    path = tmp / f"{preset}-{dtype}.gguf"
    res = ferry("synth", "--preset", preset, "--type", dtype, "-o", str(path))
    assert res.returncode == 0 and path.is_file(), res.stderr
    return path


# ---- sampling values ----------------------------------------------------------------------------

@pytest.mark.parametrize("flag,value", [
    ("--temp", "nan"), ("--temp", "inf"), ("--temp", "-1"), ("--temp", "-inf"),
    ("--top-p", "nan"), ("--min-p", "nan"), ("--repeat-penalty", "nan"), ("--repeat-penalty", "inf"),
])
def test_non_finite_or_negative_sampling_is_usage_error(flag, value):
    res = ferry("run", "-m", "x.gguf", "-p", "hi", flag, value)
    assert_error(res, 2)
    assert flag in res.stderr


# ---- --version ----------------------------------------------------------------------------------

def test_version():
    for flag in ("--version", "-V"):
        res = ferry(flag)
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert len(lines) == 2, lines
        assert lines[0].startswith("ferry ") and "(git " in lines[0], lines[0]  # version + git describe
        assert "CUDA backend built" in lines[1] or "CPU only" in lines[1], lines[1]
    assert "--version" in ferry("--help").stdout


# ---- profile -o ---------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["file_as_folder", "folder"])
def test_profile_unwritable_output_fails_before_measuring(tmp_path, where):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    out = blocker / "sub" / "p.json" if where == "file_as_folder" else tmp_path
    # One error line and no progress output: the path is checked before the (30 s) measurement starts.
    res = ferry("profile", "--quick", "-o", str(out), timeout=60)
    assert_error(res, 1)
    assert str(out) in res.stderr


# ---- --chat without a template ------------------------------------------------------------------

def without_chat_template(src: Path, dst: Path) -> Path:
    pytest.importorskip("gguf")
    res = subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(src), str(dst),
                          "--remove-metadata", "tokenizer.chat_template", "--force"], capture_output=True, text=True)
    assert res.returncode == 0 and dst.is_file(), res.stderr
    return dst


def test_chat_without_template_says_which_format(tmp_path):
    src = synth(tmp_path, "tiny-gemma3")
    model = without_chat_template(src, tmp_path / "gemma-no-template.gguf")
    res = ferry("run", "-m", str(model), "-p", "Hi", "--chat", "-n", "2", "-c", "64", "--temp", "0", "--json")
    assert res.returncode == 0, res.stderr
    warnings = [l for l in res.stderr.splitlines() if l.startswith("warning:")]
    assert len(warnings) == 1 and "Gemma" in warnings[0] and "chat_template" in warnings[0], res.stderr
    # with the template in the file: no warning
    res = ferry("run", "-m", str(src), "-p", "Hi", "--chat", "-n", "2", "-c", "64", "--temp", "0", "--json")
    assert res.returncode == 0 and "warning:" not in res.stderr, res.stderr


def test_chat_without_template_or_known_format_is_an_error(tmp_path):
    bare = without_chat_template(synth(tmp_path, "tiny-llama"), tmp_path / "llama-no-template.gguf")
    res = ferry("run", "-m", str(bare), "-p", "Hi", "--chat", "-n", "2", "-c", "64")
    assert_error(res, 1)
    assert "chat template" in res.stderr and "without --chat" in res.stderr


# ---- synth: partial file ------------------------------------------------------------------------

def test_synth_leaves_no_partial_file(tmp_path):
    out = synth(tmp_path, "tiny-llama", "Q4_0")
    assert not Path(str(out) + ".partial").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_synth_leaves_nothing(tmp_path, sig):
    out = tmp_path / "big.gguf"
    partial = tmp_path / "big.gguf.partial"
    # A real-shape preset without --fast, one thread: many seconds of k-quant work, so the signal lands
    # mid-write.
    proc = subprocess.Popen([str(FERRY), "synth", "--preset", "qwen3-4b", "--layers", "2", "--type", "Q4_K",
                             "-t", "1", "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not partial.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert partial.exists(), "synth never started writing"
        assert not out.exists()  # while writing, the final name holds nothing
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -sig  # it died of the signal, as an interrupted program does
    assert not out.exists() and not partial.exists(), sorted(p.name for p in tmp_path.iterdir())
