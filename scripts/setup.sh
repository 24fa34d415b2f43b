#!/usr/bin/env bash
# scripts/setup.sh — install every Debian package ctxlab needs (idempotent, non-interactive).
#   build:   cmake, g++, oneDNN, OpenBLAS (pthread build), cxxopts, nlohmann-json, fmt, GoogleTest,
#            Boost.Context (fibers of the CUDA emulator, core/cuda/emu), OpenMPI (mpirun: data-parallel
#            training, docs/distributed.md), SentencePiece (tokenizers, train/tokenizer_sp.*)
#   tests:   python3-torch + numpy (PyTorch parity tests), clang + libclang-rt (fuzzers, sanitizers)
#   python:  python3-dev, python3-venv, python3-pytest, and the project venv
#            ~/.cache/ctxlab/py-venv (Debian's python3 with its packages, plus nanobind,
#            scikit-build-core and mypy from PyPI, pinned): the Python module and its tests (docs/python.md)
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
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
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
  python3-dev python3-venv python3-pytest
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

# ---- the project venv: nanobind for the Python module (idempotent; cmake/python.cmake finds it) ----
# --system-site-packages: Debian's torch, numpy and pytest stay visible (the module's tests use them).
# mypy: ctest python_types type-checks the package with it (docs/python.md "Types").
PY_VENV="${XDG_CACHE_HOME:-$HOME/.cache}/ctxlab/py-venv"
PY_PINS=(nanobind==3.1.0 scikit-build-core==1.1.2 mypy==1.19.1)
# every pin installed at its version (a venv made before a pin was added or bumped gets it now)
if "$PY_VENV/bin/python" - "${PY_PINS[@]}" 2>/dev/null <<'EOF'
import sys
from importlib.metadata import version
sys.exit(any(version(name) != v for name, v in (pin.split("==") for pin in sys.argv[1:])))
EOF
then
  echo "setup: $PY_VENV already has ${PY_PINS[*]}"
else
  echo "setup: making $PY_VENV (${PY_PINS[*]} from PyPI)"
  /usr/bin/python3 -m venv --system-site-packages "$PY_VENV"
  "$PY_VENV/bin/pip" install -q --disable-pip-version-check "${PY_PINS[@]}"
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
