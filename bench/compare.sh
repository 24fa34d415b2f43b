#!/usr/bin/env bash
# bench/compare.sh — ctxlab vs PyTorch on the same model: runs `ctxlab bench` and
# bench/torch_peer.py alternately (A B A B ...) with the same preset, encoding, batch, context,
# threads and steps, and prints each pair's tokens/s, the ratio ctxlab/pytorch, the median ratio
# and both peak RSS. The FMA peak for MFU is measured with `ctxlab bench --peak-only` (the same
# value for both). The peer is Debian's torch 1.13 or today's PyTorch from bench/torch_venv.sh,
# eager or torch.compile'd, in fp32 or under bf16 autocast. See bench/README.md ("ctxlab bench
# and the PyTorch peer").
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/compare.sh [options] [-- args for both benchmarks, e.g. --steps 5 --batch 4]

  --rounds N              pairs of runs, ctxlab then pytorch each round (default 3)
  --preset NAME           tiny | small | medium (default small)
  --config FILE           a model config JSON (MODEL_SPEC §2) instead of the preset, for both
                          (e.g. bench/configs/small-dropout.json: small with dropout 0.1)
  --posenc X              type name or JSON (default: the preset's, learned)
  --torch-settings S      best: PyTorch's fastest wait policy, measured (docs/threading.md):
                          GOMP_SPINCOUNT=1000 for today's PyTorch (as the ctxlab CLI sets it),
                          OMP_WAIT_POLICY=PASSIVE for Debian's 1.13 (its OpenBLAS pthread pool
                          loses to any spin), and OPENBLAS_CORETYPE=$CORETYPE
                          (default Cooperlake on an AVX-512 CPU, else Haswell; see
                          bench/README.md); installed: PyTorch as installed
                          (OMP_WAIT_POLICY, GOMP_SPINCOUNT, OPENBLAS_CORETYPE removed from its
                          environment). Default best.
  --attention A           manual | fast (the PyTorch peer's attention; default manual)
  --peer P                debian: /usr/bin/python3 (Debian's torch 1.13, the default);
                          venv: $CTXLAB_TORCH_VENV, else ~/.cache/ctxlab/torch-venv (made by
                          bench/torch_venv.sh: today's PyTorch); or a python executable's path
  --peer-mode M           eager | compile (torch.compile of model and optimizer phase; torch 2.x;
                          compile time is reported separately, never in the timed steps). Default eager
  --precision P           fp32 | bf16: passed to `ctxlab bench --precision` and to the peer
                          (torch.autocast bf16, fp32 master weights). Default fp32
  --threads N             threads for both (default 2)
  --peak-gflops G         peak for MFU (default: ctxlab bench --peak-only, 3 times before the
                          rounds and once after each; the highest is used)
  --csv FILE              also write one row per pair to FILE
  --json-dir DIR          keep every run's JSON there
  --ctxlab PATH           the ctxlab binary (default: build-bench/ctxlab, else build/ctxlab)
  --python PATH           same as --peer PATH

examples:
  bench/compare.sh --rounds 3 --preset small --posenc rope
  bench/compare.sh --preset tiny --rounds 2 --csv /tmp/tiny.csv -- --steps 5
  bench/compare.sh --torch-settings installed --posenc alibi --attention fast
  bench/compare.sh --peer venv --peer-mode compile --preset small --posenc rope
  bench/compare.sh --peer venv --precision bf16 --preset medium
  bench/compare.sh --peer venv --attention fast --config bench/configs/small-dropout.json
EOF
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS=3 PRESET=small CONFIG="" POSENC="" SETTINGS=best ATTENTION=manual THREADS=2 PEAK="" CSV="" JSONDIR=""
CTXLAB="" PEER_ARG=debian PEER_MODE=eager PRECISION=fp32
# PyTorch's best OpenBLAS core type: Cooperlake on an AVX-512 CPU (the machines export Haswell,
# which halves OpenBLAS there), Haswell on an AVX2-only one (bench/README.md measures both)
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then DEFAULT_CORETYPE=Cooperlake; else DEFAULT_CORETYPE=Haswell; fi
CORETYPE="${COMPARE_OPENBLAS_CORETYPE:-$DEFAULT_CORETYPE}"
EXTRA=()
die() { echo "compare.sh: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS="${2:?}"; shift 2 ;;
    --preset) PRESET="${2:?}"; shift 2 ;;
    --config) CONFIG="${2:?}"; shift 2 ;;
    --posenc) POSENC="${2:?}"; shift 2 ;;
    --torch-settings) SETTINGS="${2:?}"; shift 2 ;;
    --attention) ATTENTION="${2:?}"; shift 2 ;;
    --threads) THREADS="${2:?}"; shift 2 ;;
    --peak-gflops) PEAK="${2:?}"; shift 2 ;;
    --csv) CSV="${2:?}"; shift 2 ;;
    --json-dir) JSONDIR="${2:?}"; shift 2 ;;
    --ctxlab) CTXLAB="${2:?}"; shift 2 ;;
    --peer|--python) PEER_ARG="${2:?}"; shift 2 ;;
    --peer-mode) PEER_MODE="${2:?}"; shift 2 ;;
    --precision) PRECISION="${2:?}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) usage >&2; die "unknown option '$1'" ;;
  esac
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, got '$ROUNDS'"
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer, got '$THREADS'"
[[ "$SETTINGS" == best || "$SETTINGS" == installed ]] || die "--torch-settings must be best or installed"
[[ "$ATTENTION" == manual || "$ATTENTION" == fast ]] || die "--attention must be manual or fast"
[[ "$PEER_MODE" == eager || "$PEER_MODE" == compile ]] || die "--peer-mode must be eager or compile, got '$PEER_MODE'"
[[ "$PRECISION" == fp32 || "$PRECISION" == bf16 ]] || die "--precision must be fp32 or bf16, got '$PRECISION'"
[[ -z "$CONFIG" || -f "$CONFIG" ]] || die "--config: no such file '$CONFIG'"  # (the options first, then the tools)
case "$PEER_ARG" in
  debian) PY=/usr/bin/python3 ;;
  venv) PY="${CTXLAB_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxlab/torch-venv}/bin/python"
        [[ -x "$PY" ]] || die "--peer venv: no $PY (run bench/torch_venv.sh first, or set CTXLAB_TORCH_VENV)" ;;
  *) PY="$PEER_ARG" ;;
