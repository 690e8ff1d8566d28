#!/usr/bin/env python3
"""Writes a few tiny valid GGUF files (with the `gguf` PyPI package) as a seed corpus for fuzz_gguf.

usage: make_gguf_seeds.py OUT_DIR      exit 3 when the gguf package is missing
"""
import os
import sys

try:
    import numpy as np
    import gguf
except ImportError:
    sys.exit(3)


def write(path, alignment=None, quant=True, nested=True):
    w = gguf.GGUFWriter(path, "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_uint32("llama.block_count", 1)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_bool("flag", True)
    w.add_int8("i8", -3)
    w.add_uint64("u64", 1 << 40)
    w.add_float64("f64", 0.5)
    w.add_string("general.name", "seed")
    w.add_array("tokenizer.ggml.tokens", ["<s>", "a", "bc"])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.0, -2.0])
    if nested:
        w.add_array("nested", [[1, 2], [3]])
    w.add_tensor("a", np.arange(4, dtype=np.float32))
    w.add_tensor("b", np.ones((2, 3), dtype=np.float16))
    if quant:
        w.add_tensor("q", np.zeros((1, 34), dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "seed_basic.gguf"))
    write(os.path.join(out, "seed_align8.gguf"), alignment=8, nested=False)
    write(os.path.join(out, "seed_plain.gguf"), quant=False)


if __name__ == "__main__":
    main()
