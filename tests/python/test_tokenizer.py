"""Differential test of ferry's tokenizers against llama.cpp (through llama-cpp-python).

Vocabularies: the two real models (SmolLM2: byte-level BPE, pre=smollm; Gemma 3: SentencePiece-style),
SmolLM2's vocabulary and merges re-labelled with each other pre-tokenizer we support (llama-bpe, qwen2,
gpt-2, default, gpt-4o; a metadata-only GGUF written here), and `ferry synth` tiny models (llama-bpe, qwen2,
gpt-4o and SentencePiece vocabularies). For each, every string of tokenizer_corpus.CORPUS (and the raw byte
strings of BYTE_CASES) is tokenized by `ferry tokenize --lines` (one process per vocabulary and mode)
and by llama.cpp with vocab_only=True; the ids must be identical, with (BOS, parse special) and without
(no BOS, special text as plain text). The same holds for the text of every token (token_to_piece, with
and without special rendering), the special ids and the end-of-generation set, through
`ferry tokenize --dump-vocab`.

Skips cleanly when llama-cpp-python, a model file or the ferry binary is missing.
A random part (tokenizer_corpus.stress_items: the whole codepoint range, every kind of whitespace, raw
bytes) runs too, FERRY_TOKENIZER_STRESS strings per vocabulary (default 300; thousands pass as well).

Env: FERRY_BUILD (dir holding `ferry`, default /work/main/build), FERRY_MODELS (default <repo>/models).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tokenizer_corpus import BYTE_CASES, CORPUS, stress_items  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
REAL = {
    "smollm2": "smollm2-135m-instruct-q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}
VARIANT_PRES = ["llama-bpe", "qwen2", "gpt-2", "default", "gpt-4o"]
SYNTH = ["tiny-llama", "tiny-qwen2", "tiny-gemma3", "tiny-gpt-oss"]
MODELS = list(REAL) + [f"smollm2-vocab-pre-{p}" for p in VARIANT_PRES] + [f"synth-{p}" for p in SYNTH]
MODES = {"bos+special": (True, True), "plain": (False, False)}


def _ferry() -> Path:
    path = Path(os.environ.get("FERRY_BUILD", "/work/main/build")) / "ferry"
    if not path.is_file():
        pytest.skip(f"ferry binary not built at {path} (set FERRY_BUILD)")
    return path


def _models_dir() -> Path:
    return Path(os.environ.get("FERRY_MODELS", REPO / "models"))


_PATHS: dict[str, Path] = {}
_SCRATCH: list = []


def _scratch() -> Path:
    if not _SCRATCH:
        import tempfile

        _SCRATCH.append(tempfile.TemporaryDirectory(prefix="ferry_tok_"))
    return Path(_SCRATCH[0].name)


_SMOLLM_VOCAB: dict[str, list] = {}


def _gguf_bytes(kvs: list[tuple[str, str, object]]) -> bytes:
    """A GGUF v3 file with these metadata entries and no tensors. kind: u32, f32, str, str[] or i32[]."""
    import struct

    def s(x: str | bytes) -> bytes:
        b = x.encode("utf-8", "surrogateescape") if isinstance(x, str) else x
        return struct.pack("<Q", len(b)) + b

    out = [b"GGUF", struct.pack("<IQQ", 3, 0, len(kvs))]
    for key, kind, val in kvs:
        out.append(s(key))
        if kind == "u32":
            out.append(struct.pack("<II", 4, val))
        elif kind == "f32":
            out.append(struct.pack("<If", 6, val))
        elif kind == "str":
            out.append(struct.pack("<I", 8) + s(val))
        elif kind == "str[]":
            out.append(struct.pack("<IIQ", 9, 8, len(val)))
            out.extend(s(v) for v in val)
        elif kind == "i32[]":
            out.append(struct.pack("<IIQ", 9, 5, len(val)) + struct.pack(f"<{len(val)}i", *val))
    data = b"".join(out)
    return data + b"\0" * (-len(data) % 32)


def _read_gguf_arrays(path: Path, names: tuple[str, ...]) -> dict[str, list]:
    """The named string / int32 array values of a GGUF's metadata (a minimal reader: gguf-py's takes
    seconds on 100k strings)."""
    import struct

    data = path.read_bytes()
    assert data[:4] == b"GGUF"
    _, _, n_kv = struct.unpack_from("<IQQ", data, 4)
    pos = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    out: dict[str, list] = {}

    def string(pos):
        (n,) = struct.unpack_from("<Q", data, pos)
        return data[pos + 8:pos + 8 + n], pos + 8 + n

    def skip(t, pos):
        if t in sizes:
            return pos + sizes[t]
        if t == 8:
            return string(pos)[1]
        et, n = struct.unpack_from("<IQ", data, pos)
        pos += 12
        if et in sizes:
            return pos + sizes[et] * n
        for _ in range(n):
            pos = skip(et, pos)
        return pos

    for _ in range(n_kv):
        key, pos = string(pos)
        (t,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if key.decode() in names and t == 9:
            et, n = struct.unpack_from("<IQ", data, pos)
            items, p = [], pos + 12
            if et == 8:
                for _ in range(n):
                    item, p = string(p)
                    items.append(item)
            elif et == 5:
                items = list(struct.unpack_from(f"<{n}i", data, p))
            out[key.decode()] = items
        pos = skip(t, pos)
    return out


def _write_variant(src: Path, dst: Path, pre: str) -> None:
    """SmolLM2's tokenizer (tokens, types, merges) under another tokenizer.ggml.pre, no tensors."""
    if not _SMOLLM_VOCAB:
        _SMOLLM_VOCAB.update(_read_gguf_arrays(src, ("tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                                                     "tokenizer.ggml.token_type")))
    kvs = [("general.architecture", "str", "llama")]
    kvs += [(f"llama.{k}", "u32", v) for k, v in (("context_length", 2048), ("embedding_length", 64),
                                                  ("block_count", 1), ("feed_forward_length", 128),
                                                  ("attention.head_count", 4))]
    kvs += [("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5),
            ("tokenizer.ggml.model", "str", "gpt2"),
            ("tokenizer.ggml.pre", "str", pre),
            ("tokenizer.ggml.tokens", "str[]", _SMOLLM_VOCAB["tokenizer.ggml.tokens"]),
            ("tokenizer.ggml.token_type", "i32[]", _SMOLLM_VOCAB["tokenizer.ggml.token_type"]),
            ("tokenizer.ggml.merges", "str[]", _SMOLLM_VOCAB["tokenizer.ggml.merges"]),
            ("tokenizer.ggml.bos_token_id", "u32", 1),
            ("tokenizer.ggml.eos_token_id", "u32", 2)]
    dst.write_bytes(_gguf_bytes(kvs))


def _model(key: str) -> Path:
    if key in _PATHS:
        return _PATHS[key]
    if key in REAL:
        path = _models_dir() / REAL[key]
        if not path.is_file():
            pytest.skip(f"model {path} not present")
    elif key.startswith("smollm2-vocab-pre-"):
        path = _scratch() / f"{key}.gguf"
        _write_variant(_model("smollm2"), path, key[len("smollm2-vocab-pre-"):])
    else:
        path = _scratch() / f"{key}.gguf"
        res = subprocess.run([str(_ferry()), "synth", "--preset", key[len("synth-"):], "--type", "F16",
                              "-o", str(path)], capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            pytest.skip(f"ferry synth {key} failed: {res.stderr.strip()}")
    _PATHS[key] = path
    return path


_LLAMAS: dict[str, object] = {}


def _llama(key: str):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    if key not in _LLAMAS:
        _LLAMAS[key] = llama_cpp.Llama(model_path=str(_model(key)), vocab_only=True, verbose=False)
    return _LLAMAS[key]


def escape_line(data: bytes) -> str:
    """One line of a --lines file: \\ \\n \\t \\r escaped, other control bytes (and, when the data is
    not valid UTF-8, every non-ASCII byte) as \\xNN."""
    try:
        data.decode("utf-8")
        raw_high = True
    except UnicodeDecodeError:
        raw_high = False
    out = bytearray()
    for b in data:
        if b == 0x5C:
            out += b"\\\\"
        elif b == 0x0A:
            out += b"\\n"
        elif b == 0x09:
            out += b"\\t"
        elif b == 0x0D:
            out += b"\\r"
        elif b < 0x20 or b == 0x7F or (b >= 0x80 and not raw_high):
            out += b"\\x%02X" % b
        else:
            out.append(b)
    return out.decode("utf-8")


def ferry_tokenize_lines(model: Path, items: list[bytes], tmp_path: Path, add_special: bool,
                         parse_special: bool) -> list[list[int]]:
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(escape_line(b) + "\n" for b in items), encoding="utf-8")
    args = [str(_ferry()), "tokenize", "-m", str(model), "--lines", str(lines)]
    if not add_special:
        args.append("--no-bos")
    if not parse_special:
        args.append("--no-parse-special")
    res = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"ferry tokenize failed ({res.returncode}): {res.stderr.strip()}"
    out = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(out) == len(items), f"{len(out)} result lines for {len(items)} inputs"
    return out


def test_corpus_size():
    assert len(CORPUS) >= 200


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("key", list(MODELS))
def test_ids_match_llama_cpp(key: str, mode: str, tmp_path: Path):
    add_special, parse_special = MODES[mode]
    llm = _llama(key)
    items = [s.encode("utf-8") for s in CORPUS] + list(BYTE_CASES)
    ours = ferry_tokenize_lines(_model(key), items, tmp_path, add_special, parse_special)
    mismatches = []
    for data, got in zip(items, ours):
        want = llm.tokenize(data, add_bos=add_special, special=parse_special)
        if got != want:
            mismatches.append((data, got, want))
    detail = "\n".join(f"  {d!r}\n    ferry: {g}\n    llama: {w}" for d, g, w in mismatches[:10])
    assert not mismatches, f"{key} [{mode}]: {len(mismatches)}/{len(items)} strings differ:\n{detail}"


@pytest.mark.parametrize("key", list(MODELS))
def test_random_strings_match_llama_cpp(key: str, tmp_path: Path):
    llm = _llama(key)
    n = int(os.environ.get("FERRY_TOKENIZER_STRESS", "300"))
    items = stress_items(n, seed=sum(map(ord, key)))
    for add_special, parse_special in MODES.values():
        ours = ferry_tokenize_lines(_model(key), items, tmp_path, add_special, parse_special)
        bad = [(d, g) for d, g in zip(items, ours)
               if g != llm.tokenize(d, add_bos=add_special, special=parse_special)]
        detail = "\n".join(f"  {d!r}\n    ferry: {g}" for d, g in bad[:5])
        assert not bad, f"{key} (bos/special {add_special}): {len(bad)}/{len(items)} random strings differ:\n{detail}"


@pytest.mark.parametrize("key", list(MODELS))
def test_vocab_matches_llama_cpp(key: str):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    llm = _llama(key)
    res = subprocess.run([str(_ferry()), "tokenize", "-m", str(_model(key)), "--dump-vocab"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    ours = json.loads(res.stdout)
    vocab = llm._model.vocab
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    assert ours["n_vocab"] == n
    assert ours["bos"] == llama_cpp.llama_vocab_bos(vocab)
    assert ours["eos"] == llama_cpp.llama_vocab_eos(vocab)
    assert ours["eot"] == llama_cpp.llama_vocab_eot(vocab)
    assert ours["eog"] == [i for i in range(n) if llama_cpp.llama_vocab_is_eog(vocab, i)]

    import ctypes

    buf = ctypes.create_string_buffer(4096)

    def piece(i: int, special: bool) -> str:
        k = llama_cpp.llama_token_to_piece(vocab, i, buf, len(buf), 0, special)
        assert k >= 0
        return buf.raw[:k].hex()

    bad = []
    for special, field in ((False, "pieces"), (True, "pieces_special")):
        for i in range(n):
            if ours[field][i] != piece(i, special):
                bad.append((i, special, ours[field][i], piece(i, special)))
    detail = "\n".join(f"  id {i} special={s}: ferry {a} llama {b}" for i, s, a, b in bad[:10])
    assert not bad, f"{key}: {len(bad)} token pieces differ:\n{detail}"


def test_cli_errors(tmp_path: Path):
    ferry = _ferry()
    res = subprocess.run([str(ferry), "tokenize", "-m", str(tmp_path / "missing.gguf"), "-p", "x"],
                         capture_output=True, text=True)
    assert res.returncode == 1 and res.stderr.startswith("error:"), res.stderr
    res = subprocess.run([str(ferry), "tokenize", "-m", "x.gguf"], capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.startswith("error:"), res.stderr
    bad = tmp_path / "bad.txt"
    bad.write_text("ok\\q\n")
    model = _models_dir() / REAL["smollm2"]
    if not model.is_file():
        pytest.skip("no model present")
    res = subprocess.run([str(ferry), "tokenize", "-m", str(model), "--lines", str(bad)],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "unknown escape" in res.stderr, res.stderr
    # A vocabulary with a pre-tokenizer we do not know is a clear error, not a guess.
    odd = tmp_path / "odd-pre.gguf"
    _write_variant(model, odd, "no-such-pre")
    res = subprocess.run([str(ferry), "tokenize", "-m", str(odd), "-p", "x"], capture_output=True, text=True)
    assert res.returncode == 1 and res.stderr.startswith("error:") and "no-such-pre" in res.stderr, res.stderr