esac
[[ -x "$PY" ]] || command -v "$PY" >/dev/null 2>&1 || die "--peer: '$PY' is not an executable python"
TORCH_VERSION="$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)" ||
  die "--peer: $PY cannot import torch"
# the peer's fastest wait policy (--torch-settings best): torch 1.x (Debian's, GEMMs on OpenBLAS's
# pthread pool) never spinning, torch 2.x (oneDNN on the OpenMP pool) a short spin
if [[ "$TORCH_VERSION" == 1.* ]]; then TORCH_WAIT=OMP_WAIT_POLICY=PASSIVE; else TORCH_WAIT=GOMP_SPINCOUNT=1000; fi
if [[ "$PEER_MODE" == compile ]]; then
  "$PY" -c 'import sys, torch; sys.exit(0 if hasattr(torch, "compile") else 1)' ||
    die "--peer-mode compile: torch $TORCH_VERSION ($PY) has no torch.compile (use --peer venv)"
fi
# The machine, for the table: the CPU model and the ISA flags that decide the kernels.
CPU_MODEL="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
CPU_ID="$(lscpu 2>/dev/null | awk -F: '/^CPU family:/{gsub(/ /,"",$2); f=$2} /^Model:/{gsub(/ /,"",$2); m=$2} END{if (f != "") print "family " f " model " m}')"
CPU_FLAGS="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' |
  grep -xE 'avx2|fma|avx512f|avx512_vnni|avx512_bf16|amx_tile|amx_bf16' | tr '\n' ' ')"
if [[ -z "$CTXLAB" ]]; then
  for c in "$ROOT/build-bench/ctxlab" "$ROOT/build/ctxlab"; do [[ -x "$c" ]] && { CTXLAB="$c"; break; }; done
fi
[[ -n "$CTXLAB" && -x "$CTXLAB" ]] || die "no ctxlab binary (build it, or pass --ctxlab PATH)"
PEER="$ROOT/bench/torch_peer.py"

# JSON field reader: jq when installed, else python3.
jget() {  # FILE PATH (jq syntax without the leading dot, e.g. ms_per_step.median)
  if command -v jq >/dev/null 2>&1; then jq -r ".$2" "$1"
  else "$HPY" -c 'import json,sys; v=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): v=v[k]
print(v)' "$1" "$2"; fi
}

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
[[ -n "$JSONDIR" ]] && mkdir -p "$JSONDIR"

if [[ -n "$CONFIG" ]]; then
  [[ -f "$CONFIG" ]] || die "--config: no such file '$CONFIG'"
  COMMON=(--config "$CONFIG")
  MODEL_NAME="$CONFIG"
else
  COMMON=(--preset "$PRESET")
  MODEL_NAME="$PRESET"
