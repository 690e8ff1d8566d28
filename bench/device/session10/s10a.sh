#!/usr/bin/env bash
# session 10 call 1: minitron 2G 4K, old (c818b0d) vs new (18cfa19: grown set + profile check) ferry, same profile (call 4's)
set -u
mkdir -p /root/bin /root/m; xz -dc .devcarry/bin/ferry.xz > /root/bin/ferry_old; xz -dc .devcarry/bin/ferry_new.xz > /root/bin/ferry_new; chmod +x /root/bin/*
R=$OUT; M=/root/m/mt.gguf; PR=.devcarry/prof4.json
export XDG_CACHE_HOME=/root/cache
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s]"; }
nproc; free -g | head -2
timeout 100 /root/bin/ferry_new synth --preset minitron-8b --type F16 --fast -o $M > /dev/null 2>&1; sync; el
/root/bin/ferry_new plan -m $M --vram 2G -c 4224 -b 512 --prompt-tokens 4096 --profile $PR > $R/plan_new.txt 2>&1
/root/bin/ferry_old plan -m $M --vram 2G -c 4224 -b 512 --prompt-tokens 4096 --profile $PR > $R/plan_old.txt 2>&1
for i in 1 2; do for b in old new; do
  timeout 100 /root/bin/ferry_$b bench -m $M --device cuda --vram 2G --profile $PR -p 4096 -n 64 --json > $R/${b}_$i.json 2> $R/${b}_$i.err
  echo "$b $i exit $? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); h=d.get('hybrid',{}); print('ttft', round(d['ttft_ms'],1), 'decode', round(d['decode_tok_s'],3), 'peak', d.get('peak_device_bytes'), 'cpu_vs_profile', h.get('cpu_vs_profile'))" $R/${b}_$i.json 2>&1 | tail -1)"; el
done; done
timeout 100 /root/bin/ferry_new bench -m $M --device cuda --vram 2G --profile $PR -p 4096 -n 64 > $R/new_text.txt 2>&1; grep -i "profile check\|tier\|decode" $R/new_text.txt | head; el
