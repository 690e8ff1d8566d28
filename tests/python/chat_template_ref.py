"""The reference for ferry's Jinja interpreter: Python's jinja2 set up the way Hugging Face transformers renders
chat templates (ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols extension, a
`{% generation %}` tag that renders its body, `raise_exception`, `strftime_now`, and `tojson` as json.dumps with
ensure_ascii=False), the conversations the parity test renders, and where the llama.cpp template files are.

The templates are read at test time from llama-cpp-python's source package (vendor/llama.cpp/models/templates/),
never copied into this repository. find_sdist() looks, in order, at $FERRY_LLAMA_CPP_SDIST and $LLAMA_CPP_SDIST
(an unpacked folder or the .tar.gz), the sdist scripts/setup.sh keeps in .whl/, and /work/sdist; else it downloads
it into .whl/ with `pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36`.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

LLAMA_CPP_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{LLAMA_CPP_VERSION}"
TEMPLATES_DIR = "vendor/llama.cpp/models/templates"
ROOT = Path(__file__).resolve().parents[2]

# The time strftime_now() sees on both sides.
NOW = datetime.datetime(2025, 3, 14, 9, 26, 53)
NOW_TEXT = NOW.strftime("%Y-%m-%d %H:%M:%S")


# ---- the llama.cpp templates ----------------------------------------------------------------------------

def _candidates() -> list[Path]:
    out = []
    for var in ("FERRY_LLAMA_CPP_SDIST", "LLAMA_CPP_SDIST"):
        v = os.environ.get(var, "")
        if v and not v.startswith("llama-cpp-python"):  # setup.sh's default is a pip requirement, not a path
            out.append(Path(v))
    out += [ROOT / ".whl" / f"{SDIST_NAME}.tar.gz", ROOT / ".whl" / SDIST_NAME, Path("/work/sdist") / SDIST_NAME,
            Path("/work/sdist") / f"{SDIST_NAME}.tar.gz"]
    return out


def _download() -> Path | None:
    dest = ROOT / ".whl"
    dest.mkdir(exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q",
                          "--retries", "1", "--timeout", "30",
                          "--no-binary", ":all:", "--no-deps", f"llama-cpp-python=={LLAMA_CPP_VERSION}", "-d",
                          str(dest)], capture_output=True, text=True, timeout=600)
    path = dest / f"{SDIST_NAME}.tar.gz"
    return path if res.returncode == 0 and path.is_file() else None


def find_sdist(download: bool = True) -> Path | None:
    for c in _candidates():
        if c.is_dir() and (c / TEMPLATES_DIR).is_dir():
            return c
        if c.is_file() and c.name.endswith(".tar.gz"):
            return c
    return _download() if download else None


def llama_cpp_templates(sdist: Path) -> dict[str, str]:
    """File name -> template text, for every .jinja file of the source package's models/templates/."""
    out: dict[str, str] = {}
    if sdist.is_dir():
        for f in sorted((sdist / TEMPLATES_DIR).glob("*.jinja")):
            out[f.name] = f.read_text(encoding="utf-8")
        return out
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            parent, _, name = m.name.rpartition("/")
            if m.isfile() and parent.endswith(TEMPLATES_DIR) and name.endswith(".jinja"):
                out[name] = tar.extractfile(m).read().decode("utf-8")
    return dict(sorted(out.items()))


# ---- Hugging Face's environment -------------------------------------------------------------------------

