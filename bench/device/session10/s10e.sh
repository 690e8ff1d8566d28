#!/usr/bin/env bash
# session 10 call 5: FFN slices, static: is the CPU slices' loss the strided ffn_down? FERRY_SLICE_DOWN_COPY=1
# gathers the CPU slices' down columns into contiguous memory at load. Whole vs slices vs slices + copy.
set -u
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s]"; }
mkdir -p /root/bin /root/m; xz -dc .devcarry/bin/ferry10.xz > /root/bin/ferry; chmod +x /root/bin/ferry
F=/root/bin/ferry; R=$OUT/r; mkdir -p $R; export XDG_CACHE_HOME=/root/cache
m=/root/m/q.gguf; timeout 100 $F synth --preset qwen3-8b --type Q4_K --fast -o $m > /dev/null 2>&1; sync; el
timeout 60 $F profile --quick -o /root/prof.json > $R/profile.log 2>&1; el
run() { tag=$1; ev=$2; shift 2; timeout 100 env $ev $F bench --device cuda --profile /root/prof.json -m $m --vram 4G -p 512 --strategy static "$@" > $R/$tag.txt 2>&1
  echo "$tag exit $? $(grep -E '^decode|tier    1:' $R/$tag.txt | tr -s ' ' | cut -c1-160 | tr '\n' ' ')"; el; }
for i in 1 2; do
  run whole_$i FERRY_X=0 -n 128 --ffn-slices 1
  run s2_$i FERRY_X=0 -n 128 --ffn-slices 2
  run s2copy_$i FERRY_SLICE_DOWN_COPY=1 -n 128 --ffn-slices 2
done
run s2copy_explain FERRY_SLICE_DOWN_COPY=1 -n 32 --ffn-slices 2 --explain
grep -E "cpu " $R/s2copy_explain.txt | head -6
tar czf $OUT/res.tgz -C $OUT r && rm -rf $R; el
