#!/usr/bin/env bash
# bench/gpu_compare.sh — ctxlab vs PyTorch on one GPU: `ctxlab bench --device cuda` against
# `bench/torch_peer.py --device cuda` (eager, and torch.compile'd), A B A B, for `small` and a
# GPT-2-small-sized model (bench/configs/gpt2-small.json: d 768, 12 layers, 12 heads, T 1024,
# vocab 50304 = GPT-2's 50257 padded to a multiple of 64, tied head, learned positions), in fp32
# and bf16, and writes the table as markdown. Refuses when no GPU is present. The roofline
# estimate it is to be held against is docs/results/gpu.md (bench/roofline.py).
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: bench/gpu_compare.sh [options] [-- args for both benchmarks, e.g. --batch 4]

  --rounds N          pairs per configuration, ctxlab then PyTorch each round (default 3)
  --models LIST       comma list of: small, gpt2 (default small,gpt2)
  --precisions LIST   comma list of: fp32, tf32, bf16 (default fp32,bf16). tf32: ctxlab --tf32,
                      PyTorch torch.backends.cuda.matmul.allow_tf32
  --peer-modes LIST   comma list of: eager, compile, flex (default eager,compile; compile is
                      skipped, with a line in the table, when the peer's torch has no
                      torch.compile; flex = --attention flex --compile: FlexAttention with the
                      position term as a score_mod, torch >= 2.5)
  --posencs LIST      comma list of encodings for both programs (default learned): learned, none,
                      rope, alibi, t5 (the in-kernel biases are what flex compares against)
  --peer P            venv (default: $CTXLAB_TORCH_VENV, else ~/.cache/ctxlab/torch-venv, made by
                      bench/torch_venv.sh), debian (/usr/bin/python3), or a python path
  --attention A       the peer's attention: fast (F.scaled_dot_product_attention, what a GPU
                      user runs; default) or manual
  --steps N           timed steps per run (default 20); --warmup N untimed first (default 3)
  --out FILE          the markdown table (default runs/gpu_compare-<UTC time>.md)
  --json-dir DIR      keep every run's JSON (default: next to --out, FILE.json.d)
  --ctxlab PATH       the ctxlab binary (default build/ctxlab); it must have `bench --device`
  --dry-run           print the machine check and the runs in order, run nothing
USAGE
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS=3 MODELS=small,gpt2 PRECISIONS=fp32,bf16 MODES=eager,compile POSENCS=learned PEER_ARG=venv ATTENTION=fast
STEPS=20 WARMUP=3 OUT="" JSONDIR="" CTXLAB="$ROOT/build/ctxlab" DRY=0 EXTRA=()
die() { echo "gpu_compare.sh: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds|--models|--precisions|--peer-modes|--posencs|--peer|--attention|--steps|--warmup|--out|--json-dir|--ctxlab)
      [[ $# -ge 2 ]] || die "$1 needs a value" ;;
  esac
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --precisions) PRECISIONS="$2"; shift 2 ;;
    --peer-modes) MODES="$2"; shift 2 ;;
    --posencs) POSENCS="$2"; shift 2 ;;
    --peer) PEER_ARG="$2"; shift 2 ;;
    --attention) ATTENTION="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --json-dir) JSONDIR="$2"; shift 2 ;;
    --ctxlab) CTXLAB="$2"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) usage >&2; die "unknown option '$1'" ;;
  esac
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, got '$ROUNDS'"
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die "--steps must be a positive integer, got '$STEPS'"
[[ "$WARMUP" =~ ^[0-9]+$ ]] || die "--warmup must be a non-negative integer, got '$WARMUP'"
[[ "$ATTENTION" == fast || "$ATTENTION" == manual ]] || die "--attention must be fast or manual, got '$ATTENTION'"
check_list() {  # NAME VALUE ALLOWED...
  local name="$1" value="$2" item ok a; shift 2
  [[ -n "$value" ]] || die "$name must not be empty (allowed: $*)"
  IFS=, read -ra items <<<"$value"
  for item in "${items[@]}"; do
    ok=0; for a in "$@"; do [[ "$item" == "$a" ]] && ok=1; done
    [[ $ok == 1 ]] || die "$name: unknown '$item' (allowed: $*)"
  done
}
check_list --models "$MODELS" small gpt2
check_list --precisions "$PRECISIONS" fp32 tf32 bf16
check_list --peer-modes "$MODES" eager compile flex
check_list --posencs "$POSENCS" learned none rope alibi t5
IFS=, read -ra MODEL_LIST <<<"$MODELS"
IFS=, read -ra PREC_LIST <<<"$PRECISIONS"
IFS=, read -ra MODE_LIST <<<"$MODES"
IFS=, read -ra PE_LIST <<<"$POSENCS"
if [[ "$MODES" =~ compile|flex && "$WARMUP" -lt 2 ]]; then die "--peer-modes compile needs --warmup 2 or more (flex too), got $WARMUP"; fi
case "$PEER_ARG" in
  debian) PY=/usr/bin/python3 ;;
  venv) PY="${CTXLAB_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxlab/torch-venv}/bin/python" ;;
  *) PY="$PEER_ARG" ;;
