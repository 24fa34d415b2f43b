"""tests/python/typecheck.py — ctest python_types: `mypy --strict` over the ctxlab package as this
build made it, plus python/tests/typecheck_usage.py (the API as docs/python.md uses it, with
assert_type on what each call returns). docs/python.md "Types".

    typecheck.py BUILD/python SOURCE/python

BUILD/python/ctxlab holds __init__.py (copied from the source tree), the module and the stub
_ctxlab.pyi that nanobind's stubgen generated from it, so the Python layer is checked against
what the C++ bindings really declare. mypy is required (scripts/setup.sh pins it in the project
venv): missing, the test FAILS, or exits 77 (skipped) where CTXLAB_ALLOW_MISSING lists mypy
(tests/python/deps.py). The settings are python/pyproject.toml's [tool.mypy].
"""

import os
import subprocess
import sys

import deps


def main():
    if len(sys.argv) != 3:
        print("usage: typecheck.py BUILD/python SOURCE/python")
        return 2
    built, source = (os.path.abspath(a) for a in sys.argv[1:])
    deps.require("mypy", "mypy")
    pkg = os.path.join(built, "ctxlab")
    for f in ("__init__.py", "_ctxlab.pyi", "py.typed"):
        if not os.path.isfile(os.path.join(pkg, f)):
            print(f"FAIL: {os.path.join(pkg, f)} is missing: build the targets _ctxlab and _ctxlab_stub "
                  f"(the stub is nanobind's stubgen output, python/CMakeLists.txt)")
            return 1
    cmd = [sys.executable, "-m", "mypy", "--strict", "--config-file", os.path.join(source, "pyproject.toml"),
           "--cache-dir", os.path.join(os.path.dirname(built), "mypy_cache"),
           "ctxlab", os.path.join(source, "tests", "typecheck_usage.py")]
    print("$ (cd", built, "&&", " ".join(cmd[1:]) + ")", flush=True)
    # in BUILD/python, so that `ctxlab` (the argument and the usage file's import) is the built package
    rc = subprocess.run(cmd, cwd=built).returncode
    print("PASS: mypy --strict found no issues" if rc == 0 else f"FAIL: mypy --strict exited {rc} (errors above)")
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
