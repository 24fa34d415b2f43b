#!/usr/bin/env python3
"""tests/python/layers_checks.py — the build's layering check (cmake/check_layers.py) holds.

1. The source tree as it is: clean (the build runs the same check; this says so in ctest too).
2. A copy of the tree with one planted include per rule the checker enforces: each is reported
   with its file, line and layer, and the checker exits 1 — an upward include into each layer
   boundary, a layer above core reaching a backend's private headers, and an op's extension
   kernels (autograd/kernels/) included by anything but the op that owns them. Removing any rule from
   the checker's table (or the check itself) fails this test.
usage: layers_checks.py SOURCE_ROOT
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1])
CHECKER = os.path.join(ROOT, "cmake", "check_layers.py")

# (file in the tree, planted include, the layer named in the message)
PLANTS = [
    ("core/tensor.h", "core/cpu/gemm.h", "'core' layer"),            # core names no backend
    ("core/cpu/gemm.h", "core/cuda/kernels.h", "'cpu' layer"),        # backends stay apart
    ("core/cuda/kernels.h", "autograd/variable.h", "'cuda' layer"),
    ("core/cuda/emu/fiber.h", "core/tensor.h", "'emu' layer"),        # the emulator is its own library
    ("autograd/variable.h", "nn/module.h", "'autograd' layer"),
    ("autograd/variable.h", "core/cpu/gemm.h", "'autograd' layer"),   # backend internals
    ("nn/module.h", "train/io/safetensors.h", "'nn' layer"),
    ("posenc/posenc.h", "train/trainer.h", "'nn' layer"),             # the encodings are nn's
    ("train/io/safetensors.h", "train/dist/distributed.h", "'io' layer"),
    ("train/dist/distributed.h", "train/trainer.h", "'dist' layer"),
    ("train/trainer.h", "train/cli/cli_common.h", "'train' layer"),
    ("autograd/kernels/gru_cell.h", "autograd/variable.h", "'kernels' layer"),  # kernels sit below autograd
    ("autograd/ops_ode.cpp", "autograd/kernels/gru_cell.h", "'autograd' layer"),  # only the owner, ops_gru.cpp
    ("nn/module.h", "autograd/kernels/ode_rk4.h", "'nn' layer"),
    ("train/trainer.h", "core/cpu/threading_gone.h", None),           # a missing header is not ours to judge
]


def run(root):
    return subprocess.run([sys.executable, CHECKER, root], capture_output=True, text=True)


def main():
    r = run(ROOT)
    assert r.returncode == 0, "the tree itself breaks the layering:\n" + r.stderr
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for top in ("core", "autograd", "nn", "posenc", "train", "include", "cmake"):
            shutil.copytree(os.path.join(ROOT, top), os.path.join(tmp, top),
                            ignore=shutil.ignore_patterns("*.md", "*.py", "*.in"))
        for rel, inc, layer in PLANTS:
            path = os.path.join(tmp, rel)
            with open(path) as fh:
                original = fh.read()
            with open(path, "a") as fh:
                fh.write('\n#include "%s"\n' % inc)
            line = original.count("\n") + 2
            r = run(tmp)
            with open(path, "w") as fh:
                fh.write(original)
            if layer is None:
                if r.returncode != 0:
                    failures.append("%s including the missing %s: rejected (%s)" % (rel, inc, r.stderr.strip()))
                continue
            want = "%s:%d: includes %s" % (rel, line, inc)
            if r.returncode != 1 or want not in r.stderr or layer not in r.stderr:
                failures.append("%s including %s: rc %d, expected rc 1 and '%s' naming the %s\n%s"
                                % (rel, inc, r.returncode, want, layer, r.stderr))
    if failures:
        print("\n".join(failures))
        return 1
    print("layers_checks: the tree is clean; %d planted includes rejected, each with file, line and layer"
          % (len(PLANTS) - 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
