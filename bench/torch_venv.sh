#!/usr/bin/env bash
# bench/torch_venv.sh — installs today's PyTorch from PyPI into its own virtual environment, the
# "venv" peer of bench/compare.sh and bench/gpu_compare.sh (Debian's torch 1.13 is the "debian"
# peer). Never part of CI or of scripts/setup.sh's required path: it downloads several GB (the
# PyPI wheel pulls the nvidia-* CUDA libraries, which the CPU runs do not use but pip installs).
#
# Prerequisites (Debian): python3-venv (the venv module), python3-dev (Python.h: torch.compile's
# inductor builds C++ wrappers against it on the CPU) and g++. The script checks them and says
# which apt-get line is missing; it installs nothing outside the venv itself.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: bench/torch_venv.sh [--dir DIR] [--python PY] [--torch SPEC] [--check-only]

  --dir DIR      the venv (default $CTXLAB_TORCH_VENV, else ~/.cache/ctxlab/torch-venv: outside
                 the tree, so every checkout and worktree shares one copy of the ~5 GB)
  --python PY    the interpreter the venv is made from (default /usr/bin/python3, Debian's)
  --torch SPEC   pip requirement for torch (default "torch": the newest release on PyPI)
  --check-only   do not install; verify an existing venv (import, version, torch.compile on CPU)

After it ran:  bench/compare.sh --peer venv ...   (or --peer DIR/bin/python)
USAGE
}

DIR="${CTXLAB_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxlab/torch-venv}" BASEPY=/usr/bin/python3 SPEC=torch CHECK_ONLY=0
die() { echo "torch_venv.sh: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) DIR="${2:?--dir needs a directory}"; shift 2 ;;
    --python) BASEPY="${2:?--python needs an interpreter}"; shift 2 ;;
    --torch) SPEC="${2:?--torch needs a pip requirement}"; shift 2 ;;
    --check-only) CHECK_ONLY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option '$1'" ;;
  esac
done

VPY="$DIR/bin/python"
if [[ $CHECK_ONLY == 0 ]]; then
  command -v "$BASEPY" >/dev/null || die "no interpreter '$BASEPY' (pass --python)"
  "$BASEPY" -c 'import venv, ensurepip' 2>/dev/null ||
    die "$BASEPY has no venv/ensurepip module: apt-get install python3-venv"
  if [[ ! -x "$VPY" ]]; then
    echo "creating $DIR from $BASEPY" >&2
    "$BASEPY" -m venv "$DIR"
  fi
  "$VPY" -m pip install --upgrade pip
  # numpy: torch imports it for tensor<->array conversions and warns without it.
  "$VPY" -m pip install --upgrade "$SPEC" numpy
fi
[[ -x "$VPY" ]] || die "no venv at $DIR (run bench/torch_venv.sh without --check-only)"

# Checks: the version, the C++ toolchain torch.compile needs on the CPU, and one compiled call.
command -v g++ >/dev/null || echo "torch_venv.sh: warning: no g++ (torch.compile on the CPU needs a C++ compiler: apt-get install g++)" >&2
INC="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
[[ -f "$INC/Python.h" ]] || echo "torch_venv.sh: warning: no $INC/Python.h (torch.compile on the CPU needs it: apt-get install python3-dev)" >&2
"$VPY" - <<'PY'
import time, torch
print(f"torch {torch.__version__} at {torch.__file__}")
print(f"cuda build {torch.version.cuda}, cuda available {torch.cuda.is_available()}")
f = torch.compile(lambda x, w: torch.nn.functional.gelu(x @ w, approximate="tanh").sum())
x, w = torch.randn(64, 64), torch.randn(64, 64)
t = time.perf_counter()
y = f(x, w)
ref = torch.nn.functional.gelu(x @ w, approximate="tanh").sum()
ok = torch.allclose(y, ref, rtol=1e-4, atol=1e-3)
print(f"torch.compile on cpu: {'ok' if ok else 'WRONG RESULT'} ({time.perf_counter() - t:.1f} s to compile and run)")
raise SystemExit(0 if ok else 1)
PY
echo "venv ready: $VPY  (bench/compare.sh --peer venv, or --peer $VPY)"