esac
STAMP="$(date -u +%Y%m%d-%H%M%S)"
[[ -n "$OUT" ]] || OUT="$ROOT/runs/gpu_compare-$STAMP.md"
[[ -n "$JSONDIR" ]] || JSONDIR="$OUT.json.d"
HPY="$(command -v python3 || echo /usr/bin/python3)"
PEER="$ROOT/bench/torch_peer.py"
GPT2="$ROOT/bench/configs/gpt2-small.json"

model_args() {  # the same model flags for both programs
  case "$1" in
    small) echo --preset small ;;
    gpt2) echo --config "$GPT2" ;;
  esac
}
ctx_prec() { case "$1" in fp32) ;; tf32) echo --tf32 ;; bf16) echo --precision bf16 ;; esac; }
peer_mode() {  # MODE -> the peer's flags
  case "$1" in eager) echo --attention "$ATTENTION" ;; compile) echo --attention "$ATTENTION" --compile ;;
               flex) echo --attention flex --compile ;; esac
}

# The plan, in run order: per (model, encoding, precision, peer mode) ROUNDS pairs, ctxlab first.
PLAN=()
for m in "${MODEL_LIST[@]}"; do for pe in "${PE_LIST[@]}"; do for p in "${PREC_LIST[@]}"; do
  for mode in "${MODE_LIST[@]}"; do PLAN+=("$m $pe $p $mode"); done
done; done; done
print_plan() {
  local m pe p mode r
  for cfg in "${PLAN[@]}"; do
    read -r m pe p mode <<<"$cfg"
    for ((r = 1; r <= ROUNDS; r++)); do
      echo "  [$m $pe $p $mode r$r] A: $CTXLAB bench --device cuda $(model_args "$m") --posenc $pe$(
        [[ $p != fp32 ]] && echo " $(ctx_prec "$p")") --steps $STEPS --warmup $WARMUP${EXTRA[*]:+ ${EXTRA[*]}}"
      echo "  [$m $pe $p $mode r$r] B: $PY bench/torch_peer.py --device cuda $(model_args "$m") --posenc $pe --precision $p $(
        peer_mode "$mode") --steps $STEPS --warmup $WARMUP${EXTRA[*]:+ ${EXTRA[*]}}"
    done
  done
}

