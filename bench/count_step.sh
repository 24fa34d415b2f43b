#!/usr/bin/env bash
# bench/count_step.sh — the kernels of one warm training step on the emulated CUDA device, counted
# (CTXLAB_EMU_COUNTERS, core/cuda/emu/README.md "Counters") and turned into an H100 roofline by
# bench/roofline.py: the run of 3 steps minus the run of 2 steps is one warm step, whatever the
# first step and the end of a run (report, evaluation, checkpoint) add. Estimates, not measurements.
#   bench/count_step.sh build-emu OUTDIR [ctxlab train options: --preset, --set, --batch ...]
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,6p "$0"; exit 2; }
bin=$1/ctxlab out=$2
shift 2
mkdir -p "$out"
for n in 2 3; do
  rm -rf "$out/run$n"
  CTXLAB_EMU_COUNTERS="$out/counters$n.json" "$bin" train --device cuda --steps "$n" --quiet --no-plot \
    --out "$out/run$n" "$@" > /dev/null
done
"$(dirname "$0")/roofline.py" --counters "$out/counters3.json" --minus "$out/counters2.json"
