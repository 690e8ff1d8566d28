"""Mixture-of-experts files at the CLI: `ferry inspect` shows the experts (a router and expert groups per layer,
one row per expert with --per-expert, every one with its bytes), `ferry run` runs them on the CPU, and under a
VRAM budget on the emulated GPU (the hybrid executor with routers and expert groups placed by the planner) its
greedy text equals the CPU's at budgets from the minimum up to everything resident.

Needs the ferry binary ($FERRY_BUILD/ferry) and `ferry synth`; skips otherwise.
"""

from __future__ import annotations

import json
import re
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
    assert "blk.1.experts[12:16)" in res.stdout  # 4 groups of a layer (kAutoExpertGroups)
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


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory) -> Path:
    if not FERRY.is_file():
        pytest.skip(f"ferry binary not built at {FERRY} (set FERRY_BUILD)")
    path = tmp_path_factory.mktemp("moe") / "tiny-mixtral-q4_k.gguf"
    res = ferry("synth", "--preset", "tiny-mixtral", "--type", "Q4_K", "-o", str(path))
    if res.returncode != 0:
        pytest.skip("ferry synth failed: " + res.stderr)
    return path


@pytest.fixture(scope="module")
def gptoss(tmp_path_factory) -> Path:
    if not FERRY.is_file():
        pytest.skip(f"ferry binary not built at {FERRY} (set FERRY_BUILD)")
    path = tmp_path_factory.mktemp("moe") / "tiny-gpt-oss-q8_0.gguf"  # MXFP4 experts whatever --type says
    res = ferry("synth", "--preset", "tiny-gpt-oss", "--type", "Q8_0", "-o", str(path))
    if res.returncode != 0:
        pytest.skip("ferry synth failed: " + res.stderr)
    return path


PROMPT = "The quick brown fox jumps over the lazy dog, and then"


def _greedy(model: Path, *extra: str) -> dict:
    res = ferry("run", "-m", str(model), "-p", PROMPT, "-n", "24", "--temp", "0", "--json", "-t", "2", "-c", "256",
                "-b", "16", *extra)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _minimum_mib(model: Path) -> int:
    """The smallest --vram the emulated run accepts, from the error a far too small budget gives."""
    res = ferry("run", "-m", str(model), "-p", "hi", "-n", "1", "-c", "256", "-b", "16", "--device", "emulated",
                "--profile", str(PROFILE), "--vram", "1M")
    assert_error(res, 1)
    m = re.search(r"needs at least (\d+) MiB", res.stderr)
    assert m, res.stderr
    return int(m.group(1))


@pytest.mark.parametrize("which", ["moe", "mixtral", "gptoss"])
def test_emulated_budgets_match_cpu(request, which):
    """The hybrid executor on the emulated GPU (16-token tiers: small activations, so the planner streams) from
    the minimum budget (routers and expert groups on the CPU) through streamed ones to everything resident: the
    same greedy tokens and text as --device cpu."""
    model = request.getfixturevalue(which)
    cpu = _greedy(model)
    low = _minimum_mib(model) + 1
    placed = set()
    # The forced strategy where the planner finds it feasible; which budgets leave room for its ring depends on
    # the resident set the planner picks, so a few small budgets in a row.
    runs = [(f"{low}M", [])] + [(f"{low + i}M", ["--strategy", "gpu-stream"]) for i in range(7)] + [("2G", [])]
    for vram, strategy in runs:
        emu = _greedy(model, "--device", "emulated", "--profile", str(PROFILE), "--vram", vram, *strategy)
        assert emu["device"] == "emulated", emu["device"]
        assert emu["tokens"] == cpu["tokens"], (vram, strategy)
        assert emu["text"] == cpu["text"], (vram, strategy)
        for tier in emu["hybrid"]["tiers"]:
            placed |= {k for k in ("resident", "streamed", "cpu") if tier[k] > 0}
    # tiny-mixtral Q4_K (2 MiB of weights) and tiny-gpt-oss (MXFP4 experts; its bias tables stay on the device
    # with the norms): a MiB more than the minimum makes every expert group resident.
    assert placed == ({"resident", "streamed", "cpu"} if which == "moe" else {"resident", "cpu"}), placed


def test_emulated_bench(moe):
    res = ferry("bench", "-m", str(moe), "-p", "8", "-n", "2", "--device", "emulated", "--vram", "2G",
                "--profile", str(PROFILE), "--explain")
    assert res.returncode == 0, res.stderr
    assert ".experts[" in res.stdout, res.stdout


def test_expert_cache_run_matches_cpu_and_reports(moe):
    """--expert-cache at the minimum budget plus the cache (the experts on the CPU, a few of them cached on the
    emulated GPU): the CPU's greedy text, and bench reports the cache's hit rate (text and JSON)."""
    cpu = _greedy(moe)
    low = _minimum_mib(moe) + 4  # the minimum counts the cache too
    emu = _greedy(moe, "--device", "emulated", "--profile", str(PROFILE), "--vram", f"{low}M", "--expert-cache", "2M")
    assert emu["tokens"] == cpu["tokens"]
    res = ferry("bench", "-m", str(moe), "-p", "8", "-n", "24", "--device", "emulated", "--vram", f"{low}M",
                "--expert-cache", "2M", "--profile", str(PROFILE), "--explain")
    assert res.returncode == 0, res.stderr
    assert re.search(r"expert cache: \d+ experts a layer x \d+ layers .* hit rate", res.stdout), res.stdout
    res = ferry("bench", "-m", str(moe), "-p", "8", "-n", "24", "--device", "emulated", "--vram", f"{low}M",
                "--expert-cache", "2M", "--profile", str(PROFILE), "--json")
    assert res.returncode == 0, res.stderr
    cache = json.loads(res.stdout)["plan"]["expert_cache"]
    assert cache["slots_per_layer"] > 0 and cache["lookups"] > 0, cache


def test_expert_cache_bad_flags(moe):
    res = ferry("run", "-m", str(moe), "-p", "hi", "-n", "1", "--expert-cache", "lots")
    assert_error(res, 2)
    assert "--expert-cache" in res.stderr
    res = ferry("run", "-m", str(moe), "-p", "hi", "-n", "1", "--expert-cache", "2M")
    assert_error(res, 2)
    assert "needs a VRAM budget" in res.stderr
