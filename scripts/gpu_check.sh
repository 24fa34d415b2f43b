#!/usr/bin/env bash
# scripts/gpu_check.sh — on a machine with an NVIDIA GPU, the checks that skip without one
# (docs/cuda.md, "On a machine with a GPU") and the timings against PyTorch, each section under its
# own time limit and all of them under one budget, everything logged to OUTDIR/log.txt (so a run
# cut short still says how far it got), the summary written to OUTDIR/gpu-<device>-<date>.md
# (copy it to docs/results/ to keep it).
#
#   scripts/gpu_check.sh OUTDIR [SECTION ...]      (default: the protocol, below)
#
# The protocol (issue 33; what a session lent a GPU runs first, as a baseline, and again after its
# change): env tests tc graph compare-tc attention compare-fp32 compare-small compare-bias sanitizer, then
# report, within
# GPU_CHECK_BUDGET_S seconds (default 450: the device tool's 8-minute protocol with room to
# start), the comparisons one round each (COMPARE_ROUNDS) unless asked for more: sized from the
# H200 session of 2026-11-27 (tests 26 s, tc 23 s, compare-tc 128 s with torch.compile's 60 s;
# compare-bias compiles FlexAttention twice). Every step's limit is cut to what is left of the
# budget, and a section that cannot start any more is listed as "not run (budget)" in the report.
# Binaries are built here and carried (docs/cuda.md).
#
# Sections:
#   env        the device, driver, CUDA, CPU and the peer's torch
#   tests      every CUDA test of ctest (the backend table, the model and trainer checks, the CLI
#              comparisons with the CPU, bf16/tf32), on the real GPU; none may skip
#   sanitizer  compute-sanitizer memcheck over the model check (rope) and the trainer step; racecheck
#              and synccheck over the attention kernels (the backend table's cuda cases, the
#              model's attention paths)
#   bench      `ctxlab bench --device cuda`: small fp32 / tf32 / bf16, GPT-2 small fp32 / bf16; MFU
#              against the H100/H200 SXM datasheet peaks (fp32 66.9, tf32 494.7, bf16 989.4 TFLOP/s);
#              GPT-2 bf16 with CTXLAB_FUSED_CAUSAL_SOFTMAX=0 vs 1 (bench/ab_steps.sh, 2 pairs)
#   compare    bench/gpu_compare.sh against the machine's PyTorch (eager), 2 rounds
#   compare-core  GPT-2 small bf16 and fp32 (learned) against PyTorch eager and torch.compile
#              (SDPA flash attention), A B A B, COMPARE_ROUNDS rounds (default 2)
#   compare-tc GPT-2 small bf16 with the tensor-core attention (the default) against
#              PyTorch eager and torch.compile, A B A B, COMPARE_ROUNDS rounds (default 2)
#   attention  attention alone, bf16, causal: bench_attention_tc (the tensor-core kernels) against
#              PyTorch's SDPA on its flash backend (FlashAttention-2's kernel), at FlashAttention-2's
#              benchmark shapes (head dim 64, 32 heads, 16k tokens, seqlen 512..8k) and GPT-2 small's,
#              A B A B (2 rounds); OUTDIR/attention.md: TFLOP/s and ctxlab / FA2 per shape
#   tc         GPT-2 small bf16: composed attention (CTXLAB_BF16_ATTENTION=0) vs tensor-core, then the
#              default vs the MLP's GELU epilogues (CTXLAB_FUSED_MLP=1) and vs the tensor-core forward's
#              blocks of 128 query rows (CTXLAB_TC_FORWARD_ROWS=128) and the backward's of 128 keys /
#              queries (CTXLAB_TC_BACKWARD_ROWS=128) (A B, 2 pairs each), per-op profiles
#   graph      the warm step eager (CTXLAB_CUDA_GRAPH=0) vs as a CUDA Graph (the default): small bf16, GPT-2 small bf16
#              (A B, 2 pairs each)
#   fire       GPT-2 small bf16 with FIRE (init_L 1024: every query below thr): the per-pair bias
#              through the composed attention (CTXLAB_FIRE_TABLE=0) vs the default, its distance
#              table read in the tensor-core attention's tiles (A B, 2 pairs); not in the protocol
#   norm       the residual add fused into the norms: bench_norm's fused / composed pairs at GPT-2
#              small's [8192, 768], then GPT-2 small bf16 with CTXLAB_FUSED_ADD_NORM=0 vs the default
#              (A B, 2 pairs); not in the protocol
#   ncu        Nsight Compute over one GPT-2 small bf16 step's kernels (NCU_KERNELS, NCU_COUNT)
#   compare-fp32  GPT-2 small fp32 against PyTorch eager (TF32 off on both sides)
#   compare-small `small` bf16 against PyTorch eager (issue 33's target: >= 2x; the CUDA Graph's case)
#   compare-bias  GPT-2 small bf16 with ALiBi and T5 buckets against PyTorch FlexAttention
#              compiled (the bias as a score_mod), COMPARE_ROUNDS rounds (default 2)
#   report     OUTDIR/gpu-<device>-<date>.md: device, versions, each section's outcome, the tables
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
[[ $# -ge 1 ]] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
OUTDIR="$1"; shift
SECTIONS=("$@")
if [[ ${#SECTIONS[@]} -eq 0 ]]; then
  SECTIONS=(env tests tc graph compare-tc attention compare-fp32 compare-small compare-bias sanitizer report)
  export COMPARE_ROUNDS="${COMPARE_ROUNDS:-1}"
fi
BUDGET_S="${GPU_CHECK_BUDGET_S:-100000}"
[[ $# -gt 0 ]] || BUDGET_S="${GPU_CHECK_BUDGET_S:-450}"
[[ "$BUDGET_S" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check.sh: GPU_CHECK_BUDGET_S must be a positive integer, got '$BUDGET_S'" >&2; exit 2; }
START_S=$SECONDS
BUILD="${BUILD:-build}"
PYTHON="${PYTHON:-$(command -v python3)}"
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
LOG="$OUTDIR/log.txt"
# A build carried by scripts/gpu_pack.sh brings its libraries in BUILD/carried-lib: ctxlab loads
# them; the peer's Python runs with the machine's own library path (PEER_PY), so torch keeps its.
PEER_PY="$PYTHON"
if [[ -d "$BUILD/carried-lib" ]]; then
  PEER_PY="$OUTDIR/peer-python"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "${LD_LIBRARY_PATH:-}" "$PYTHON" >"$PEER_PY"
  chmod +x "$PEER_PY"
  # BUILD first: ctxlab_tests links libctxlab_cuda.so, which must be the file the backend dlopens
  export LD_LIBRARY_PATH="$(cd "$BUILD" && pwd):$(cd "$BUILD/carried-lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
FAILED=0
say() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$LOG"; }
left_s() { echo $((BUDGET_S - (SECONDS - START_S))); }
# run LIMIT_S CMD...: one step under `timeout` (cut to what is left of the budget), output into
# the log; returns the command's status (124: timed out)
run() {
  local limit="$1" left; shift
  left=$(left_s)
  [[ $left -lt $limit ]] && limit=$left
  [[ $limit -ge 5 ]] || { say "not run (budget): $*"; return 124; }
  say "\$ $*"
  timeout --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  [[ $rc == 124 || $rc == 137 ]] && say "TIMED OUT after ${limit}s"
  say "exit $rc"
  return $rc
}

CUDA_TESTS='^(BackendOpsCuda\.|Cuda\.|CudaGraphStep\.|CudaModel[A-Za-z]*\.|CudaCheckpoint\.|CudaTrainStep\.|CudaGemmLt\.|FusedMlp\.Cuda|DeviceCore\.|Devices/BackendOps\..*/cuda|Encodings/CudaModel\.|device_.*cuda_vs_cpu|precision_.*_cuda)'

section_env() {
  run 30 nvidia-smi || { say "no usable nvidia-smi: is there a GPU?"; return 1; }
  run 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  run 10 lscpu
  say "cpu flags of note: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  command -v nvcc >/dev/null && run 10 nvcc --version
  run 60 "$PEER_PY" -c 'import torch, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0), "numpy", numpy.__version__)'
  run 10 ldd "$BUILD/libctxlab_cuda.so"
}

# The configuring machine's source directory (the build was made there and carried).
built_root() { sed -n 's/^# Build directory: \(.*\)\/[^/]*$/\1/p' "$BUILD/CTestTestfile.cmake" 2>/dev/null | head -1; }
# ctxlab_tests has that directory compiled in (CTXLAB_SOURCE_DIR: the shipped corpus, docs/): where
# the path does not exist here it becomes a link to this checkout (without it, the tests that read
# data/ fail to open it: the H200 window of 2026-11-28)
link_source_dir() {
  local r; r="$(built_root)"
  if [[ -n "$r" && "$r" != "$ROOT" && ! -e "$r" ]]; then
    mkdir -p "$(dirname "$r")" && ln -s "$ROOT" "$r" && say "linked $r -> $ROOT (the tests' compiled-in source directory)"
  fi
}

section_tests() {
  link_source_dir  # (first: the rewrite below removes the path it reads)
  # The CTest files name the configuring machine's paths and Python: rewrite a copy in place.
  local built_root; built_root="$(built_root)"
  if [[ -n "$built_root" && "$built_root" != "$ROOT" ]]; then
    sed -i "s#${built_root}#${ROOT}#g" "$BUILD"/CTestTestfile.cmake "$BUILD"/*_include.cmake "$BUILD"/*_tests.cmake
  fi
  sed -i "s#/usr/bin/python3#${PYTHON}#g" "$BUILD"/CTestTestfile.cmake
  run 30 ctest --test-dir "$BUILD" -N -R "$CUDA_TESTS"
  run 300 ctest --test-dir "$BUILD" -R "$CUDA_TESTS" --output-on-failure -j4 --timeout 240 || return 1
  # a skip is a pass to ctest: on a GPU machine none of these may skip
  run 10 "$PYTHON" .ci/check_skips.py "$BUILD" --no-skips
}

# the sanitizers' gtest filters (SANITIZE_MEMCHECK, SANITIZE_ATTENTION override them, e.g. to fit a
# short window; SANITIZE_CASES the backend table's cases under racecheck / synccheck, default ^attention)
ATTENTION_TESTS="${SANITIZE_ATTENTION:-Devices/BackendOps.EveryMethodAgainstTheReference/cuda:CudaModelAttention.*:BackendOpsCuda.TensorCoreAttention*}"
MEMCHECK_TESTS="${SANITIZE_MEMCHECK:-Encodings/CudaModel.TrainingStepsMatchTheCpu/rope:CudaTrainStep.*:CudaGraphStep.ReplayGivesTheEagerBits:BackendOpsCuda.TensorCoreAttention*}"
section_sanitizer() {
  command -v compute-sanitizer >/dev/null || { say "no compute-sanitizer on PATH"; return 1; }
  link_source_dir
  local rc=0 tool
  run 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/ctxlab_tests" --gtest_filter="$MEMCHECK_TESTS" || rc=1
  for tool in racecheck synccheck; do  # shared-memory hazards, barrier misuse: the attention kernels
    # (the backend table's attention cases only: the whole table overran 90 s under racecheck)
    CTXLAB_BACKEND_CASES="${SANITIZE_CASES:-^attention}" run 90 compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$BUILD/ctxlab_tests" --gtest_filter="$ATTENTION_TESTS" || rc=1
  done
  return $rc
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
  run 480 bench/gpu_compare.sh --peer "$PEER_PY" --ctxlab "$BUILD/ctxlab" --rounds 2 --peer-modes eager \
    --models small,gpt2 --precisions fp32,bf16 --steps 10 --out "$OUTDIR/gpu_compare.md"
}

compare() {  # NAME ARGS...: bench/gpu_compare.sh into OUTDIR/NAME.md, COMPARE_ROUNDS rounds (default 2)
  local name="$1"; shift
  run 400 bench/gpu_compare.sh --peer "$PEER_PY" --ctxlab "$BUILD/ctxlab" --rounds "${COMPARE_ROUNDS:-2}" --steps 10 \
    --out "$OUTDIR/$name.md" --json-dir "$OUTDIR/$name.json.d" "$@"
}
section_compare-core() {
  compare compare-core --models gpt2 --precisions "${COMPARE_PRECISIONS:-bf16,fp32}" --peer-modes eager,compile
}
# GPT-2 small bf16 with the tensor-core attention (ctxlab's default on CUDA since fa41362)
section_compare-tc() {
  compare compare-tc --models gpt2 --precisions bf16 --peer-modes eager,compile
}
# GPT-2 small fp32 (exact: TF32 off on both sides) against PyTorch eager
section_compare-fp32() { compare compare-fp32 --models gpt2 --precisions fp32 --peer-modes eager; }
section_compare-small() { compare compare-small --models small --precisions bf16 --peer-modes eager; }
section_compare-bias() { compare compare-bias --models gpt2 --posencs alibi,t5 --precisions bf16 --peer-modes flex; }

GPT2_BF16="bench --config bench/configs/gpt2-small.json --device cuda --precision bf16 --peak-gflops 989400"
section_tc() {  # GPT-2 small bf16 on hardware: composed attention (A, CTXLAB_BF16_ATTENTION=0) vs the
  # default (B, tensor-core attention), then the default (A) vs the opt-in MLP GELU epilogues
  # (B, CTXLAB_FUSED_MLP=1), vs the tensor-core forward's 128-row blocks (B), vs the backward's
  # 128-row blocks (B, CTXLAB_TC_BACKWARD_ROWS=128), and the per-op profiles
  local b="$BUILD/ctxlab" j="$OUTDIR/bench" rc=0
  mkdir -p "$j"
  run 150 bench/ab_steps.sh 2 "CTXLAB_BF16_ATTENTION=0 $b $GPT2_BF16 --steps 10" "$b $GPT2_BF16 --steps 10" || rc=1
  run 150 bench/ab_steps.sh 2 "$b $GPT2_BF16 --steps 10" "CTXLAB_FUSED_MLP=1 $b $GPT2_BF16 --steps 10" || rc=1
  run 150 bench/ab_steps.sh 2 "$b $GPT2_BF16 --steps 10" "CTXLAB_TC_FORWARD_ROWS=128 $b $GPT2_BF16 --steps 10" || rc=1
  run 150 bench/ab_steps.sh 2 "$b $GPT2_BF16 --steps 10" "CTXLAB_TC_BACKWARD_ROWS=128 $b $GPT2_BF16 --steps 10" || rc=1
  CTXLAB_BF16_ATTENTION=0 run 60 "$b" $GPT2_BF16 --steps 5 --profile --json "$j/gpt2-bf16-composed-profile.json" || rc=1
  run 60 "$b" $GPT2_BF16 --steps 5 --profile --json "$j/gpt2-bf16-tc-profile.json" || rc=1
  return $rc
}

section_graph() {  # the warm step eager (A, CTXLAB_CUDA_GRAPH=0) vs recorded once and replayed as a CUDA
  # Graph (B, the default): `small` bf16 (launch-bound: where a graph pays most) and GPT-2 small bf16
  local b="$BUILD/ctxlab" rc=0
  local small="bench --preset small --device cuda --precision bf16 --steps 30"
  run 120 bench/ab_steps.sh 2 "CTXLAB_CUDA_GRAPH=0 $b $small" "$b $small" || rc=1
  run 150 bench/ab_steps.sh 2 "CTXLAB_CUDA_GRAPH=0 $b $GPT2_BF16 --steps 10" "$b $GPT2_BF16 --steps 10" || rc=1
  return $rc
}

section_fire() {  # FIRE on GPT-2 small bf16: per-pair bias, composed attention (A, CTXLAB_FIRE_TABLE=0) vs
  # the default (B): the distance table decided from L_multiplier's host-side bound, tensor cores
  local b="$BUILD/ctxlab"
  local fire=(--posenc '{"type":"fire","init_L":1024}' --steps 10)
  run 200 bench/ab_steps.sh 2 "CTXLAB_FIRE_TABLE=0 $b $GPT2_BF16 ${fire[*]@Q}" "$b $GPT2_BF16 ${fire[*]@Q}"
}

section_attention() {  # attention alone: ctxlab's tensor-core kernels (A) against PyTorch's SDPA flash
  # backend, FlashAttention-2's kernel (B), A B A B; the table from both runs' JSON lines
  [[ -x "$BUILD/bench_attention_tc" ]] || { say "no $BUILD/bench_attention_tc (gpu_pack.sh packs it)"; return 1; }
  local args=(--seqlens 512,1024,2048,4096,8192 --gpt2 --repeats 10 --calls 5) j="$OUTDIR/attention.jsonl" rc=0
  : >"$j"
  for r in 1 2; do
    run 90 "$BUILD/bench_attention_tc" "${args[@]}" --json "$j" || rc=1
    run 90 "$PEER_PY" bench/torch_attention.py "${args[@]}" --json "$j" || rc=1
  done
  "$PYTHON" bench/attention_table.py "$j" >"$OUTDIR/attention.md" 2>>"$LOG" || rc=1
  cat "$OUTDIR/attention.md" >>"$LOG"
  return $rc
}

section_norm() {  # the residual add fused into the norms: the pairs of bench_norm (add, then the norm
  # / the fused call; the backward, then the gradient add / with dres), then GPT-2 small bf16 with the
  # adds composed (A, CTXLAB_FUSED_ADD_NORM=0) vs fused (B)
  local b="$BUILD/ctxlab" rc=0
  if [[ -x "$BUILD/bench_norm" ]]; then
    run 120 "$BUILD/bench_norm" --device cuda --rows 8192 --cols 768 --repeats 30 --calls 20 || rc=1
  else
    say "no $BUILD/bench_norm (gpu_pack.sh packs it when the build has it)"; rc=1
  fi
  run 150 bench/ab_steps.sh 2 "CTXLAB_FUSED_ADD_NORM=0 $b $GPT2_BF16 --steps 10" "$b $GPT2_BF16 --steps 10" || rc=1
  return $rc
}

section_ncu() {  # Nsight Compute on one GPT-2 small bf16 step's kernels: NCU_KERNELS (regex; default the
  # tensor-core attention and the bf16 conversions), the first NCU_COUNT (default 8) launches
  command -v ncu >/dev/null || { say "no ncu on PATH"; return 1; }
  run 90 ncu --clock-control none --kernel-name regex:"${NCU_KERNELS:-tc_|f32_to_bf16}" \
    --launch-count "${NCU_COUNT:-8}" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
    --csv --log-file "$OUTDIR/ncu-tc.csv" "$BUILD/ctxlab" $GPT2_BF16 --steps 1 --warmup 0
}

section_report() {  # the summary of this run, from the log and the tables
  local dev day f
  dev="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -c 'A-Za-z0-9\n' '-' | tr -s '-' | sed 's/-$//')"
  day="$(date -u +%Y-%m-%d)"
  f="$OUTDIR/gpu-${dev:-unknown}-$day.md"
  {
    echo "# GPU protocol on ${dev:-an unknown device}, $day (scripts/gpu_check.sh)"
    echo
    echo "ctxlab $(cat "$BUILD/built-from.txt" 2>/dev/null || git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') (built from; scripts/gpu_pack.sh); budget ${BUDGET_S} s, used $((SECONDS - START_S)) s."
    echo "Device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)."
    echo "Peer: $("$PEER_PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null || echo 'no torch')."
    echo
    echo "## Sections"
    echo
    grep -E '^== [0-9:]+ (section |not run|TIMED OUT|done:)' "$LOG" | sed 's/^== [0-9:]* /- /'
    echo
    echo "## Tests and sanitizers (from the log)"
    echo
    echo '```'
    grep -E 'tests passed|tests failed|ERROR SUMMARY|RACECHECK SUMMARY|Skipped|skip' "$LOG" | head -40
    echo '```'
    for t in compare-core compare-tc attention compare-fp32 compare-small compare-bias; do
      [[ -f "$OUTDIR/$t.md" ]] && { echo; echo "## $t"; echo; sed '1d' "$OUTDIR/$t.md"; }
    done
  } >"$f"
  say "report: $f"
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
  run 200 $pin bench/compare.sh --peer "$PEER_PY" --ctxlab "$b" --precision bf16 --preset small --rounds 2 \
    --peer-mode eager --attention fast --peak-gflops "$peak"
}

for s in "${SECTIONS[@]}"; do
  if ! declare -F "section_$s" >/dev/null; then say "unknown section '$s'"; FAILED=$((FAILED + 1)); continue; fi
  if [[ $s != report && $(left_s) -lt 20 ]]; then say "not run (budget): section $s"; FAILED=$((FAILED + 1)); continue; fi
  say "section $s"
  "section_$s" || { FAILED=$((FAILED + 1)); say "section $s FAILED"; }
done
say "done: $FAILED section(s) failed"
exit "$FAILED"
