"""A `ferry serve` process for the tests: started on a free port (--port 0), ready when it says so on
stderr, stopped with SIGTERM (and killed if it does not stop)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path


class ServeProcess:
    def __init__(self, ferry: Path, model: Path, *args: str, api_key: str | None = None, timeout: float = 120):
        cmd = [str(ferry), "serve", "-m", str(model), "--port", "0", *args]
        if api_key:
            cmd += ["--api-key", api_key]
        self.api_key = api_key
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self.stderr_lines: list[str] = []
        self.port = 0
        deadline = time.monotonic() + timeout
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if "ready:" in line or time.monotonic() > deadline:
                break
        if not self.port or "ready:" not in "".join(self.stderr_lines):
            self.stop()
            raise RuntimeError("ferry serve did not start: " + "".join(self.stderr_lines))
        # Keep reading stderr so the pipe never fills.
        self._drain = threading.Thread(target=self._read_rest, daemon=True)
        self._drain.start()

    def _read_rest(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: bytes | str | dict | None = None,
                headers: dict | None = None, key: str | None = "default", timeout: float = 60):
        """(status, parsed JSON or text) of one HTTP request; key "default" sends the server's key."""
        data = None
        if isinstance(body, dict):
            data = json.dumps(body).encode()
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = body
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        k = self.api_key if key == "default" else key
        if k:
            req.add_header("Authorization", f"Bearer {k}")
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, text = r.status, r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode("utf-8", "replace")
        try:
            return status, json.loads(text)
        except json.JSONDecodeError:
            return status, text

    def metrics(self) -> dict[str, float]:
        """The /metrics samples, by name with labels."""
        status, text = self.request("GET", "/metrics")
        assert status == 200, text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
