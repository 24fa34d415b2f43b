#!/usr/bin/env python3
"""cmake/check_layers.py — the layers of ctxlab, and the build step that holds every include to them.

Data flows one way (docs/architecture.md): each layer may include its own headers and those of
the layers below it, never one above. The build runs this script before compiling the library
(CMake target ctxlab_layers), so an upward include fails the build with the file, the line and
the rule, instead of waiting for a review. The backends' own headers (core/cpu/, core/cuda/) are
private to them: above core only the CLI, which prints backend details, may read them.
Extension kernels (core/extension.h: an op's own kernels, per device) are a layer of their own,
"kernels" (autograd/kernels/): they may include core and the backends' headers they build on
(core/cuda/ for their .cu files), and each is private to the op that owns it: no layer may include
them, only the owner files listed in OWNERS.

usage: check_layers.py ROOT [--stamp FILE]     exit 0: clean; 1: violations listed; 2: bad use
"""
import os
import re
import sys

# (layer, folders it owns, layers it may include). A file belongs to the layer of the longest
# folder that holds it; the order is bottom-up. This table is the one home of the layering.
LAYERS = [
    ("emu",      ["core/cuda/emu"], ["emu"]),
    ("core",     ["core"],          ["core"]),
    ("cpu",      ["core/cpu"],      ["core", "cpu"]),
    ("cuda",     ["core/cuda"],     ["core", "cuda", "emu"]),
    ("kernels",  ["autograd/kernels"], ["core", "cpu", "cuda", "kernels"]),
    ("autograd", ["autograd"],      ["core", "autograd"]),
    ("nn",       ["nn", "posenc"],  ["core", "autograd", "nn"]),
    ("io",       ["train/io"],      ["core", "autograd", "nn", "io"]),
    ("dist",     ["train/dist"],    ["core", "autograd", "nn", "io", "dist"]),
    ("train",    ["train"],         ["core", "autograd", "nn", "io", "dist", "train"]),
    ("cli",      ["train/cli"],     ["core", "cpu", "cuda", "autograd", "nn", "io", "dist", "train", "cli"]),
    ("api",      ["include"],       ["core", "autograd", "nn", "io", "dist", "train", "cli"]),
]
# Headers of the "kernels" layer and the one file each that may include them besides their own
# layer: the op that owns the kernels and calls them (a new encoding's kernels add a line here).
OWNERS = {
    "autograd/kernels/gru_cell.h": "autograd/ops_gru.cpp",
    "autograd/kernels/ode_rk4.h": "autograd/ops_ode.cpp",
    "autograd/kernels/fire.h": "autograd/ops_fire.cpp",
    "autograd/kernels/cope.h": "autograd/ops_cope.cpp",
}
SOURCE_EXT = (".h", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of(path):
    """The layer owning a repository-relative path (longest folder match), or None."""
    best, best_len = None, -1
    for name, folders, _ in LAYERS:
        for f in folders:
            if (path == f or path.startswith(f + "/")) and len(f) > best_len:
                best, best_len = name, len(f)
    return best


def check(root):
    allowed = {name: set(may) for name, _, may in LAYERS}
    problems = []
    for top in sorted({f.split("/")[0] for _, folders, _ in LAYERS for f in folders}):
        for d, _, files in os.walk(os.path.join(root, top)):
            for fn in sorted(files):
                if not fn.endswith(SOURCE_EXT):
                    continue
                full = os.path.join(d, fn)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                me = layer_of(rel)
                with open(full, encoding="utf-8", errors="replace") as fh:
                    for lineno, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        # "x.h" next to the including file (the emulator's own headers) is its layer
                        beside = os.path.normpath(os.path.join(os.path.dirname(rel), inc)).replace(os.sep, "/")
                        target = inc if os.path.exists(os.path.join(root, inc)) else beside
                        if not os.path.exists(os.path.join(root, target)):
                            continue  # a system or generated header
                        them = layer_of(target)
                        if them is None or them in allowed[me] or OWNERS.get(target) == rel:
                            continue
                        problems.append(f"{rel}:{lineno}: includes {inc} (layer '{them}'); the '{me}' layer "
                                        f"may include only {', '.join(sorted(allowed[me]))}")
    return problems


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    root = argv[1]
    stamp = argv[argv.index("--stamp") + 1] if "--stamp" in argv else None
    problems = check(root)
    if problems:
        print("layering: %d include(s) run against the layers (cmake/check_layers.py, docs/architecture.md):"
              % len(problems), file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    if stamp:
        with open(stamp, "w") as fh:
            fh.write("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
