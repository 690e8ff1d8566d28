"""Vision-language models (Qwen2.5-VL): ferry against llama.cpp's multimodal library on the same files, and
the CLI's errors for bad image input.

The pair is `ferry synth --preset tiny-qwen2.5-vl --mmproj-out ...` (a 2-layer qwen2vl text model and a
4-block vision tower with windowed and full-attention blocks). The images are PNGs written here, so ferry's
decoder (libpng) and the reference (given the same RGB bytes) see identical pixels; everything after that is
compared: the token rows (text, <|vision_start|>, image rows, <|vision_end|>), each image's grid after
resizing, its embeddings, the logits of every row after the last image, and greedy tokens.

Reference: libmtmd and libllama from the installed llama-cpp-python's source with the multimodal part on
($FERRY_MTMD_LIB; else the wheel's own lib folder when it was built with LLAVA_BUILD=ON; else
<repo>/.llama-build/bin, docs/TESTING.md says how to build it); tests/python/mtmd_ref.py
drives them in a subprocess with the clip graph's flash attention off (F32 attention, as ferry's). Without
that build the comparisons skip, saying how to build it (docs/TESTING.md).

Tolerances, in units of the reference's spread (std of the image's embeddings; std of a logits row, at least 1):
embeddings max |diff| F32 0.01 / F16 0.02 / Q8_0 0.2, logits as test_differential.py (F32 and F16: 0.02 max,
0.005 rms; Q8_0 0.25 / 0.06), greedy tokens equal up to a near tie (0.1 spreads).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import ferry_ref
import vision_images

def _mtmd_dir() -> Path:
    """$FERRY_MTMD_LIB, else the installed llama-cpp-python's lib folder when its wheel was built with
    libmtmd, else <repo>/.llama-build/bin."""
    if "FERRY_MTMD_LIB" in os.environ:
        return Path(os.environ["FERRY_MTMD_LIB"])
    try:
        import importlib.util
        spec = importlib.util.find_spec("llama_cpp")
        if spec and spec.origin and (Path(spec.origin).parent / "lib" / "libmtmd.so").is_file():
            return Path(spec.origin).parent / "lib"
    except (ImportError, ValueError):
        pass
    return ferry_ref.REPO / ".llama-build" / "bin"


MTMD_DIR = _mtmd_dir()
N_GEN = 8
TIE = 0.1


@dataclass(frozen=True)
class Case:
    id: str
    dtype: str                      # text model and mmproj matrices
    sizes: tuple[tuple[int, int], ...]  # images (w, h)
    prompt: str
    tol_embd: float
    tol_logits: tuple[float, float]


CASES = [
    # 300 x 200 -> 308 x 196: resized with black bars; 3 x 2 windows, the last ones partial.
    Case("f32-one-image", "F32", ((300, 200),), "<__media__>Describe this image.", 0.01, (0.02, 0.005)),
    # Portrait, upscaled to the 8-token minimum on one side; two images move the M-RoPE time position twice.
    Case("f16-two-images", "F16", ((90, 160), (200, 140)), "Compare <__media__> with <__media__> please.", 0.02,
         (0.02, 0.005)),
    Case("q8-no-marker", "Q8_0", ((640, 480),), "What is in the picture?", 0.2, (0.25, 0.06)),
]


@pytest.fixture(scope="session")
def vision_work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vision")


def _pair(work: Path, dtype: str) -> tuple[Path, Path]:
    lm, mm = work / f"tiny-vl-{dtype}.gguf", work / f"tiny-vl-{dtype}-mmproj.gguf"
    if not lm.is_file():
        res = ferry_ref.run_ferry(["synth", "--preset", "tiny-qwen2.5-vl", "--type", dtype, "-o", str(lm),
                                   "--mmproj-out", str(mm), "--mmproj-type", dtype])
        assert res.returncode == 0, res.stderr
    return lm, mm


def _mtmd_reference(case: Case, lm: Path, mm: Path, images: list[Path], out: Path) -> dict:
    if not (MTMD_DIR / "libmtmd.so").is_file():
        pytest.skip(f"llama.cpp's libmtmd is not built in {MTMD_DIR} (docs/TESTING.md: build it from the "
                    "llama-cpp-python source with the multimodal part on, or set FERRY_MTMD_LIB)")
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=str(MTMD_DIR), MTMD_CPP_LIB=str(MTMD_DIR))
    # llama-mtmd-cli puts one marker per image in front of text that has none; the reference library
    # needs them spelled out.
    prompt = case.prompt if "<__media__>" in case.prompt else "<__media__>" * len(images) + case.prompt
    args = [sys.executable, str(Path(__file__).with_name("mtmd_ref.py")), "--model", str(lm), "--mmproj", str(mm),
            "--prompt", prompt, "--n-gen", str(N_GEN), "--out", str(out)]
    for img in images:
        args += ["--image", str(img)]
    res = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    r = np.load(out)
    return {k: r[k] for k in r.files}


def _ferry(case: Case, lm: Path, mm: Path, images: list[Path], work: Path) -> dict:
    logits, embd = work / f"{case.id}.logits", work / f"{case.id}.embd"
    args = ["run", "-m", str(lm), "--mmproj", str(mm), "-p", case.prompt, "-n", str(N_GEN), "--temp", "0",
            "--ignore-eos", "--json", "--logits-out", str(logits), "--image-embd-out", str(embd), "-t", "2"]
    for img in images:
        args += ["--image", str(img)]
    res = ferry_ref.run_ferry(args)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    out["logits"] = np.fromfile(logits, dtype="<f4").reshape(-1, int(out["n_vocab"]))
    out["embd"] = np.fromfile(embd, dtype="<f4")
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_against_llama_cpp(case: Case, ferry_bin, vision_work):
    lm, mm = _pair(vision_work, case.dtype)
    images = [vision_images.write_png(vision_work / f"{case.id}-{i}.png", vision_images.test_pattern(w, h, seed=i))
              for i, (w, h) in enumerate(case.sizes)]
    ref = _mtmd_reference(case, lm, mm, images, vision_work / f"{case.id}.npz")
    ours = _ferry(case, lm, mm, images, vision_work)

    assert ours["prompt_tokens"] == [int(t) for t in ref["tokens"]], "prompt rows differ"
    assert [(i["grid_w"], i["grid_h"]) for i in ours["images"]] == [tuple(int(v) for v in g) for g in ref["grid"]]

    ref_embd = ref["embd"].astype(np.float64)
    embd = ours["embd"].reshape(ref_embd.shape).astype(np.float64)
    embd_err = float(np.abs(embd - ref_embd).max() / ref_embd.std())
    assert embd_err <= case.tol_embd, f"image embeddings differ by {embd_err:.3e} spreads"

    toks = ours["prompt_tokens"]
    first = max(i for i, t in enumerate(toks) if t == -1) + 1  # the row after the last image row
    rows = ours["logits"][first:].astype(np.float64)
    diverge = next((j for j in range(N_GEN) if ours["tokens"][j] != int(ref["gen"][j])), N_GEN)
    n = len(toks) - first + min(diverge, N_GEN - 1)
    refl = ref["logits"][:n].astype(np.float64)
    rows = rows[:n]
    assert rows.shape == refl.shape, (rows.shape, refl.shape)
    scale = np.maximum(1.0, refl.std(axis=1))
    err_max = (np.abs(rows - refl).max(axis=1) / scale).max()
    err_rms = (np.sqrt(((rows - refl) ** 2).mean(axis=1)) / scale).max()
    tol_max, tol_rms = case.tol_logits
    print(f"{case.id}: embeddings {embd_err:.2e} spreads; logits after the image max {err_max:.3e} rms "
          f"{err_rms:.3e}; greedy {diverge}/{N_GEN}")
    assert err_max <= tol_max and err_rms <= tol_rms, (err_max, err_rms)
    if diverge < N_GEN:  # the runs may part only at a near tie
        row = ref["logits"][len(toks) - first + diverge - 1].astype(np.float64)
        gap = (row.max() - row[ours["tokens"][diverge]]) / max(1.0, row.std())
        assert gap <= TIE, f"greedy tokens part at step {diverge} with a gap of {gap:.3f} spreads"


# ---- errors ----------------------------------------------------------------------------------------------

def _run_error(args: list[str], code: int, text: str) -> None:
    res = ferry_ref.run_ferry(args)
    assert res.returncode == code, (res.returncode, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("error:") and text in lines[-1], res.stderr


def test_bad_images(ferry_bin, vision_work):
    lm, mm = _pair(vision_work, "F32")
    base = ["run", "-m", str(lm), "--mmproj", str(mm), "-p", "hi", "-n", "1"]
    png = vision_images.write_png(vision_work / "ok.png", vision_images.test_pattern(64, 64))
    data = png.read_bytes()

    _run_error(base + ["--image", str(vision_work / "missing.png")], 1, "cannot open image")
    (vision_work / "text.png").write_text("not an image at all")
    _run_error(base + ["--image", str(vision_work / "text.png")], 1, "not a JPEG or PNG")
    (vision_work / "cut.png").write_bytes(data[: len(data) // 2])
    _run_error(base + ["--image", str(vision_work / "cut.png")], 1, "corrupt or truncated PNG")
    # A header that claims 20000 x 20000 pixels (valid CRC): refused before any pixel is decoded.
    import struct
    import zlib
    ihdr = b"IHDR" + struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
    big = data[:8] + struct.pack(">I", 13) + ihdr + struct.pack(">I", zlib.crc32(ihdr) & 0xFFFFFFFF) + data[33:]
    (vision_work / "big.png").write_bytes(big)
    _run_error(base + ["--image", str(vision_work / "big.png")], 1, "too large")
    _run_error(["run", "-m", str(lm), "-p", "hi", "--image", str(png)], 2, "--image needs --mmproj")
    _run_error(base + ["--image", str(png), "--device", "cuda"], 2, "runs on the CPU for now")
    _run_error(["run", "-m", str(lm), "--mmproj", str(mm), "-p", "<__media__> and <__media__>", "--image", str(png)],
               2, "2 image markers")


def test_mismatched_pair(ferry_bin, vision_work):
    _, mm = _pair(vision_work, "F32")
    other = vision_work / "tiny-qwen2.gguf"
    res = ferry_ref.run_ferry(["synth", "--preset", "tiny-qwen2", "--type", "F32", "-o", str(other)])
    assert res.returncode == 0, res.stderr
    png = vision_images.write_png(vision_work / "ok2.png", vision_images.test_pattern(64, 64))
    _run_error(["run", "-m", str(other), "--mmproj", str(mm), "-p", "hi", "--image", str(png)], 2,
               "feeds a qwen2vl language model")
    # The text model given as the projector.
    lm, _ = _pair(vision_work, "F32")
    _run_error(["run", "-m", str(lm), "--mmproj", str(lm), "-p", "hi", "--image", str(png)], 1,
               "not a multimodal projector")
