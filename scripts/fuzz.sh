#!/usr/bin/env bash
# scripts/fuzz.sh [seconds] — fuzz the file-format parsers (safetensors, .npy, config JSON, the
# optimizer state of a checkpoint, tokenizer models and records, token files and JSONL corpora).
# Configures a separate clang build (build-fuzz/, libFuzzer + ASan + UBSan, no CUDA, no tests),
# builds only the fuzz targets, and runs each for N seconds (default 60) starting from the seed
# corpora in tests/fuzz/seeds/<name>/ (+ tests/fuzz/<name>.dict). Fails on the first crash;
# the crashing input is left in build-fuzz/artifacts/ — add it as a regression test in
# tests/test_io.cpp. Environment: CTXLAB_FUZZ_BUILD (build dir), JOBS (parallel compile jobs).
set -euo pipefail
SECS="${1:-60}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${CTXLAB_FUZZ_BUILD:-$ROOT/build-fuzz}"
JOBS="${JOBS:-2}"
TARGETS=(fuzz_safetensors fuzz_npy fuzz_config fuzz_optim fuzz_tokenizer fuzz_data)

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/setup.sh installs it)" >&2; exit 1; }
CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCTXLAB_FUZZ=ON -DCTXLAB_BUILD_TESTS=OFF -DCTXLAB_WITH_CUDA=OFF -DCTXLAB_NATIVE=OFF >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}"

mkdir -p "$BUILD/artifacts"
status=0
for t in "${TARGETS[@]}"; do
  name="${t#fuzz_}"
  corpus="$BUILD/corpus/$name"  # grows across runs; the seeds stay read-only
  mkdir -p "$corpus"
  args=(-max_total_time="$SECS" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048
        -artifact_prefix="$BUILD/artifacts/$t-")
  [ -f "$ROOT/tests/fuzz/$name.dict" ] && args+=(-dict="$ROOT/tests/fuzz/$name.dict")
  echo "fuzz.sh: running $t for ${SECS}s"
  log="$BUILD/$t.log"
  if ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" "$BUILD/$t" "${args[@]}" "$corpus" \
       "$ROOT/tests/fuzz/seeds/$name" >"$log" 2>&1; then
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    echo "fuzz.sh: $t ok ($execs executions, log $log)"
  else
    echo "fuzz.sh: $t FAILED — see $log and $BUILD/artifacts/" >&2
    grep -E 'ERROR|SUMMARY|round trip|fuzz_' "$log" | head -20 >&2 || true
    status=1
  fi
done
exit $status
