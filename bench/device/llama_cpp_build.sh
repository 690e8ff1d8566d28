#!/usr/bin/env bash
# Builds the peer, llama.cpp (the copy vendored in the llama-cpp-python source package), with CUDA for
# sm_90 on the GPU host, in the background (setsid) so later calls on the same warm machine can use it.
# Input: .devcarry/llama.cpp-src.tar.xz (a trimmed `vendor/llama.cpp` of llama_cpp_python-0.3.36).
# Env: TARGETS (default "llama-bench llama-completion"; add llama-server for bench/device/serve_gpu.sh: the
#      server is then configured too, without its web UI, which would need npm or a download), JOBS (10).
# Output: /root/lcb/build/bin/<TARGETS>; log /root/lcb/build.log; done marker /root/lcb/done, set when every
# target of this call is built. A call that asks for a target the last build lacks builds it (the marker
# goes away meanwhile); one whose targets are all there, or that finds a build running, does nothing.
set -u
SRC=${1:-.devcarry/llama.cpp-src.tar.xz}
JOBS=${JOBS:-10}
TARGETS=${TARGETS:-llama-bench llama-completion}
LCB=${LCB:-/root/lcb}  # the build's root (the other device scripts read /root/lcb)
mkdir -p $LCB
missing=
for t in $TARGETS; do [ -x $LCB/build/bin/$t ] || missing="$missing $t"; done
[ -f $LCB/done ] && [ -z "$missing" ] && { echo "llama.cpp already built ($TARGETS)"; exit 0; }
# A build still running (its process exists and is no zombie: this machine's init may not reap them).
pid=$(cat $LCB/pid 2>/dev/null)
state=$([ -n "$pid" ] && awk '{print $3}' /proc/$pid/stat 2>/dev/null)
if [ -n "$state" ] && [ "$state" != Z ]; then
  echo "a llama.cpp build is already running (log $LCB/build.log)"; exit 0
fi
rm -f $LCB/done
[ -d $LCB/llama.cpp ] || tar -C $LCB -xJf "$SRC"
server=OFF
case " $TARGETS " in *" llama-server "*) server=ON ;; esac
setsid nohup bash -c "echo \$\$ > $LCB/pid; cd $LCB/llama.cpp && \
  cmake -S . -B $LCB/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=$server -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DBUILD_SHARED_LIBS=OFF && \
  nice -n 5 ninja -C $LCB/build -j$JOBS $TARGETS && touch $LCB/done" \
  > $LCB/build.log 2>&1 < /dev/null &
echo "llama.cpp build of$missing started in the background (log $LCB/build.log)"
