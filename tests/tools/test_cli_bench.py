"""`ferry bench` on the hybrid executor (issue 6): --json keys on the emulated device (peak and context
device bytes, the process's modelled peak within the budget (issue 27: the budget is the whole process,
CUDA context included), the plan per tier with predicted and measured ms, the fraction of the hybrid limits),
and `--timeline FILE`: an SVG that parses as XML with one span rectangle per recorded span, refused
on the CPU device (exit 2) and for an unwritable path (exit 1), each with one `error:` line.

Needs the ferry binary ($FERRY_BUILD/ferry) and `ferry synth`; skips otherwise.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("FERRY_BUILD", "/work/main/build"))
FERRY = BUILD / "ferry"
PROFILE = REPO / "tests" / "data" / "profiles" / "h200-host-measured.json"
SVG_NS = "{http://www.w3.org/2000/svg}"
# The emulated device models a CUDA context of 512 MiB (exec::kDefaultCudaContextBytes; the fixture
# profile records none) and keeps 96 MiB free for the driver's growth (exec::kCudaGrowthReserve): a
# budget of 668 MiB leaves the arena 60 MiB.
MIB = 1 << 20
CONTEXT = 512 * MIB
BUDGET = 668 * MIB
ARENA = 60 * MIB


def ferry(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(FERRY), *args], capture_output=True, text=True, timeout=timeout)


def assert_error(res: subprocess.CompletedProcess, code: int, text: str) -> None:
    assert res.returncode == code, f"exit {res.returncode}, wanted {code}; stderr: {res.stderr!r}"
    lines = [l for l in res.stderr.splitlines() if l.strip() and not l.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    assert text in lines[0], lines[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    if not FERRY.is_file():
        pytest.skip(f"ferry binary not built at {FERRY} (set FERRY_BUILD)")
    if not PROFILE.is_file():
        pytest.skip(f"no GPU profile fixture at {PROFILE}")
    path = tmp_path_factory.mktemp("bench") / "tiny-llama-q8_0.gguf"
    res = ferry("synth", "--preset", "tiny-llama", "--type", "Q8_0", "-o", str(path))
    if res.returncode != 0 or not path.is_file():
        pytest.skip("ferry synth failed: " + res.stderr)
    return path


def emulated(model: Path, *extra: str) -> list[str]:
    return ["bench", "-m", str(model), "-p", "24", "-n", "8", "-b", "16", "-t", "2", "--no-membw", "--device",
            "emulated", "--vram", "668M", "--profile", str(PROFILE), *extra]


def test_bench_json_hybrid_keys(model):
    res = ferry(*emulated(model, "--json"))
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    for k in ("prefill_tok_s", "decode_tok_s", "ttft_ms", "decode_gb_s", "peak_device_bytes",
              "context_device_bytes", "plan", "limit_fraction"):
        assert k in j, k
    assert 0 < j["peak_device_bytes"] <= ARENA  # the arena's high-water mark
    assert j["context_device_bytes"] == CONTEXT  # the context the emulated GPU stands for
    # The process as the GPU would hold it (context + the arena, reserved whole), never past the budget.
    assert j["vram_peak_process_source"] == "modelled"
    assert j["vram_peak_process_bytes"] == CONTEXT + ARENA <= BUDGET
    assert j["plan"]["vram_budget"] == BUDGET and j["plan"]["context_bytes"] == CONTEXT
    ran = [t for t in j["plan"]["tiers"] if t["steps"] > 0]
    assert {t["tokens"] for t in ran} == {1, 8, 16}  # decode, and chunks of 16 and 8 tokens
    for t in ran:
        assert t["strategy"] in ("gpu-stream", "static", "dynamic")
        assert t["predicted_ms"] > 0 and t["measured_ms"] > 0
    assert sum(t["steps"] for t in ran if t["tokens"] == 1) == 8  # the measured run only (no warm-up)
    lf = j["limit_fraction"]
    for k in ("decode_h", "decode_cp", "prefill_p"):
        assert k in lf and (lf[k] is None or lf[k] > 0)


def test_timeline_svg(model, tmp_path):
    out = tmp_path / "t.svg"
    res = ferry(*emulated(model, "--timeline", str(out)))
    assert res.returncode == 0, res.stderr
    m = re.search(r"^timeline: (.+) \((\d+) spans\)$", res.stdout, re.M)
    assert m and m.group(1) == str(out), res.stdout
    root = ET.parse(out).getroot()  # well-formed XML
    assert root.tag == SVG_NS + "svg"
    spans = [r for r in root.iter(SVG_NS + "rect") if r.get("class") == "span"]
    assert len(spans) == int(m.group(2)) > 0
    assert all(float(r.get("width")) >= 1 for r in spans)
    texts = " ".join(t.text or "" for t in root.iter(SVG_NS + "text"))
    for lane in ("copy stream", "GPU compute", "CPU workers", "host waits"):
        assert lane in texts
    # One prefill chunk (tier 16) and 6 decode steps.
    assert "step 0 (tier 16, 16 tokens)" in texts
    assert "step 6 (tier 1, 1 tokens)" in texts and "step 7" not in texts


def test_timeline_json_mode(model, tmp_path):
    out = tmp_path / "t.svg"
    res = ferry(*emulated(model, "--json", "--timeline", str(out)))
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    assert j["timeline"]["path"] == str(out) and j["timeline"]["steps"] == 7
    assert out.is_file()


def test_bench_json_cpu_process_memory(model):
    res = ferry("bench", "-m", str(model), "-p", "8", "-n", "2", "--no-membw", "--device", "cpu", "--json")
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    assert j["vram_peak_process_bytes"] == 0 and j["vram_peak_process_source"] == "none"


def test_bench_json_cpu_host_memory(model):
    res = ferry("bench", "-m", str(model), "-p", "8", "-n", "2", "--no-membw", "--device", "cpu", "--json")
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    assert j["model_file_bytes"] == model.stat().st_size
    assert j["host_peak_rss_bytes"] > 0


@pytest.mark.parametrize("device", ["cpu", "emulated"])
def test_bench_parallel_sequences(model, device):
    """--parallel N: N sequences prefilled and decoded together (llama-batched-bench's -npl); rates are totals,
    and the hybrid plan's decode steps carry N tokens."""
    args = emulated(model, "--json", "--parallel", "3") if device == "emulated" else [
        "bench", "-m", str(model), "-p", "24", "-n", "8", "-b", "16", "-t", "2", "--no-membw", "--json", "--parallel", "3"]
    res = ferry(*args)
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    assert j["parallel"] == 3 and j["prefill_tok_s"] > 0 and j["decode_tok_s"] > 0
    if device == "emulated":
        steps = {t["tokens"]: t["steps"] for t in j["plan"]["tiers"] if t["steps"] > 0}
        assert max(steps) >= 16  # 72 prompt tokens in steps of up to 16 (-b), rows of several sequences
        assert steps.get(4, 0) >= 8  # the 8 decode steps of 3 tokens run in the 4-token tier


def test_bench_parallel_too_many_cells(model):
    res = ferry("bench", "-m", str(model), "-p", "1048576", "-n", "8", "--parallel", "4096", "--no-membw")
    assert_error(res, 2, "KV cells; at most")


def test_budget_too_small_counts_the_context(model):
    res = ferry(*emulated(model)[:-4], "--vram", "600M", "--profile", str(PROFILE))
    assert_error(res, 1, "VRAM budget 600 MiB is too small")
    assert "(of which 608 MiB for the CUDA context" in res.stderr


def test_budget_zero_names_the_minimum(model):
    res = ferry(*emulated(model)[:-4], "--vram", "0", "--profile", str(PROFILE))
    assert_error(res, 2, "the VRAM budget must be > 0")
    assert "needs at least" in res.stderr


def test_timeline_needs_gpu_or_emulated(model, tmp_path):
    res = ferry("bench", "-m", str(model), "-p", "8", "-n", "2", "--no-membw", "--device", "cpu", "--timeline",
                str(tmp_path / "t.svg"))
    assert_error(res, 2, "--timeline needs a GPU or emulated device")


def test_timeline_unwritable(model, tmp_path):
    res = ferry(*emulated(model, "--timeline", str(tmp_path / "missing" / "t.svg")))
    assert_error(res, 1, "cannot write --timeline file")
