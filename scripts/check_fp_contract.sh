#!/usr/bin/env bash
# scripts/check_fp_contract.sh — checks that the CUDA files whose kernel variants the tests hold
# bit-equal (CTX_CUDA_EXACT_FP in CMakeLists.txt) leave nvcc nothing to contract: their PTX may have
# only rounded adds and multiplies (add.rn, sub.rn, mul.rn: never merged into an fma by ptxas) and
# explicit fma.rn. A plain add.f32 / mul.f32 is one that ptxas may fuse in one instantiation and not
# in another, which gave the tensor-core forward's two block shapes other lse bits on an H200
# (2026-11-28) while the emulator ran them bit-equal. docs/cuda.md, "Exact arithmetic where
# variants are held bit-equal".
#
#   scripts/check_fp_contract.sh [BUILD]     (a Ninja build configured with nvcc; default: build)
#
# Exit 0: every listed file is clean; 1: a contractible operation (listed by file and kernel);
# 2: no such build. scripts/gpu_pack.sh runs it before packing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" 2>/dev/null && pwd)" || { echo "check_fp_contract.sh: no build directory ${1:-build}" >&2; exit 2; }
die() { echo "check_fp_contract.sh: $*" >&2; exit 2; }
[[ -f "$BUILD/build.ninja" ]] || die "$BUILD is not a Ninja build"
command -v ninja >/dev/null || die "ninja is not on PATH"
# the sources the build was configured from (another clone's build names its own paths)
SRC=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
[[ -d "$SRC" ]] || die "$BUILD/CMakeCache.txt names no source directory"
files=$(sed -n 's/^ *set(CTX_CUDA_EXACT_FP \(.*\))$/\1/p' "$SRC/CMakeLists.txt")
[[ -n "$files" ]] || die "CMakeLists.txt has no set(CTX_CUDA_EXACT_FP ...) line"
commands=$(ninja -C "$BUILD" -t commands ctxlab_cuda 2>/dev/null) || die "ninja found no target ctxlab_cuda in $BUILD"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
status=0
for f in $files; do
  cmd=$(grep -F -- "-c $SRC/$f " <<<"$commands" | grep -F nvcc | head -n 1) ||
    die "$BUILD compiles no $f with nvcc (is it a CUDA build of $SRC?)"
  [[ "$cmd" == *"-fmad=false"* ]] || { echo "$f: compiled without -fmad=false" >&2; status=1; }
  # the same command, to PTX for one virtual architecture (no objects, no dependency files)
  read -r -a argv <<<"$cmd"
  ptx_cmd=()
  skip=0
  for a in "${argv[@]}"; do
    if ((skip)); then skip=0; continue; fi
    case "$a" in
      -c|--generate-code=*|-MD) ;;
      -o|-MT|-MF) skip=1 ;;
      *) ptx_cmd+=("$a") ;;
    esac
  done
  out="$TMP/$(basename "$f").ptx"
  (cd "$BUILD" && "${ptx_cmd[@]}" -arch=compute_90 -ptx -o "$out") || die "nvcc could not make PTX of $f"
  # kernels with a contractible operation: a plain (unrounded) f32 / f64 add, sub or mul
  bad=$(awk '/^(\.visible )?\.entry / { k = $NF; sub(/\(.*/, "", k) }
             /^\t(add|sub|mul)\.f(32|64)[ \t]/ { n[k]++ }
             END { for (k in n) print "  " n[k] " in " k }' "$out" | { c++filt 2>/dev/null || cat; })
  fma=$(grep -c -E '^\s*fma\.rn\.f(32|64)' "$out" || true)
  if [[ -n "$bad" ]]; then
    echo "$f: contractible adds / multiplies in its PTX (ptxas may fuse them differently per kernel):"
    echo "$bad"
    status=1
  else
    echo "$f: exact (only .rn adds and multiplies; $fma explicit or library fma.rn)"
  fi
done
exit $status
