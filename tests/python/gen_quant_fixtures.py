#!/usr/bin/env python3
"""Generate the weight-type fixtures of tests/tensor (tests/data/tensor/quant_<TYPE>.bin).

For each type: random float rows (fixed seed, an odd number of blocks per row, mixed magnitudes,
zero / constant / tiny / outlier blocks), the bytes made by the *reference* quantizer, and the floats
the reference dequantizes those bytes to. The references are llama.cpp's own:
  - ggml's quantize_row_*_ref / dequantize_row_* called through ctypes from the libggml-base shared
    library that llama-cpp-python ships (found in the installed llama_cpp package, or FERRY_GGML_LIB);
  - gguf-py's gguf.quants (PyPI `gguf`), which quantizes F16/BF16/Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 and
    dequantizes every type here except Q8_1/Q8_K.
Each block type also gets quant_<TYPE>.random.bin: random but valid blocks (finite fp16 scales of
either sign, every level and sub-scale bit pattern) with the reference's dequantized floats, because a
quantizer's output never reaches some patterns (e.g. Q6_K scale -128, Q3_K levels with all sub-scales).
When both are there they are cross-checked (bytes and floats must agree bit for bit) and ggml's bytes
are stored. A type that no reference can quantize gets random blocks in its main file too, so its
dequantizer is still tested; its header says so and the C++ test then skips the quantize comparison.

File layout (little endian):
  char magic[4] = "FQFX"; u32 version = 1; u32 ggml_type; u32 nrows; u32 n_per_row;
  u32 flags (1: input floats present, 2: bytes made by a reference quantizer, 4: floats cross-checked
             against ggml's dequantizer);
  u32 source (0: gguf-py, 1: ggml via llama-cpp-python, 2: random valid blocks);
  f32 input[nrows * n_per_row]      (only with flag 1)
  u8  quant[nrows * row_bytes]
  f32 dequant[nrows * n_per_row]

Usage: python3 tests/python/gen_quant_fixtures.py [--out DIR] [--check] [--require-ggml] [--row-scale N]
  --check compares with the committed files instead of writing (exit 1 on a difference).
  Stress run: --out /tmp/qfx --row-scale 200, then FERRY_QUANT_FIXTURE_DIR=/tmp/qfx build/test_tensor.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import os
import struct
import sys

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize as gguf_dequantize, quantize as gguf_quantize
except ImportError:  # pragma: no cover
    sys.exit("gen_quant_fixtures: the `gguf` package is required (pip install gguf)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(ROOT, "tests", "data", "tensor")

MAGIC = b"FQFX"
FLAG_INPUT, FLAG_REF_QUANT, FLAG_GGML_DEQUANT = 1, 2, 4
SRC_GGUF_PY, SRC_GGML, SRC_RANDOM = 0, 1, 2

# name -> (ggml type id, block elems, block bytes, rows, blocks per row). Block bytes are ggml's
# current layouts (gguf-py's table still says 40 for Q8_1, the old float layout; ggml uses 36).
TYPES = {
    "F32": (0, 1, 4, 4, 9 * 32),
    "F16": (1, 1, 2, 4, 9 * 32),
    "BF16": (30, 1, 2, 4, 9 * 32),
    "Q4_0": (2, 32, 18, 5, 9),
    "Q4_1": (3, 32, 20, 5, 9),
    "Q5_0": (6, 32, 22, 5, 9),
    "Q5_1": (7, 32, 24, 5, 9),
    "Q8_0": (8, 32, 34, 5, 9),
    "Q8_1": (9, 32, 36, 5, 9),
    "Q2_K": (10, 256, 84, 5, 5),
    "Q3_K": (11, 256, 110, 5, 5),
    "Q4_K": (12, 256, 144, 5, 5),
    "Q5_K": (13, 256, 176, 5, 5),
    "Q6_K": (14, 256, 210, 5, 5),
    "Q8_K": (15, 256, 292, 5, 5),
    "MXFP4": (39, 32, 17, 5, 9),  # last: adding it left the other types' seeds as they were
}
GGUF_PY_QUANTIZES = {"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4"}
GGUF_PY_DEQUANTIZES = set(TYPES) - {"Q8_1", "Q8_K"}


# ---- input floats -------------------------------------------------------------------------------

def make_group(rng: np.random.Generator, n: int, kind: int, scale: float) -> np.ndarray:
    """n floats of one 'kind' of group: the mix that exercises every branch of the quantizers."""
    if kind == 0:
        v = rng.standard_normal(n)
    elif kind == 1:
        v = rng.uniform(-1, 1, n)
    elif kind == 2:  # all positive, min > 0 (asymmetric types clamp min to 0)
        v = rng.uniform(0.2, 1, n)
    elif kind == 3:  # all negative
        v = -rng.uniform(0.1, 1, n)
    elif kind == 4:  # heavy tails
        v = rng.laplace(0, 1, n) ** 3
    elif kind == 5:  # one outlier
        v = rng.standard_normal(n) * 0.01
        v[rng.integers(n)] = rng.choice([-1.0, 1.0]) * 3
    elif kind == 6:  # zeros
        v = np.zeros(n)
    elif kind == 7:  # constant
        v = np.full(n, rng.uniform(-1, 1))
    elif kind == 8:  # values on a coarse grid: many exact ties in the rounding
        v = rng.integers(-8, 8, n) * 0.125
    elif kind == 9:  # below ggml's GROUP_MAX_EPS (1e-15) or fp16-subnormal tiny
        v = rng.standard_normal(n) * rng.choice([1e-17, 1e-9, 3e-7])
    else:  # fp16-representable values
        v = rng.standard_normal(n).astype(np.float16).astype(np.float64)
    return v * scale


def make_input(rng: np.random.Generator, nrows: int, n: int, block: int) -> np.ndarray:
    # Groups of 16 for the k-quants (their smallest sub-block) so that a super-block mixes kinds.
    group = 16 if block == 256 else 32
    scales = [1e-4, 1e-2, 0.1, 1.0, 1.0, 1.0, 7.0, 300.0]
    x = np.empty(nrows * n, dtype=np.float64)
    for g in range(0, nrows * n, group):
        if block == 256 and rng.random() < 0.6:  # mostly one distribution per super-block
            kind = int(rng.integers(0, 5))
        else:
            kind = int(rng.integers(0, 11))
        x[g:g + group] = make_group(rng, group, kind, float(rng.choice(scales)))
    # The first block of the first row: exact zeros (all-zero block path); the second row starts
    # with a constant block (max == min).
    x[:block] = 0
    if nrows > 1:
        x[n:n + block] = 0.37
    return x.astype(np.float32).reshape(nrows, n)


def make_plain_input(rng: np.random.Generator, nrows: int, n: int) -> np.ndarray:
    """F16 / BF16 / F32: the float mix plus fp16 edge cases (overflow, subnormals, ties)."""
    x = make_input(rng, nrows, n, 32).reshape(-1)
    edge = np.array([65504.0, 65519.99, 65520.0, -70000.0, 6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8, -1e-10,
                     1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 3.0e38, -0.0, 1e-45], dtype=np.float32)
    x[5:5 + edge.size] = edge
    return x.reshape(nrows, n)


# ---- ggml through ctypes ------------------------------------------------------------------------

class Ggml:
    """The reference functions of libggml-base (quantize_row_*_ref, dequantize_row_*)."""

    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        self.path = path

    @staticmethod
    def find() -> "Ggml | None":
        cands = []
        if os.environ.get("FERRY_GGML_LIB"):
            cands.append(os.environ["FERRY_GGML_LIB"])
        try:
            import importlib.util
            spec = importlib.util.find_spec("llama_cpp")
            if spec and spec.submodule_search_locations:
                for d in spec.submodule_search_locations:
                    cands += sorted(glob.glob(os.path.join(d, "**", "libggml-base.so*"), recursive=True))
                    cands += sorted(glob.glob(os.path.join(d, "**", "libggml.so*"), recursive=True))
        except Exception:
            pass
        for c in cands:
            try:
                g = Ggml(c)
                g.lib.dequantize_row_q4_0  # noqa: B018  (probe for the symbol)
                return g
            except (OSError, AttributeError):
                continue
        return None

    def _fn(self, name: str):
        try:
            return getattr(self.lib, name)
        except AttributeError:
            return None

    def quantize(self, name: str, x: np.ndarray, row_bytes: int) -> np.ndarray | None:
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.zeros(x.shape[0] * row_bytes, dtype=np.uint8)
        n = x.size
        fp = ctypes.c_void_p(x.ctypes.data)
        op = ctypes.c_void_p(out.ctypes.data)
        if name == "F32":
            return x.view(np.uint8).reshape(-1).copy()
        if name in ("F16", "BF16"):
            f = self._fn("ggml_fp32_to_fp16_row" if name == "F16" else "ggml_fp32_to_bf16_row_ref")
        else:
            f = self._fn(f"quantize_row_{name.lower().replace('_k', '_K')}_ref")
        if f is None:
            return None
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        f.restype = None
        f(fp, op, ctypes.c_int64(n))
        return out

    def dequantize(self, name: str, q: np.ndarray, n: int) -> np.ndarray | None:
        q = np.ascontiguousarray(q, dtype=np.uint8)
        out = np.zeros(n, dtype=np.float32)
        if name == "F32":
            return q.view(np.float32).copy()
        if name in ("F16", "BF16"):
            f = self._fn("ggml_fp16_to_fp32_row" if name == "F16" else "ggml_bf16_to_fp32_row")
        else:
            f = self._fn(f"dequantize_row_{name.lower().replace('_k', '_K')}")
        if f is None:
            return None
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        f.restype = None
        f(ctypes.c_void_p(q.ctypes.data), ctypes.c_void_p(out.ctypes.data), ctypes.c_int64(n))
        return out


# ---- random valid blocks (types no reference can quantize) -------------------------------------

def random_blocks(rng: np.random.Generator, name: str, nblocks: int, bbytes: int) -> np.ndarray:
    """Random block bytes with every fp16 / f32 scale field replaced by a finite, sensible value."""
    b = rng.integers(0, 256, size=(nblocks, bbytes), dtype=np.uint8)

    def f16(lo: float, hi: float) -> np.ndarray:
        v = rng.uniform(lo, hi, nblocks) * rng.choice([-1.0, 1.0], nblocks)
        return v.astype(np.float16).view(np.uint8).reshape(nblocks, 2)

    if name == "Q8_K":
        b[:, 0:4] = rng.uniform(1e-4, 1e-2, nblocks).astype(np.float32).view(np.uint8).reshape(nblocks, 4)
        qs = b[:, 4:260].view(np.int8).astype(np.int32).reshape(nblocks, 16, 16)
        b[:, 260:292] = qs.sum(axis=2).astype(np.int16).view(np.uint8).reshape(nblocks, 32)
    elif name == "Q8_1":
        b[:, 0:2] = f16(1e-4, 1e-2)
        d = b[:, 0:2].copy().view(np.float16).astype(np.float32).reshape(-1)
        s = b[:, 4:36].view(np.int8).astype(np.float32).sum(axis=1) * d
        b[:, 2:4] = s.astype(np.float16).view(np.uint8).reshape(nblocks, 2)
    elif name == "MXFP4":  # the E8M0 exponent byte: scales 2^-30 .. 2^10 (255 is NaN in the format)
        b[:, 0] = rng.integers(97, 138, nblocks, dtype=np.uint8)
    else:  # where the fp16 scale fields sit
        offsets = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
                   "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}[name]
        for o in offsets:
            b[:, o:o + 2] = f16(1e-4, 0.05)
    return b.reshape(-1)


# ---- one type -----------------------------------------------------------------------------------

def build(name: str, ggml: Ggml | None, rng: np.random.Generator, log: list[str], row_scale: int = 1,
          random_only: bool = False) -> bytes:
    """One fixture. random_only: random valid blocks (every bit pattern of levels and sub-scales,
    which a quantizer rarely produces), 2 rows, for the dequantizer alone."""
    tid, bel, bby, nrows, per_row = TYPES[name]
    nrows = 2 * row_scale if random_only else nrows * row_scale
    n_per_row = per_row if bel == 1 else per_row * bel
    row_bytes = n_per_row // bel * bby
    n = nrows * n_per_row
    x = make_plain_input(rng, nrows, n_per_row) if bel == 1 else make_input(rng, nrows, n_per_row, bel)
    qtype = T[name]

    q_ggml = ggml.quantize(name, x, row_bytes) if ggml and not random_only else None
    q_py = None
    if random_only:
        pass
    elif name in GGUF_PY_QUANTIZES:
        with np.errstate(over="ignore"):
            q_py = np.asarray(gguf_quantize(x, qtype)).view(np.uint8).reshape(-1)
    elif name == "F32":
        q_py = x.view(np.uint8).reshape(-1).copy()

    flags = FLAG_INPUT
    if q_ggml is not None:
        q, source, flags = q_ggml, SRC_GGML, flags | FLAG_REF_QUANT
        if q_py is not None:
            nd = int(np.count_nonzero(q_py != q_ggml))
            log.append(f"{name}: gguf-py vs ggml quantized bytes: {nd} of {q.size} differ")
    elif q_py is not None:
        q, source, flags = q_py, SRC_GGUF_PY, flags | FLAG_REF_QUANT
    else:
        q, source = random_blocks(rng, name, n // bel, bby), SRC_RANDOM
        flags &= ~FLAG_INPUT  # the input floats have nothing to do with these bytes
    assert q.size == nrows * row_bytes, (name, q.size)

    deq_py = None
    if name in GGUF_PY_DEQUANTIZES:
        deq_py = np.asarray(gguf_dequantize(q.reshape(nrows, row_bytes), qtype), dtype=np.float32).reshape(-1)
    deq_ggml = ggml.dequantize(name, q, n) if ggml else None
    if deq_ggml is not None:
        flags |= FLAG_GGML_DEQUANT
        if deq_py is not None:
            nd = int(np.count_nonzero(deq_py.view(np.uint32) != deq_ggml.view(np.uint32)))
            log.append(f"{name}: gguf-py vs ggml dequantized floats: {nd} of {n} differ")
            if nd:
                raise SystemExit(f"{name}: gguf-py and ggml dequantize differently; refusing to write")
    deq = deq_py if deq_py is not None else deq_ggml
    if deq is None:  # Q8_1 / Q8_K without ggml: d * q is their definition
        blocks = q.reshape(-1, bby)
        if name == "Q8_1":
            d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
            deq = (blocks[:, 4:36].view(np.int8).astype(np.float32) * d).reshape(-1)
        else:
            d = blocks[:, 0:4].copy().view(np.float32)
            deq = (d * blocks[:, 4:260].view(np.int8).astype(np.float32)).reshape(-1)
    src_name = ["gguf-py", "ggml", "random blocks"][source]
    log.append(f"{name}: {nrows} rows x {n_per_row}, bytes from {src_name}, "
               f"dequant from {'gguf-py' if deq_py is not None else 'ggml' if deq_ggml is not None else 'numpy'}"
               f"{' (checked against ggml)' if deq_ggml is not None and deq_py is not None else ''}")

    head = struct.pack("<4sIIIIII", MAGIC, 1, tid, nrows, n_per_row, flags, source)
    parts = [head]
    if flags & FLAG_INPUT:
        parts.append(x.astype("<f4").tobytes())
    parts.append(q.astype(np.uint8).tobytes())
    parts.append(deq.astype("<f4").tobytes())
    return b"".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--check", action="store_true", help="compare with the files in --out, write nothing")
    ap.add_argument("--require-ggml", action="store_true", help="fail if llama-cpp-python's ggml is missing")
    ap.add_argument("--row-scale", type=int, default=1,
                    help="N times more rows (a stress set for FERRY_QUANT_FIXTURE_DIR; not for committing)")
    args = ap.parse_args()

    ggml = Ggml.find()
    if ggml is None and args.require_ggml:
        print("gen_quant_fixtures: ggml (llama-cpp-python) not found", file=sys.stderr)
        return 1
    try:
        from importlib.metadata import version
        versions = f"gguf {version('gguf')}, numpy {np.__version__}"
        if ggml:
            versions += f", llama-cpp-python {version('llama_cpp_python')}"
    except Exception:
        versions = "versions unknown"
    print(f"{versions}; ggml: {ggml.path if ggml else 'not found'}")

    os.makedirs(args.out, exist_ok=True)
    bad = 0
    for i, name in enumerate(TYPES):
        rng = np.random.default_rng(20240611 + i)
        log: list[str] = []
        data = build(name, ggml, rng, log, args.row_scale)
        for line in log:
            print("  " + line)
        outputs = [(f"quant_{name}.bin", data)]
        if TYPES[name][1] > 1:  # block types: also random valid blocks for the dequantizer
            rlog: list[str] = []
            rdata = build(name, ggml, np.random.default_rng(777 + i), rlog, args.row_scale, random_only=True)
            for line in rlog:
                print("  random " + line)
            outputs.append((f"quant_{name}.random.bin", rdata))
        for fname, blob in outputs:
            path = os.path.join(args.out, fname)
            if args.check:
                old = open(path, "rb").read() if os.path.exists(path) else b""
                if old != blob:
                    print(f"  {fname}: differs from {path}")
                    bad += 1
            else:
                with open(path, "wb") as f:
                    f.write(blob)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
