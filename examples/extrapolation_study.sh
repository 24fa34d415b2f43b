#!/usr/bin/env bash
# examples/extrapolation_study.sh — the length-extrapolation study in one command: train the same
# small model with each positional encoding at a short context L on the shipped corpus, evaluate
# each at L, 2L, 4L, 8L; evaluate the RoPE model with every context-extension method without
# training; fine-tune it with Position Interpolation at 4L and evaluate again. With --tokenizer, the
# RoPE / PI part is re-run with that SentencePiece tokenizer (a BPE model from `ctxlab tokenizer
# train`): does a word-piece model take PI as the PI paper's LLaMA does? Writes CSVs, gnuplot PNGs,
# a Markdown report (examples/extrapolation_report.py) and <out>/report.html (`ctxlab report`).
#
#   examples/extrapolation_study.sh            # full study (~30 min on 2 idle cores), report in docs/results/
#   examples/extrapolation_study.sh --quick    # smoke run (~1 min), report in <out>/extrapolation.md
#
# Options: --quick, --out DIR (default runs/extrapolation[-quick]), --bin PATH (default build/ctxlab),
#          --doc FILE (report path; default docs/results/extrapolation.md, or <out>/extrapolation.md
#          with --quick), --steps N (pretraining steps per encoding), --ft-steps N, --fresh (retrain
#          even when a finished run exists in <out>), --tokenizer FILE (a SentencePiece .model: adds
#          the BPE re-run of RoPE / PI in <out>/bpe_*; its context L counts tokens),
#          --plugin PATH.so (repeatable: every ctxlab call loads it; docs/extending.md),
#          --add-encoding NAME or NAME='POSENC_JSON' (repeatable: one more encoding in part 1, e.g.
#          --plugin libfire.so --add-encoding 'fire-example={"type":"fire-example","init_L":128}').
# A finished run (its checkpoint at the final step) is reused, so an interrupted study continues.
# The same grid with 3 seeds and 95% intervals, as a `ctxlab study` preset (baselines and
# fine-tunes included; not the BPE re-run or this report; --plugin: `ctxlab --plugin LIB study`,
# --add-encoding: an "encodings" entry in a copy of the preset; docs/evaluation.md):
#   ctxlab study --study examples/studies/extrapolation.json --out runs/extrapolation-study
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
quick=0; out=""; bin="$root/build/ctxlab"; doc=""; steps=""; ft_steps=""; fresh=0; tokenizer=""
plugins=(); added=(); declare -A posenc_json
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --out) out="$2"; shift ;;
    --bin) bin="$2"; shift ;;
    --doc) doc="$2"; shift ;;
    --steps) steps="$2"; shift ;;
    --ft-steps) ft_steps="$2"; shift ;;
    --fresh) fresh=1 ;;
    --tokenizer) tokenizer="$2"; shift ;;
    --plugin) plugins+=("$2"); shift ;;
    --add-encoding)
      name="${2%%=*}"; added+=("$name")
      [ "$name" != "$2" ] && posenc_json[$name]="${2#*=}"
      shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "extrapolation_study.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$bin" ] || { echo "extrapolation_study.sh: no ctxlab binary at $bin (build first, or pass --bin)" >&2; exit 2; }
if [ -n "$tokenizer" ]; then
  [ -f "$tokenizer" ] || { echo "extrapolation_study.sh: --tokenizer $tokenizer: no such file (make one with: $bin tokenizer train --data data/pride_and_prejudice.txt --vocab 4000 --type bpe --out bpe4k.model)" >&2; exit 2; }
  tokenizer="$(cd "$(dirname "$tokenizer")" && pwd)/$(basename "$tokenizer")"
fi

