"""The CLI contract of `ferry serve` and `ferry chat`: bad usage exits 2 and a model that cannot be read or
a port that is taken exits 1, each with exactly one `error:` line; `ferry serve --help` reaches the server
binary (ferry-serve, beside ferry)."""

from __future__ import annotations

import socket

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
