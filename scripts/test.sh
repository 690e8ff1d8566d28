#!/usr/bin/env bash
# Runs every test stage of `make test` on an already set-up and built tree, keeps going after a failed
# stage, and ends with one summary line (exit 1 if any stage failed) that gives each stage's passed,
# skipped and failed counts. Under CI=true a skipped Python test fails (tests/conftest.py). Stages:
#   unit    CTest unit tests of build/
#   python  pytest tests/python (differential vs llama.cpp, synth, tokenizer, ...; exit 5 = none found)
#   asan    the unit tests again, built with ASan + UBSan in build-asan/ (CUDA off, -O1); CTest runs the
#           costliest (the planner's, COST in tests/plan/tests.cmake) first, JOBS at a time
#   fuzz    scripts/fuzz_smoke.sh: libFuzzer on the GGUF reader for FUZZ_SECONDS (default 30)
# Env: FERRY_BUILD (default build), FERRY_ASAN_BUILD (default build-asan), FERRY_TEST_STAGES
#      (default "unit python asan fuzz"), JOBS (default all cores), PYTHON (default python3),
#      PYTEST_ARGS (extra pytest arguments).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FERRY_BUILD:-$root/build}
asan=${FERRY_ASAN_BUILD:-$root/build-asan}
jobs=${JOBS:-$(nproc)}
PY=${PYTHON:-python3}
stages=${FERRY_TEST_STAGES:-unit python asan fuzz}
# CI=true (.ci/run): a skipped Python test or module is a failure (tests/conftest.py), and so is a
# stage that collects no test; GTEST_SKIPs (hardware the machine lacks) are counted, not failed.
ci=0
[[ ${CI:-} =~ ^(1|true|TRUE|True|yes)$ ]] && ci=1
logs=$build/test-logs
mkdir -p "$logs"

t_all=$(date +%s)
summary=()
failed=0

# run_stage NAME DETAIL_FN COMMAND...: runs COMMAND with output to the terminal and $logs/NAME.log.
run_stage() {
  local name=$1 detail_fn=$2
  shift 2
  echo
  echo "==== test stage: $name"
  local t0 rc=0
  t0=$(date +%s)
  "$@" 2>&1 | tee "$logs/$name.log" || rc=$?
  local secs=$(($(date +%s) - t0)) detail
  detail=$($detail_fn "$logs/$name.log" "$rc")
  if [[ $rc -eq 0 ]]; then
    summary+=("$name ok${detail:+ ($detail)} ${secs}s")
  else
    summary+=("$name FAILED${detail:+ ($detail)} ${secs}s")
    failed=1
  fi
  echo "==== $name: $([[ $rc -eq 0 ]] && echo ok || echo "FAILED (exit $rc)") in ${secs}s"
}

# "N passed, M skipped, K failed": CTest counts a skipped test (GTEST_SKIP, exit 77) among the passed
# ones in its summary line and lists it under "did not run ... (Skipped)".
ctest_detail() {
  local line total failed skipped
  line=$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$1" | tail -1)
  [[ -n $line ]] || return 0
  failed=$(sed -E 's/.*, ([0-9]+) tests? failed.*/\1/' <<<"$line")
  total=$(sed -E 's/.* out of ([0-9]+)/\1/' <<<"$line")
  skipped=$(grep -Ec '^[[:space:]]*[0-9]+ - .* \((Skipped|Disabled)\)$' "$1")
  echo "$((total - failed - skipped)) passed, $skipped skipped, $failed failed"
}
pytest_detail() { grep -E '(passed|failed|error|skipped|no tests ran)' "$1" | tail -1 | sed -E 's/=//g; s/^ +| +$//g; s/ in [0-9.]+s.*//'; }
fuzz_detail() { grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$1" | tail -1 | sed -E 's/.*: *([0-9]+)/\1 execs/'; }

unit_tests() { ctest --test-dir "$1" -L unit -j"$jobs" --timeout 900 --output-on-failure; }

python_tests() {
  local rc=0
  PYTHONUNBUFFERED=1 FERRY_BUILD=$build "$PY" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-} "$root/tests/python" || rc=$?
  if [[ $rc -eq 5 ]]; then
    echo "pytest: no tests collected"
    [[ $ci == 1 ]] || rc=0  # a CI run that tests nothing fails
  fi
  return $rc
}

asan_tests() {
  if [[ ! -f $asan/build.ninja ]]; then
    # -O1 -g1: quick to compile, fast enough to run, line numbers in sanitizer reports.
    cmake -S "$root" -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
      -DFERRY_SANITIZE=ON -DFERRY_CUDA=OFF || return 1
  fi
  ninja -C "$asan" -j"$jobs" || return 1
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 unit_tests "$asan"
}

fuzz_smoke() { FUZZ_SECONDS=${FUZZ_SECONDS:-30} FERRY_BUILD=$build FUZZ_JOBS=$jobs "$root/scripts/fuzz_smoke.sh"; }

for s in $stages; do
  case $s in
    unit) run_stage unit ctest_detail unit_tests "$build" ;;
    python) run_stage python pytest_detail python_tests ;;
    asan) run_stage asan ctest_detail asan_tests ;;
    fuzz) run_stage fuzz fuzz_detail fuzz_smoke ;;
    *) echo "test.sh: unknown stage '$s'" >&2; exit 2 ;;
  esac
done

total=$(($(date +%s) - t_all))
line=$(IFS=';'; echo "${summary[*]}" | sed 's/;/, /g')
echo
echo "make test: $([[ $failed -eq 0 ]] && echo PASS || echo FAIL) — $line — $((total / 60))m$((total % 60))s (logs: ${logs#$root/})"
exit $failed
