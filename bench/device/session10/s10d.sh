#!/usr/bin/env bash
# session 10 call 4: does running a layer's CPU and GPU FFN slices at once pay when no weights stream?
# --strategy static (resident on the GPU, the rest on the CPU, no copies) with whole FFNs vs 2 slices,
# alternated, on one quick profile; one --explain run of each.
set -u
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s]"; }
mkdir -p /root/bin /root/m; xz -dc .devcarry/bin/ferry10.xz > /root/bin/ferry; chmod +x /root/bin/ferry
F=/root/bin/ferry; R=$OUT/r; mkdir -p $R; export XDG_CACHE_HOME=/root/cache
for pt in qwen3-8b:Q4_K minitron-8b:F16; do p=${pt%%:*}; t=${pt#*:}; m=/root/m/$p-$t.gguf
  [ -s $m ] || { timeout 200 $F synth --preset $p --type $t --fast -o $m.tmp > /dev/null 2>&1 && mv $m.tmp $m; }; done; sync; el
Q=/root/m/qwen3-8b-Q4_K.gguf; MT=/root/m/minitron-8b-F16.gguf
timeout 60 $F profile --quick -o /root/prof.json > $R/profile.log 2>&1; cp /root/prof.json $R/; el
run() { tag=$1; shift; timeout 120 $F bench --device cuda --profile /root/prof.json "$@" > $R/$tag.txt 2>&1
  echo "$tag exit $? $(grep -E '^decode|tier    1:|profile check' $R/$tag.txt | tr -s ' ' | tr '\n' ' ')"; el; }
for i in 1 2; do for sl in 1 2; do run q4g_static_s${sl}_$i -m $Q --vram 4G -p 512 -n 128 --strategy static --ffn-slices $sl; done; done
for i in 1 2; do for sl in 1 2; do run q2g_static_s${sl}_$i -m $Q --vram 2G -p 512 -n 128 --strategy static --ffn-slices $sl; done; done
for sl in 1 2; do run q4g_static_explain_s$sl -m $Q --vram 4G -p 512 -n 32 --strategy static --ffn-slices $sl --explain; done
for i in 1 2; do for sl in 1 2; do run mt8g_static_s${sl}_$i -m $MT --vram 8G -p 128 -n 48 --strategy static --ffn-slices $sl; done; done
run mt8g_static_explain_s2 -m $MT --vram 8G -p 128 -n 24 --strategy static --ffn-slices 2 --explain
tar czf $OUT/res.tgz -C $OUT r && rm -rf $R; el
