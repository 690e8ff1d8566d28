#!/usr/bin/env bash
# CPU baseline: prefill and decode tokens/s of `ferry run` and of llama.cpp (llama-cpp-python) on the
# same model, the same prompt token ids, the same thread count, greedy, a fixed number of generated
# tokens (EOS ignored). Each engine runs REPS times; the median is reported, with how many of ferry's
# greedy tokens match llama.cpp's (leading run). Prints a Markdown table for bench/RESULTS.md.
#   bench/cpu_baseline.sh [MODEL...]      (default: both bundled models)
# Env: FERRY_BUILD (default build), THREADS (thread counts to measure, default "1 <all cores>"),
#      N_GEN (default 64), REPS (default 3),
#      PYTHON (default python3).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FERRY_BUILD:-$root/build}
PY=${PYTHON:-python3}
thread_counts=${THREADS:-1 $(nproc)}
n_gen=${N_GEN:-64}
reps=${REPS:-3}
models=("$@")
((${#models[@]})) || models=("$root/models/smollm2-135m-instruct-q4_1.gguf" "$root/models/gemma-3-270m-q4_k_m.gguf")
[[ -x $build/ferry ]] || { echo "cpu_baseline: $build/ferry not built (scripts/build.sh)" >&2; exit 1; }

# A prompt of ordinary English prose (~100 tokens), tokenized once by llama.cpp; both engines get the
# same ids (ferry through --tokens, which adds no BOS).
PROMPT="The history of the city begins with a small settlement on the river, where fishermen and traders \
built wooden houses along the banks. Over the centuries it grew into a busy port, with markets, churches \
and a university that drew students from across the continent. Today visitors come for its museums, its \
old bridges and the narrow streets of the historic center, which"

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$n_gen generated tokens, greedy, EOS ignored; median of $reps runs; thread counts: $thread_counts"
echo
echo "Wall-clock rates suffer when other processes share the cores. The CPU-time columns (process CPU"
echo "seconds of all threads, per token) are steadier under load, but count spin-waiting threads too."
echo
echo "| model | engine | threads | prompt tokens | prefill tok/s | decode tok/s | TTFT ms | prefill CPU ms/tok | decode CPU ms/tok | greedy = llama.cpp |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for model in "${models[@]}"; do
 for threads in $thread_counts; do
  "$PY" - "$model" "$build/ferry" "$threads" "$n_gen" "$reps" "$PROMPT" <<'EOF2'
import json, os, resource, statistics, subprocess, sys, time
import numpy as np
from llama_cpp import Llama

model, ferry, threads, n_gen, reps, prompt_text = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
name = os.path.basename(model)

def cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime

llm = Llama(model_path=model, n_ctx=512, n_batch=512, n_threads=threads, n_threads_batch=threads,
            n_gpu_layers=0, seed=0, verbose=False)
ids = llm.tokenize(prompt_text.encode(), add_bos=True, special=False)

gen: list[int] = []  # llama.cpp's greedy tokens (the same every run)
n_vocab = llm.n_vocab()

def last_logits():
    # Without logits_all (which would make llama.cpp compute the head at every prompt position),
    # llama-cpp-python keeps no scores: read the context's output row directly.
    return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))

def llama_once():
    """-> prefill tok/s, decode tok/s, TTFT ms, prefill CPU ms/token, decode CPU ms/token."""
    llm.reset()
    c0, t0 = cpu(resource.RUSAGE_SELF), time.perf_counter()
    llm.eval(ids)  # the first token is known once the prompt is evaluated
    c1, t1 = cpu(resource.RUSAGE_SELF), time.perf_counter()
    gen.clear()
    for _ in range(n_gen):
        tok = int(np.argmax(last_logits()))
        gen.append(tok)
        llm.eval([tok])
    c2, t2 = cpu(resource.RUSAGE_SELF), time.perf_counter()
    return (len(ids) / (t1 - t0), n_gen / (t2 - t1), (t1 - t0) * 1e3,
            (c1 - c0) * 1e3 / len(ids), (c2 - c1) * 1e3 / n_gen)

def ferry_run(n):
    c0 = cpu(resource.RUSAGE_CHILDREN)
    out = subprocess.run([ferry, "run", "-m", model, "--tokens", ",".join(map(str, ids)), "-n", str(n),
                          "--temp", "0", "--ignore-eos", "-t", str(threads), "-c", "512", "--json"],
                         capture_output=True, text=True, check=True)
    j = json.loads(out.stdout)
    assert len(j["tokens"]) == n, j
    return j, cpu(resource.RUSAGE_CHILDREN) - c0

ferry_gen: list[int] = []

def ferry_once():
    # CPU split: a run generating 1 token (load + prefill) and one generating n_gen + 1.
    short, c_short = ferry_run(1)
    j, c_long = ferry_run(n_gen + 1)
    ferry_gen[:] = j["tokens"][:n_gen]
    return (j["prefill_tok_s"], j["decode_tok_s"], j["ttft_ms"], c_short * 1e3 / len(ids),
            (c_long - c_short) * 1e3 / n_gen)

llama_once()  # warm-up: page in the weights
rows = {"llama.cpp": [llama_once() for _ in range(reps)]}
llm.close()
ferry_run(1)
rows["ferry"] = [ferry_once() for _ in range(reps)]
same = next((i for i in range(n_gen) if ferry_gen[i] != gen[i]), n_gen)
for engine in ("ferry", "llama.cpp"):
    med = [statistics.median(x[i] for x in rows[engine]) for i in range(5)]
    agree = f"{same}/{n_gen}" if engine == "ferry" else ""
    print(f"| {name} | {engine} | {threads} | {len(ids)} | {med[0]:.1f} | {med[1]:.1f} | {med[2]:.0f} | {med[3]:.2f} | "
          f"{med[4]:.2f} | {agree} |", flush=True)
EOF2
 done
done
