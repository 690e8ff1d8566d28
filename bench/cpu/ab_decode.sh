#!/bin/sh
# Interleaved decode A/B of two ferry binaries on the 8B models (bench/RESULTS_cpu.md, decode round 3):
#   bench/cpu/ab_decode.sh OLD_BIN NEW_BIN ROUNDS MODEL...    env: T=2 P=16 N=16
# One line per run: binary, model, load (1 min) at its start, decode tok/s, decode GB/s, host GB/s, %.
T=${T:-2}; P=${P:-16}; N=${N:-16}
old=$1; new=$2; rounds=$3; shift 3
r=0
while [ "$r" -lt "$rounds" ]; do
  for m in "$@"; do
    for b in "$old" "$new"; do
      load=$(cut -d' ' -f1 /proc/loadavg)
      "$b" bench -m "$m" --device cpu -t "$T" -p "$P" -n "$N" --json 2>/dev/null | tail -1 | python3 -c "
import json, sys
d = json.loads(sys.stdin.read())
print('%-28s %-22s load %-5s %6.3f tok/s %6.2f GB/s host %6.2f  %5.1f %%' % ('$b'[-28:], '$m'.split('/')[-1], '$load',
      d['decode_tok_s'], d['decode_gb_s'], d['host_gb_s'], 100 * d['decode_gb_s'] / d['host_gb_s']))"
    done
  done
  r=$((r + 1))
done
