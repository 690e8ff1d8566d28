"""The CLI contract of `ferry serve` and `ferry chat`: bad usage exits 2 and a model that cannot be read or
a port that is taken exits 1, each with exactly one `error:` line; `ferry serve --help` reaches the server
binary (ferry-serve, beside ferry)."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import time

import pytest

from cli_helpers import FERRY, assert_error, ferry

SERVE = FERRY.parent / "ferry-serve"


@pytest.fixture(scope="module", autouse=True)
def _binaries():
    if not FERRY.is_file():
        pytest.skip(f"ferry binary not built at {FERRY} (set FERRY_BUILD)")


@pytest.mark.parametrize("args", [
    ["chat"],                                            # -m missing
    ["chat", "-m", "x.gguf", "--temp", "hot"],
    ["chat", "-m", "x.gguf", "-n", "-7"],
    ["chat", "-m", "x.gguf", "--no-such-flag"],
])
def test_chat_usage_errors(args):
    assert_error(ferry(*args), 2)


def test_chat_unreadable_model(tmp_path):
    assert_error(ferry("chat", "-m", str(tmp_path / "absent.gguf")), 1)
    assert_error(ferry("chat", "-m", str(tmp_path)), 1)


@pytest.fixture(scope="module")
def serve_bin():
    if not SERVE.is_file():
        pytest.skip(f"ferry-serve not built at {SERVE} (needs cpp-httplib)")


@pytest.mark.parametrize("args", [
    ["serve"],                                           # -m missing
    ["serve", "-m", "x.gguf", "--port", "70000"],
    ["serve", "-m", "x.gguf", "--port", "http"],
    ["serve", "-m", "x.gguf", "--parallel", "0"],
    ["serve", "-m", "x.gguf", "--queue", "-1"],
    ["serve", "-m", "x.gguf", "--device", "tpu"],
    ["serve", "-m", "x.gguf", "--bogus"],
])
def test_serve_usage_errors(serve_bin, args):
    assert_error(ferry(*args), 2)


def test_serve_help_reaches_the_server(serve_bin):
    res = ferry("serve", "--help")
    assert res.returncode == 0 and "--api-key" in res.stdout and "--parallel" in res.stdout


def test_serve_unreadable_model(serve_bin, tmp_path):
    assert_error(ferry("serve", "-m", str(tmp_path / "absent.gguf"), "--port", "0"), 1)
    assert_error(ferry("serve", "-m", str(tmp_path), "--port", "0"), 1)


def test_serve_port_in_use(serve_bin, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")  # readable; the port fails first
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        assert_error(ferry("serve", "-m", str(model), "--port", str(port)), 1)


def test_serve_takes_a_burst_of_connections_while_busy(serve_bin, tmp_path):
    # 64 clients connect at once while the server cannot accept (stopped): the kernel completes the
    # handshakes up to the listen backlog and drops the other SYNs (each retried after a second or more).
    # cpp-httplib's own backlog is 5; ferry serve listens with the system's largest.
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)  # opening it blocks: the server listens and stays loading
    p = subprocess.Popen([str(FERRY), "serve", "-m", str(fifo), "--port", "0"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    socks = []
    try:
        port = int(p.stderr.readline().split("127.0.0.1:")[1].split()[0])
        p.send_signal(signal.SIGSTOP)
        sel = selectors.DefaultSelector()
        for _ in range(64):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
            sel.register(s, selectors.EVENT_WRITE)
        connected = set()
        deadline = time.monotonic() + 0.5  # well before the first SYN retry (1 s)
        while len(connected) < len(socks) and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.05):
                if key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    connected.add(key.fileobj)
                sel.unregister(key.fileobj)
        assert len(connected) == len(socks)
    finally:
        for s in socks:
            s.close()
        p.send_signal(signal.SIGCONT)
        p.kill()
        p.wait()
