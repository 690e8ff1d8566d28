"""The ferry CLI's error and output contract (issue 2): bad usage exits 2, a missing, truncated or corrupt
model exits 1, each with exactly one stderr line starting `error:`, never a signal; `run --json` prints
one JSON object with the documented keys; `--logits-out` writes [rows, n_vocab] float32; `inspect`
prints metadata, tensors and totals (and --json parses).

Needs the ferry binary ($FERRY_BUILD/ferry, default /work/main/build/ferry). Tests that need a model use
`ferry synth --preset tiny-llama --type Q8_0`, or the bundled SmolLM2 when synth is not available, and
skip when neither is.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
from cli_helpers import FERRY, assert_error, ferry
MODELS_DIR = Path(os.environ.get("FERRY_MODELS", str(REPO / "models")))

JSON_KEYS = {"prompt_tokens", "tokens", "text", "ttft_ms", "prefill_tok_s", "decode_tok_s"}



@pytest.fixture(scope="session", autouse=True)
def _binary():
    if not FERRY.is_file():
        pytest.skip(f"ferry binary not built at {FERRY} (set FERRY_BUILD)")


@pytest.fixture(scope="session")
def model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "tiny-llama-q8_0.gguf"
    res = ferry("synth", "--preset", "tiny-llama", "--type", "Q8_0", "-o", str(path))
    if res.returncode == 0 and path.is_file():
        return path
    real = MODELS_DIR / "smollm2-135m-instruct-q4_1.gguf"
    if real.is_file():
        return real
    pytest.skip("no model: ferry synth failed and the bundled model is absent")


@pytest.fixture(scope="session")
def model_bytes(model) -> bytes:
    return model.read_bytes()


# ---- bad usage: exit 2 ---------------------------------------------------------------------------

def test_no_command():
    res = ferry()
    assert res.returncode == 2


def test_unknown_command():
    assert_error(ferry("frobnicate"), 2)


@pytest.mark.parametrize("args", [
    ["run", "--no-such-flag"],
    ["run", "-p", "hi"],                                  # -m missing
    ["run", "-m", "x.gguf"],                              # neither -p nor --tokens
    ["run", "-m", "x.gguf", "-p", "hi", "-n", "abc"],
    ["run", "-m", "x.gguf", "-p", "hi", "-n", "-5"],
    ["run", "-m", "x.gguf", "-p", "hi", "--top-p", "7"],
    ["run", "-m", "x.gguf", "-p", "hi", "--min-p", "-1"],
    ["run", "-m", "x.gguf", "-p", "hi", "--temp", "hot"],
    ["run", "-m", "x.gguf", "-p", "hi", "--repeat-penalty", "0"],
    ["run", "-m", "x.gguf", "-p", "hi", "-b", "0"],
    ["run", "-m", "x.gguf", "-p", "hi", "-t", "-3"],
    ["run", "-m", "x.gguf", "-p", "hi", "--device", "tpu"],
    ["run", "-m", "x.gguf", "-p", "hi", "--tokens", "1,2"],  # both prompt forms
    ["run", "-m", "x.gguf", "-p"],                          # flag without its value
    ["inspect"],
    ["inspect", "a.gguf", "b.gguf"],
    ["inspect", "--bogus", "a.gguf"],
])
def test_bad_usage_exits_2(args):
    assert_error(ferry(*args), 2)


def test_help_exits_0():
    for cmd in ("run", "inspect"):
        res = ferry(cmd, "--help")
        assert res.returncode == 0
        assert "--json" in res.stdout


def test_token_outside_vocab_is_usage_error(model):
    assert_error(ferry("run", "-m", str(model), "--tokens", "1,999999999", "-n", "1"), 2)


def test_garbage_token_list(model):
    assert_error(ferry("run", "-m", str(model), "--tokens", "1,two,3", "-n", "1"), 2)


# ---- missing / corrupt model: exit 1 ------------------------------------------------------------

def test_missing_model(tmp_path):
    assert_error(ferry("run", "-m", str(tmp_path / "absent.gguf"), "-p", "hi", "-n", "1"), 1)
    assert_error(ferry("inspect", str(tmp_path / "absent.gguf")), 1)


def test_directory_as_model(tmp_path):
    assert_error(ferry("run", "-m", str(tmp_path), "-p", "hi", "-n", "1"), 1)
    assert_error(ferry("inspect", str(tmp_path)), 1)


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "text.gguf"
    bad.write_text("this is not a model\n" * 100)
    assert_error(ferry("run", "-m", str(bad), "-p", "hi", "-n", "1"), 1)
    assert_error(ferry("inspect", str(bad)), 1)


def test_empty_file(tmp_path):
    bad = tmp_path / "empty.gguf"
    bad.write_bytes(b"")
    assert_error(ferry("run", "-m", str(bad), "-p", "hi", "-n", "1"), 1)
    assert_error(ferry("inspect", str(bad)), 1)


@pytest.mark.parametrize("fraction", [0.0005, 0.01, 0.1, 0.5, 0.9, 0.999])
def test_truncated_model(tmp_path, model_bytes, fraction):
    cut = max(4, int(len(model_bytes) * fraction))
    bad = tmp_path / f"cut-{cut}.gguf"
    bad.write_bytes(model_bytes[:cut])
    assert_error(ferry("run", "-m", str(bad), "-p", "hi", "-n", "1"), 1)
    assert_error(ferry("inspect", str(bad)), 1)


def test_absurd_tensor_count(tmp_path, model_bytes):
    # header: magic, u32 version, u64 n_tensors, u64 n_kv
    bad = tmp_path / "absurd.gguf"
    data = bytearray(model_bytes)
    struct.pack_into("<Q", data, 8, 1 << 60)
    bad.write_bytes(bytes(data))
    assert_error(ferry("run", "-m", str(bad), "-p", "hi", "-n", "1"), 1)
    assert_error(ferry("inspect", str(bad)), 1)


def test_unwritable_logits_out(tmp_path, model):
    res = ferry("run", "-m", str(model), "-p", "hi", "-n", "1", "--logits-out", str(tmp_path / "no" / "dir" / "x.bin"))
    assert_error(res, 1)


# ---- output contract ----------------------------------------------------------------------------

def run_json(model: Path, *extra: str) -> dict:
    res = ferry("run", "-m", str(model), "-p", "Once upon a time", "-n", "8", "-t", "2", "-c", "256", "--json", *extra)
    assert res.returncode == 0, res.stderr
    lines = [l for l in res.stdout.splitlines() if l.strip()]
    assert len(lines) == 1, f"--json must print exactly one line of JSON, got {len(lines)}"
    return json.loads(lines[0])


def test_run_json_keys(model):
    out = run_json(model, "--temp", "0", "--ignore-eos")
    assert JSON_KEYS <= out.keys(), JSON_KEYS - out.keys()
    assert all(isinstance(t, int) for t in out["prompt_tokens"]) and out["prompt_tokens"]
    assert all(isinstance(t, int) for t in out["tokens"]) and len(out["tokens"]) == 8
    assert isinstance(out["text"], str)
    for k in ("ttft_ms", "prefill_tok_s", "decode_tok_s"):
        assert isinstance(out[k], (int, float)) and out[k] >= 0, k
    assert out["ttft_ms"] > 0 and out["prefill_tok_s"] > 0 and out["decode_tok_s"] > 0


def test_run_greedy_is_deterministic(model):
    a = run_json(model, "--temp", "0", "--ignore-eos")
    b = run_json(model, "--temp", "0", "--ignore-eos", "-b", "2")  # chunked prefill, same tokens
    assert a["tokens"] == b["tokens"]


def test_run_seed_reproducible(model):
    a = run_json(model, "--temp", "1.0", "--top-k", "0", "--top-p", "1", "--min-p", "0", "-s", "7", "--ignore-eos")
    b = run_json(model, "--temp", "1.0", "--top-k", "0", "--top-p", "1", "--min-p", "0", "-s", "7", "--ignore-eos")
    assert a["tokens"] == b["tokens"]


def test_run_tokens_prompt_used_as_is(model):
    res = ferry("run", "-m", str(model), "--tokens", "1, 2,3", "-n", "2", "--temp", "0", "--json", "-c", "64")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["prompt_tokens"] == [1, 2, 3]


def test_run_text_mode_streams_and_reports(model):
    res = ferry("run", "-m", str(model), "-p", "Hello", "-n", "4", "--temp", "0", "--ignore-eos", "-c", "64")
    assert res.returncode == 0, res.stderr
    assert "TTFT" in res.stderr and "tok/s" in res.stderr
    assert not res.stderr.startswith("error:")


def test_logits_out_shape(tmp_path, model):
    path = tmp_path / "logits.bin"
    out = run_json(model, "--temp", "0", "--ignore-eos", "--logits-out", str(path))
    n_vocab = out["n_vocab"]
    rows = len(out["prompt_tokens"]) + len(out["tokens"]) - 1
    logits = np.fromfile(path, dtype="<f4")
    assert logits.size == rows * n_vocab
    logits = logits.reshape(rows, n_vocab)
    assert np.isfinite(logits).all()
    n_prompt = len(out["prompt_tokens"])
    # greedy: each generated token is the argmax of the row before it
    assert [int(np.argmax(logits[n_prompt - 1 + j])) for j in range(len(out["tokens"]))] == out["tokens"]


def test_run_json_object_and_schema(tmp_path, model):
    # --json-object: the text is (a prefix of) one object; "json" when it closed. With a schema whose only
    # documents are {"a": 1} and {"a": 2} (whitespace aside), even a random model closes it.
    def run(n, *extra):
        res = ferry("run", "-m", str(model), "-p", "Once upon a time", "-n", n, "-t", "2", "-c", "512", "--json", *extra)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    out = run("64", "--temp", "0", "--json-object")
    assert out["text"].lstrip().startswith("{"), out["text"]
    assert out["stop"] in ("json", "length")
    if out["stop"] == "json":
        assert isinstance(json.loads(out["text"]), dict)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"a": {"enum": [1, 2]}}, "required": ["a"],
                                  "additionalProperties": False}))
    for temp in ("0", "1.5"):
        out = run("400", "--temp", temp, "--json-schema-file", str(schema))
        assert out["stop"] == "json", out
        assert json.loads(out["text"]) in ({"a": 1}, {"a": 2})
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}')
    res = ferry("run", "-m", str(model), "-p", "x", "--json-schema-file", str(bad))
    assert_error(res, 2)
    assert "'pattern' is not supported" in res.stderr
    assert_error(ferry("run", "-m", str(model), "-p", "x", "--json-schema-file", str(tmp_path / "none.json")), 1)
    assert_error(ferry("run", "-m", str(model), "-p", "x", "--json-object", "--json-schema-file", str(schema)), 2)


def test_context_limit_stops_cleanly(model):
    res = ferry("run", "-m", str(model), "--tokens", "1,2,3,4", "-n", "100", "--temp", "0", "--ignore-eos",
                "-c", "8", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert len(out["tokens"]) <= 5  # positions 4..7 evaluated, one token sampled from each + the prompt's


def test_prompt_longer_than_context(model):
    assert_error(ferry("run", "-m", str(model), "--tokens", ",".join(["1"] * 20), "-n", "1", "-c", "8"), 2)


def test_inspect_text(model):
    res = ferry("inspect", str(model))
    assert res.returncode == 0, res.stderr
    assert "general.architecture" in res.stdout
    assert "token_embd.weight" in res.stdout
    assert "totals" in res.stdout


def test_inspect_json(model):
    res = ferry("inspect", str(model), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert "general.architecture" in out["metadata"]
    names = [t["name"] for t in out["tensors"]]
    assert "token_embd.weight" in names
    assert out["totals"]["bytes"] == sum(t["bytes"] for t in out["tensors"])
    toks = out["metadata"].get("tokenizer.ggml.tokens")
    if isinstance(toks, dict):  # long arrays are abbreviated
        assert toks["count"] > len(toks["first"])


def test_inspect_sublayers(model):
    res = ferry("inspect", str(model))
    assert res.returncode == 0, res.stderr
    assert "sub-layers" in res.stdout
    out = json.loads(ferry("inspect", str(model), "--json").stdout)
    subs = out.get("sublayers")
    assert subs, out.get("sublayers_error")
    kinds = [s["kind"] for s in subs]
    assert kinds[0] == "embed" and kinds[-1] == "head"
    n_layer = out["spec"]["n_layer"]
    assert kinds.count("attn") == n_layer
    assert all(s["bytes"] > 0 for s in subs)


def ferry_env(extra: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(FERRY), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **extra})


@pytest.mark.parametrize("var,value", [("FERRY_CPU_ISA", "avx9"), ("FERRY_CPU_HUGEPAGES", "yes"),
                                       ("FERRY_GEMM_STAGING_MB", "16M")])
def test_bad_environment_value_is_usage_error(model, var, value):
    """docs/ENVIRONMENT.md: a bad value is one error line naming the variable, before any work."""
    res = ferry_env({var: value}, "inspect", str(model))
    assert_error(res, 2)
    assert f"{var}='{value}'" in res.stderr


def test_ignored_experiment_switch_is_named(model):
    """A production build ignores the FERRY_CUDA_* A/B switches and says which are set."""
    res = ferry_env({"FERRY_CUDA_FUSE": "0", "FERRY_CUDA_ABLATE": "norm"}, "inspect", str(model))
    assert res.returncode == 0, res.stderr
    if "this build ignores" not in res.stderr:
        pytest.skip("an experiments build (-DFERRY_EXPERIMENTS=ON) reads the FERRY_CUDA_* switches")
    warning = [l for l in res.stderr.splitlines() if "this build ignores" in l]
    assert len(warning) == 1 and "FERRY_CUDA_FUSE" in warning[0] and "FERRY_CUDA_ABLATE" in warning[0]


def cpu_levels() -> list[str]:
    """The CPU kernel levels this machine has, from /proc/cpuinfo's flags (x86 Linux)."""
    try:
        flags = next(l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("flags")).split()
    except (OSError, StopIteration):
        return ["scalar"]
    have = set(flags)
    levels = ["scalar"]
    if {"avx2", "fma", "f16c"} <= have:
        levels.append("avx2")
        if "avx_vnni" in have:
            levels.append("avx2-vnni")
        if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"} <= have:
            levels.append("avx512")
    return levels


