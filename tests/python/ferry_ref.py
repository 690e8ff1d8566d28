"""Helpers shared by the Python tests: locate and run the ferry binary, drive llama.cpp through
llama-cpp-python as the reference, and compare logits rows.

Conventions (same as `ferry run --logits-out`): a run over a prompt of P tokens followed by G greedy
tokens gives P + G - 1 logits rows; row r holds the logits computed at sequence position r, i.e. the
distribution of the token at position r + 1.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def ferry_binary() -> Path:
    """The ferry executable: $FERRY_BUILD/ferry (default /work/main/build/ferry)."""
    build = Path(os.environ.get("FERRY_BUILD", "/work/main/build"))
    return build / "ferry"


def run_ferry(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(ferry_binary()), *args], capture_output=True, text=True, timeout=timeout)


@dataclass
class Run:
    """One prompt + greedy continuation: ids and logits rows [P + G - 1, n_vocab]."""

    prompt: list[int]
    tokens: list[int]
    logits: np.ndarray
    extra: dict = field(default_factory=dict)


def ferry_greedy(model: Path, prompt: list[int], n_gen: int, logits_path: Path, n_ctx: int,
                 threads: int = 2, batch: int | None = None, device: str = "cpu") -> Run:
    """Greedy run of ferry over prompt ids (`--tokens`, no BOS added), with all logits written out."""
    args = ["run", "-m", str(model), "--tokens", ",".join(map(str, prompt)), "-n", str(n_gen),
            "--temp", "0", "--ignore-eos", "--json", "--logits-out", str(logits_path),
            "-t", str(threads), "-c", str(n_ctx), "--device", device]
    if batch:
        args += ["-b", str(batch)]
    res = run_ferry(args)
    if res.returncode != 0:
        raise RuntimeError(f"ferry run failed ({res.returncode}): {res.stderr.strip()}")
    out = json.loads(res.stdout)
    raw = np.fromfile(logits_path, dtype="<f4")
    n_vocab = int(out["n_vocab"])
    assert raw.size % n_vocab == 0, f"logits file of {raw.size} floats is not rows of {n_vocab}"
    logits = raw.reshape(-1, n_vocab)
    logits_path.unlink(missing_ok=True)
    return Run(prompt=list(out["prompt_tokens"]), tokens=list(out["tokens"]), logits=logits, extra=out)


def llama_load(model: Path, n_ctx: int):
    """The llama.cpp reference on the CPU: all logits kept, 2 threads, fixed seed."""
    from llama_cpp import Llama

    return Llama(model_path=str(model), logits_all=True, n_ctx=n_ctx, seed=0, n_threads=2,
                 n_threads_batch=2, n_gpu_layers=0, verbose=False)


def llama_greedy(llm, prompt: list[int], n_gen: int) -> Run:
    """Evaluates the prompt, then n_gen greedy tokens (argmax, lowest id on ties), one per eval."""
    llm.reset()
    llm.eval(prompt)
    rows = [np.array(llm.scores[: llm.n_tokens], dtype=np.float32)]
    tokens: list[int] = []
    for i in range(n_gen):
        last = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        tok = int(np.argmax(last))
        tokens.append(tok)
        if i + 1 < n_gen:
            llm.eval([tok])
            rows.append(np.array(llm.scores[llm.n_tokens - 1 : llm.n_tokens], dtype=np.float32))
    return Run(prompt=list(prompt), tokens=tokens, logits=np.concatenate(rows, axis=0))


def llama_tokenize(llm, text: str) -> list[int]:
    """Prompt ids as llama.cpp's CLI makes them (BOS per the vocabulary flag, special text parsed)."""
    return list(llm.tokenize(text.encode("utf-8"), add_bos=True, special=True))


def row_errors(ours: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per row: max |ours - ref| / max(1, std(ref)) — the error in units of the reference's spread."""
    diff = np.abs(ours.astype(np.float64) - ref.astype(np.float64)).max(axis=1)
    scale = np.maximum(1.0, ref.astype(np.float64).std(axis=1))
    return diff / scale


def row_scale(ref_row: np.ndarray) -> float:
    return float(max(1.0, np.std(ref_row.astype(np.float64))))
