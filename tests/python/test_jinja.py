"""Parity of ferry's Jinja interpreter (src/text/jinja/, through `ferry template --batch`) with Python's jinja2 in
Hugging Face's chat-template environment (chat_template_ref.py): every template of llama-cpp-python's source
package (vendor/llama.cpp/models/templates/, read at test time), the bundled models' templates and `ferry synth`'s,
each on every conversation of chat_template_ref.CONVERSATIONS with add_generation_prompt on and off.

A case agrees when both render the same text, when both refuse through raise_exception() with the same message,
or when both fail otherwise. A case jinja2 itself cannot render while ferry can (its sandbox refuses list.append,
or the template uses llama.cpp's from_json filter, which jinja2 lacks) is counted as skipped, with the reason.
test_parity_summary prints the counts (run pytest with -s to see them); FERRY_JINJA_REPORT=PATH also writes them
as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import chat_template_ref as ref
import ferry_ref

jinja2 = pytest.importorskip("jinja2")

RESULTS: dict[str, dict[str, str]] = {}  # template -> case -> outcome
FAILURES: dict[str, dict[str, list[str]]] = {}  # template -> case -> [jinja2's error, ferry's] where both fail
SKIPPED_TEMPLATES: dict[str, str] = {}   # template -> why jinja2 cannot render it at all


def _sdist():
    try:
        return ref.find_sdist(download=True)
    except (OSError, subprocess.SubprocessError):
        return None


SDIST = _sdist()
LLAMA_TEMPLATES = ref.llama_cpp_templates(SDIST) if SDIST else {}


def run_batch(args: list[str], cases: list[tuple[str, dict]], tmp_path: Path) -> list[dict]:
    batch = tmp_path / "cases.jsonl"
    batch.write_text("".join(ref.batch_line(c) + "\n" for _, c in cases), encoding="utf-8")
    res = ferry_ref.run_ferry(["template", *args, "--batch", str(batch)], timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == len(cases), res.stdout[-2000:]
    return [json.loads(line) for line in lines]


def first_difference(want: str, got: str) -> str:
    i = next((k for k, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    lo = max(0, i - 60)
    return (f"first difference at {i} (lengths {len(want)} / {len(got)}):\n  jinja2: {want[lo:i + 60]!r}\n"
            f"  ferry:  {got[lo:i + 60]!r}")


def compare(name: str, source: str, ferry_args: list[str], tmp_path: Path, bos: str, eos: str) -> list[str]:
    """Renders every case with both; returns the disagreements (and records every outcome)."""
    env = ref.hf_environment()
    cases = ref.cases(bos, eos)
    try:
        template = env.from_string(source)
    except jinja2.TemplateError as e:
        SKIPPED_TEMPLATES[name] = f"jinja2 cannot compile it: {type(e).__name__}: {e}"
        pytest.skip(SKIPPED_TEMPLATES[name])
    ours = run_batch(ferry_args, cases, tmp_path)
    outcomes: dict[str, str] = {}
    problems = []
    for (case_name, case), got in zip(cases, ours):
        try:
            want, want_err = ref.reference_render(env, template, case), None
        except ref.Raised as e:
            want, want_err = None, ("raise", str(e))
        except Exception as e:  # noqa: BLE001 - any jinja2 / Python failure is an outcome here
            want, want_err = None, ("error", f"{type(e).__name__}: {e}")
        if want is not None:
            if "text" in got and got["text"] == want:
                outcomes[case_name] = "identical"
            elif "text" in got:
                outcomes[case_name] = "DIFFERENT"
                problems.append(f"{case_name}: texts differ\n{first_difference(want, got['text'])}")
            else:
                outcomes[case_name] = "FERRY_ERROR"
                problems.append(f"{case_name}: jinja2 renders, ferry fails: {got['error']}")
        elif want_err[0] == "raise":
            expected = f"chat template: {want_err[1]}"
            if got.get("error") == expected:
                outcomes[case_name] = "both raise"
            else:
                outcomes[case_name] = "DIFFERENT_RAISE"
                problems.append(f"{case_name}: jinja2 raises {want_err[1]!r}, ferry gives {got}")
        elif "error" in got:
            outcomes[case_name] = "both fail"
            FAILURES.setdefault(name, {})[case_name] = [want_err[1], got["error"]]
        else:
            outcomes[case_name] = f"skipped: jinja2 cannot render it ({want_err[1][:120]})"
    RESULTS[name] = outcomes
    return problems


@pytest.mark.skipif(not LLAMA_TEMPLATES, reason="llama-cpp-python's source package not found nor downloadable "
                                                "(set FERRY_LLAMA_CPP_SDIST)")
@pytest.mark.parametrize("name", sorted(LLAMA_TEMPLATES) or ["none"])
def test_llama_cpp_template(ferry_bin, tmp_path, name):
    path = tmp_path / name
    path.write_text(LLAMA_TEMPLATES[name], encoding="utf-8")
    problems = compare(name, LLAMA_TEMPLATES[name], ["--template", str(path)], tmp_path, "<s>", "</s>")
    assert not problems, "\n\n".join(problems)


def model_template(model: Path) -> str | None:
    res = ferry_ref.run_ferry(["template", "-m", str(model), "--print-template"])
    if res.returncode != 0:
        assert "has no chat template" in res.stderr, res.stderr
        return None
    return res.stdout


BUNDLED = sorted((ref.ROOT / "models").glob("*.gguf"))


@pytest.mark.parametrize("model", BUNDLED, ids=[m.name for m in BUNDLED])
def test_bundled_model_template(ferry_bin, tmp_path, model):
    source = model_template(model)
    if source is None:  # Gemma-3-270M's file has none: --chat uses its architecture's turns (test_cli_checks.py)
        assert "gemma" in model.name, f"{model.name} has no tokenizer.chat_template"
        return
    problems = compare(f"models/{model.name}", source, ["-m", str(model), "--raw"], tmp_path, "<s>", "</s>")
    assert not problems, "\n\n".join(problems)


SYNTH_PRESETS = ["tiny-llama", "tiny-qwen3", "tiny-gemma3", "tiny-gpt-oss"]  # the template families synth writes


@pytest.mark.parametrize("preset", SYNTH_PRESETS)
def test_synth_template(ferry_bin, tmp_path, preset):
    path = tmp_path / f"{preset}.gguf"
    res = ferry_ref.run_ferry(["synth", "--preset", preset, "--type", "Q8_0", "-o", str(path)])
    assert res.returncode == 0, res.stderr
    source = model_template(path)
    assert source, f"ferry synth --preset {preset} wrote no chat template"
    problems = compare(f"synth/{preset}", source, ["-m", str(path), "--raw"], tmp_path, "<|begin_of_text|>", "<|eot_id|>")
    assert not problems, "\n\n".join(problems)


def test_parity_summary():
    """Prints N of M template x conversation cases identical (run after the tests above)."""
    if not RESULTS:
        pytest.skip("no template was compared in this session")
    counts = Counter()
    skipped_reasons = Counter()
    for outcomes in RESULTS.values():
        for o in outcomes.values():
            kind = o.split(":")[0] if o.startswith("skipped") else o
            counts[kind] += 1
            if o.startswith("skipped"):
                skipped_reasons[o] += 1
    total = sum(counts.values())
    agree = counts["identical"] + counts["both raise"] + counts["both fail"]
    lines = [f"jinja parity: {counts['identical']} of {total} cases identical text, {counts['both raise']} both "
             f"raise the same raise_exception, {counts['both fail']} both fail, {counts['skipped']} skipped "
             f"(jinja2 cannot render); {len(RESULTS)} templates compared, {len(SKIPPED_TEMPLATES)} skipped whole"]
    for name, why in sorted(SKIPPED_TEMPLATES.items()):
        lines.append(f"  skipped template {name}: {why}")
    for why, n in skipped_reasons.most_common():
        lines.append(f"  {n} x {why}")
    print("\n" + "\n".join(lines))
    if os.environ.get("FERRY_JINJA_REPORT"):
        Path(os.environ["FERRY_JINJA_REPORT"]).write_text(json.dumps(
            {"counts": counts, "templates": RESULTS, "skipped_templates": SKIPPED_TEMPLATES,
             "both_fail": FAILURES}, indent=1))
    assert agree + counts["skipped"] == total, counts


# ---- one construct at a time ------------------------------------------------------------------------------

import jinja_snippets  # noqa: E402


@pytest.mark.parametrize("index", range(len(jinja_snippets.SNIPPETS)))
def test_snippet(ferry_bin, tmp_path, index):
    source = jinja_snippets.SNIPPETS[index]
    path = tmp_path / "snippet.jinja"
    path.write_text(source, encoding="utf-8")
    case = {"messages": [], "add_generation_prompt": False, "bos_token": "<s>", "eos_token": "</s>",
            "vars": jinja_snippets.CONTEXT}
    env = ref.hf_environment()
    try:
        want, want_err = ref.reference_render(env, env.from_string(source), case), None
    except ref.Raised as e:
        want, want_err = None, f"chat template: {e}"
    except Exception as e:  # noqa: BLE001
        want, want_err = None, f"{type(e).__name__}: {e}"
    batch = tmp_path / "case.jsonl"
    batch.write_text(ref.batch_line(case) + "\n", encoding="utf-8")
    res = ferry_ref.run_ferry(["template", "--template", str(path), "--batch", str(batch)], timeout=60)
    if res.returncode != 0:  # the template does not parse: jinja2 must refuse it too
        assert want is None, f"ferry refuses what jinja2 renders as {want!r}: {res.stderr}"
        return
    got = json.loads(res.stdout)
    if want is not None:
        assert got.get("text") == want, f"{source!r}\n{first_difference(want, got.get('text', ''))}\n{got}"
    elif want_err.startswith("chat template: "):
        assert got.get("error") == want_err
    else:
        assert "error" in got, f"jinja2 fails ({want_err}) but ferry renders {got.get('text')!r}"


# ---- the `ferry template` command line --------------------------------------------------------------------

SMOL = ref.ROOT / "models" / "smollm2-135m-instruct-q4_1.gguf"


def _one_error_line(res, code: int) -> str:
    assert res.returncode == code, (res.returncode, res.stderr)
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    return lines[0]


def test_cli_prompt_system_and_json(ferry_bin, tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                    "{% if add_generation_prompt %}<assistant>{% endif %}")
    res = ferry_ref.run_ferry(["template", "--template", str(path), "-p", "Hi", "--system", "Sys"])
    assert res.returncode == 0 and res.stdout == "<system>Sys<user>Hi<assistant>", res
    res = ferry_ref.run_ferry(["template", "--template", str(path), "--messages", '[{"role": "user", "content": "é"}]',
                               "--no-generation-prompt", "--json"])
    assert res.returncode == 0 and json.loads(res.stdout) == {"text": "<user>é"}, res
    msgs = tmp_path / "m.json"
    msgs.write_text('[{"role": "user", "content": "from file"}]')
    res = ferry_ref.run_ferry(["template", "--template", str(path), "--messages", f"@{msgs}"])
    assert res.stdout == "<user>from file<assistant>", res


def test_cli_errors(ferry_bin, tmp_path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("ok\n{% for m in messages %}\nnever closed")
    line = _one_error_line(ferry_ref.run_ferry(["template", "--template", str(bad), "-p", "x"]), 1)
    assert "line 2" in line or "line 3" in line, line
    raising = tmp_path / "raise.jinja"
    raising.write_text("{{ raise_exception('Conversation roles must alternate') }}")
    line = _one_error_line(ferry_ref.run_ferry(["template", "--template", str(raising), "-p", "x"]), 2)
    assert line == "error: chat template: Conversation roles must alternate", line
    _one_error_line(ferry_ref.run_ferry(["template", "--template", str(raising), "--messages", "[{"]), 2)
    _one_error_line(ferry_ref.run_ferry(["template", "--template", str(raising)]), 2)  # no conversation
    _one_error_line(ferry_ref.run_ferry(["template", "-p", "x"]), 2)                   # no template
    _one_error_line(ferry_ref.run_ferry(["template", "--template", str(tmp_path / "missing"), "-p", "x"]), 1)


@pytest.mark.skipif(not SMOL.is_file(), reason="bundled SmolLM2 missing (scripts/setup.sh)")
def test_cli_model_template_is_what_run_chat_tokenizes(ferry_bin):
    res = ferry_ref.run_ferry(["template", "-m", str(SMOL), "-p", "Hi"])
    want = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert res.returncode == 0 and res.stdout == want, res
    src = ferry_ref.run_ferry(["template", "-m", str(SMOL), "--print-template"])
    assert src.returncode == 0 and src.stdout.startswith("{% for message in messages %}"), src
    # The prompt `ferry run --chat` tokenizes is this text, tokenized as `ferry tokenize` does.
    run = ferry_ref.run_ferry(["run", "-m", str(SMOL), "-p", "Hi", "--chat", "-n", "1", "--temp", "0", "--json",
                               "-c", "128"])
    tok = ferry_ref.run_ferry(["tokenize", "-m", str(SMOL), "-p", want, "--json"])
    assert run.returncode == 0 and tok.returncode == 0, (run.stderr, tok.stderr)
    assert json.loads(run.stdout)["prompt_tokens"] == json.loads(tok.stdout)
