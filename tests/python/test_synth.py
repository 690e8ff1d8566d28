"""`ferry synth` files are valid for other readers: for every tiny preset x every weight type, gguf-py
reads the file (metadata, shapes, every tensor dequantizes to finite values) and llama.cpp
(llama-cpp-python) loads it, round-trips text through its tokenizer and gives finite logits.
Also the CLI contract: --list, exit 2 on unknown preset / unsupported type / a --route-skew the preset cannot
take, same seed -> same bytes, and --route-skew skewing expert popularity (through llama.cpp's router logits).

Skips cleanly without the ferry binary (FERRY_BUILD) or without llama_cpp (llama tests only).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

import ferry_ref

PRESETS = {  # preset -> (architecture, layers, d, vocab)
    "tiny-llama": ("llama", 2, 256, 1024),
    "tiny-qwen2": ("qwen2", 2, 256, 1024),
    "tiny-qwen3": ("qwen3", 2, 256, 1024),
    "tiny-gemma3": ("gemma3", 6, 256, 512),
    "tiny-qwen3moe": ("qwen3moe", 2, 256, 1024),
    "tiny-mixtral": ("llama", 2, 256, 1024),
}
MOE = {"tiny-qwen3moe": (16, 4), "tiny-mixtral": (8, 2)}  # preset -> (experts, used per token)
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
TEXT = "The quick brown fox jumps over the lazy dog. def add(a, b): return a + b  # 12345"


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("synth")


@pytest.fixture(scope="session")
def synth_file(ferry_bin, synth_dir):
    """(preset, type) -> path of the synthesized file, made once per session."""
    made: dict[tuple[str, str], Path] = {}

    def get(preset: str, dtype: str, seed: int = 0) -> Path:
        key = (preset, dtype, seed)
        if key not in made:
            path = synth_dir / f"{preset}-{dtype}-{seed}.gguf"
            res = ferry_ref.run_ferry(["synth", "--preset", preset, "--type", dtype, "-o", str(path),
                                       "--seed", str(seed)])
            assert res.returncode == 0, res.stderr
            made[key] = path
        return made[key]

    return get


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("preset", list(PRESETS))
def test_gguf_py_reads(synth_file, preset, dtype):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    arch, n_layer, d, n_vocab = PRESETS[preset]
    r = GGUFReader(str(synth_file(preset, dtype)))
    fields = r.fields
    assert fields["general.architecture"].contents() == arch
    assert fields[f"{arch}.block_count"].contents() == n_layer
    assert fields[f"{arch}.embedding_length"].contents() == d
    assert len(fields["tokenizer.ggml.tokens"].data) == n_vocab
    assert len(fields["tokenizer.ggml.token_type"].data) == n_vocab
    names = {t.name for t in r.tensors}
    assert "token_embd.weight" in names and "output_norm.weight" in names
    assert f"blk.{n_layer - 1}.ffn_down{'_exps' if preset in MOE else ''}.weight" in names
    if preset in MOE:
        assert fields[f"{arch}.expert_count"].contents() == MOE[preset][0]
        assert fields[f"{arch}.expert_used_count"].contents() == MOE[preset][1]
    for t in r.tensors:
        x = dequantize(t.data, t.tensor_type)
        assert np.isfinite(x).all(), t.name
        if len(t.shape) >= 2:  # matrices and stacked experts in the type; MoE routers in F32
            router = t.name.endswith("ffn_gate_inp.weight")
            assert t.tensor_type.name == ("F32" if router else dtype), t.name
            assert x.size == int(np.prod([int(n) for n in t.shape]))
            assert 0.01 < float(np.std(x)) < 1.0, t.name
        else:
            assert t.tensor_type.name == "F32", t.name


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("preset", list(PRESETS))
def test_llama_cpp_runs(llama_cpp, synth_file, preset, dtype):
    path = synth_file(preset, dtype)
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=128, logits_all=True, n_threads=2, n_threads_batch=2,
                          n_gpu_layers=0, seed=0, verbose=False)
    try:
        assert llm.n_vocab() == PRESETS[preset][3]
        ids = llm.tokenize(TEXT.encode(), add_bos=False, special=False)
        assert llm.detokenize(ids).decode() == TEXT  # the vocabulary spells any text
        assert len(ids) < len(TEXT)  # and merges fire
        prompt = llm.tokenize(TEXT.encode(), add_bos=True, special=False)[:24]
        llm.eval(prompt)
        logits = np.asarray(llm.scores[: llm.n_tokens], dtype=np.float32)
        assert logits.shape == (len(prompt), PRESETS[preset][3])
        assert np.isfinite(logits).all()
        assert 0.5 < float(logits[-1].std()) < 20.0  # a real spread, no blow-up
    finally:
        if hasattr(llm, "close"):
            llm.close()


def test_list(ferry_bin):
    res = ferry_ref.run_ferry(["synth", "--list"])
    assert res.returncode == 0
    for name in [*PRESETS, "llama3-8b", "minitron-8b", "qwen3-4b", "qwen3-8b", "gemma3-4b"]:
        assert name in res.stdout


@pytest.mark.parametrize("args", [
    ["--preset", "no-such-preset", "--type", "Q4_K"],
    ["--preset", "tiny-llama", "--type", "Q8_K"],
    ["--preset", "tiny-llama", "--type", "IQ4_XS"],
    ["--preset", "tiny-llama"],
])
def test_usage_errors(ferry_bin, synth_dir, args):
    out = synth_dir / "bad.gguf"
    res = ferry_ref.run_ferry(["synth", *args, "-o", str(out)])
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert not out.exists()


@pytest.mark.parametrize("args", [
    ["--preset", "tiny-llama", "--type", "F16", "--route-skew", "1"],  # no experts
    ["--preset", "tiny-qwen3moe", "--type", "F16", "--route-skew", "-1"],
    ["--preset", "tiny-qwen3moe", "--type", "F16", "--route-skew", "nan"],
])
def test_route_skew_usage_errors(ferry_bin, synth_dir, args):
    out = synth_dir / "bad.gguf"
    res = ferry_ref.run_ferry(["synth", *args, "-o", str(out)])
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert not out.exists()


def _top_quarter_share(router: dict[int, np.ndarray], n_used: int) -> float:
    """Mean over layers of the share of all picks that go to the most popular quarter of the experts."""
    shares = []
    for logits in router.values():
        picks = np.argsort(-logits, axis=1, kind="stable")[:, :n_used]
        count = np.sort(np.bincount(picks.ravel(), minlength=logits.shape[1]))[::-1]
        shares.append(count[: logits.shape[1] // 4].sum() / picks.size)
    return float(np.mean(shares))


def test_route_skew_skews_popularity(llama_cpp, ferry_bin, synth_dir):
    """--route-skew 0: near-uniform routing (a quarter of the experts take about a quarter of the picks);
    larger S: the popular quarter takes more (bench/moe/route_stats.py has the per-layer details)."""
    n_expert, n_used = MOE["tiny-qwen3moe"]
    ids = list(np.random.default_rng(7).integers(0, 1024, 256))
    share = {}
    for s in ("0", "0.5", "2"):
        path = synth_dir / f"skew-{s}.gguf"
        res = ferry_ref.run_ferry(["synth", "--preset", "tiny-qwen3moe", "--type", "F16", "--route-skew", s,
                                   "-o", str(path)])
        assert res.returncode == 0, res.stderr
        share[s] = _top_quarter_share(ferry_ref.llama_router_logits(path, ids, n_ctx=300), n_used)
    assert share["0"] < 0.45, share
    assert share["0"] < share["0.5"] < share["2"], share
    assert share["2"] > 0.7, share


def test_deterministic(synth_file):
    def sha(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    a = synth_file("tiny-qwen3", "Q4_K", 0)
    again = a.with_name("again.gguf")
    res = ferry_ref.run_ferry(["synth", "--preset", "tiny-qwen3", "--type", "Q4_K", "-o", str(again), "-t", "1"])
    assert res.returncode == 0, res.stderr
    assert sha(a) == sha(again)
    assert sha(a) != sha(synth_file("tiny-qwen3", "Q4_K", 1))
