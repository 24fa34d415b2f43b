"""The required-dependency policy of the Python tests (docs/testing.md).

scripts/setup.sh installs python3-torch and python3-numpy, so a test that needs them FAILS when
they do not import. Only where CTXLAB_ALLOW_MISSING (comma-separated names, e.g. "torch"; never
set in CI) lists the dependency does the test exit 77 instead, which ctest reports as skipped,
after printing why.

    import deps
    deps.require("torch", "numpy", "torch")   # name for CTXLAB_ALLOW_MISSING, then modules
"""

import importlib
import os
import sys

SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests


def missing_allowed(name):
    """Whether CTXLAB_ALLOW_MISSING lists `name` (or "all")."""
    listed = [s.strip() for s in os.environ.get("CTXLAB_ALLOW_MISSING", "").split(",")]
    return name in listed or "all" in listed


def require(name, *modules):
    """Imports every module; on failure exits 1 (FAIL) or, where allowed, 77 (skip)."""
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError as e:
            why = f"cannot import {m} with {sys.executable}: {e}"
            if missing_allowed(name):
                print(f"SKIP: dependency '{name}' missing, allowed by CTXLAB_ALLOW_MISSING: {why}")
                sys.exit(SKIP)
            print(f"FAIL: required dependency '{name}' missing: {why} (scripts/setup.sh installs "
                  f"it; set CTXLAB_ALLOW_MISSING={name} only on a machine that cannot have it)")
            sys.exit(1)


def require_program(name, exe):
    """The path of program `exe`; when it is not on PATH exits 1 (FAIL) or, where allowed, 77."""
    import shutil
    path = shutil.which(exe)
    if path:
        return path
    why = f"program '{exe}' not found on PATH"
    if missing_allowed(name):
        print(f"SKIP: dependency '{name}' missing, allowed by CTXLAB_ALLOW_MISSING: {why}")
        sys.exit(SKIP)
    print(f"FAIL: required dependency '{name}' missing: {why} (scripts/setup.sh installs it; set "
          f"CTXLAB_ALLOW_MISSING={name} only on a machine that cannot have it)")
    sys.exit(1)
