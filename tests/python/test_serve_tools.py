"""Tool calling in `ferry serve`, through the official `openai` Python client (and raw server-sent events where
the chunks matter), on the bundled SmolLM2:

- its own template (ChatML without tools) and the Gemma model (no template) refuse tools with one 400 naming the
  model; tool_choice "none" works there (the tools are left out, as OpenAI does);
- with llama.cpp's Qwen2.5 template (--chat-template-file, read at test time from llama-cpp-python's source
  package) a tools request gets text or parsed calls, never a 5xx, and a conversation with an assistant's
  tool_calls and a tool result renders to the same number of prompt tokens as jinja2 + llama.cpp's tokenizer;
- with --test-forced-reply (the reply's tokens chosen in place of sampling) each format's calls (hermes, llama3,
  mistral-nemo) come back as message.tool_calls, streamed and not, the same either way;
- tool_choice "required" or a named function forces a call (hermes and llama3 formats): the real model's reply is
  a call to an allowed tool whose arguments validate, greedy and sampled, whole and streamed; the Mistral
  formats refuse it in one 400;
- tools and tool_choice of the wrong shape get a 400 naming the field.

Needs $FERRY_BUILD/ferry and ferry-serve, models/smollm2-135m-instruct-q4_1.gguf and `openai` (PyPI).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import subprocess
import tempfile

import pytest

openai = pytest.importorskip("openai", reason="the openai client is not installed (scripts/setup.sh test)")

import chat_template_ref as ref  # noqa: E402
from serve_process import ServeProcess  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "smollm2-135m-instruct-q4_1.gguf"
GEMMA = REPO / "models" / "gemma-3-270m-q4_k_m.gguf"


def _sdist():
    # As test_jinja.py: fetched and unpacked once when missing (a fresh clone has none).
    try:
        return ref.find_sdist(download=True)
    except (OSError, subprocess.SubprocessError):
        return None


SDIST = _sdist()


def _template_dir():
    """The source package's models/templates/ folder; from the tarball, its templates in a temporary folder."""
    if SDIST is None:
        return None
    if SDIST.is_dir():
        return SDIST / ref.TEMPLATES_DIR
    out = Path(tempfile.mkdtemp(prefix="ferry-templates-"))
    for name, text in ref.llama_cpp_templates(SDIST).items():
        (out / name).write_text(text, encoding="utf-8")
    return out


TEMPLATE_DIR = _template_dir()

TOOLS = ref.TOOLS
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
# The forced replies: each format's two calls with text before them.
WEATHER_ARGS = '{"city": "Paris", "unit": "celsius"}'
REPLIES = {
    "Qwen-Qwen2.5-7B-Instruct.jinja":
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": ' + WEATHER_ARGS + '}\n</tool_call>\n'
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
    "meta-llama-Llama-3.1-8B-Instruct.jinja":
        '{"name": "get_weather", "parameters": ' + WEATHER_ARGS + '}; {"name": "add", "parameters": {"a": 1, "b": 2}}',
    "mistralai-Mistral-Nemo-Instruct-2407.jinja":
        'Let me check.[TOOL_CALLS][{"name": "get_weather", "arguments": ' + WEATHER_ARGS + ', "id": "abcDEF123"}, '
        '{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "zyx987WVU"}]',
}
CONTENT = {"Qwen-Qwen2.5-7B-Instruct.jinja": "Let me check.", "meta-llama-Llama-3.1-8B-Instruct.jinja": None,
           "mistralai-Mistral-Nemo-Instruct-2407.jinja": "Let me check."}


def start(ferry_bin, model: Path, *args: str) -> ServeProcess:
    if not model.is_file():
        pytest.skip(f"bundled model missing: {model}")
    if not (ferry_bin.parent / "ferry-serve").is_file():
        pytest.skip("ferry-serve not built (needs cpp-httplib)")
    return ServeProcess(ferry_bin, model, "-t", "2", "-c", "2048", "--parallel", "2", *args)


def template(name: str) -> Path:
    if TEMPLATE_DIR is None or not (TEMPLATE_DIR / name).is_file():
        pytest.skip("llama-cpp-python's source package (its models/templates/) is not unpacked here")
    return TEMPLATE_DIR / name


def client_of(server: ServeProcess):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def plain(ferry_bin):
    s = start(ferry_bin, MODEL)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def qwen(ferry_bin):
    s = start(ferry_bin, MODEL, "--chat-template-file", str(template("Qwen-Qwen2.5-7B-Instruct.jinja")))
    yield s
    s.stop()


