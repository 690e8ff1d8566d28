#!/usr/bin/env python3
"""Serving throughput of an OpenAI-compatible server (ferry serve, llama-server, ...) at several numbers of
parallel clients. Python standard library only (it runs on the GPU host, which has no pip packages).

For each level N of --levels: one warm-up request alone (not counted), then N client threads send streamed
`/v1/completions` requests back to back until the level's requests (max(2N, --min-requests)) are sent.
Every request has its own prompt of --prompt-tokens random token ids (no two share a prefix, so no
server's prompt cache helps), asks for --max-tokens tokens at temperature 0 with `ignore_eos` (a synthetic
model's reply may otherwise end early) and usage in the stream. Per level it reports:
  gen_tok_s     completion tokens of all requests / wall time of the level (first send to last answer)
  ttft p50/p99  time from sending to the first streamed text, over the level's requests (queueing included)
  decode        per-stream tokens/s after the first token (median)
  errors        failed requests (HTTP status, connection, malformed stream)
  cut           requests still open at the level's deadline (--level-seconds): no request starts after it
                and open streams are closed; their streamed chunks count as tokens, and one cut before its
                first text counts its wait as its TTFT, a lower bound (">" in the table where that makes a
                percentile one)
Completion / prompt tokens come from the stream's `usage`; without it, from the number of text chunks.

  bench/serve_throughput.py --url http://127.0.0.1:8080 --levels 1,4,16,64 --json out.json --md out.md
  bench/serve_throughput.py --url URL --wait-health 300 --label ferry ...   # waits for /health first

Exit status 1 when any request failed or the server never became healthy.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import random
import socket
import statistics
import sys
import threading
import time
import urllib.parse
import urllib.request

# Words of a text prompt (--prompt-mode text); a word is about one token for the usual BPE vocabularies.
WORDS = ("the river light stone garden window morning paper silver market music winter field "
         "letter engine forest harbor number yellow simple quiet middle system travel").split()


def build_prompt(a, level: int, index: int):
    """The prompt of one request: token ids (or words) from a generator seeded by the run's seed, the level
    and the request's index, so runs repeat exactly and no two requests share a prefix."""
    rng = random.Random(f"{a.seed}-{level}-{index}")
    if a.prompt_mode == "tokens":
        lo, hi = a.token_range
        return [rng.randrange(lo, hi) for _ in range(a.prompt_tokens)]
    return " ".join(rng.choice(WORDS) for _ in range(a.prompt_tokens))


class Target:
    """The server: host, port and path prefix of --url (http only)."""

    def __init__(self, url: str):
        u = urllib.parse.urlsplit(url.rstrip("/"))
        if u.scheme != "http":
            raise SystemExit(f"--url must be http://HOST:PORT[/prefix] (got {url})")
        self.host, self.port, self.prefix, self.base = u.hostname, u.port or 80, u.path, url.rstrip("/")


