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
    if source is None:
        pytest.skip(f"{model.name} has no tokenizer.chat_template")  # --chat falls back to its architecture's format
    problems = compare(f"models/{model.name}", source, ["-m", str(model), "--raw"], tmp_path, "<s>", "</s>")
    assert not problems, "\n\n".join(problems)


SYNTH_PRESETS = ["tiny-llama", "tiny-qwen3", "tiny-gemma3"]  # the three template families synth writes


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
