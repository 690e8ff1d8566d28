"""Differential tests: ferry's CPU path against llama.cpp (llama-cpp-python) on the same GGUF files.

Models: the two bundled real models (SmolLM2-135M-Instruct Q4_1, Gemma-3-270M Q4_K_M) and tiny synthetic
models of every architecture (tiny-llama, tiny-qwen2, tiny-qwen3, tiny-gemma3) in every weight type
(F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K), written by `ferry synth`.

For each model the same prompt ids go through both (ferry gets them with `--tokens`, so the tokenizer is
not under test here; tests/python has its own tokenizer tests), then 32 greedy tokens.

Contract (also in docs/TESTING.md):
- Logits: at every prompt position, and at every generated position while the two runs agree,
      max_i |ferry_i - llama_i|  <=  TOL * max(1, std(llama row))
  with TOL = 0.02 for the real models and 0.05 for the synthetic ones (random weights give flat,
  noisy logit distributions whose spread is a poor yardstick, and they amplify rounding more).
  Both engines round activations to 8-bit blocks before quantized dot products, in different
  summation orders; the tolerance covers that, while any real math error (a wrong RoPE pairing, norm,
  mask, scale) is off by a large fraction of the spread.
- Greedy: the 32 tokens are identical. For the real models, exactly. For synthetic models a divergence
  is accepted only at a near tie: where llama.cpp's own logit of the token ferry picked is within
  TOL * max(1, std) of llama.cpp's top logit at that step. Such cases are counted and printed in the
  session summary ("greedy divergences accepted as near ties").

Skips cleanly when llama-cpp-python, the ferry binary, a real model file, or `ferry synth` for a
preset/type is missing. Environment: FERRY_BUILD (binary folder, default /work/main/build),
FERRY_MODELS (real models, default <repo>/models), FERRY_DIFF_DEVICE (default cpu).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import ferry_ref

N_GEN = 32
TOL_REAL = 0.02
TOL_SYNTH = 0.05
PROMPT_TEXT = ("The capital of France is Paris. The quick brown fox jumps over the lazy dog, and then "
               "def add(a, b):\n    return a + b  # 12345")
N_PROMPT_SYNTH = 24

MODELS_DIR = Path(os.environ.get("FERRY_MODELS", str(ferry_ref.REPO / "models")))
DEVICE = os.environ.get("FERRY_DIFF_DEVICE", "cpu")
REAL_MODELS = {
    "smollm2-135m-q4_1": "smollm2-135m-instruct-q4_1.gguf",
    "gemma3-270m-q4_k_m": "gemma-3-270m-q4_k_m.gguf",
}
PRESETS = ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3"]
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]


@dataclass(frozen=True)
class Case:
    id: str
    real: bool
    file: str = ""      # real: file name under MODELS_DIR
    preset: str = ""    # synthetic
    dtype: str = ""
    batch: int = 0      # ferry -b (0: default); small values exercise chunked prefill

    @property
    def tol(self) -> float:
        return TOL_REAL if self.real else TOL_SYNTH


CASES = [Case(id=k, real=True, file=v) for k, v in REAL_MODELS.items()] + [
    Case(id=f"{p}-{t}", real=False, preset=p, dtype=t, batch=7 if i % 2 else 0)
    for p in PRESETS for i, t in enumerate(TYPES)
]


@dataclass
class Result:
    ours: ferry_ref.Run
    ref: ferry_ref.Run
    diverge: int          # first step where greedy tokens differ (N_GEN if none)
    compared_rows: int    # rows comparable: prompt rows + generated rows before the divergence


def _model_path(case: Case, ferry_bin: Path, work: Path) -> Path:
    if case.real:
        path = MODELS_DIR / case.file
        if not path.is_file():
            pytest.skip(f"real model {path} not present (the setup script installs it)")
        return path
    path = work / f"{case.preset}-{case.dtype}.gguf"
    if not path.is_file():
        res = ferry_ref.run_ferry(["synth", "--preset", case.preset, "--type", case.dtype, "-o", str(path)])
        if res.returncode != 0 or not path.is_file():
            pytest.skip(f"ferry synth --preset {case.preset} --type {case.dtype} failed: {res.stderr.strip()[:200]}")
    return path


def _prompt(case: Case, llm) -> list[int]:
    ids = ferry_ref.llama_tokenize(llm, PROMPT_TEXT)
    if case.real:
        return ids
    ids = ids[:N_PROMPT_SYNTH]
    if len(ids) < 8:  # a synthetic vocabulary too small to spell the text: random ids instead
        rng = np.random.default_rng(1234)
        ids = ids[:1] + [int(x) for x in rng.integers(0, llm.n_vocab(), N_PROMPT_SYNTH - 1)]
    return ids


def _compute(case: Case, ferry_bin: Path, work: Path) -> Result:
    model = _model_path(case, ferry_bin, work)
    llm = ferry_ref.llama_load(model, n_ctx=256)
    try:
        prompt = _prompt(case, llm)
        ref = ferry_ref.llama_greedy(llm, prompt, N_GEN)
    finally:
        if hasattr(llm, "close"):
            llm.close()
    ours = ferry_ref.ferry_greedy(model, prompt, N_GEN, work / f"{case.id}.logits", n_ctx=256,
                                  batch=case.batch or None, device=DEVICE)
    diverge = next((j for j in range(N_GEN) if ours.tokens[j:j + 1] != ref.tokens[j:j + 1]), N_GEN)
    return Result(ours=ours, ref=ref, diverge=diverge, compared_rows=len(prompt) + min(diverge, N_GEN - 1))


@pytest.fixture(scope="session")
def diff_work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("differential")


@pytest.fixture(scope="session")
def diff_results(llama_cpp, ferry_bin, diff_work):
    """case id -> Result (or the skip/failure it raised), computed once per model for the session."""
    cache: dict[str, object] = {}

    def get(case: Case) -> Result:
        if case.id not in cache:
            try:
                cache[case.id] = _compute(case, ferry_bin, diff_work)
            except BaseException as e:  # noqa: BLE001 - remembered so the sibling test reports it too
                cache[case.id] = e
        value = cache[case.id]
        if isinstance(value, BaseException):
            raise value
        return value

    return get


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_logits(case: Case, diff_results, diff_summary):
    r = diff_results(case)
    n_prompt = len(r.ref.prompt)
    assert r.ours.prompt == r.ref.prompt
    assert r.ours.logits.shape == r.ref.logits.shape, (r.ours.logits.shape, r.ref.logits.shape)
    assert np.isfinite(r.ours.logits).all(), "ferry produced non-finite logits"
    n = r.compared_rows
    errs = ferry_ref.row_errors(r.ours.logits[:n], r.ref.logits[:n])
    worst = int(np.argmax(errs))
    s = diff_summary.setdefault(case.id, {})
    s.update(rows=n, max_err=float(errs.max()), prompt_max_err=float(errs[:n_prompt].max()))
    assert errs.max() <= case.tol, (
        f"{case.id}: logits row {worst} ({'prompt' if worst < n_prompt else 'generated'}) off by "
        f"{errs[worst]:.3e} x spread > tol {case.tol}; rows over tol: {int((errs > case.tol).sum())}/{n}")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_greedy(case: Case, diff_results, diff_summary):
    r = diff_results(case)
    n_prompt = len(r.ref.prompt)
    assert len(r.ours.tokens) == N_GEN, f"ferry generated {len(r.ours.tokens)} tokens, not {N_GEN}"
    # ferry's greedy choices follow its own logits (the sampler path, lowest id on ties).
    for j, tok in enumerate(r.ours.tokens):
        assert tok == int(np.argmax(r.ours.logits[n_prompt - 1 + j])), f"greedy token {j} is not ferry's argmax"
    s = diff_summary.setdefault(case.id, {})
    if r.diverge == N_GEN:
        s["greedy"] = f"{N_GEN}/{N_GEN}"
        return
    j = r.diverge
    row = r.ref.logits[n_prompt - 1 + j].astype(np.float64)
    ours_tok, ref_tok = r.ours.tokens[j], r.ref.tokens[j]
    gap = float(row[ref_tok] - row[ours_tok])  # >= 0: llama.cpp's preference for its own pick
    allowed = case.tol * ferry_ref.row_scale(row)
    s["greedy"] = f"{j}/{N_GEN}"
    msg = (f"{case.id}: greedy token {j} differs: ferry {ours_tok}, llama.cpp {ref_tok}; llama.cpp's logit gap "
           f"{gap:.4f} (tolerance {allowed:.4f}); ferry {r.ours.tokens}, llama.cpp {r.ref.tokens}")
    if case.real or gap > allowed:
        pytest.fail(msg)
    s.update(near_tie=True, near_tie_step=j, near_tie_margin=gap)