fi
[[ -n "$POSENC" ]] && COMMON+=(--posenc "$POSENC")
# --precision fp32 is each side's default and is not passed (a ctxlab without the flag still runs);
# bf16 goes to both: ctxlab's own bf16 GEMMs, the peer's torch.autocast.
[[ "$PRECISION" == bf16 ]] && COMMON+=(--precision bf16)
COMMON+=("${EXTRA[@]}")
PEER_ARGS=(--threads "$THREADS" --attention "$ATTENTION")
[[ "$PEER_MODE" == compile ]] && PEER_ARGS+=(--compile)

# ctxlab always runs as its CLI does (GOMP_SPINCOUNT=1000, docs/threading.md).
# Helpers' arithmetic runs on the system python (the peer's may be any interpreter).
HPY="$(command -v python3 || echo /usr/bin/python3)"
run_ctxlab() { env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=1000 CTXLAB_THREADS="$THREADS" "$CTXLAB" bench "$@"; }
run_torch() {
  if [[ "$SETTINGS" == best ]]; then
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT $TORCH_WAIT OPENBLAS_CORETYPE="$CORETYPE" "$PY" "$PEER" "$@"
  else
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OPENBLAS_CORETYPE "$PY" "$PEER" "$@"
  fi
}

# The FMA peak for MFU. On a shared machine interference only lowers a measurement, so it is
# measured 3 times before the rounds and once after each, and MFU is reported against the highest.
PEAK_GIVEN=1
# In bf16 the peak is ctxlab's bf16 one (`--peak-only --precision bf16`) where ctxlab has it; a
# ctxlab without it gets the fp32 FMA peak, and the note says so.
PEAK_PRECISION=()
if [[ "$PRECISION" == bf16 && -z "$PEAK" ]]; then
  if run_ctxlab --peak-only --precision bf16 --threads "$THREADS" >/dev/null 2>&1; then
    PEAK_PRECISION=(--precision bf16)
  else
    echo "compare.sh: note: '$CTXLAB bench --peak-only --precision bf16' failed: MFU is against the fp32 FMA peak" >&2
  fi
fi
measure_peak() {
  run_ctxlab --peak-only "${PEAK_PRECISION[@]}" --threads "$THREADS" >"$TMP/peak.json" 2>/dev/null || die "ctxlab bench --peak-only failed"
  PEAK="$("$HPY" -c 'import sys; print(max(float(x) for x in sys.argv[1:] if x))' "$(jget "$TMP/peak.json" peak_gflops)" ${PEAK:+"$PEAK"})"
}
if [[ -z "$PEAK" ]]; then
  PEAK_GIVEN=0
  for i in 1 2 3; do measure_peak; done
  PEAK_START="$PEAK"
  PEAK_NOTE="measured: ctxlab bench --peak-only ${PEAK_PRECISION[*]}: $(jget "$TMP/peak.json" peak_isa), $THREADS threads, best of 3"
else
  PEAK_NOTE="given"
fi

echo "machine: ${CPU_MODEL:-unknown CPU}${CPU_ID:+ ($CPU_ID)}, $(nproc) cores visible; flags: ${CPU_FLAGS:-(none of avx2 fma avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16)}"
echo "peer: torch $TORCH_VERSION ($PY), $PEER_MODE; precision $PRECISION"
echo "compare: model $MODEL_NAME, posenc ${POSENC:-(preset default)}, threads $THREADS, torch settings $SETTINGS$(
  [[ $SETTINGS == best ]] && echo " ($TORCH_WAIT OPENBLAS_CORETYPE=$CORETYPE)"), attention $ATTENTION,"
