#!/usr/bin/env bash
# scripts/gpu_pack.sh — packs a CUDA build made here for a lent GPU machine, which builds nothing
# and reaches no package mirror (the device tool carries at most 64 MiB of ignored paths): the
# binaries, the CUDA module, the test plugins, the CTest files, and every shared library they load
# that is not the C runtime or CUDA's own (libcuda, cuBLAS, cuBLASLt, cudart, NCCL: the device has
# them, with its driver), as one compressed archive.
#
#   scripts/gpu_pack.sh [BUILD] [ARCHIVE]     (defaults: build, build-gpu-carry.tar.xz)
#
# On the device (docs/cuda.md, "The GPU window"):
#   mkdir -p build && tar -xJf build-gpu-carry.tar.xz -C build &&
#     LD_LIBRARY_PATH=$PWD/build/carried-lib scripts/gpu_check.sh out
# Exit status 1 when the archive is over the 64 MiB the device tool carries.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}" ARCHIVE="${2:-$ROOT/build-gpu-carry.tar.xz}"
LIMIT=$((64 * 1024 * 1024))
die() { echo "gpu_pack.sh: $*" >&2; exit 2; }
[[ -f "$BUILD/libctxlab_cuda.so" ]] ||
  die "$BUILD has no libctxlab_cuda.so: build with nvcc (cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release)"
for b in ctxlab ctxlab_tests; do [[ -x "$BUILD/$b" ]] || die "$BUILD/$b is missing: cmake --build $BUILD --target $b"; done

# the kernels held bit-equal across variants must leave nvcc nothing to contract (docs/cuda.md)
"$ROOT/scripts/check_fp_contract.sh" "$BUILD" || die "check_fp_contract.sh failed: not packing"

STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
# What runs there: the binaries, every module and plugin, the CTest files (gpu_check.sh rewrites
# their paths), and the test corpus the CLI tests read from the build tree, if any.
(cd "$BUILD" && cp -a --parents ctxlab ctxlab_tests ./*.so CTestTestfile.cmake ./*_include.cmake \
  ./*_tests.cmake "$STAGE"/)
[[ -x "$BUILD/cuda_emu_tests" ]] && cp -a "$BUILD/cuda_emu_tests" "$STAGE"/
[[ -x "$BUILD/bench_norm" ]] && cp -a "$BUILD/bench_norm" "$STAGE"/  # gpu_check.sh's norm section
[[ -x "$BUILD/bench_attention_tc" ]] && cp -a "$BUILD/bench_attention_tc" "$STAGE"/  # ... and attention
find "$BUILD" -name CTestTestfile.cmake -mindepth 2 | while read -r f; do
  rel="${f#"$BUILD"/}"; mkdir -p "$STAGE/$(dirname "$rel")"; cp -a "$f" "$STAGE/$rel"
done

# The shared libraries, resolved by ldd, less the C runtime and CUDA's (the device's own) and the
# build's own (libctxlab_cuda.so: staged above; a second copy in carried-lib made ctxlab_tests,
# which links it, and core/cuda_module.cpp's dlopen of BUILD's load two, each registering its
# kernels: every CUDA test failed so on an H200, 2026-11-27).
mkdir -p "$STAGE/carried-lib"
ldd "$STAGE"/ctxlab "$STAGE"/ctxlab_tests "$STAGE"/*.so 2>/dev/null | awk '/=> \//{print $3}' | sort -u |
  grep -v -F -e "$STAGE/" -e "$(cd "$BUILD" && pwd)/" |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|ld-linux[^/]*)\.so|/lib(cuda|cublas|cublasLt|cudart|nccl|nvidia)[^/]*\.so' |
  while read -r lib; do cp -L "$lib" "$STAGE/carried-lib/"; done

# the commit the binaries were built from (the device's copy of the repository may name another)
echo "$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- . 2>/dev/null || echo '+changes')" \
  >"$STAGE/built-from.txt"
tar -cJf "$ARCHIVE" -C "$STAGE" .
size=$(stat -c %s "$ARCHIVE")
echo "gpu_pack.sh: $ARCHIVE: $((size / 1024 / 1024)) MiB ($(ls "$STAGE/carried-lib" | wc -l) carried libraries: $(ls "$STAGE/carried-lib" | tr '\n' ' '))"
[[ $size -le $LIMIT ]] || { echo "gpu_pack.sh: over the 64 MiB the device tool carries" >&2; exit 1; }
