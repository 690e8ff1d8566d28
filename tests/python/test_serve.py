"""`ferry serve` through the official `openai` Python client (and raw HTTP where the bytes matter), on the
bundled SmolLM2 on the CPU: chat and text completions, streamed and not, stop sequences, seeded sampling,
usage counts, logprobs, JSON mode and structured outputs, concurrent clients getting the tokens they get alone (greedy), a streaming client
that disconnects (its request is cancelled), every kind of bad input (a 4xx JSON error in OpenAI's shape,
and the server keeps serving), the API key, a full queue (429) and /metrics.

Needs $FERRY_BUILD/ferry and ferry-serve, models/smollm2-135m-instruct-q4_1.gguf and `openai` (PyPI).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

openai = pytest.importorskip("openai", reason="the openai client is not installed (scripts/setup.sh test)")

from serve_process import ServeProcess  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "smollm2-135m-instruct-q4_1.gguf"
KEY = "test-key-123"
CTX_PER_REQUEST = 512
PROMPTS = ["The capital of France is", "Write a haiku about the sea.", "1, 2, 3, 4,", "def fib(n):"]


@pytest.fixture(scope="module")
def server(ferry_bin):
    if not MODEL.is_file():
        pytest.skip(f"bundled model missing: {MODEL}")
    if not (ferry_bin.parent / "ferry-serve").is_file():
        pytest.skip("ferry-serve not built (needs cpp-httplib)")
    s = ServeProcess(ferry_bin, MODEL, "-t", "2", "-c", str(4 * CTX_PER_REQUEST), "--parallel", "4",
                     api_key=KEY)
    yield s
    s.stop()
    assert s.proc.returncode == 0, "".join(s.stderr_lines)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def chat(client, content: str, **kw):
    return client.chat.completions.create(model="smol", messages=[{"role": "user", "content": content}], **kw)


def test_health_models_and_metrics(server, client):
    assert server.request("GET", "/health", key=None) == (200, {"status": "ok"})
    models = client.models.list()
    assert [m.id for m in models.data] == ["smollm2-135m-instruct-q4_1"]
    m = server.metrics()
    for name in ("ferry_requests_running", "ferry_requests_queued", "ferry_generated_tokens_total",
                 "ferry_step_seconds_total", "ferry_resident_memory_bytes", "ferry_vram_peak_bytes"):
        assert name in m, name
    assert m["ferry_kv_cells"] == 4 * CTX_PER_REQUEST
    assert m["ferry_resident_memory_bytes"] > 50e6


def test_chat_greedy_usage_and_stream(client):
    r = chat(client, "What is the capital of France?", max_tokens=12, temperature=0)
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content
    assert c.finish_reason == "length"
    assert r.usage.completion_tokens == 12
    assert r.usage.prompt_tokens > 10
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12
    # The same request streamed: the same text, the role first, the finish reason and usage at the end.
    chunks = list(chat(client, "What is the capital of France?", max_tokens=12, temperature=0, stream=True,
                       stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == c.message.content
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finish == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert chunks[-1].usage.prompt_tokens == r.usage.prompt_tokens


def test_completions_usage_counts_prompt_tokens(client, ferry_bin):
    import subprocess

    prompt = "Once upon a time"
    ids = subprocess.run([str(ferry_bin), "tokenize", "-m", str(MODEL), "-p", prompt], capture_output=True,
                         text=True, check=True).stdout.split()
    r = client.completions.create(model="smol", prompt=prompt, max_tokens=5, temperature=0)
    assert r.usage.prompt_tokens == len(ids)
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model="smol", prompt=prompt, max_tokens=5, temperature=0, stream=True) if ch.choices)
    assert streamed == r.choices[0].text
    # Token ids as the prompt give the same completion.
    r2 = client.completions.create(model="smol", prompt=[int(i) for i in ids], max_tokens=5, temperature=0)
    assert r2.choices[0].text == r.choices[0].text


def test_stop_sequences(client):
    full = client.completions.create(model="smol", prompt="1, 2, 3, 4,", max_tokens=16, temperature=0)
    text = full.choices[0].text
    # A stop string from the middle of the greedy text: the reply ends right before it.
    words = text.split(" ")
    assert len(words) > 3, text
    stop = " " + words[3]
    want = text[: text.index(stop)]
    r = client.completions.create(model="smol", prompt="1, 2, 3, 4,", max_tokens=16, temperature=0, stop=[stop, "@@@"])
    assert r.choices[0].text == want and r.choices[0].finish_reason == "stop"
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model="smol", prompt="1, 2, 3, 4,", max_tokens=16, temperature=0, stop=stop, stream=True) if ch.choices)
    assert streamed == want


def test_seeded_sampling_is_reproducible(client):
    kw = dict(max_tokens=12, temperature=1.0, top_p=1.0)
    a = chat(client, "Tell me a story.", seed=123, **kw).choices[0].message.content
    b = chat(client, "Tell me a story.", seed=123, **kw).choices[0].message.content
    assert a == b
    others = {chat(client, "Tell me a story.", seed=s, **kw).choices[0].message.content for s in (1, 2, 3)}
    assert others - {a}, "three other seeds all gave the same text"


def test_logprobs(client):
    r = chat(client, "Say hello.", max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert t.top_logprobs[0].token == t.token  # greedy picks the most likely token
        assert abs(t.top_logprobs[0].logprob - t.logprob) < 1e-5


def test_concurrent_clients_get_the_greedy_tokens_they_get_alone(client):
    def run(p):
        r = client.completions.create(model="smol", prompt=p, max_tokens=20, temperature=0, logprobs=0)
        return r.choices[0].text, r.choices[0].logprobs.tokens

    alone = [run(p) for p in PROMPTS]
    with ThreadPoolExecutor(len(PROMPTS)) as ex:
        together = list(ex.map(run, PROMPTS))
    assert together == alone


def test_streaming_client_that_disconnects_is_cancelled(server):
    before = server.metrics()
    s = socket.create_connection(("127.0.0.1", server.port))
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 400, "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    got = b""
    while got.count(b"data:") < 2:
        got += s.recv(4096)
    s.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = server.metrics()
        if m['ferry_requests_total{finish="cancelled"}'] > before['ferry_requests_total{finish="cancelled"}']:
            break
        time.sleep(0.1)
    assert m['ferry_requests_total{finish="cancelled"}'] == before['ferry_requests_total{finish="cancelled"}'] + 1
    assert m["ferry_requests_running"] == 0
    assert m["ferry_generated_tokens_total"] - before["ferry_generated_tokens_total"] < 400


def test_json_mode_replies_with_one_object(client):
    # response_format json_object: the reply is one JSON object and ends when it closes ("stop"), greedy
    # and sampled, whole and streamed.
    ask = "Give the name and age of a person as JSON."
    for kw in (dict(temperature=0), dict(temperature=1.0, seed=7)):
        r = chat(client, ask, max_tokens=200, response_format={"type": "json_object"}, **kw)
        c = r.choices[0]
        assert c.finish_reason == "stop", c.message.content
        assert isinstance(json.loads(c.message.content), dict), c.message.content
        streamed = "".join(ch.choices[0].delta.content or "" for ch in chat(
            client, ask, max_tokens=200, response_format={"type": "json_object"}, stream=True, **kw) if ch.choices)
        assert streamed == c.message.content
    # Cut by max_tokens: "length", the text an unfinished object.
    r = chat(client, ask, max_tokens=3, temperature=0, response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content.lstrip().startswith("{")


def test_structured_output_follows_the_schema(client):
    # response_format json_schema, from a pydantic model (pydantic comes with the openai client): $defs / $ref,
    # an enum, an integer in a range, a string of bounded length, an array of objects with maxItems (the 135M
    # model would list pets forever); the reply validates, whole and streamed.
    from typing import Literal

    import pydantic

    class Pet(pydantic.BaseModel):
        kind: Literal["cat", "dog"]
        age: int

    class Person(pydantic.BaseModel):
        name: str = pydantic.Field(min_length=1, max_length=40)
        age: int = pydantic.Field(ge=0, le=120)
        pets: list[Pet] = pydantic.Field(min_length=1, max_length=2)

    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": Person.model_json_schema()}}
    ask = "Describe a person who has two pets, as JSON."
    for kw in (dict(temperature=0), dict(temperature=1.0, seed=11)):
        r = chat(client, ask, max_tokens=300, response_format=fmt, **kw)
        c = r.choices[0]
        assert c.finish_reason == "stop", c.message.content
        Person.model_validate_json(c.message.content)
        streamed = "".join(ch.choices[0].delta.content or "" for ch in chat(
            client, ask, max_tokens=300, response_format=fmt, stream=True, **kw) if ch.choices)
        assert streamed == c.message.content


def test_grammar_constrains_the_reply(client):
    # llama-server's `grammar` field (GBNF) on both endpoints: the reply is a text of the grammar and ends
    # with "stop" once nothing more may follow, greedy and sampled, whole and streamed.
    grammar = 'root ::= ("yes" | "no" | "maybe") ", because " [a-z ]{3,40} "."'
    for kw in (dict(temperature=0), dict(temperature=1.0, seed=5)):
        r = chat(client, "Is the sky blue? Answer yes or no and why.", max_tokens=60, extra_body={"grammar": grammar}, **kw)
        c = r.choices[0]
        assert c.finish_reason == "stop", c.message.content
        assert re.fullmatch(r"(yes|no|maybe), because [a-z ]{3,40}\.", c.message.content), c.message.content
        streamed = "".join(ch.choices[0].delta.content or "" for ch in chat(
            client, "Is the sky blue? Answer yes or no and why.", max_tokens=60, extra_body={"grammar": grammar},
            stream=True, **kw) if ch.choices)
        assert streamed == c.message.content
    r = client.completions.create(model="m", prompt="Count: 1, 2,", max_tokens=20, temperature=0,
                                  extra_body={"grammar": 'root ::= (" " [0-9]+ ","){3}'})
    assert r.choices[0].finish_reason == "stop"
    assert re.fullmatch(r"( [0-9]+,){3}", r.choices[0].text), r.choices[0].text


LONG = "word " * 3000  # far more tokens than one request's context

# (endpoint, body, what the error message or param names)
BAD = [
    ("chat", '{"messages": [', "not valid JSON"),
    ("chat", "[1, 2]", "JSON object"),
    ("chat", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', "UTF-8"),
    ("completions", b'{"prompt": "caf\xe9"}', "UTF-8"),
    ("chat", {"messages": "hello"}, "messages"),
    ("chat", {"messages": []}, "messages"),
    ("chat", {"messages": [{"content": "hi"}]}, "messages[0].role"),
    ("chat", {"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ("chat", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("chat", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content[0]"),
    ("chat", {"messages": [{"role": "user", "content": "hi", "colour": "red"}]}, "messages[0].colour"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "10"}, "max_tokens"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}, "max_tokens"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2.5}, "max_tokens"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, "temperature"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "temperature": 7}, "temperature"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, "stream"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "stop": 5}, "stop"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "seed": 1.5}, "seed"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema"}},
     "response_format.json_schema"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema",
     "json_schema": {"name": "x", "schema": {"type": "string"}}}}, "top level must be an object"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, "tools"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "grammar": "root ::= x"}, "never defined"),
    ("completions", {"prompt": "hi", "grammar": ["root ::= \"a\""]}, "grammar"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, "top_logprobs"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "frobnicate": True}, "frobnicate"),
    ("chat", {"messages": [{"role": "user", "content": LONG}]}, "context_length_exceeded"),
    ("completions", {"prompt": LONG}, "context_length_exceeded"),
    ("completions", {}, "prompt"),
    ("completions", {"prompt": ["a", "b"]}, "prompt"),
    ("completions", {"prompt": [1, 2, 999999]}, "vocabulary"),
    ("completions", {"prompt": "hi", "echo": True}, "echo"),
    ("completions", {"prompt": "hi", "messages": []}, "messages"),
]


@pytest.mark.parametrize("endpoint,body,names", BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_bad_input_gets_a_json_4xx(server, endpoint, body, names):
    status, err = server.request("POST", f"/v1/{'chat/completions' if endpoint == 'chat' else 'completions'}", body)
    assert status == 400, err
    assert set(err) == {"error"} and set(err["error"]) == {"message", "type", "param", "code"}, err
    e = err["error"]
    assert e["type"] == "invalid_request_error" and e["message"]
    assert names in f"{e['message']} {e['param']} {e['code']}", e


def test_bad_input_through_the_client_and_the_server_keeps_serving(server, client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="smol", messages=[], max_tokens=4)
    assert info.value.status_code == 400 and "messages" in str(info.value)
    status, err = server.request("GET", "/v1/nothing-here")
    assert status == 404 and err["error"]["type"] == "not_found_error"
    # Still serving.
    assert chat(client, "Hi", max_tokens=3, temperature=0).usage.completion_tokens == 3
    assert server.request("GET", "/health") == (200, {"status": "ok"})


def test_huge_max_tokens_is_clamped_to_the_context(server):
    # A prompt near the context limit, so the clamp leaves a few tokens of room.
    prompt = "hello " * 480
    status, r = server.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 1})
    assert status == 200, r
    n_prompt = r["usage"]["prompt_tokens"]
    assert CTX_PER_REQUEST - 40 < n_prompt < CTX_PER_REQUEST, n_prompt
    status, r = server.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 10**15, "temperature": 0,
                                                           "ignore_eos": True})
    assert status == 200, r
    assert r["usage"]["completion_tokens"] == CTX_PER_REQUEST - n_prompt
    assert r["choices"][0]["finish_reason"] == "length"


def test_api_key(server):
    for key in (None, "wrong-key"):
        status, err = server.request("POST", "/v1/chat/completions",
                                     {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, key=key)
        assert status == 401, err
        assert err["error"]["type"] == "authentication_error" and err["error"]["code"] == "invalid_api_key"
    assert server.request("GET", "/v1/models", key="nope")[0] == 401
    assert server.request("GET", "/health", key=None)[0] == 200
    bad = openai.OpenAI(base_url=server.base_url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_full_queue_gets_429(ferry_bin):
    if not MODEL.is_file():
        pytest.skip(f"bundled model missing: {MODEL}")
    s = ServeProcess(ferry_bin, MODEL, "-t", "1", "-c", "1024", "--parallel", "1", "--queue", "1")
    try:
        c = openai.OpenAI(base_url=s.base_url + "/v1", api_key="none", max_retries=0, timeout=120)
        running = c.completions.create(model="m", prompt="Once upon a time", max_tokens=900, stream=True)
        next(iter(running))  # it runs
        waiting = {}
        t = threading.Thread(target=lambda: waiting.setdefault("r", c.completions.create(
            model="m", prompt="Hi", max_tokens=2, temperature=0)))
        t.start()
        deadline = time.monotonic() + 10
        while s.metrics()["ferry_requests_queued"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(openai.RateLimitError) as info:
            c.completions.create(model="m", prompt="Hi", max_tokens=2)
        assert info.value.status_code == 429
        running.response.close()  # the running stream goes away: its sequence is freed
        t.join(timeout=60)
        assert waiting["r"].usage.completion_tokens == 2
        assert s.metrics()["ferry_requests_rejected_total"] == 1
    finally:
        s.stop()
    assert s.proc.returncode == 0


def test_health_says_loading_until_the_model_is_open_and_a_bad_model_is_one_error_line(ferry_bin, tmp_path):
    # The "model" is a FIFO: opening it blocks until a writer comes, so the server sits in loading.
    import os
    import subprocess

    if not (ferry_bin.parent / "ferry-serve").is_file():
        pytest.skip("ferry-serve not built (needs cpp-httplib)")
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    p = subprocess.Popen([str(ferry_bin), "serve", "-m", str(fifo), "--port", "0"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()
        port = int(line.split("127.0.0.1:")[1].split()[0])
        s = ServeProcess.__new__(ServeProcess)  # only its request helper
        s.port, s.api_key = port, None
        for path in ("/health", "/v1/models"):
            status, err = s.request("GET", path)
            assert status == 503 and err["error"]["type"] == "unavailable_error", err
        status, err = s.request("POST", "/v1/completions", {"prompt": "hi"})
        assert status == 503, err
        with open(fifo, "wb"):
            pass  # an empty file: the load fails
        rest = p.stderr.read()
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1
    lines = [l for l in rest.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), rest
