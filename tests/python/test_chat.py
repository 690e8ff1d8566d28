"""`ferry chat` driven through its stdin on the bundled SmolLM2: replies stream to stdout, the history
shapes the next reply, /reset forgets it, Ctrl-C (SIGINT) stops a reply and the program goes on, /exit
and end of input quit with status 0, and a missing model is one `error:` line."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "smollm2-135m-instruct-q4_1.gguf"


@pytest.fixture(scope="module")
def model():
    if not MODEL.is_file():
        pytest.skip(f"bundled model missing: {MODEL}")
    return MODEL


def chat(ferry_bin, model, stdin: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ferry_bin), "chat", "-m", str(model), "--temp", "0", "-n", "10", "-t", "2", *args],
                          input=stdin, capture_output=True, text=True, timeout=120)


def test_replies_history_and_reset(ferry_bin, model):
    alone = chat(ferry_bin, model, "Hello\n")
    assert alone.returncode == 0, alone.stderr
    hello = alone.stdout.strip()
    assert hello
    # Another turn first: the history changes the reply to "Hello"; after /reset it is the reply alone.
    res = chat(ferry_bin, model, "What is 2+2?\nHello\n/reset\nHello\n/exit\nNever read\n")
    assert res.returncode == 0, res.stderr
    replies = res.stdout.strip("\n").split("\n")
    assert len(replies) == 3, res.stdout
    assert replies[1] != hello
    assert replies[2] == hello
    assert "[conversation cleared]" in res.stderr


def test_system_message_and_unknown_command(ferry_bin, model):
    res = chat(ferry_bin, model, "/help\nHello\n", "--system", "You are a pirate.")
    assert res.returncode == 0, res.stderr
    assert "unknown command /help" in res.stderr
    assert res.stdout.strip() and res.stdout.strip() != chat(ferry_bin, model, "Hello\n").stdout.strip()


def test_ctrl_c_stops_the_reply_not_the_program(ferry_bin, model):
    p = subprocess.Popen([str(ferry_bin), "chat", "-m", str(model), "--temp", "0", "-t", "2"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(b"Write a very long story about a dragon.\n")
        p.stdin.flush()
        got = b""
        deadline = time.monotonic() + 60
        while len(got) < 20 and time.monotonic() < deadline:  # the reply is streaming
            if select.select([p.stdout], [], [], 1)[0]:
                got += os.read(p.stdout.fileno(), 4096)
        assert len(got) >= 20
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)
        p.stdin.write(b"Hello\n/exit\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert b"[stopped]" in err
    lines = (got + out).decode("utf-8", "replace").strip("\n").split("\n")
    assert len(lines) >= 2 and lines[-1].strip(), lines  # the reply to "Hello" after the stopped one


def test_missing_model_is_one_error_line(ferry_bin, tmp_path):
    res = subprocess.run([str(ferry_bin), "chat", "-m", str(tmp_path / "nope.gguf")], input="", capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 1
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
