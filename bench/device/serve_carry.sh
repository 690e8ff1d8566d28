#!/usr/bin/env bash
# Puts what bench/device/serve_gpu.sh needs from this machine into the carried folder (.devcarry, ignored):
#   .devcarry/bin/{ferry,ferry-serve}.xz   the stripped binaries of a build folder (carry_setup.sh unpacks them)
#   .devcarry/lib/NAME.xz                  every shared library ferry-serve loads besides glibc and CUDA's:
#                                          cpp-httplib, OpenSSL, zlib, brotli, libstdc++, libgcc_s (Debian's;
#                                          the GPU host's image may lack them or have older ones)
# serve_gpu.sh unpacks the libraries to /root/lib/serve and puts that folder on LD_LIBRARY_PATH of the
# ferry-serve process alone (llama-server and the rest keep the host's own libraries).
# Usage: bench/device/serve_carry.sh [BUILD]   (default build-cuda, made by
#   FERRY_CUDA=ON FERRY_BUILD=build-cuda scripts/build.sh ferry ferry-serve)
# Env: CARRY (default .devcarry).
set -euo pipefail
build=${1:-build-cuda}
carry=${CARRY:-.devcarry}
for b in ferry ferry-serve; do [ -x "$build/$b" ] || { echo "no $build/$b: build it first" >&2; exit 1; }; done
mkdir -p "$carry/bin" "$carry/lib"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for b in ferry ferry-serve; do
  strip -o "$tmp/$b" "$build/$b"
  nice -n 19 xz -T1 -6 -c "$tmp/$b" > "$carry/bin/$b.xz"
done
# ldd's "NAME => PATH" lines; glibc's own libraries, the loader and CUDA's (the host has its driver and
# toolkit, carry_setup.sh finds cuBLAS) stay the host's.
rm -f "$carry/lib/"*.xz
ldd "$build/ferry-serve" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
  grep -vE '^(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^ ]*|libcuda|libcublas[^ ]*|libcudart|libnvidia[^ ]*)\.so' |
  while read -r name path; do
    nice -n 19 xz -T1 -6 -c "$(readlink -f "$path")" > "$carry/lib/$name.xz"
    echo "lib $name <- $path"
  done
ls -la "$carry/bin" "$carry/lib"
echo "carried folder: $(du -sm "$carry" | cut -f1) MiB (the device tool carries at most 64 MiB in all)"
