#!/usr/bin/env bash
# scripts/setup.sh — install every Debian package ctxlab needs (idempotent, non-interactive).
#   build:   cmake, g++, oneDNN, OpenBLAS (pthread build), cxxopts, nlohmann-json, fmt, GoogleTest,
#            Boost.Context (fibers of the CUDA emulator, core/cuda/emu), OpenMPI (mpirun: data-parallel
#            training, docs/distributed.md), SentencePiece (tokenizers, train/tokenizer_sp.*)
#   tests:   python3-torch + numpy (PyTorch parity tests), clang + libclang-rt (fuzzers, sanitizers)
#   tools:   gnuplot (loss / perplexity plots), bible-kjv (optional larger corpus), dygraphs (charts
#            inlined by `ctxlab report`), chromium (headless: the report's browser test)
#   usage:   scripts/setup.sh [--kjv]
#            --kjv  also prepare data/kjv.txt, the King James Bible from the bible-kjv package
#                   (~4 MB, one verse per line, verse references stripped; public domain)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

WITH_KJV=0
for arg in "$@"; do
  case "$arg" in
    --kjv) WITH_KJV=1 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "setup: unknown option '$arg' (usage: scripts/setup.sh [--kjv])" >&2; exit 2 ;;
  esac
done
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

PKGS=(
  build-essential cmake ninja-build pkg-config git
  libdnnl-dev libopenblas-dev libopenblas0-pthread
  libcxxopts-dev nlohmann-json3-dev libfmt-dev
  libgtest-dev googletest libomp-dev
  python3 python3-numpy python3-torch
  clang libclang-rt-14-dev
  gnuplot-nox
  libboost-context-dev
  openmpi-bin libopenmpi-dev
  libsentencepiece-dev
  libjs-dygraphs chromium
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PKGS[@]} packages already installed"
fi

# ---- optional larger corpus: data/kjv.txt (idempotent; rebuilt only when missing or empty) ----
prepare_kjv() {
  local root out tmp
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  out="$root/data/kjv.txt"
  if [ -s "$out" ]; then
    echo "setup: $out already present"
    return 0
  fi
  if ! command -v bible >/dev/null; then
    echo "setup: installing bible-kjv"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends bible-kjv
  fi
  mkdir -p "$root/data"
  tmp="$out.tmp"
  # `bible` prints "Ge1:1 In the beginning ..." one verse per line; drop the reference.
  bible -f gen1:1-rev22:21 </dev/null | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' >"$tmp"
  if [ "$(wc -l <"$tmp")" -lt 31000 ]; then
    echo "setup: bible printed only $(wc -l <"$tmp") verses (expected 31102); keeping no kjv.txt" >&2
    rm -f "$tmp"
    return 1
  fi
  mv "$tmp" "$out"
  echo "setup: wrote $out ($(wc -c <"$out") bytes, $(wc -l <"$out") verses)"
}
if [ "$WITH_KJV" = 1 ]; then prepare_kjv; fi