def hf_environment():
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """`{% generation %}...{% endgeneration %}`: Hugging Face marks assistant text with it; renders the body."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class Raised(Exception):
    """The template called raise_exception(message)."""


def reference_render(env, template, case: dict) -> str:
    """Renders `case` ({messages, tools?, add_generation_prompt, bos_token, eos_token, vars?}) with jinja2.
    Raises Raised for raise_exception(), any other exception for other failures."""
    import jinja2

    kwargs = dict(messages=case["messages"], add_generation_prompt=case["add_generation_prompt"],
                  bos_token=case["bos_token"], eos_token=case["eos_token"])
    if case.get("tools") is not None:
        kwargs["tools"] = case["tools"]
    kwargs.update(case.get("vars", {}))
    try:
        return template.render(**kwargs)
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:  # raise_exception's plain TemplateError
            raise Raised(str(e)) from None
        raise


# ---- conversations --------------------------------------------------------------------------------------

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}, {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]},
    },
}]


def _call(id_: str, name: str, args: dict) -> dict:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS: dict[str, dict] = {
    "user": {"messages": [{"role": "user", "content": "Hello!"}]},
    "system_user": {"messages": [{"role": "system", "content": "You are a terse assistant."},
                                 {"role": "user", "content": "What is 2+2?"}]},
    "multi_turn": {"messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."}]},
    "ends_with_assistant": {"messages": [
        {"role": "user", "content": "Name a color."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another one."},
        {"role": "assistant", "content": "Green."}]},
    "unicode_and_markup": {"messages": [
        {"role": "system", "content": "  Réponds en français. 日本語も OK 👍  "},
        {"role": "user", "content": "Quote: \"it's\" {{ not jinja }} {% raw %} <b>bold</b>\n\tindented\n"},
        {"role": "assistant", "content": "D'accord — « ça marche ».\n"},
        {"role": "user", "content": "Ωμέγα ПРИВЕТ\u00a0end"}]},
    "thinking": {"messages": [
        {"role": "user", "content": "Is 7 prime?"},
        {"role": "assistant", "content": "<think>\n7 has no divisors but 1 and 7.\n</think>\n\nYes, 7 is prime."},
        {"role": "user", "content": "And 9?"}]},
    "content_parts": {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe this:"}, {"type": "text", "text": "a cat"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A small feline."}]},
        {"role": "user", "content": "Thanks"}]},
    "tool_call": {"tools": TOOLS, "messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [_call("call00001", "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather",
         "content": "{\"temperature\": 22.5, \"unit\": \"celsius\"}"},
        {"role": "assistant", "content": "It is 22.5 °C in Paris."},
        {"role": "user", "content": "Thanks!"}]},
    "parallel_tool_calls": {"tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Oslo and 3+4?"},
        {"role": "assistant", "content": "", "tool_calls": [
            _call("call00002", "get_weather", {"city": "Oslo", "unit": "celsius"}),
            _call("call00003", "add", {"a": 3, "b": 4.5})]},
        {"role": "tool", "tool_call_id": "call00002", "name": "get_weather", "content": "-3 degrees"},
        {"role": "tool", "tool_call_id": "call00003", "name": "add", "content": "7.5"}]},
    "tools_offered": {"tools": TOOLS, "messages": [{"role": "user", "content": "Add 1 and 2."}]},
    # The same call with content "" instead of null (many templates print content without a null check) and,
    # next, with the arguments as the JSON string OpenAI clients send (ferry then keeps them a string:
    # parse_tool_arguments false).
    "tool_call_empty_content": {"tools": TOOLS, "messages": [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [_call("call00001", "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "22 degrees"}]},
    "tool_call_string_arguments": {"tools": TOOLS, "parse_tool_arguments": False, "messages": [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "call00001", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "22 degrees"},
        {"role": "assistant", "content": "22 degrees in Paris."}]},
}


def cases(bos: str = "<s>", eos: str = "</s>") -> list[tuple[str, dict]]:
    """(name, case) for every conversation with add_generation_prompt true and false."""
    out = []
    for name, conv in CONVERSATIONS.items():
        for gen in (True, False):
            case = dict(conv, add_generation_prompt=gen, bos_token=bos, eos_token=eos)
            out.append((f"{name}/{'gen' if gen else 'nogen'}", case))
    return out


def batch_line(case: dict) -> str:
    line = {k: case[k] for k in ("messages", "add_generation_prompt", "bos_token", "eos_token")}
    if case.get("tools") is not None:
        line["tools"] = case["tools"]
    if case.get("vars"):
        line["vars"] = case["vars"]
    if "parse_tool_arguments" in case:
        line["parse_tool_arguments"] = case["parse_tool_arguments"]
    line["now"] = NOW_TEXT
    return json.dumps(line, ensure_ascii=False)
