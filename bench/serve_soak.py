#!/usr/bin/env python3
"""Soak test of `ferry serve` (not CI): N concurrent clients for T minutes through the official `openai`
client, each sending requests back to back (chat and completions, streamed and not, greedy and sampled,
now and then a stop string or a stream it abandons after a few chunks). It reports requests answered,
errors (any exception or unexpected status, with a sample of each kind), abandoned streams, tokens
generated and throughput, time to first token of streams (p50 / p99), and the server's resident memory at
the start, at each tenth of the run and at the end (sampled every 2 s from /proc).

  bench/serve_soak.py --ferry build/ferry -m models/smollm2-135m-instruct-q4_1.gguf --clients 16 --minutes 2
  bench/serve_soak.py --url http://127.0.0.1:8080 --clients 64 --minutes 10   # a server already running

Starting its own server, it passes --parallel (default: clients, at most 64), -c (parallel x 512 cells),
-t and any --server-arg; the queue is the server's default. Exit status 1 when any request failed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import openai

PROMPTS = [
    "Write a short poem about the sea.",
    "What is the capital of France?",
    "Explain gravity to a child.",
    "List three colours.",
    "Tell me a story about a dragon.",
    "How do I boil an egg?",
    "Translate 'good morning' into Spanish.",
    "Why is the sky blue?",
]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def start_server(a) -> tuple[subprocess.Popen, str]:
    parallel = a.parallel or min(a.clients, 64)
    cmd = [a.ferry, "serve", "-m", a.model, "--port", "0", "--parallel", str(parallel), "-c", str(parallel * 512),
           "-t", str(a.threads), *a.server_arg]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    for line in p.stderr:
        sys.stderr.write(line)
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = m.group(1)
        if "ready:" in line:
            break
    if p.poll() is not None or port is None:
        sys.exit("ferry serve did not start")
    threading.Thread(target=lambda: [sys.stderr.write(l) for l in p.stderr], daemon=True).start()
    return p, f"http://127.0.0.1:{port}"


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.answered = 0
        self.abandoned = 0
        self.errors: Counter[str] = Counter()
        self.error_samples: dict[str, str] = {}
        self.tokens = 0
        self.ttft: list[float] = []

    def error(self, e: BaseException):
        kind = type(e).__name__ + (f" {e.status_code}" if isinstance(e, openai.APIStatusError) else "")
        with self.lock:
            self.errors[kind] += 1
            self.error_samples.setdefault(kind, str(e)[:300])


def client_loop(i: int, client: openai.OpenAI, deadline: float, st: Stats):
    rng = random.Random(i)
    while time.monotonic() < deadline:
        prompt = rng.choice(PROMPTS)
        kw = dict(model="m", max_tokens=rng.randint(8, 64),
                  temperature=rng.choice([0.0, 0.7, 1.0]), seed=rng.randint(0, 1 << 30))
        if rng.random() < 0.2:
            kw["stop"] = rng.choice([".", "\n", " the"])
        use_chat = rng.random() < 0.7
        stream = rng.random() < 0.6
        abandon = stream and rng.random() < 0.1
        try:
            t0 = time.monotonic()
            if use_chat:
                r = client.chat.completions.create(messages=[{"role": "user", "content": prompt}], stream=stream,
                                                   **({"stream_options": {"include_usage": True}} if stream else {}),
                                                   **kw)
            else:
                r = client.completions.create(prompt=prompt, stream=stream,
                                              **({"stream_options": {"include_usage": True}} if stream else {}), **kw)
            if not stream:
                n = r.usage.completion_tokens
            else:
                n, first, chunks = 0, None, 0
                for ch in r:
                    chunks += 1
                    if first is None and ch.choices and ((use_chat and ch.choices[0].delta.content) or
                                                         (not use_chat and ch.choices[0].text)):
                        first = time.monotonic() - t0
                    if ch.usage:
                        n = ch.usage.completion_tokens
                    if abandon and chunks >= 3:
                        r.response.close()
                        break
                if first is not None:
                    with st.lock:
                        st.ttft.append(first)
            with st.lock:
                if abandon:
                    st.abandoned += 1
                else:
                    st.answered += 1
                    st.tokens += n
        except Exception as e:  # noqa: BLE001 - every failure is a finding
            st.error(e)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (else one is started)")
    ap.add_argument("--ferry", default="build/ferry")
    ap.add_argument("-m", "--model", default="models/smollm2-135m-instruct-q4_1.gguf")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--minutes", type=float, default=2)
    ap.add_argument("--parallel", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--server-arg", action="append", default=[])
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()

    proc = None
    url = a.url
    if not url:
        proc, url = start_server(a)
    pid = proc.pid if proc else None
    st = Stats()
    rss_start = rss_bytes(pid) if pid else 0
    rss_peak = rss_start
    rss_samples: list[tuple[float, int]] = []
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
    t0 = time.monotonic()
    deadline = t0 + a.minutes * 60
    threads = [threading.Thread(target=client_loop, args=(i, client, deadline, st)) for i in range(a.clients)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(2)
        if pid:
            rss = rss_bytes(pid)
            rss_peak = max(rss_peak, rss)
            rss_samples.append((time.monotonic() - t0, rss))
    wall = time.monotonic() - t0
    rss_end = rss_bytes(pid) if pid else 0
    with urllib.request.urlopen(url + "/health", timeout=30) as r:
        healthy = r.status == 200
    metrics = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    if proc:
        proc.terminate()
        proc.wait(timeout=60)

    ttft = sorted(st.ttft)
    q = lambda p: ttft[min(len(ttft) - 1, int(p * len(ttft)))] * 1e3 if ttft else float("nan")  # noqa: E731
    out = {
        "clients": a.clients, "minutes": a.minutes, "wall_s": round(wall, 1),
        "answered": st.answered, "abandoned_streams": st.abandoned, "errors": sum(st.errors.values()),
        "errors_by_kind": dict(st.errors), "tokens": st.tokens, "tokens_per_s": round(st.tokens / wall, 1),
        "requests_per_s": round(st.answered / wall, 2),
        "ttft_ms_p50": round(q(0.5), 1), "ttft_ms_p99": round(q(0.99), 1),
        "rss_start_mib": round(rss_start / 2**20, 1), "rss_end_mib": round(rss_end / 2**20, 1),
        "rss_peak_mib": round(rss_peak / 2**20, 1),
        # Resident memory at each tenth of the run: growth that stops early is warm-up (KV cache pages and
        # scratch touched for the first time); growth to the end would be a leak.
        "rss_mib_by_tenth": [round(next((r for t, r in rss_samples if t >= wall * k / 10), rss_end) / 2**20, 1)
                             for k in range(1, 11)],
        "healthy_after": healthy,
        "server_exit": proc.returncode if proc else None,
    }
    for line in metrics.splitlines():
        if line.startswith(("ferry_requests_total", "ferry_requests_rejected_total")):
            name, value = line.rsplit(" ", 1)
            out.setdefault("server_counts", {})[name] = float(value)
    print(json.dumps(out, indent=2))
    for kind, sample in st.error_samples.items():
        print(f"error sample [{kind}]: {sample}", file=sys.stderr)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
    return 1 if st.errors or not healthy else 0


if __name__ == "__main__":
    sys.exit(main())