# ---- the machine: a GPU, the peer's torch seeing it, and a ctxlab that can run on it ----------
gpu_check() {
  command -v nvidia-smi >/dev/null 2>&1 ||
    { echo "gpu_compare.sh: no GPU: nvidia-smi is not installed (this script measures on an NVIDIA GPU; nothing was run)" >&2; return 3; }
  local n
  n="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
  [[ "$n" -ge 1 ]] ||
    { echo "gpu_compare.sh: no GPU: nvidia-smi lists no device (this script measures on an NVIDIA GPU; nothing was run)" >&2; return 3; }
  [[ -x "$PY" ]] || command -v "$PY" >/dev/null 2>&1 ||
    { echo "gpu_compare.sh: --peer: '$PY' is not an executable python (run bench/torch_venv.sh, or pass --peer)" >&2; return 2; }
  "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() and torch.cuda.device_count() > 0 else 1)' 2>/dev/null ||
    { echo "gpu_compare.sh: nvidia-smi sees $n GPU(s) but the peer's torch ($PY) has no CUDA device (CPU-only wheel? driver too old?)" >&2; return 3; }
  [[ -x "$CTXLAB" ]] || { echo "gpu_compare.sh: no ctxlab binary at $CTXLAB (build it with CUDA, or pass --ctxlab)" >&2; return 2; }
  local help; help="$("$CTXLAB" bench --help 2>&1 || true)"  # no pipe into grep -q: SIGPIPE + pipefail
  [[ "$help" == *--device* ]] ||
    { echo "gpu_compare.sh: $CTXLAB bench has no --device option (build a tree with issue 14's --device on every verb)" >&2; return 2; }
  return 0
}

if [[ $DRY == 1 ]]; then
  echo "gpu_compare.sh: dry run; machine check:"
  if gpu_check; then echo "  GPU present: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"; fi
  echo "runs (A = ctxlab, B = PyTorch), table to $OUT:"
  print_plan
  exit 0
fi
gpu_check || exit $?

