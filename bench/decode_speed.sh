#!/bin/bash
# bench/decode_speed.sh — tokens/s of `ctxlab sample` (500 tokens, greedy), A B A B over builds and
# modes: each round runs every (build, mode) once in turn; the figure is sample's own stderr line
# (the prompt and the steps, the model load excluded). docs/sampling.md has the results.
#   bench/decode_speed.sh CHECKPOINT ROUNDS BUILD [BUILD ...]
#   e.g. bench/decode_speed.sh runs/small/model.safetensors 5 /tmp/old/ctxlab build/ctxlab
# Modes: fp32 and --precision bf16 with the cache for every build; --no-cache for the last one.
set -euo pipefail
if [ $# -lt 3 ]; then sed -n 2,7p "$0"; exit 2; fi
ck=$1 rounds=$2
shift 2
run() { "$@" --checkpoint "$ck" --prompt "It is a truth" --max-tokens 500 --temperature 0 2>&1 >/dev/null |
          grep -o "[0-9.]* tokens/s" || echo "failed"; }
for r in $(seq "$rounds"); do
  line="round $r"
  for b in "$@"; do
    line+=" | $b fp32 $(run "$b" sample) | bf16 $(run "$b" sample --precision bf16)"
  done
  line+=" | no-cache $(run "${@: -1}" sample --no-cache)"
  echo "$line"
done