@pytest.mark.parametrize("cmd", ["run", "bench"])
def test_cpu_isa_unknown_is_usage_error(model, cmd):
    """--cpu-isa: an unknown level is one error line naming the accepted ones (exit 2)."""
    res = ferry(cmd, "-m", str(model), "-p", "1", "-n", "1", "--cpu-isa", "avx9")
    assert_error(res, 2)
    assert "avx2-vnni" in res.stderr


def test_cpu_isa_missing_level_is_error(model):
    """--cpu-isa with a level this CPU lacks: one error line naming the levels it has (exit 2)."""
    missing = [l for l in ("avx2", "avx2-vnni", "avx512") if l not in cpu_levels()]
    if not missing:
        # A CPU with every vector level: the level name it cannot know is refused the same way.
        res = ferry("bench", "-m", str(model), "-p", "1", "-n", "1", "--no-membw", "--cpu-isa", "avx1024")
        assert_error(res, 2)
        assert "avx1024" in res.stderr and "scalar" in res.stderr
        return
    res = ferry("bench", "-m", str(model), "-p", "1", "-n", "1", "--no-membw", "--cpu-isa", missing[0])
    assert_error(res, 2)
    assert "cannot run" in res.stderr and "scalar" in res.stderr


def test_cpu_isa_levels_run_and_report(model):
    """Every level this CPU has runs, and `ferry bench --json` reports the level it ran (numerical parity
    of the levels is the kernel tests' business: tests/kernels)."""
    for level in cpu_levels():
        bench = ferry("bench", "-m", str(model), "-p", "16", "-n", "2", "--no-membw", "--json", "--cpu-isa", level)
        assert bench.returncode == 0, bench.stderr
        assert json.loads(bench.stdout)["cpu_isa"] == level
        run = ferry("run", "-m", str(model), "-p", "Hello", "-n", "4", "--json", "--cpu-isa", level)
        assert run.returncode == 0, run.stderr
