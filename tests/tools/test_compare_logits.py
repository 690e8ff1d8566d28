"""bench/device/check_cuda.sh's whole-model gate (bench/device/compare_logits.py) on made-up logits: one
row over the tolerance fails the model even when the median row is far inside it (the gate is the
maximum over rows, not the median)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "device" / "compare_logits.py"
N_VOCAB = 64


def write_case(tmp: Path, name: str, noise_per_row: list[float], seed: int = 1) -> Path:
    rng = np.random.default_rng(seed)
    cpu = rng.standard_normal((len(noise_per_row), N_VOCAB)).astype(np.float32) * 4
    cpu[np.arange(len(cpu)), rng.integers(0, N_VOCAB, len(cpu))] += 50  # a clear top-1 in every row
    gpu = cpu.copy()
    for r, rel in enumerate(noise_per_row):  # noise of the given relative L2 size
        d = rng.standard_normal(N_VOCAB)
        gpu[r] += (d / np.linalg.norm(d) * rel * np.linalg.norm(cpu[r])).astype(np.float32)
    base = tmp / name
    n_prompt = len(noise_per_row) - 2
    tokens = [int(np.argmax(cpu[n_prompt - 1 + j])) for j in range(3)]
    for dev, logits in (("cpu", cpu), ("cuda", gpu)):
        logits.tofile(f"{base}.{dev}.f32")
        Path(f"{base}.{dev}.json").write_text(json.dumps({"n_vocab": N_VOCAB, "n_prompt": n_prompt, "tokens": tokens}))
    return base


def gate(base: Path, name: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(base), name], capture_output=True, text=True)


def test_all_rows_inside_tolerance_pass(tmp_path):
    res = gate(write_case(tmp_path, "tiny-llama-Q4_K", [0.01] * 10), "tiny-llama-Q4_K")
    assert res.returncode == 0, res.stdout + res.stderr
    assert " ok " in res.stdout


def test_one_bad_row_fails_although_the_median_is_fine(tmp_path):
    res = gate(write_case(tmp_path, "tiny-llama-Q4_K", [0.01] * 9 + [0.2]), "tiny-llama-Q4_K")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAIL" in res.stdout
    assert "max 2.00e-01" in res.stdout


def test_float_weights_have_the_tighter_tolerance(tmp_path):
    res = gate(write_case(tmp_path, "tiny-qwen3-F16", [0.001] * 9 + [0.02]), "tiny-qwen3-F16")
    assert res.returncode == 1, res.stdout
    res = gate(write_case(tmp_path, "tiny-qwen3-Q4_0", [0.001] * 9 + [0.02]), "tiny-qwen3-Q4_0")
    assert res.returncode == 0, res.stdout
