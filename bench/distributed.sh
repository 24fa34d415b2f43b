#!/usr/bin/env bash
# bench/distributed.sh — the measurements of docs/distributed.md ("Measured"): on one machine,
#  (1) tokens/s of `mpirun -np 2` x 1 thread against 1 process x 2 threads on a preset (default
#      small), alternated A B A B for --rounds rounds, same global batch, steps and seed;
#  (2) the time of one allreduce of the gradient buffer per preset and N (bench_allreduce, with a
#      barrier before each call, so it excludes waiting for a slower rank).
# Run it on a quiet machine (nothing else building): every number is wall-clock.
#   bench/distributed.sh [--rounds 3] [--preset small] [--steps 30] [--batch 8] [--bin build]
#                        [--allreduce-presets tiny,small,medium]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS=3 PRESET=small STEPS=30 BATCH=8 BIN="$ROOT/build" AR_PRESETS=tiny,small,medium
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --preset) PRESET="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    --allreduce-presets) AR_PRESETS="$2"; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "bench/distributed.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
CTXLAB="$BIN/ctxlab"
for f in "$CTXLAB" "$BIN/bench_allreduce"; do
  [ -x "$f" ] || { echo "bench/distributed.sh: $f missing (cmake --build $BIN --target ctxlab bench_allreduce)" >&2; exit 1; }
done
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMP_WAIT_POLICY=PASSIVE
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
ARGS=(train --preset "$PRESET" --steps "$STEPS" --batch "$BATCH" --no-plot --eval-interval 0
      --ckpt-interval 0 --log-interval "$STEPS")
# tokens/s of a run = the mean over its steps after the first (the progress line's "tok/s")
toks() { grep -o '[0-9]* tok/s' | tail -1 | cut -d' ' -f1; }

echo "# (1) $PRESET, global batch $BATCH, $STEPS steps: A = 1 process x 2 threads, B = mpirun -np 2 x 1 thread"
echo "round,A_tok_s,B_tok_s,B_over_A,B_allreduce"
for r in $(seq 1 "$ROUNDS"); do
  a=$(CTXLAB_THREADS=2 "$CTXLAB" "${ARGS[@]}" --out "$TMP/a" | toks)
  bout=$(CTXLAB_THREADS=1 mpirun -np 2 -x CTXLAB_THREADS -x OMP_WAIT_POLICY --bind-to core \
         "$CTXLAB" "${ARGS[@]}" --out "$TMP/b")
  b=$(echo "$bout" | toks)
  ar=$(echo "$bout" | sed -nE 's/.*allreduce ([0-9.]+) ms per step \(([0-9.]+)%.*/\1 ms (\2% of the step)/p')
  echo "$r,$a,$b,$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", b/a}'),$ar"
done

echo "# (2) one allreduce of the flat gradient buffer (ms), per preset and N (N > cores oversubscribes)"
for n in 2 4; do
  extra=(); [ "$n" -gt "$(nproc)" ] && extra=(--oversubscribe)
  mpirun -np "$n" "${extra[@]}" "$BIN/bench_allreduce" --repeats 50 --presets "$AR_PRESETS"
done
echo "# (2b) the same over TCP loopback (--mca btl self,tcp: the transport between nodes)"
mpirun -np 2 --mca btl self,tcp "$BIN/bench_allreduce" --repeats 50 --presets "$AR_PRESETS"
