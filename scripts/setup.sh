#!/usr/bin/env bash
# scripts/setup.sh — install every Debian package ctxlab needs (idempotent, non-interactive).
#   build:   cmake, g++, oneDNN, OpenBLAS (pthread build), cxxopts, nlohmann-json, fmt, GoogleTest
#   tests:   python3-torch + numpy (PyTorch parity tests), clang + libclang-rt (fuzzers, sanitizers)
#   tools:   gnuplot (loss / perplexity plots), bible-kjv (optional larger corpus)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
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