def sse_chunks(server: ServeProcess, body: dict) -> list[dict]:
    """The data of every server-sent event of a streamed request, [DONE] left out."""
    req = urllib.request.Request(server.base_url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        text = r.read().decode()
    return [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ") and line != "data: [DONE]"]


def test_a_template_without_tools_refuses_them_in_one_400(plain, ferry_bin):
    status, body = plain.request("POST", "/v1/chat/completions", {"messages": USER, "tools": TOOLS})
    assert status == 400, body
    msg = body["error"]["message"]
    assert "smollm2-135m-instruct-q4_1" in msg and "does not render tools" in msg, msg
    assert body["error"]["param"] == "tools"
    # tool_choice "none": the tools are left out and the request is an ordinary chat.
    status, body = plain.request("POST", "/v1/chat/completions",
                                 {"messages": USER, "tools": TOOLS, "tool_choice": "none", "max_tokens": 4})
    assert status == 200, body
    assert "tool_calls" not in body["choices"][0]["message"]
    # Gemma without a template in the file: its turn format has no tools either.
    g = start(ferry_bin, GEMMA)
    try:
        status, body = g.request("POST", "/v1/chat/completions", {"messages": USER, "tools": TOOLS})
        assert status == 400 and "gemma-3-270m-q4_k_m" in body["error"]["message"], body
    finally:
        g.stop()


@pytest.mark.parametrize("body, param", [
    ({"tools": {"type": "function"}}, "tools"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]}, "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "description": 3}}]}, "tools[0].function.description"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "mul"}}}, "tool_choice.function.name"),
    ({"tools": TOOLS, "tool_choice": {"function": {"name": "add"}}}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
])
def test_bad_tools_get_a_400_naming_the_field(qwen, body, param):
    status, out = qwen.request("POST", "/v1/chat/completions", {"messages": USER, **body})
    assert status == 400, out
    assert out["error"]["param"] == param, out


def check_call(tc) -> None:
    """A call of TOOLS whose arguments validate against its parameters (the subset TOOLS uses)."""
    tool = next(t["function"] for t in TOOLS if t["function"]["name"] == tc.function.name)
    args = json.loads(tc.function.arguments)
    props = tool["parameters"]["properties"]
    assert set(tool["parameters"]["required"]) <= set(args) <= set(props), args
    for k, v in args.items():
        want = props[k]
        assert isinstance(v, str) if want["type"] == "string" else isinstance(v, (int, float)), (k, v)
        assert v in want.get("enum", [v]), (k, v)


@pytest.mark.parametrize("name", ["Qwen-Qwen2.5-7B-Instruct.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja"])
def test_tool_choice_required_and_named_force_a_call(ferry_bin, name):
    s = start(ferry_bin, MODEL, "--chat-template-file", str(template(name)))
    try:
        c = client_of(s)
        for kw in (dict(temperature=0), dict(temperature=1.0, seed=3)):
            r = c.chat.completions.create(model="m", messages=USER, tools=TOOLS, tool_choice="required",
                                          max_tokens=120, **kw)
            choice = r.choices[0]
            assert choice.finish_reason == "tool_calls", choice.message
            assert choice.message.tool_calls
            for tc in choice.message.tool_calls:
                check_call(tc)
            streamed = []
            with c.chat.completions.stream(model="m", messages=USER, tools=TOOLS, tool_choice="required",
                                           max_tokens=120, **kw) as st:
                for _ in st:
                    pass
                final = st.get_final_completion().choices[0]
            assert final.finish_reason == "tool_calls"
            streamed = [(tc.function.name, tc.function.arguments) for tc in final.message.tool_calls]
            assert streamed == [(tc.function.name, tc.function.arguments) for tc in choice.message.tool_calls]
        # A named function: a call to that one; parallel_tool_calls false: one call.
        r = c.chat.completions.create(model="m", messages=USER, tools=TOOLS, max_tokens=120, temperature=0,
                                      tool_choice={"type": "function", "function": {"name": "add"}},
                                      parallel_tool_calls=False)
        calls = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1 and calls[0].function.name == "add"
        check_call(calls[0])
    finally:
        s.stop()


def test_mistral_formats_refuse_a_forced_call(ferry_bin):
    s = start(ferry_bin, MODEL, "--chat-template-file", str(template("mistralai-Mistral-Nemo-Instruct-2407.jinja")))
    try:
        status, out = s.request("POST", "/v1/chat/completions", {"messages": USER, "tools": TOOLS, "tool_choice": "required"})
        assert status == 400 and out["error"]["param"] == "tool_choice" and out["error"]["code"] == "unsupported", out
        assert "not supported" in out["error"]["message"], out
    finally:
        s.stop()


def test_the_real_model_answers_a_tools_request_with_text_or_calls(qwen):
    c = client_of(qwen)
    for stream in (False, True):
        kw = dict(model="m", messages=USER, tools=TOOLS, max_tokens=48, temperature=0)
        if stream:  # (the client's stream helper refuses finish_reason "length": the chunks by hand)
            content, names, finish = "", [], None
            for ch in c.chat.completions.create(stream=True, **kw):
                d = ch.choices[0].delta
                content += d.content or ""
                names += [tc.function.name for tc in d.tool_calls or [] if tc.function and tc.function.name]
                finish = ch.choices[0].finish_reason or finish
        else:
            choice = c.chat.completions.create(**kw).choices[0]
            content, finish = choice.message.content, choice.finish_reason
            names = [tc.function.name for tc in choice.message.tool_calls or []]
        assert finish in ("stop", "length", "tool_calls")
        if finish == "tool_calls":
            assert names and all(names)
        else:
            assert content is not None and not names


def test_a_tool_round_trip_renders_as_jinja2_does(qwen, llama_cpp):
    """An assistant turn with tool_calls and the tool's result: the prompt the server builds has as many tokens as
    jinja2's rendering of the same conversation tokenized by llama.cpp (the tools, the call and its result are
    all in it)."""
    messages = USER + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": WEATHER_ARGS}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "22 degrees, sunny"},
    ]
    r = client_of(qwen).chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=1)
    env = ref.hf_environment()
    tmpl = env.from_string(template("Qwen-Qwen2.5-7B-Instruct.jinja").read_text())
    ref_messages = json.loads(json.dumps(messages))
    ref_messages[1]["tool_calls"][0]["function"]["arguments"] = json.loads(WEATHER_ARGS)  # as Hugging Face passes it
    text = ref.reference_render(env, tmpl, {"messages": ref_messages, "tools": TOOLS, "add_generation_prompt": True,
                                            "bos_token": "", "eos_token": ""})
    assert "<tool_response>\n22 degrees, sunny\n</tool_response>" in text and '"get_weather"' in text
    llm = llama_cpp.Llama(model_path=str(MODEL), vocab_only=True, verbose=False)
    want = len(llm.tokenize(text.encode(), add_bos=False, special=True))
    assert r.usage.prompt_tokens == want


