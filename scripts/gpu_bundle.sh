#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh runs into DIR (default .gpu/), for a GPU machine that
# cannot build bakusoku (no Debian packages there): the three programs, bakusoku's libraries
# and the third-party ones they load, except the C library and the CUDA libraries (cuDNN,
# cuBLAS, NCCL: large, and the GPU machine has its own). DIR/run.sh finds those there and
# runs the check:  bash DIR/run.sh   (bash DIR/run.sh CMD... runs CMD with its libraries)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-.gpu}"
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
progs=(build/src/bakusoku build/tests/test_gpu_ops build/tests/gpu_conv_bench)
cp "${progs[@]}" "$out/bin/"
cp scripts/gpu_check.sh "$out/"
skip='^(libc|libm|libdl|libpthread|librt|ld-linux|libstdc\+\+|libgcc_s|libcuda|libcublas|libcublasLt|libcudnn|libnccl)[.-]'
for lib in $(ldd "${progs[@]}" | awk '/=> \//{print $3}' | sort -u); do
  name=$(basename "$lib")
  [[ "$name" =~ $skip ]] || cp -L "$lib" "$out/lib/$name"
done
# Compressed: the device tool carries at most 64 MiB.
tar -czf "$out/lib.tar.gz" -C "$out" lib && rm -rf "$out/lib"
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the GPU check from this bundle (made by scripts/gpu_bundle.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[ -d "$here/lib" ] || tar -xzf "$here/lib.tar.gz" -C "$here"
cuda_dirs=$(find / -xdev \( -name 'libcudnn.so.9' -o -name 'libcublas.so.13' -o -name 'libnccl.so.2' \) \
  -not -path '*/proc/*' 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
export LD_LIBRARY_PATH="$here/lib:$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "CUDA libraries from: $cuda_dirs"
# With arguments: runs them in this environment (a sanitizer around a test, say).
[ $# -eq 0 ] || exec "$@"
BKS_GPU_BIN="$here/bin" bash "$here/gpu_check.sh"
RUN
du -sh "$out"
