"""Mixture-of-experts files at the CLI: `ferry inspect` shows the experts (a router and expert groups per layer,
one row per expert with --per-expert, every one with its bytes), `ferry run` runs them on the CPU, and a GPU
run (`--vram`, `--device cuda`, the emulated device) answers with one `error:` line until the planner places
experts, before measuring or loading anything.

Needs the ferry binary ($FERRY_BUILD/ferry) and `ferry synth`; skips otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import FERRY, assert_error, ferry

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "tests" / "data" / "profiles" / "h200-host-measured.json"


@pytest.fixture(scope="module")
def moe(tmp_path_factory) -> Path:
    if not FERRY.is_file():
        pytest.skip(f"ferry binary not built at {FERRY} (set FERRY_BUILD)")
    path = tmp_path_factory.mktemp("moe") / "tiny-qwen3moe-q8_0.gguf"
    res = ferry("synth", "--preset", "tiny-qwen3moe", "--type", "Q8_0", "-o", str(path))
    if res.returncode != 0:
        pytest.skip("ferry synth failed: " + res.stderr)
    return path


def test_inspect_lists_experts(moe):
    res = ferry("inspect", str(moe))
    assert res.returncode == 0, res.stderr
    assert "mixture of experts: 16 experts of width 256 per layer, 4 per token" in res.stdout
    assert "blk.1.router" in res.stdout
    assert "blk.1.experts[8:16)" in res.stdout
    assert "a token runs 4 of them" in res.stdout
    per = ferry("inspect", "--per-expert", str(moe))
    assert per.returncode == 0, per.stderr
    assert sum(1 for line in per.stdout.splitlines() if ".experts[" in line) == 2 * 16
    assert "blk.0.experts[15:16)" in per.stdout


def test_inspect_json_expert_bytes(moe):
    res = ferry("inspect", "--json", "--per-expert", str(moe))
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    assert j["spec"]["n_expert"] == 16 and j["spec"]["n_expert_used"] == 4 and j["spec"]["n_ff_expert"] == 256
    tensors = {t["name"]: t["bytes"] for t in j["tensors"]}
    for layer in range(2):
        experts = [s for s in j["sublayers"] if s["kind"] == "experts" and s["layer"] == layer]
        assert [s["experts"] for s in experts] == [[e, e + 1] for e in range(16)]
        stacked = sum(tensors[f"blk.{layer}.ffn_{w}_exps.weight"] for w in ("gate", "up", "down"))
        assert sum(s["bytes"] for s in experts) == stacked
        assert all(s["bytes"] == j["spec"]["expert_bytes"] for s in experts)


def test_run_on_cpu(moe):
    res = ferry("run", "-m", str(moe), "--tokens", "1,2,3,4,5", "-n", "8", "--temp", "0", "--json", "-t", "2")
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)["tokens"]) == 8


@pytest.mark.parametrize("cmd", [["run", "-p", "hi", "-n", "2"], ["bench", "-p", "8", "-n", "2"]])
def test_gpu_run_is_one_error(moe, tmp_path, cmd):
    res = ferry(cmd[0], "-m", str(moe), *cmd[1:], "--device", "emulated", "--vram", "2G", "--profile", str(PROFILE))
    assert_error(res, 1)
    assert "mixture-of-experts" in res.stderr and "drop --vram" in res.stderr