class Result:
    """One request's outcome; times in seconds from its send."""

    def __init__(self):
        self.status = "ok"   # ok | cut (stopped at the level's deadline) | error
        self.error = ""
        self.ttft = None     # first streamed text
        self.e2e = None      # last byte of the stream
        self.t_send = None   # time.monotonic() when it was sent
        self.t_end = None    # time.monotonic() when it ended, any way
        self.chunks = 0      # data events carrying text
        self.completion_tokens = None
        self.prompt_tokens = None

    def tokens(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else self.chunks


class Level:
    """The shared state of one level's client threads: the next request's index, the open connections
    (closed by the deadline watchdog) and the results."""

    def __init__(self, n_requests: int):
        self.lock = threading.Lock()
        self.next_index = 0
        self.n_requests = n_requests
        self.open: set[http.client.HTTPConnection] = set()
        self.closed: set[http.client.HTTPConnection] = set()  # open at the deadline, closed by the watchdog
        self.results: list[Result] = []
        self.deadline_hit = False

    def take_index(self):
        with self.lock:
            if self.deadline_hit or self.next_index >= self.n_requests:
                return None
            self.next_index += 1
            return self.next_index - 1


def stream_request(a, t: Target, body: dict, level: Level | None) -> Result:
    """Sends one streamed completion and reads its server-sent events to the end ("data: [DONE]")."""
    r = Result()
    conn = http.client.HTTPConnection(t.host, t.port, timeout=a.timeout)
    if level:
        with level.lock:
            level.open.add(conn)
    t0 = r.t_send = time.monotonic()
    try:
        payload = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if a.api_key:
            headers["Authorization"] = f"Bearer {a.api_key}"
        conn.request("POST", t.prefix + "/v1/completions", body=payload, headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            r.status, r.error = "error", f"HTTP {resp.status}: {resp.read(300).decode(errors='replace')}"
            return r
        done = False
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, ": comment" pings, event names
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            ev = json.loads(data)
            if "error" in ev:
                r.status, r.error = "error", "stream error: " + json.dumps(ev["error"])[:300]
                return r
            for ch in ev.get("choices") or []:
                text = ch.get("text")
                if text is None:  # a chat-style delta, should a server send one
                    text = (ch.get("delta") or {}).get("content")
                if text:
                    r.chunks += 1
                    if r.ttft is None:
                        r.ttft = time.monotonic() - t0
            usage = ev.get("usage")
            if usage:
                r.completion_tokens = usage.get("completion_tokens")
                r.prompt_tokens = usage.get("prompt_tokens")
        r.e2e = time.monotonic() - t0
        if not done:
            r.status, r.error = "error", "stream ended without [DONE]"
    except (OSError, http.client.HTTPException, ValueError) as e:
        r.status, r.error = "error", f"{type(e).__name__}: {e}"
    finally:
        r.t_end = time.monotonic()
        if level:
            with level.lock:
                level.open.discard(conn)
                if conn in level.closed and r.status == "error":
                    r.status = "cut"
        conn.close()
    return r


def request_body(a, prompt, max_tokens: int) -> dict:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if a.ignore_eos:
        body["ignore_eos"] = True
    if a.model:
        body["model"] = a.model
    body.update(a.extra)
    return body


def client_thread(a, t: Target, level_no: int, level: Level):
    while (i := level.take_index()) is not None:
        r = stream_request(a, t, request_body(a, build_prompt(a, level_no, i), a.max_tokens), level)
        with level.lock:
            level.results.append(r)


def percentile(values: list[tuple[float, bool]], p: float) -> tuple[float, bool]:
    """Nearest-rank percentile (p in 0..100) of a non-empty list of (value, censored) pairs, where a censored
    value is a lower bound of the true one. The result is a lower bound (True) when a censored value sits at
    or below its rank: that value's true one may be larger and move the percentile up."""
    s = sorted(values)
    k = max(0, math.ceil(p / 100 * len(s)) - 1)
    return s[k][0], any(c for _, c in s[:k + 1])


def run_level(a, t: Target, n: int) -> dict:
    warm = stream_request(a, t, request_body(a, build_prompt(a, n, -1), a.warmup_tokens), None)
    level = Level(max(2 * n, a.min_requests))
    threads = [threading.Thread(target=client_thread, args=(a, t, n, level), daemon=True) for _ in range(n)]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    # Watchdog: at the level's deadline no new request starts and open streams are closed.
    while alive := [th for th in threads if th.is_alive()]:
        alive[0].join(timeout=0.1)
        if a.level_seconds and time.monotonic() - t0 > a.level_seconds and not level.deadline_hit:
            with level.lock:
                level.deadline_hit = True
                conns = list(level.open)
                level.closed.update(conns)
            for c in conns:
                try:
                    if c.sock:
                        c.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
    # The level's wall time: from the first send to the end of the last request.
    wall = max((r.t_end for r in level.results), default=t0) - t0
    if level.deadline_hit:
        time.sleep(a.settle_seconds)  # the server cancels the cut requests before the next level starts
    ok = [r for r in level.results if r.status == "ok"]
    cut = [r for r in level.results if r.status == "cut"]
    errors = [r for r in level.results if r.status == "error"]
    tokens = sum(r.tokens() for r in ok + cut)
    # TTFT of every sent request; one cut before its first text counts the time it waited (censored: the
    # true TTFT is longer), which can make a percentile a lower bound (">" in the table).
    ttft = [(r.ttft, False) if r.ttft is not None else (r.t_end - r.t_send, True) for r in ok + cut]
    p50, p99 = (percentile(ttft, 50), percentile(ttft, 99)) if ttft else ((None, False), (None, False))
    decode = [(r.tokens() - 1) / (r.e2e - r.ttft) for r in ok
              if r.ttft is not None and r.e2e and r.tokens() > 1 and r.e2e > r.ttft]
    prompt = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    completion = [r.tokens() for r in ok]
    out = {
        "clients": n, "requests": len(ok), "cut": len(cut), "errors": len(errors),
        "not_sent": level.n_requests - len(level.results), "wall_s": round(wall, 2),
        "gen_tokens": tokens, "gen_tok_s": round(tokens / wall, 1) if wall > 0 else 0.0,
        "ttft_ms_p50": round(p50[0] * 1e3, 1) if ttft else None, "ttft_p50_censored": p50[1],
        "ttft_ms_p99": round(p99[0] * 1e3, 1) if ttft else None, "ttft_p99_censored": p99[1],
        "ttft_censored": sum(1 for _, c in ttft if c),
        "e2e_s_p50": round(statistics.median([r.e2e for r in ok]), 2) if ok else None,
        "decode_tok_s_median": round(statistics.median(decode), 2) if decode else None,
        "prompt_tokens_mean": round(statistics.mean(prompt), 1) if prompt else None,
        "completion_tokens_mean": round(statistics.mean(completion), 1) if completion else None,
        "warmup": {"status": warm.status, "error": warm.error,
                   "ttft_ms": round(warm.ttft * 1e3, 1) if warm.ttft else None},
        "error_samples": sorted({r.error for r in errors})[:3],
    }
    return out


def wait_health(t: Target, seconds: float) -> bool:
    """Polls GET /health until it answers 200 (ferry and llama-server answer 503 while loading)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(t.base + "/health", timeout=5) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass  # not listening yet, or 503 (HTTPError is an OSError)
        time.sleep(0.5)
    return False


def fmt(v, censored: bool = False) -> str:
    return "-" if v is None else (">" if censored else "") + str(v)


def markdown(rows: list[dict], label: str) -> str:
    lines = ["| server | clients | requests | gen tok/s | TTFT p50 ms | TTFT p99 ms | decode tok/s/stream | "
             "prompt tok | gen tok/req | wall s | cut | errors |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [label, r["clients"], r["requests"], r["gen_tok_s"], fmt(r["ttft_ms_p50"], r["ttft_p50_censored"]),
                 fmt(r["ttft_ms_p99"], r["ttft_p99_censored"]), fmt(r["decode_tok_s_median"]),
                 fmt(r["prompt_tokens_mean"]), fmt(r["completion_tokens_mean"]), r["wall_s"], r["cut"], r["errors"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def token_range(text: str) -> tuple[int, int]:
    lo, hi = (int(x) for x in text.split(":"))
    if not 0 <= lo < hi:
        raise argparse.ArgumentTypeError("LO:HI with 0 <= LO < HI")
    return lo, hi


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="the server, http://HOST:PORT")
    ap.add_argument("--levels", default="1,4,16,64", help="numbers of parallel clients, comma-separated")
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--min-requests", type=int, default=8, help="requests per level: max(2 x clients, this)")
    ap.add_argument("--level-seconds", type=float, default=0,
                    help="deadline of a level: no new request after it, open streams cut (0: none)")
    ap.add_argument("--settle-seconds", type=float, default=3,
                    help="pause after a level whose deadline cut requests, while the server cancels them")
    ap.add_argument("--timeout", type=float, default=600, help="socket timeout of one request, seconds")
    ap.add_argument("--warmup-tokens", type=int, default=4, help="max_tokens of each level's warm-up request")
    ap.add_argument("--prompt-mode", choices=["tokens", "text"], default="tokens",
                    help="prompt as token ids (exact length) or as text (length from usage)")
    ap.add_argument("--token-range", type=token_range, default=(100, 1000),
                    help="LO:HI, prompt token ids are drawn from [LO, HI) (inside every vocabulary used)")
    ap.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                    help="do not send ignore_eos (for servers that refuse it)")
    ap.add_argument("--extra", type=json.loads, default={}, help="JSON object merged into every request body")
    ap.add_argument("--model", help="the request's model field (default: none sent)")
    ap.add_argument("--api-key")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--label", default="server", help="the server's name in the table")
    ap.add_argument("--wait-health", type=float, default=0, help="first wait up to this many seconds for /health")
    ap.add_argument("--json", help="write the levels' figures here")
    ap.add_argument("--md", help="write the markdown table here")
    a = ap.parse_args()

    t = Target(a.url)
    if a.wait_health and not wait_health(t, a.wait_health):
        print(f"{a.url}/health did not answer 200 within {a.wait_health:.0f} s", file=sys.stderr)
        return 1
    rows = []
    for n in (int(x) for x in a.levels.split(",")):
        row = run_level(a, t, n)
        rows.append(row)
        print(json.dumps(row), flush=True)
        for e in row["error_samples"]:
            print(f"  error sample: {e}", file=sys.stderr)
    table = markdown(rows, a.label)
    print(table, end="")
    settings = {k: getattr(a, k) for k in ("url", "label", "prompt_tokens", "max_tokens", "min_requests",
                                           "level_seconds", "prompt_mode", "ignore_eos", "extra", "seed")}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"settings": settings, "levels": rows}, f, indent=2)
            f.write("\n")
    if a.md:
        with open(a.md, "w") as f:
            f.write(table)
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