# Sizes. Full: d=128, 4 layers, 4 heads, L=128, 8 x 128 tokens per step (~0.1 s/step on 2 cores).
if [ "$quick" = 1 ]; then
  D=64; LAYERS=2; HEADS=4; L=32; B=8; STEPS=${steps:-150}; FT_STEPS=${ft_steps:-20}; MAXW=16
  LR=3e-3; WARMUP=10; FT_LR=3e-4; FT_EVAL=5
  out=${out:-$root/runs/extrapolation-quick}; doc=${doc:-$out/extrapolation.md}
else
  D=128; LAYERS=4; HEADS=4; L=128; B=8; STEPS=${steps:-1200}; FT_STEPS=${ft_steps:-300}; MAXW=0
  LR=2e-3; WARMUP=100; FT_LR=3e-4; FT_EVAL=25
  out=${out:-$root/runs/extrapolation}; doc=${doc:-$root/docs/results/extrapolation.md}
fi
# the survey's families too (POSENC_SPEC §5): beyond L the GRU recurs further from h_0 = 0,
# FLOATER integrates its ODE further, complex-order turns each word by t * omega for any t;
# then any --add-encoding
ENCODINGS="learned sinusoidal rope alibi kerple t5 xpos sandwich rnn floater complex-order${added[*]:+ ${added[*]}}"
L2=$((2 * L)); L4=$((4 * L)); L8=$((8 * L)); LENGTHS="$L,$L2,$L4,$L8"
mkdir -p "$out/eval"
if [ ${#plugins[@]} -gt 0 ]; then  # every call below goes through a wrapper that loads them
  args=""
  for p in "${plugins[@]}"; do args="$args --plugin '$(cd "$(dirname "$p")" && pwd)/$(basename "$p")'"; done
  printf '#!/bin/sh\nexec %s%s "$@"\n' "'$bin'" "$args" > "$out/ctxlab_with_plugins"
  chmod +x "$out/ctxlab_with_plugins"
  bin="$out/ctxlab_with_plugins"
fi
export OMP_WAIT_POLICY=PASSIVE
t_start=$(date +%s)
log() { printf '[%5ds] %s\n' $(( $(date +%s) - t_start )) "$*"; }
timing="$out/timing.csv"
echo "stage,seconds" > "$timing"
stage() {  # stage NAME CMD...: runs CMD, records its wall time
  local name="$1"; shift
  local t0; t0=$(date +%s)
  "$@"
  echo "$name,$(( $(date +%s) - t0 ))" >> "$timing"
}
evalq() { "$bin" eval --max-windows "$MAXW" "$@" > /dev/null; }

# Has <dir> finished its run of <steps> steps? (the checkpoint's __metadata__.step)
finished() {
  [ -f "$1/model.safetensors" ] || return 1
  python3 - "$1/model.safetensors" "$2" <<'EOF'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    meta = json.loads(f.read(n)).get("__metadata__", {})
sys.exit(0 if meta.get("step") == sys.argv[2] else 1)
EOF
}

cat > "$out/study.json" <<EOF
{"quick": $quick, "d_model": $D, "n_layers": $LAYERS, "n_heads": $HEADS, "context": $L, "batch": $B,
 "steps": $STEPS, "lr": $LR, "warmup": $WARMUP, "ft_steps": $FT_STEPS, "ft_lr": $FT_LR,
 "ft_context": $L4, "max_windows": $MAXW, "encodings": "$ENCODINGS", "bin": "$bin", "tokenizer": "$tokenizer"}
EOF

# ---- 1. pretrain every encoding at L, evaluate at L..8L ----
for enc in $ENCODINGS; do
  run="$out/$enc"
  if [ "$fresh" = 0 ] && finished "$run" "$STEPS"; then
    log "$enc: reusing the finished run in $run"
  else
    rm -rf "$run"; mkdir -p "$run"
    pe="${posenc_json[$enc]:-}"; [ -n "$pe" ] || pe="{\"type\": \"$enc\"}"
    cat > "$run/config.json" <<EOF
{"vocab_size": 256, "d_model": $D, "n_layers": $LAYERS, "n_heads": $HEADS, "context": $L,
 "norm": "layernorm", "tie_embeddings": true, "posenc": $pe}
EOF
    log "$enc: training $STEPS steps at L=$L"
    stage "train_$enc" "$bin" train --config "$run/config.json" --steps "$STEPS" --batch "$B" --lr "$LR" \
      --min-lr "$(python3 -c "print($LR/10)")" --warmup "$WARMUP" --eval-interval $((STEPS / 6)) \
      --ckpt-interval "$STEPS" --log-interval $((STEPS / 4)) --out "$run" --no-plot > "$run/train.log"
    tail -n 2 "$run/train.log" | head -n 1
  fi
  extra=""
  [ "$enc" = learned ] && extra="--hierarchical"  # learned positions beyond L: Su's hierarchical extension
  log "$enc: evaluating at $LENGTHS"
  stage "eval_$enc" evalq --checkpoint "$run/model.safetensors" --lengths "$LENGTHS" $extra --csv "$out/eval/$enc.csv" \
    --json "$run/eval.json"
done

# ---- 2. the two baselines: segmented (chunks of L) and sliding-window attention ----
log "baselines: learned --segmented, rope --window $L"
stage eval_learned_segmented evalq --checkpoint "$out/learned/model.safetensors" --lengths "$LENGTHS" --segmented \
  --csv "$out/eval/learned_segmented.csv"
stage eval_rope_window evalq --checkpoint "$out/rope/model.safetensors" --lengths "$LENGTHS" --window "$L" \
  --csv "$out/eval/rope_window.csv"

# ---- 3. RoPE context extension without training ----
rope="$out/rope/model.safetensors"
for method in pi ntk yarn; do  # factor s = length / L at each length
  log "rope + $method (s = length / L)"
  rm -f "$out/eval/rope_$method.csv"
  for len in $L2 $L4 $L8; do
    evalq --checkpoint "$rope" --lengths "$len" --rope-scaling "$method" --factor $((len / L)) \
      --csv "$out/eval/rope_${method}_$len.csv"
    if [ -f "$out/eval/rope_$method.csv" ]; then tail -n +2 "$out/eval/rope_${method}_$len.csv" >> "$out/eval/rope_$method.csv"
    else cp "$out/eval/rope_${method}_$len.csv" "$out/eval/rope_$method.csv"; fi
    rm -f "$out/eval/rope_${method}_$len.csv"
  done
done
log "rope + dynamic-ntk (factor 1: the base grows with the sequence), rerope and leaky-rerope (window L/2)"
evalq --checkpoint "$rope" --lengths "$LENGTHS" --rope-scaling dynamic-ntk --factor 1 --csv "$out/eval/rope_dynamic-ntk.csv"
evalq --checkpoint "$rope" --lengths "$LENGTHS" --rope-scaling rerope --csv "$out/eval/rope_rerope.csv"
evalq --checkpoint "$rope" --lengths "$LENGTHS" --rope-scaling leaky-rerope --factor 16 --csv "$out/eval/rope_leaky-rerope.csv"

# ---- 4. fine-tunes of the RoPE model at 4L: with Position Interpolation, and without scaling ----
# finetune NAME LABEL [scaling args...]: the same budget and recipe for both; reuses a finished run.
# Fine-tunes the checkpoint in $src (the byte RoPE model, or the BPE one in section 5).
src="$rope"
finetune() {
  local name="$1" label="$2"; shift 2
  local rope="$src"
  local dir="$out/$name"
  if [ "$fresh" = 0 ] && finished "$dir" "$FT_STEPS"; then
    log "$label: reusing $dir"
  else
    rm -rf "$dir"
    log "$label: rope at context $L4, $FT_STEPS steps"
    stage "$name" "$bin" finetune --checkpoint "$rope" --context "$L4" "$@" --steps "$FT_STEPS" \
      --batch $((B * L / L4 > 0 ? B * L / L4 : 1)) --lr "$FT_LR" --warmup $((FT_STEPS / 15 + 1)) \
      --eval-interval "$FT_EVAL" --eval-batches 1000 --log-interval $((FT_STEPS / 4)) --out "$dir" --no-plot \
      > "$out/$name.log"
  fi
  evalq --checkpoint "$dir/model.safetensors" --lengths "$LENGTHS" --csv "$out/eval/$name.csv" --json "$dir/eval.json"
}
finetune rope_pi_ft "PI fine-tune (factor 4)" --rope-scaling pi --factor 4
# The fine-tune's validation curve at 4L starts from the un-tuned PI model: its loss at step 0.
evalq --checkpoint "$rope" --lengths "$L4" --rope-scaling pi --factor 4 --csv "$out/eval/rope_pi_ft_step0.csv"
# Same budget without scaling: the PI paper's "direct fine-tuning" comparison.
finetune rope_direct_ft "direct fine-tune (no scaling)"

# ---- 5. with --tokenizer: RoPE and PI again with word pieces (L counts tokens) ----
runs="$(for e in $ENCODINGS; do printf '%s ' "$out/$e"; done)$out/rope_pi_ft $out/rope_direct_ft"
if [ -n "$tokenizer" ]; then
  run="$out/bpe_rope"
  if [ "$fresh" = 0 ] && finished "$run" "$STEPS"; then
    log "bpe rope: reusing the finished run in $run"
  else
    rm -rf "$run"; mkdir -p "$run"
    cp "$out/rope/config.json" "$run/config.json"  # ctxlab train sets vocab_size from the tokenizer
    log "bpe rope: training $STEPS steps at L=$L tokens with $tokenizer"
    stage train_bpe_rope "$bin" train --config "$run/config.json" --tokenizer "$tokenizer" --steps "$STEPS" \
      --batch "$B" --lr "$LR" --min-lr "$(python3 -c "print($LR/10)")" --warmup "$WARMUP" \
      --eval-interval $((STEPS / 6)) --ckpt-interval "$STEPS" --log-interval $((STEPS / 4)) --out "$run" \
      --no-plot > "$run/train.log"
    tail -n 2 "$run/train.log" | head -n 1
  fi
  src="$run/model.safetensors"
  stage eval_bpe_rope evalq --checkpoint "$src" --lengths "$LENGTHS" --csv "$out/eval/bpe_rope.csv" --json "$run/eval.json"
  log "bpe rope + pi (s = length / L)"
  rm -f "$out/eval/bpe_rope_pi.csv"
  for len in $L2 $L4 $L8; do
    evalq --checkpoint "$src" --lengths "$len" --rope-scaling pi --factor $((len / L)) --csv "$out/eval/bpe_rope_pi_$len.csv"
    if [ -f "$out/eval/bpe_rope_pi.csv" ]; then tail -n +2 "$out/eval/bpe_rope_pi_$len.csv" >> "$out/eval/bpe_rope_pi.csv"
    else cp "$out/eval/bpe_rope_pi_$len.csv" "$out/eval/bpe_rope_pi.csv"; fi
    rm -f "$out/eval/bpe_rope_pi_$len.csv"
  done
  finetune bpe_rope_pi_ft "BPE PI fine-tune (factor 4)" --rope-scaling pi --factor 4
  evalq --checkpoint "$src" --lengths "$L4" --rope-scaling pi --factor 4 --csv "$out/eval/bpe_rope_pi_ft_step0.csv"
  finetune bpe_rope_direct_ft "BPE direct fine-tune (no scaling)"
  runs="$runs $out/bpe_rope $out/bpe_rope_pi_ft $out/bpe_rope_direct_ft"
fi

total=$(( $(date +%s) - t_start ))
echo "total,$total" >> "$timing"
log "study done in $((total / 60)) min $((total % 60)) s; writing the report"
python3 "$here/extrapolation_report.py" --out "$out" --doc "$doc"
# shellcheck disable=SC2086  # $runs: one word per run directory
"$bin" report $runs --title "ctxlab extrapolation study (L = $L)" --out "$out/report.html"
