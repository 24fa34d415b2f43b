#!/usr/bin/env bash
# scripts/gpu_check.sh — on a machine with an NVIDIA GPU, the checks that skip without one
# (docs/cuda.md, "On a machine with a GPU") and the first timings, each section under its own
# time limit, everything logged to OUTDIR/log.txt (so a run cut short still says how far it got).
#
#   scripts/gpu_check.sh OUTDIR [SECTION ...]      (default sections: env tests bench)
#
# Sections:
#   env        the device, driver, CUDA, CPU and the peer's torch
#   tests      every CUDA test of ctest (the backend table, the model and trainer checks, the CLI
#              comparisons with the CPU, bf16/tf32), on the real GPU; none may skip
#   sanitizer  compute-sanitizer memcheck over the model check (rope) and the trainer step
#   bench      `ctxlab bench --device cuda`: small fp32 / tf32 / bf16, GPT-2 small fp32 / bf16; MFU
#              against the H100/H200 SXM datasheet peaks (fp32 66.9, tf32 494.7, bf16 989.4 TFLOP/s);
#              GPT-2 bf16 with CTXLAB_FUSED_CAUSAL_SOFTMAX=0 vs 1 (bench/ab_steps.sh, 2 pairs)
#   compare    bench/gpu_compare.sh against the machine's PyTorch (eager), 2 rounds
#   cpu-bf16   issue 17 on this host's CPU when it has avx512_bf16: ctxlab fp32 vs bf16 and the
#              peer's bf16 autocast, pinned to 2 cores (skipped, with the reason, without it)
#
# BUILD (default build) holds ctxlab, ctxlab_tests, libctxlab_cuda.so and the CTest files;
# PYTHON (default: python3 on PATH, which must have numpy; torch for `compare`/`cpu-bf16`)
# replaces the /usr/bin/python3 the CTest files were configured with. Exit status: the number of
# sections that failed (0: all passed).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[[ $# -ge 1 ]] || { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OUTDIR="$1"; shift
SECTIONS=("$@"); [[ ${#SECTIONS[@]} -gt 0 ]] || SECTIONS=(env tests bench)
BUILD="${BUILD:-build}"
PYTHON="${PYTHON:-$(command -v python3)}"
mkdir -p "$OUTDIR"
LOG="$OUTDIR/log.txt"
FAILED=0
say() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$LOG"; }
# run LIMIT_S CMD...: one step under `timeout`, output into the log; returns the command's status
run() {
  local limit="$1"; shift
  say "\$ $*"
  timeout --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  [[ $rc == 124 || $rc == 137 ]] && say "TIMED OUT after ${limit}s"
  say "exit $rc"
  return $rc
}

CUDA_TESTS='^(BackendOpsCuda\.|Cuda\.|CudaModel[A-Za-z]*\.|CudaCheckpoint\.|CudaTrainStep\.|DeviceCore\.|Devices/BackendOps\..*/cuda|Encodings/CudaModel\.|device_.*cuda_vs_cpu|precision_.*_cuda)'

section_env() {
  run 30 nvidia-smi || { say "no usable nvidia-smi: is there a GPU?"; return 1; }
  run 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  run 10 lscpu
  say "cpu flags of note: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  command -v nvcc >/dev/null && run 10 nvcc --version
  run 60 "$PYTHON" -c 'import torch, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0), "numpy", numpy.__version__)'
  run 10 ldd "$BUILD/libctxlab_cuda.so"
}

section_tests() {
  # The CTest files name the configuring machine's paths and Python: rewrite a copy in place.
  local built_root; built_root="$(sed -n 's/^# Build directory: \(.*\)\/[^/]*$/\1/p' "$BUILD/CTestTestfile.cmake" | head -1)"
  if [[ -n "$built_root" && "$built_root" != "$ROOT" ]]; then
    sed -i "s#${built_root}#${ROOT}#g" "$BUILD"/CTestTestfile.cmake "$BUILD"/*_include.cmake "$BUILD"/*_tests.cmake
  fi
  sed -i "s#/usr/bin/python3#${PYTHON}#g" "$BUILD"/CTestTestfile.cmake
  run 30 ctest --test-dir "$BUILD" -N -R "$CUDA_TESTS"
  run 300 ctest --test-dir "$BUILD" -R "$CUDA_TESTS" --output-on-failure -j4 --timeout 240 || return 1
  # a skip is a pass to ctest: on a GPU machine none of these may skip
  run 10 "$PYTHON" .ci/check_skips.py "$BUILD" --no-skips
}

section_sanitizer() {
  command -v compute-sanitizer >/dev/null || { say "no compute-sanitizer on PATH"; return 1; }
  run 180 compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/ctxlab_tests" \
    --gtest_filter='Encodings/CudaModel.TrainingStepsMatchTheCpu/rope:CudaTrainStep.*'
}

section_bench() {
  local b="$BUILD/ctxlab" j="$OUTDIR/bench" rc=0
  mkdir -p "$j"
  run 120 "$b" bench --preset small --device cuda --steps 30 --peak-gflops 66900 --json "$j/small-fp32.json" || rc=1
  run 120 "$b" bench --preset small --device cuda --steps 30 --tf32 --peak-gflops 494700 --json "$j/small-tf32.json" || rc=1
  run 120 "$b" bench --preset small --device cuda --steps 30 --precision bf16 --peak-gflops 989400 --json "$j/small-bf16.json" || rc=1
  run 180 "$b" bench --config bench/configs/gpt2-small.json --device cuda --steps 10 --peak-gflops 66900 --json "$j/gpt2-fp32.json" || rc=1
  run 180 "$b" bench --config bench/configs/gpt2-small.json --device cuda --steps 10 --precision bf16 --peak-gflops 989400 --json "$j/gpt2-bf16.json" || rc=1
  # the composed attention's mask + softmax: two passes (A) against Backend::causal_softmax (B)
  run 300 bench/ab_steps.sh 2 \
    "CTXLAB_FUSED_CAUSAL_SOFTMAX=0 $b bench --config bench/configs/gpt2-small.json --device cuda --steps 10 --precision bf16" \
    "$b bench --config bench/configs/gpt2-small.json --device cuda --steps 10 --precision bf16" || rc=1
  return $rc
}

section_compare() {
  run 480 bench/gpu_compare.sh --peer "$PYTHON" --ctxlab "$BUILD/ctxlab" --rounds 2 --peer-modes eager \
    --models small,gpt2 --precisions fp32,bf16 --steps 10 --out "$OUTDIR/gpu_compare.md"
}

section_cpu-bf16() {
  if ! grep -q -w avx512_bf16 /proc/cpuinfo; then say "SKIP: this CPU has no avx512_bf16"; return 0; fi
  local pin="taskset -c 2,3" b="$BUILD/ctxlab" peak
  export CTXLAB_THREADS=2 OMP_NUM_THREADS=2
  run 60 $pin "$b" bench --peak-only || return 1
  run 60 $pin "$b" bench --peak-only --precision bf16 || return 1
  $pin "$b" bench --peak-only --precision bf16 | grep '^{' | tail -1 >"$OUTDIR/peak-bf16.json"
  peak=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_gflops"])' "$OUTDIR/peak-bf16.json") || return 1
  run 200 $pin bench/ab_steps.sh 2 "$b bench --preset small --steps 8 --peak-gflops $peak" \
    "$b bench --preset small --steps 8 --precision bf16 --peak-gflops $peak" || return 1
  run 200 $pin bench/compare.sh --peer "$PYTHON" --ctxlab "$b" --precision bf16 --preset small --rounds 2 \
    --peer-mode eager --attention fast --peak-gflops "$peak"
}

for s in "${SECTIONS[@]}"; do
  if ! declare -F "section_$s" >/dev/null; then say "unknown section '$s'"; FAILED=$((FAILED + 1)); continue; fi
  say "section $s"
  "section_$s" || { FAILED=$((FAILED + 1)); say "section $s FAILED"; }
done
say "done: $FAILED section(s) failed"
exit "$FAILED"
