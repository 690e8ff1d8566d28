#!/usr/bin/env python3
"""Side-by-side CPU speed of ferry and llama.cpp on one GGUF, same threads, same prompt/decode lengths.

ferry:     `ferry bench -m MODEL -p P -n N -t T --json` (prefill tok/s, decode tok/s, CPU ms per token).
llama.cpp: `llama-bench -m MODEL -p P -n N -t T -ngl 0 -o json` when --llama-bench is given, else
           llama-cpp-python (eval of P random tokens, then N single-token evals; CPU time from getrusage).
The runs alternate (ferry, llama.cpp, ferry, ...) --rounds times so both see the same machine load;
the best round of each is reported (on a shared machine, the least-disturbed run is the fairest).

Usage: compare_llamacpp.py --ferry build/ferry -m model.gguf [-p 512] [-n 128] [-t 2] [--rounds 2]
                           [--llama-bench /path/to/llama-bench] [--markdown]
"""
import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time


def run_ferry(ferry, model, p, n, t):
    out = subprocess.run([ferry, "bench", "-m", model, "-p", str(p), "-n", str(n), "-t", str(t), "--json"],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    return {"pp": j["prefill_tok_s"], "tg": j["decode_tok_s"], "pp_cpu": j.get("prefill_cpu_ms_per_tok", 0),
            "tg_cpu": j.get("decode_cpu_ms_per_tok", 0), "host_gb_s": j.get("host_gb_s", 0),
            "decode_gb_s": j.get("decode_gb_s", 0)}


def run_llama_bench(exe, model, p, n, t):
    res = {"pp": 0.0, "tg": 0.0, "pp_cpu": 0.0, "tg_cpu": 0.0}
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([exe, "-m", model, "-p", str(p), "-n", str(n), "-t", str(t), "-ngl", "0", "-r", "1",
                          "-o", "json"], check=True, capture_output=True, text=True, env=env).stdout
    for row in json.loads(out):
        if row.get("n_prompt", 0) > 0 and row.get("n_gen", 0) == 0:
            res["pp"] = row["avg_ts"]
        elif row.get("n_gen", 0) > 0 and row.get("n_prompt", 0) == 0:
            res["tg"] = row["avg_ts"]
    return res


def run_llama_cpp_python(model, p, n, t):
    import llama_cpp  # noqa: imported late so the script works without it when llama-bench is used
    llm = llama_cpp.Llama(model_path=model, n_ctx=p + n + 32, n_threads=t, n_threads_batch=t, n_batch=512,
                          verbose=False)
    rng = random.Random(1)
    toks = [rng.randrange(llm.n_vocab()) for _ in range(p + n + 16)]
    llm.eval(toks[:16])  # warm-up: pages the weights in
    llm.reset()

    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return (r.ru_utime + r.ru_stime) * 1e3

    c0, t0 = cpu(), time.perf_counter()
    if p:
        llm.eval(toks[:p])
    c1, t1 = cpu(), time.perf_counter()
    for i in range(n):
        llm.eval([toks[p + i]])
    c2, t2 = cpu(), time.perf_counter()
    return {"pp": p / (t1 - t0) if p else 0.0, "tg": n / (t2 - t1) if n else 0.0,
            "pp_cpu": (c1 - c0) / max(p, 1), "tg_cpu": (c2 - c1) / max(n, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--llama-bench")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()

    best_f, best_l = None, None
    for _ in range(a.rounds):
        f = run_ferry(a.ferry, a.model, a.p, a.n, a.t)
        if a.llama_bench:
            l = run_llama_bench(a.llama_bench, a.model, a.p, a.n, a.t)
            l["who"] = "llama-bench"
        else:
            l = run_llama_cpp_python(a.model, a.p, a.n, a.t)
            l["who"] = "llama-cpp-python"
        if best_f is None:
            best_f, best_l = f, l
        else:
            for k in ("pp", "tg"):
                best_f[k] = max(best_f[k], f[k])
                best_l[k] = max(best_l[k], l[k])
            for k in ("pp_cpu", "tg_cpu"):
                best_f[k] = min(best_f[k], f[k]) if f[k] else best_f[k]
                best_l[k] = min(best_l[k], l[k]) if l[k] else best_l[k]

    name = os.path.basename(a.model)
    ratio = lambda x, y: (x / y) if y else float("nan")
    if a.markdown:
        print(f"| {name} | {a.t} | {a.p} | {best_f['pp']:.2f} | {best_l['pp']:.2f} | {ratio(best_f['pp'], best_l['pp']):.2f}x "
              f"| {a.n} | {best_f['tg']:.2f} | {best_l['tg']:.2f} | {ratio(best_f['tg'], best_l['tg']):.2f}x "
              f"| {best_f['decode_gb_s']:.1f} / {best_f['host_gb_s']:.1f} |")
    else:
        print(f"{name}  threads={a.t}  vs {best_l['who']}")
        print(f"  prefill {a.p:4d}: ferry {best_f['pp']:8.2f} tok/s (cpu {best_f['pp_cpu']:.1f} ms/tok)   "
              f"llama.cpp {best_l['pp']:8.2f} tok/s (cpu {best_l['pp_cpu']:.1f} ms/tok)   ratio {ratio(best_f['pp'], best_l['pp']):.2f}x")
        print(f"  decode  {a.n:4d}: ferry {best_f['tg']:8.2f} tok/s (cpu {best_f['tg_cpu']:.1f} ms/tok)   "
              f"llama.cpp {best_l['tg']:8.2f} tok/s (cpu {best_l['tg_cpu']:.1f} ms/tok)   ratio {ratio(best_f['tg'], best_l['tg']):.2f}x")
        print(f"  ferry decode {best_f['decode_gb_s']:.2f} GB/s of weights vs host {best_f['host_gb_s']:.2f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