echo "         extra args: ${EXTRA[*]:-(none)}; peak $PEAK GFLOP/s ($PEAK_NOTE); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %12s %12s %7s %10s %10s %9s %9s %9s %6s\n' round ctxlab_tok/s torch_tok/s ratio ctx_ms torch_ms ctx_RSS torch_RSS compile_s load1
RATIOS=() ROWS=() GA=() GB=()
for ((r = 1; r <= ROUNDS; r++)); do
  A="$TMP/ctxlab$r.json" B="$TMP/torch$r.json"
  run_ctxlab "${COMMON[@]}" --peak-gflops "$PEAK" --json "$A" >/dev/null 2>"$TMP/ctxlab$r.err" ||
    { cat "$TMP/ctxlab$r.err" >&2; die "ctxlab bench failed in round $r"; }
  run_torch "${COMMON[@]}" "${PEER_ARGS[@]}" --peak-gflops "$PEAK" --json "$B" \
    >/dev/null 2>"$TMP/torch$r.err" || { cat "$TMP/torch$r.err" >&2; die "torch_peer.py failed in round $r"; }
  load1="$(cut -d' ' -f1 /proc/loadavg)"
  [[ -n "$JSONDIR" ]] && cp "$A" "$JSONDIR/ctxlab-$(basename "$MODEL_NAME" .json)-$PRECISION-r$r.json" &&
    cp "$B" "$JSONDIR/pytorch-$TORCH_VERSION-$PEER_MODE-$PRECISION-$(basename "$MODEL_NAME" .json)-r$r.json"
  ta="$(jget "$A" tokens_per_s)" tb="$(jget "$B" tokens_per_s)"
  ratio="$("$HPY" -c 'import sys; print("%.3f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$ta" "$tb")"
  RATIOS+=("$ratio")
  csec="$(jget "$B" compile_s)"; [[ "$csec" == null || "$csec" == None ]] && csec=-
  printf '%-5s %12s %12s %7s %10s %10s %9s %9s %9s %6s\n' "$r" "$ta" "$tb" "$ratio" "$(jget "$A" ms_per_step.median)" \
    "$(jget "$B" ms_per_step.median)" "$(jget "$A" peak_rss_mb)MB" "$(jget "$B" peak_rss_mb)MB" "$csec" "$load1"
  ROWS+=("$r,$MODEL_NAME,$(jget "$A" posenc),$(jget "$A" batch),$(jget "$A" context),$THREADS,$SETTINGS,$ATTENTION,$TORCH_VERSION,$PEER_MODE,$PRECISION,$csec,$ta,$tb,$ratio,$(
    jget "$A" ms_per_step.median),$(jget "$B" ms_per_step.median),$(jget "$A" forward_ms),$(jget "$A" backward_ms),$(
    jget "$A" optimizer_ms),$(jget "$B" forward_ms),$(jget "$B" backward_ms),$(jget "$B" optimizer_ms),$(
    jget "$A" peak_rss_mb),$(jget "$B" peak_rss_mb),$(jget "$A" achieved_gflops),$(jget "$B" achieved_gflops),$load1")
  GA+=("$(jget "$A" achieved_gflops)") GB+=("$(jget "$B" achieved_gflops)")
  [[ $PEAK_GIVEN == 0 ]] && measure_peak
done
last_a="$TMP/ctxlab$ROUNDS.json" last_b="$TMP/torch$ROUNDS.json"
echo "median ratio ctxlab/pytorch (torch $TORCH_VERSION $PEER_MODE, $PRECISION): $("$HPY" -c 'import statistics,sys; print("%.3f" % statistics.median(map(float, sys.argv[1:])))' "${RATIOS[@]}") over $ROUNDS rounds"
med() { "$HPY" -c 'import statistics,sys; print("%.4g" % statistics.median(map(float, sys.argv[1:])))' "$@"; }
MFU_A="$("$HPY" -c 'import sys; print("%.4f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$(med "${GA[@]}")" "$PEAK")"
MFU_B="$("$HPY" -c 'import sys; print("%.4f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$(med "${GB[@]}")" "$PEAK")"
echo "last round: ctxlab forward/backward/optimizer $(jget "$last_a" forward_ms)/$(jget "$last_a" backward_ms)/$(jget "$last_a" optimizer_ms) ms; pytorch $(jget "$last_b" forward_ms)/$(jget "$last_b" backward_ms)/$(jget "$last_b" optimizer_ms) ms"
if [[ $PEAK_GIVEN == 0 ]]; then
  echo "peak: $PEAK_START GFLOP/s before the rounds, $PEAK highest of $((3 + ROUNDS)) measurements (MFU below uses it; each JSON's mfu used the highest measured before its round)"
fi
echo "median achieved GFLOP/s: ctxlab $(med "${GA[@]}"), pytorch $(med "${GB[@]}"); MFU vs $PEAK GFLOP/s: ctxlab $MFU_A, pytorch $MFU_B"
echo "peak RSS (last round): ctxlab $(jget "$last_a" peak_rss_mb) MB, pytorch $(jget "$last_b" peak_rss_mb) MB (includes the Python interpreter and torch libraries)"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ -n "$CSV" ]]; then
  echo "round,preset,posenc,batch,context,threads,torch_settings,attention,torch_version,peer_mode,precision,peer_compile_s,ctxlab_tok_s,pytorch_tok_s,ratio,ctxlab_ms,pytorch_ms,ctxlab_fwd_ms,ctxlab_bwd_ms,ctxlab_opt_ms,pytorch_fwd_ms,pytorch_bwd_ms,pytorch_opt_ms,ctxlab_rss_mb,pytorch_rss_mb,ctxlab_gflops,pytorch_gflops,load1,peak_gflops" >"$CSV"
  for row in "${ROWS[@]}"; do echo "$row,$PEAK" >>"$CSV"; done
  echo "rows written to $CSV"
fi
exit 0
