#!/usr/bin/env python3
"""check_cuda.sh's whole-model gate: `ferry run --logits-out` of the same tokens on --device cpu and
--device cuda, compared row by row.

usage: compare_logits.py BASE NAME   (reads BASE.cpu.json, BASE.cuda.json, BASE.cpu.f32, BASE.cuda.f32)

Rows: the prompt's positions, then the greedy decode steps; decode rows are compared only up to the
first generated token where the two runs differ (after that they see different inputs). Pass: top-1
agreement >= 90 % of the rows and EVERY row's relative L2 difference |cuda - cpu| / |cpu| below the
documented TOL_RMS of docs/TESTING.md (0.06 for quantized weights, whose GPU path quantizes activations
in 32-blocks where the CPU uses the type's own block; 0.01 for float weights) — the maximum, so one bad
row fails the model. Prints one line; exit 0 on pass, 1 on fail.
"""

from __future__ import annotations

import array
import json
import math
import sys


def tolerance(name: str) -> float:
    return 0.01 if any(f in name for f in ("F16", "F32", "BF16")) else 0.06


def read_rows(path: str, n_vocab: int) -> list:
    a = array.array("f")
    with open(path, "rb") as fh:
        a.frombytes(fh.read())
    return [a[i:i + n_vocab] for i in range(0, len(a), n_vocab)]


def row_stats(a, b) -> tuple[bool, float]:
    """(same argmax, relative L2 difference) of two logits rows."""
    top_a = max(range(len(a)), key=a.__getitem__)
    top_b = max(range(len(b)), key=b.__getitem__)
    num = math.sqrt(sum((u - v) ** 2 for u, v in zip(a, b)))
    den = math.sqrt(sum(u * u for u in a)) or 1.0
    return top_a == top_b, num / den


def compare(base: str, name: str) -> tuple[bool, str]:
    jc, jg = (json.load(open(f"{base}.{d}.json")) for d in ("cpu", "cuda"))
    n_vocab = jc["n_vocab"]
    rc, rg = read_rows(f"{base}.cpu.f32", n_vocab), read_rows(f"{base}.cuda.f32", n_vocab)
    same = jc["n_prompt"]
    for x, y in zip(jc["tokens"], jg["tokens"]):
        if x != y:
            break
        same += 1
    n = min(len(rc), len(rg), same)
    try:
        import numpy as np
        stats = []
        for a, b in zip(rc[:n], rg[:n]):
            a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
            stats.append((a.argmax() == b.argmax(), float(np.linalg.norm(a - b) / (np.linalg.norm(a) or 1.0))))
    except ImportError:
        stats = [row_stats(a, b) for a, b in zip(rc[:n], rg[:n])]
    agree = sum(1 for t, _ in stats if t) / max(n, 1)
    rel = sorted(r for _, r in stats)
    tol = tolerance(name)
    worst = rel[-1] if rel else float("nan")
    ok = n > 0 and agree >= 0.9 and worst < tol
    line = "%-36s %s rows %3d  top-1 %5.1f%%  rel L2 diff max %.2e (tol %.0e) median %.2e  gen tokens equal %s  " \
           "runner %s" % (name, "ok  " if ok else "FAIL", n, 100 * agree, worst, tol,
                          rel[len(rel) // 2] if rel else float("nan"), jc["tokens"] == jg["tokens"],
                          "gpu" if "hybrid" in jg else "?")
    return ok, line


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[3], file=sys.stderr)
        return 2
    ok, line = compare(sys.argv[1], sys.argv[2])
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
