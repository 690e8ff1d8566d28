"""llama.cpp's multimodal library (libmtmd) as the reference for ferry's vision path, run as a script so the
libllama / libmtmd it loads (a build of the same llama-cpp-python source with the multimodal part on, see
docs/TESTING.md) never meets the llama_cpp the other tests import in their process.

    LLAMA_CPP_LIB_PATH=DIR MTMD_CPP_LIB=DIR python3 mtmd_ref.py --model M --mmproj P --image IMG.png \
        --prompt TEXT --n-gen N --out OUT.npz

The image is decoded here (PNG, 8-bit RGB, written by the tests) and handed to mtmd as raw RGB, so both
sides see the same pixels. mtmd tokenizes the prompt (its media marker "<__media__>" stands for the image),
encodes the image (flash attention off: llama.cpp's F32 clip graph) and the helper decodes the image chunk
with M-RoPE positions; the text after the image is decoded here with logits for every row, then N greedy
tokens one at a time. --image may repeat (one marker each). OUT.npz holds: embd [image tokens of every image,
n_embd], tokens (prompt rows, -1 for image rows), logits [rows after the last image + N - 1, n_vocab], gen (the
greedy ids), grid [(nx, ny) per image], n_past.
"""

from __future__ import annotations

import argparse
import ctypes
import struct
import zlib

import numpy as np


def read_png_rgb(path: str) -> np.ndarray:
    """8-bit RGB, non-interlaced PNGs with filter 0 on every row (what vision_images.write_png writes)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w, h = 8, b"", 0, 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color, _, _, inter = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color == 2 and inter == 0, "test PNGs are 8-bit RGB"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(h, 1 + w * 3)
    assert (raw[:, 0] == 0).all(), "test PNGs use filter 0"
    return raw[:, 1:].reshape(h, w, 3).copy()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--mmproj", required=True)
    ap.add_argument("--image", action="append", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--n-gen", type=int, default=8)
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import llama_cpp
    import llama_cpp.mtmd_cpp as mtmd
    from llama_cpp import Llama

    llm = Llama(model_path=a.model, n_ctx=a.n_ctx, n_batch=a.n_ctx, n_ubatch=a.n_ctx, logits_all=True, seed=0,
                n_threads=2, n_threads_batch=2, n_gpu_layers=0, verbose=False)
    lctx = llm._ctx.ctx
    n_vocab = llm.n_vocab()

    params = mtmd.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = 2
    params.print_timings = False
    params.warmup = False
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    mctx = mtmd.mtmd_init_from_file(a.mmproj.encode(), llm._model.model, params)
    assert mctx, "mtmd_init_from_file failed"

    bitmaps = (mtmd.mtmd_bitmap_p_ctypes * len(a.image))()
    for i, path in enumerate(a.image):
        rgb = np.ascontiguousarray(read_png_rgb(path))
        h, w, _ = rgb.shape
        buf = (ctypes.c_uint8 * rgb.size).from_buffer_copy(rgb.tobytes())
        bitmaps[i] = mtmd.mtmd_bitmap_init(w, h, buf)
    chunks = mtmd.mtmd_input_chunks_init()
    text = mtmd.mtmd_input_text(text=a.prompt.encode(), text_len=len(a.prompt.encode()), add_special=True,
                                parse_special=True)
    rc = mtmd.mtmd_tokenize(mctx, chunks, ctypes.byref(text), bitmaps, len(a.image))
    assert rc == 0, f"mtmd_tokenize: {rc}"

    tokens: list[int] = []
    embds: list[np.ndarray] = []
    grids: list[tuple[int, int]] = []
    n_past = 0
    rows: list[np.ndarray] = []
    after_image = False
    batch = llama_cpp.llama_batch_init(a.n_ctx, 0, 1)

    def decode(ids: list[int], pos0: int, want_all: bool) -> list[np.ndarray]:
        batch.n_tokens = len(ids)
        for i, t in enumerate(ids):
            batch.token[i] = t
            batch.pos[i] = pos0 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = want_all or i == len(ids) - 1
        assert llama_cpp.llama_decode(lctx, batch) == 0
        out = []
        for i in range(len(ids)):
            if want_all or i == len(ids) - 1:
                p = llama_cpp.llama_get_logits_ith(lctx, i)
                out.append(np.ctypeslib.as_array(p, shape=(n_vocab,)).copy())
        return out

    n_chunks = mtmd.mtmd_input_chunks_size(chunks)
    last = None
    for ci in range(n_chunks):
        chunk = mtmd.mtmd_input_chunks_get(chunks, ci)
        kind = mtmd.mtmd_input_chunk_get_type(chunk)
        if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t(0)
            ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            ids = [ptr[i] for i in range(n.value)]
            tokens += ids
            got = decode(ids, n_past, after_image)
            if after_image:
                rows += got
            last = got[-1]
            n_past += len(ids)
        else:
            assert kind == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE
            img_tokens = mtmd.mtmd_input_chunk_get_tokens_image(chunk)
            nx, ny = mtmd.mtmd_image_tokens_get_nx(img_tokens), mtmd.mtmd_image_tokens_get_ny(img_tokens)
            n_tok = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
            grids.append((nx, ny))
            assert mtmd.mtmd_encode_chunk(mctx, chunk) == 0
            n_embd = llm.n_embd()
            out = mtmd.mtmd_get_output_embd(mctx)
            embds.append(np.ctypeslib.as_array(out, shape=(n_tok * n_embd,)).copy().reshape(n_tok, n_embd))
            new_past = llama_cpp.llama_pos(0)
            rc = mtmd.mtmd_helper_eval_chunk_single(mctx, lctx, chunk, n_past, 0, a.n_ctx, False,
                                                    ctypes.byref(new_past))
            assert rc == 0, f"mtmd_helper_eval_chunk_single: {rc}"
            n_past = new_past.value
            tokens += [-1] * n_tok
            after_image = True
            rows = []  # only the rows after the last image

    gen: list[int] = []
    for i in range(a.n_gen):
        tok = int(np.argmax(last))
        gen.append(tok)
        if i + 1 < a.n_gen:
            last = decode([tok], n_past, True)[0]
            rows.append(last)
            n_past += 1
    np.savez(a.out, embd=np.concatenate(embds, axis=0), tokens=np.array(tokens), logits=np.array(rows, dtype=np.float32),
             gen=np.array(gen), grid=np.array(grids), n_past=n_past)
    llama_cpp.llama_batch_free(batch)
    mtmd.mtmd_input_chunks_free(chunks)
    for i in range(len(a.image)):
        mtmd.mtmd_bitmap_free(bitmaps[i])
    mtmd.mtmd_free(mctx)


if __name__ == "__main__":
    main()
