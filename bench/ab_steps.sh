#!/usr/bin/env bash
# bench/ab_steps.sh — two `ctxlab bench` commands (or anything that prints bench's JSON line)
# run A B A B ..., N pairs: each pair's median step ms and ratio A/B, then the medians and the
# median pair ratio. On a VM whose speed drifts, only pairs taken back to back compare.
# `ctxlab bench --decode` lines work too (their ms_per_step: one decoding step).
#   bench/ab_steps.sh 3 "build/ctxlab bench --preset small --precision fp32 --steps 8" \
#                       "build/ctxlab bench --preset small --precision bf16 --steps 8"
set -euo pipefail
[[ $# -eq 3 && $1 =~ ^[0-9]+$ && $1 -ge 1 ]] || {
  echo "usage: bench/ab_steps.sh PAIRS \"command A\" \"command B\" (each prints ctxlab bench's JSON line)" >&2
  exit 2
}
n=$1 A=$2 B=$3
step_ms() {  # the command's ms_per_step.median; fails naming the command when there is none
  local out
  out=$(eval "$1" 2>/dev/null | grep '^{' | tail -1) || true
  # training: ms_per_step.median; bench --decode: ms_per_step (one number)
  python3 -c 'import json,sys; v = json.loads(sys.argv[1])["ms_per_step"]; print(v["median"] if isinstance(v, dict) else v)' \
    "$out" 2>/dev/null ||
    { echo "ab_steps.sh: no bench JSON line (ms_per_step) from: $1" >&2; exit 1; }
}
ra=() rb=()
for i in $(seq "$n"); do
  a=$(step_ms "$A")
  b=$(step_ms "$B")
  echo "pair $i: A $a ms  B $b ms  A/B $(python3 -c "print(round($a / $b, 3))")"
  ra+=("$a") rb+=("$b")
done
python3 - "${ra[*]}" "${rb[*]}" <<'PY'
import statistics as st, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
print(f"median A {st.median(a):.1f} ms  B {st.median(b):.1f} ms  "
      f"median pair ratio A/B {st.median([x / y for x, y in zip(a, b)]):.3f}")
PY
