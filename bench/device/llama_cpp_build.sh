#!/usr/bin/env bash
# Builds the peer, llama.cpp (the copy vendored in the llama-cpp-python source package), with CUDA for
# sm_90 on the GPU host, in the background (setsid) so later calls on the same warm machine can use it.
# Input: .devcarry/llama.cpp-src.tar.xz (a trimmed `vendor/llama.cpp` of llama_cpp_python-0.3.36.tar.gz).
# Output: /root/lcb/build/bin/{llama-bench,llama-completion}; log /root/lcb/build.log; done marker /root/lcb/done.
set -u
SRC=${1:-.devcarry/llama.cpp-src.tar.xz}
JOBS=${JOBS:-10}
mkdir -p /root/lcb
[ -f /root/lcb/done ] && { echo "llama.cpp already built"; exit 0; }
tar -C /root/lcb -xJf "$SRC"
setsid nohup bash -c "cd /root/lcb/llama.cpp && \
  cmake -S . -B /root/lcb/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF && \
  nice -n 5 ninja -C /root/lcb/build -j$JOBS llama-bench llama-completion && touch /root/lcb/done" \
  > /root/lcb/build.log 2>&1 < /dev/null &
echo "llama.cpp build started in the background (log /root/lcb/build.log)"
