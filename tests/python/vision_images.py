"""Test images for the vision tests: PNG (8-bit RGB, filter 0, lossless, so every decoder sees the same
pixels) and a synthetic test pattern."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np


def write_png(path: Path, rgb: np.ndarray) -> Path:
    h, w, _ = rgb.shape
    rgb = rgb.astype(np.uint8)
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
           chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    Path(path).write_bytes(png)
    return Path(path)


def test_pattern(w: int, h: int, seed: int = 0) -> np.ndarray:
    """Gradients with texture and noise: every resize tap and every patch sees different values."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([xx * 255 // max(1, w - 1), yy * 255 // max(1, h - 1), ((xx * 3 + yy * 5) * 7) % 256], -1)
    return np.clip(img + rng.integers(-24, 24, img.shape), 0, 255).astype(np.uint8)
