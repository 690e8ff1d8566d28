# Sourced by the session 12 call scripts (run from the repo root on the GPU host): unpacks the carried
# binaries named in $BINS (.devcarry/bin/NAME.xz) to /root/bin and puts the toolkit's cuBLAS on the path.
mkdir -p /root/bin /root/m
for b in $BINS; do xz -dc .devcarry/bin/$b.xz > /root/bin/$b; done
chmod +x /root/bin/*
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
done
