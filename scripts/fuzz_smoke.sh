#!/usr/bin/env bash
# Fuzz smoke test of the GGUF reader, the chat-template interpreter and the GBNF grammars: configures
# build-fuzz/ with clang (libFuzzer + ASan + UBSan, -DFERRY_FUZZ=ON), builds fuzz_gguf, fuzz_chat_template and
# fuzz_grammar, seeds the GGUF corpus with tiny valid GGUF files (gguf PyPI package, else ferry's gguf_dump),
# the template corpus with tests/python/jinja_snippets.py and the grammar corpus with three grammars, and
# fuzzes each for FUZZ_SECONDS (default 60). Exits non-zero on any
# crash, leak, UB report, timeout or out-of-memory (the reproducer is left in build-fuzz/fuzz_artifacts/).
# Env: FUZZ_SECONDS, FERRY_FUZZ_BUILD (build folder), FUZZ_JOBS (ninja -j, default 2),
#      FERRY_BUILD (a normal build with gguf_dump, used for seeds when python's gguf is missing).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FERRY_FUZZ_BUILD:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-2}

command -v clang++ >/dev/null || { echo "fuzz_smoke: clang++ not found (apt-get install clang)" >&2; exit 1; }

mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DFERRY_FUZZ=ON -DFERRY_TESTS=OFF -DFERRY_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/configure.log" 2>&1 \
  || { cat "$build/configure.log" >&2; exit 1; }
ninja -C "$build" -j"$jobs" fuzz_gguf fuzz_chat_template fuzz_grammar

# fuzz NAME MAX_LEN DICT: runs build/NAME for the set time over its corpus (which persists in the build
# folder, so repeated runs go deeper) and its seeds (rewritten each time), with the sanitizers halting on the
# first report; -rss_limit_mb / -malloc_limit_mb turn a huge allocation from a hostile count into a reported
# failure. Exits on a failure, naming the reproducer's folder.
artifacts=$build/fuzz_artifacts
mkdir -p "$artifacts"
fuzz() {
  local name=$1 max_len=$2 dict=$3 rc
  echo "fuzz_smoke: $name for ${seconds}s"
  set +e
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
    "$build/$name" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=512 -dict="$dict" -artifact_prefix="$artifacts/" -print_final_stats=1 \
    "$build/fuzz_corpus/$name" "$build/fuzz_seeds/$name" 2>"$build/$name.log"
  rc=$?
  set -e
  tail -n 30 "$build/$name.log"
  if [[ $rc -ne 0 ]]; then
    echo "fuzz_smoke: $name FAILED (exit $rc); reproducer(s) in $artifacts, full log $build/$name.log" >&2
    exit 1
  fi
  echo "fuzz_smoke: $name ok (no crash in ${seconds}s)"
}
for f in fuzz_gguf fuzz_chat_template fuzz_grammar; do mkdir -p "$build/fuzz_corpus/$f" "$build/fuzz_seeds/$f"; done

# GGUF files: tiny valid ones (seeds < 2 KB; 8 KB leaves room to grow).
seeds=$build/fuzz_seeds/fuzz_gguf
if python3 "$root/tests/fuzz/make_gguf_seeds.py" "$seeds"; then
  echo "fuzz_smoke: seeds from the gguf python package"
elif [[ -x ${FERRY_BUILD:-$root/build}/gguf_dump ]]; then
  "${FERRY_BUILD:-$root/build}/gguf_dump" --write-sample "$seeds/seed_sample.gguf"
  echo "fuzz_smoke: seed from gguf_dump --write-sample"
else
  echo "fuzz_smoke: no seed generator (pip install gguf); fuzzing from an empty corpus" >&2
fi
fuzz fuzz_gguf 8192 "$root/tests/fuzz/gguf.dict"

# The chat-template interpreter: seeds are the one-construct templates of the parity test.
python3 - "$root/tests/python" "$build/fuzz_seeds/fuzz_chat_template" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import jinja_snippets
for i, src in enumerate(jinja_snippets.SNIPPETS):
    open(f"{sys.argv[2]}/snippet{i:03d}.jinja", "w", encoding="utf-8").write(src)
PY
fuzz fuzz_chat_template 16384 "$root/tests/fuzz/jinja.dict"

# GBNF grammars: three grammars of the unit tests' shapes, each with a text after a NUL.
seeds=$build/fuzz_seeds/fuzz_grammar
printf 'root ::= expr\nexpr ::= term ([-+*/] term)*\nterm ::= [0-9]+ | "(" expr ")"\0(1+2)*3' > "$seeds/arith"
printf 'root ::= "a"{2,4} "b"? [^\\x00-\\x1f]* ("\\u00e9" | .)+ # c\n\0aaabxyz\xc3\xa9' > "$seeds/repeat"
printf 'root ::= (x | y)*\nx ::= "<" root ">"\ny ::= [a-z]{1,3}\0<ab<c>>d' > "$seeds/nested"
fuzz fuzz_grammar 4096 "$root/tests/fuzz/gbnf.dict"
echo "fuzz_smoke: ok (no crash in ${seconds}s each)"