GPU_NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
GPU_INFO="$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | head -1)"
TORCH_VERSION="$("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)')"
HAS_COMPILE="$("$PY" -c 'import torch; print(int(hasattr(torch, "compile")))')"
HAS_FLEX="$("$PY" -c $'try:\n import torch.nn.attention.flex_attention\n print(1)\nexcept ImportError:\n print(0)' 2>/dev/null || echo 0)"
# Dense tensor / fp32 peaks for MFU, NVIDIA datasheets (TFLOPS without sparsity). Other GPUs: no MFU.
peak_tflops() {  # PRECISION -> TFLOPS or empty
  local name="$GPU_NAME" p="$1"
  case "$name" in
    *H100*PCIe*) case "$p" in bf16) echo 756 ;; tf32) echo 378 ;; fp32) echo 51 ;; esac ;;
    *H100*|*H200*) case "$p" in bf16) echo 989.4 ;; tf32) echo 494.7 ;; fp32) echo 66.9 ;; esac ;;
    *A100*) case "$p" in bf16) echo 312 ;; tf32) echo 156 ;; fp32) echo 19.5 ;; esac ;;
  esac
}
mkdir -p "$(dirname "$OUT")" "$JSONDIR"
jget() { "$HPY" -c 'import json,sys; v=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): v=v[k] if v is not None else None
print("" if v is None else v)' "$1" "$2"; }
med() { "$HPY" -c 'import statistics,sys; v=[float(x) for x in sys.argv[1:] if x]; print("%.4g" % statistics.median(v) if v else "")' "$@"; }

{
  echo "# ctxlab vs PyTorch on $GPU_NAME ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "Measured by \`bench/gpu_compare.sh\` (A B A B, $ROUNDS rounds, $STEPS timed steps after $WARMUP warm-up)."
  echo "GPU: $GPU_INFO. Peer: torch $TORCH_VERSION ($PY), attention $ATTENTION. ctxlab: $CTXLAB ($(cat "$(dirname "$CTXLAB")/built-from.txt" 2>/dev/null || git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))."
  echo "Extra args: ${EXTRA[*]:-(none)}. MFU: 6N + 12 L T D FLOP per token against the datasheet dense peak of the precision (fp32: CUDA cores; tf32 / bf16: tensor cores)."
  echo
  echo "| model | posenc | precision | PyTorch mode | ctxlab tok/s | PyTorch tok/s | median ratio ctxlab/PyTorch | ratios per round | ctxlab ms fwd / bwd / opt | PyTorch ms fwd / bwd / opt | MFU ctxlab / PyTorch | PyTorch compile s | GPU MB PyTorch |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} >"$OUT"

for cfg in "${PLAN[@]}"; do
  read -r m pe p mode <<<"$cfg"
  if [[ $mode != eager && $HAS_COMPILE != 1 ]]; then
    echo "| $m | $pe | $p | $mode | - | - | - | - | - | - | - | torch $TORCH_VERSION has no torch.compile | - |" >>"$OUT"; continue
  fi
  if [[ $mode == flex && $HAS_FLEX != 1 ]]; then
    echo "| $m | $pe | $p | flex | - | - | - | - | - | - | - | torch $TORCH_VERSION has no FlexAttention | - |" >>"$OUT"; continue
  fi
  peak="$(peak_tflops "$p")"
  PK=(); [[ -n "$peak" ]] && PK=(--peak-gflops "$("$HPY" -c "print($peak * 1000)")")
  read -ra MA <<<"$(model_args "$m")"
  read -ra CP <<<"$(ctx_prec "$p")"
  TA=() TB=() RATIOS=() A="" B=""
  for ((r = 1; r <= ROUNDS; r++)); do
    A="$JSONDIR/ctxlab-$m-$pe-$p-$mode-r$r.json" B="$JSONDIR/pytorch-$m-$pe-$p-$mode-r$r.json"
    echo "gpu_compare: $m $pe $p $mode round $r/$ROUNDS" >&2
    "$CTXLAB" bench --device cuda "${MA[@]}" --posenc "$pe" "${CP[@]}" --steps "$STEPS" --warmup "$WARMUP" "${PK[@]}" \
      "${EXTRA[@]}" --json "$A" >/dev/null 2>"$A.err" || { cat "$A.err" >&2; die "ctxlab bench failed ($m $p round $r)"; }
    read -ra MODEFLAG <<<"$(peer_mode "$mode")"
    "$PY" "$PEER" --device cuda "${MA[@]}" --posenc "$pe" --precision "$p" "${MODEFLAG[@]}" \
      --steps "$STEPS" --warmup "$WARMUP" "${PK[@]}" "${EXTRA[@]}" --json "$B" >/dev/null 2>"$B.err" ||
      { cat "$B.err" >&2; die "torch_peer.py failed ($m $p $mode round $r)"; }
    ta="$(jget "$A" tokens_per_s)" tb="$(jget "$B" tokens_per_s)"
    TA+=("$ta") TB+=("$tb")
    RATIOS+=("$("$HPY" -c 'import sys; print("%.3f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$ta" "$tb")")
  done
  split() { echo "$(jget "$1" forward_ms) / $(jget "$1" backward_ms) / $(jget "$1" optimizer_ms)"; }
  mfu() { local v; v="$(jget "$1" mfu)"; [[ -n "$v" ]] && "$HPY" -c "print('%.1f%%' % (100 * $v))" || echo -; }
  echo "| $m | $pe | $p | $mode | $(med "${TA[@]}") | $(med "${TB[@]}") | $(med "${RATIOS[@]}") | ${RATIOS[*]} | $(split "$A") | $(split "$B") | $(mfu "$A") / $(mfu "$B") | $(jget "$B" compile_s) | $(jget "$B" cuda_max_allocated_mb) |" >>"$OUT"
done
echo >>"$OUT"
echo "ms splits, compile time and memory are the last round's; tok/s are medians over the rounds." >>"$OUT"
echo "gpu_compare: table written to $OUT (JSON in $JSONDIR)" >&2
cat "$OUT"
