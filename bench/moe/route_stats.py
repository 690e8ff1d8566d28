#!/usr/bin/env python3
"""Routing statistics of a mixture-of-experts GGUF: how skewed expert popularity is and how much the
experts of one token are reused by the next, per layer, from llama.cpp's router logits (through its eval
callback; ferry routes identically, tests/python/test_differential.py). Use it on `ferry synth --route-skew`
files to see what a skew gives, or on a real model for comparison.

    bench/moe/route_stats.py MODEL.gguf [--tokens N] [--text FILE] [--json]

The prompt is N tokens of the text (default: a built-in mix of prose and code, repeated as needed).
Per layer it prints:
  - top share: the most popular expert's share of the tokens (a token counts once per expert it runs);
  - zipf: minus the slope of log share against log rank over the upper half of the ranks;
  - hot10: the fraction of all picks that go to the 10 % most popular experts (uniform routing: 0.10);
  - reuse: the mean fraction of a token's experts that the previous token ran too, next to the fraction
    popularity alone gives (sum of squared pick shares over n_used): above it is locality.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "python"))
import ferry_ref  # noqa: E402

TEXT = (
    "The history of the river town begins with a ford, a mill and a market that met every Thursday. "
    "Merchants carried salt, wool and iron along the valley road, and the bridge that replaced the ford "
    "in 1420 still stands. def parse(line):\n    key, value = line.split('=', 1)\n    return key.strip(), "
    "int(value)\nfor i in range(10):\n    print(i * i)\n"
    "In the spring the meadows flood, and the children count herons from the old tower while their parents "
    "argue about the price of grain, the weather, and whether the new school should have a library. "
)


def stats(router: dict[int, np.ndarray], n_used: int) -> list[dict]:
    out = []
    for layer, logits in router.items():
        n_tok, n_expert = logits.shape
        picks = np.argsort(-logits, axis=1, kind="stable")[:, :n_used]
        share = np.bincount(picks.ravel(), minlength=n_expert) / n_tok  # sums to n_used
        ranked = np.sort(share)[::-1]
        upper = max(2, n_expert // 2)
        nz = ranked[:upper] > 0
        slope = np.polyfit(np.log(np.arange(1, upper + 1)[nz]), np.log(ranked[:upper][nz]), 1)[0] if nz.sum() > 1 else 0
        hot = ranked[: max(1, n_expert // 10)].sum() / n_used
        sets = [set(p) for p in picks.tolist()]
        reuse = np.mean([len(sets[t] & sets[t - 1]) / n_used for t in range(1, n_tok)])
        chance = float((share**2).sum() / n_used)
        out.append(dict(layer=layer, top_share=float(ranked[0]), zipf=float(-slope), hot10=float(hot),
                        reuse=float(reuse), reuse_chance=chance))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--text", help="prompt text file (default: built-in)")
    ap.add_argument("--used", type=int, default=0, help="experts per token (default: the file's expert_used_count)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from gguf import GGUFReader

    fields = GGUFReader(a.model).fields
    arch = fields["general.architecture"].contents()
    n_used = a.used or int(fields[f"{arch}.expert_used_count"].contents())
    text = Path(a.text).read_text() if a.text else TEXT
    llm = ferry_ref.llama_load(Path(a.model), n_ctx=a.tokens + 8)
    ids = ferry_ref.llama_tokenize(llm, text)
    llm.close()
    while len(ids) < a.tokens:
        ids += ids
    ids = ids[: a.tokens]
    rows = stats(ferry_ref.llama_router_logits(Path(a.model), ids, n_ctx=a.tokens + 8), n_used)
    if a.json:
        print(json.dumps(dict(model=a.model, tokens=len(ids), n_used=n_used, layers=rows), indent=1))
        return 0
    print(f"{a.model}: {len(ids)} tokens, {n_used} experts per token")
    print(f"{'layer':>5} {'top share':>9} {'zipf':>5} {'hot10':>6} {'reuse':>6} {'by chance':>9}")
    for r in rows:
        print(f"{r['layer']:5d} {r['top_share']:9.3f} {r['zipf']:5.2f} {r['hot10']:6.2f} {r['reuse']:6.3f} "
              f"{r['reuse_chance']:9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