@pytest.mark.parametrize("name", sorted(REPLIES))
def test_forced_replies_come_back_as_tool_calls(ferry_bin, name):
    s = start(ferry_bin, MODEL, "--chat-template-file", str(template(name)), "--test-forced-reply", REPLIES[name])
    try:
        c = client_of(s)
        r = c.chat.completions.create(model="m", messages=USER, tools=TOOLS)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == CONTENT[name]
        calls = choice.message.tool_calls
        assert [(tc.type, tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [
            ("function", "get_weather", {"city": "Paris", "unit": "celsius"}), ("function", "add", {"a": 1, "b": 2})]
        assert calls[0].function.arguments == '{"city":"Paris","unit":"celsius"}'  # the model's key order
        if "Nemo" in name:
            assert [tc.id for tc in calls] == ["abcDEF123", "zyx987WVU"]  # the model's ids: its template needs them
        else:
            assert all(tc.id.startswith("call_") and len(tc.id) == 29 for tc in calls)
            assert calls[0].id != calls[1].id

        # Streamed: text deltas, then each call as an opening chunk (id, type, name) and an arguments chunk, then
        # finish_reason "tool_calls"; the client's accumulated message is the one above (ids aside).
        chunks = sse_chunks(s, {"messages": USER, "tools": TOOLS, "stream": True})
        deltas = [ch["choices"][0]["delta"] for ch in chunks if ch["choices"]]
        text = "".join(d.get("content") or "" for d in deltas)
        assert text == (CONTENT[name] or "")
        tc_deltas = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
        assert [(t["index"], "id" in t, t["function"].get("name")) for t in tc_deltas] == [
            (0, True, "get_weather"), (0, False, None), (1, True, "add"), (1, False, None)]
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
        with c.chat.completions.stream(model="m", messages=USER, tools=TOOLS) as st:
            for _ in st:
                pass
            final = st.get_final_completion().choices[0]
        assert final.finish_reason == "tool_calls"
        assert final.message.content in (CONTENT[name], None, "")
        assert [(tc.function.name, tc.function.arguments) for tc in final.message.tool_calls] == [
            (tc.function.name, tc.function.arguments) for tc in calls]

        # parallel_tool_calls false: the first call only.
        r = c.chat.completions.create(model="m", messages=USER, tools=TOOLS, parallel_tool_calls=False)
        assert [tc.function.name for tc in r.choices[0].message.tool_calls] == ["get_weather"]
        # tool_choice "none": no tools in the prompt and the reply is text as the model wrote it.
        r = c.chat.completions.create(model="m", messages=USER, tools=TOOLS, tool_choice="none")
        assert not r.choices[0].message.tool_calls and r.choices[0].finish_reason == "length"
        assert "get_weather" in r.choices[0].message.content
    finally:
        s.stop()
