"""Helpers shared by the Python tests: locate and run the ferry binary, drive llama.cpp through
llama-cpp-python as the reference, and compare logits rows.

Conventions (same as `ferry run --logits-out`): a run over a prompt of P tokens followed by G greedy
tokens gives P + G - 1 logits rows; row r holds the logits computed at sequence position r, i.e. the
distribution of the token at position r + 1.
"""

from __future__ import annotations

import ctypes
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


class _GgmlTensor(ctypes.Structure):
    """The head of ggml.h's struct ggml_tensor, as far as `name` (what the eval callback reads)."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64)]


def llama_router_logits(model: Path, ids: list[int], n_ctx: int, name: str = "ffn_moe_logits") -> dict[int, np.ndarray]:
    """llama.cpp's router logits ("ffn_moe_logits-<layer>", F32 [n_expert, n_tokens] on the CPU backend)
    for the token ids evaluated in one sequence: layer -> [len(ids), n_expert]. gpt-oss picks its experts
    from the biased logits, which its graph names "ffn_moe_probs" last (softmax-weight gating: the probs
    are the biased logits, one tensor under both names)."""
    import llama_cpp
    from llama_cpp import llama_cpp as lc

    rows: dict[int, list[np.ndarray]] = {}
    prefix = name + "-"

    def on_tensor(t_ptr, ask, _user):
        t = ctypes.cast(t_ptr, ctypes.POINTER(_GgmlTensor)).contents
        tname = t.name.decode(errors="replace")
        if not tname.startswith(prefix) or not tname[len(prefix):].isdigit():  # not "-0 (reshaped)" views
            return False
        if ask:
            return True
        assert t.type == 0, f"{tname}: type {t.type}, expected F32"  # GGML_TYPE_F32
        n_expert, n_tok = int(t.ne[0]), int(t.ne[1])
        data = np.ctypeslib.as_array(ctypes.cast(t.data, ctypes.POINTER(ctypes.c_float)), shape=(n_tok, n_expert))
        rows.setdefault(int(tname.split("-")[1]), []).append(data.copy())
        return True

    callback = lc.ggml_backend_sched_eval_callback(on_tensor)
    default_params = lc.llama_context_default_params

    def params_with_callback():
        p = default_params()
        p.cb_eval = callback
        p.cb_eval_user_data = None
        return p

    lc.llama_context_default_params = params_with_callback
    try:
        llm = llama_cpp.Llama(model_path=str(model), n_ctx=n_ctx, logits_all=True, n_threads=2, n_threads_batch=2,
                              n_gpu_layers=0,
                              seed=0, verbose=False)
    finally:
        lc.llama_context_default_params = default_params
    try:
        llm.eval(list(ids))
    finally:
        if hasattr(llm, "close"):
            llm.close()
    return {layer: np.concatenate(parts, axis=0) for layer, parts in sorted(rows.items())}


def route_margins(router_logits: dict[int, np.ndarray], n_used: int) -> np.ndarray:
    """[n_tokens] the smallest gap, over layers, between the n_used-th and the next largest router logit:
    how close each token's expert choice came to picking another expert."""
    gaps = []
    for logits in router_logits.values():
        s = -np.sort(-logits.astype(np.float64), axis=1)
        gaps.append(s[:, n_used - 1] - s[:, n_used])
    return np.min(np.stack(gaps), axis=0)
