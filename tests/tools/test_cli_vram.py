"""`ferry run --vram` (issue 27): the budget is the whole process, so `--json` reports the process's peak
device memory (`vram_peak_process_bytes`, with `vram_peak_process_source` saying whether it was read from
the driver, modelled, or is 0 on the CPU) and the budget's split; a budget too small or 0 says how much
the model needs and how much of it is the CUDA context; `--vram` on a machine without a GPU answers with
one `error:` line saying what to do, before measuring anything.

Needs the ferry binary ($FERRY_BUILD/ferry) and `ferry synth`; skips otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("FERRY_BUILD", "/work/main/build"))
FERRY = BUILD / "ferry"
PROFILE = REPO / "tests" / "data" / "profiles" / "h200-host-measured.json"
MIB = 1 << 20


def ferry(*args: str, home: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if home is not None:  # no cached profile: nothing to find, nothing to write
        env["HOME"] = str(home)
        env.pop("XDG_CACHE_HOME", None)
    return subprocess.run([str(FERRY), *args], capture_output=True, text=True, timeout=timeout, env=env)


def one_error(res: subprocess.CompletedProcess, code: int) -> str:
    assert res.returncode == code, f"exit {res.returncode}, wanted {code}; stderr: {res.stderr!r}"
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    return lines[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    if not FERRY.is_file():
        pytest.skip(f"ferry binary not built at {FERRY} (set FERRY_BUILD)")
    path = tmp_path_factory.mktemp("vram") / "tiny-llama-q8_0.gguf"
    res = ferry("synth", "--preset", "tiny-llama", "--type", "Q8_0", "-o", str(path))
    if res.returncode != 0 or not path.is_file():
        pytest.skip("ferry synth failed: " + res.stderr)
    return path


def has_gpu() -> bool:
    return Path("/dev/nvidia0").exists()


def run_args(model: Path, *extra: str) -> list[str]:
    return ["run", "-m", str(model), "-p", "hello", "-n", "4", "-c", "64", "-t", "2", *extra]


@pytest.mark.may_skip_in_ci("on a CI machine with a GPU there is no GPU-less message to check")
def test_vram_without_gpu_says_what_to_do(model, tmp_path):
    if has_gpu():
        pytest.skip("this machine has a GPU")
    t0 = time.monotonic()
    line = one_error(ferry(*run_args(model, "--vram", "2G"), home=tmp_path), 2)
    assert time.monotonic() - t0 < 20  # answered at once, no quick profile measured first
    assert "drop --vram" in line and "--device emulated --profile FILE" in line
    assert line.count("CUDA GPU") == 1, line  # the driver's reason once, not twice
    assert not (tmp_path / ".cache").exists()


def test_vram_zero_must_be_positive(model, tmp_path):
    line = one_error(ferry(*run_args(model, "--vram", "0", "--device", "emulated", "--profile", str(PROFILE))), 2)
    assert "the VRAM budget must be > 0" in line and "needs at least" in line and "CUDA context" in line
    if not has_gpu():
        line = one_error(ferry(*run_args(model, "--vram", "0"), home=tmp_path), 2)
        assert "must be > 0" in line


def test_vram_unreadable(model):
    line = one_error(ferry(*run_args(model, "--vram", "lots")), 2)
    assert "cannot read size 'lots'" in line


def test_run_json_process_memory(model):
    budget = 700 * MIB
    res = ferry(*run_args(model, "--json", "--device", "emulated", "--vram", str(budget), "--profile", str(PROFILE)))
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    assert j["vram_peak_process_source"] == "modelled"
    assert 0 < j["vram_peak_process_bytes"] <= budget
    h = j["hybrid"]
    assert h["vram_budget"] == budget
    assert h["context_bytes"] + h["growth_reserve"] + h["arena_capacity"] <= budget
    assert h["arena_peak"] <= h["arena_capacity"]

    res = ferry(*run_args(model, "--json"))
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    assert j["vram_peak_process_bytes"] == 0 and j["vram_peak_process_source"] == "none"
    assert "hybrid" not in j


def test_run_matches_cpu_on_emulated_device(model):
    cpu = ferry(*run_args(model, "--json", "--temp", "0"))
    emu = ferry(*run_args(model, "--json", "--temp", "0", "--device", "emulated", "--vram", "700M", "--profile",
                          str(PROFILE)))
    assert cpu.returncode == 0 and emu.returncode == 0, cpu.stderr + emu.stderr
    assert json.loads(cpu.stdout)["tokens"] == json.loads(emu.stdout)["tokens"]
