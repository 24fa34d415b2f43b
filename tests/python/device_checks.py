#!/usr/bin/env python3
"""tests/python/device_checks.py — `ctxlab grads --device cuda` against `--device cpu`.

For each encoding given, one tiny checkpoint (ctxlab init) and one token batch; the gradients of
every parameter and the loss from the two devices must agree: loss within 1e-5 relative, every
gradient tensor within 1e-4 (max |a - b| / max(max |b|, 1e-30), per tensor), the same names and
shapes. A gradient zero in exact arithmetic (FIRE's mlp.fc2.bias shifts every softmax row,
POSENC_SPEC §7.1) is rounding noise on both devices: measured against the largest gradient. Run by tests/cli/device.cmake in builds with the CUDA backend (the emulated one in CI).

With a real CUDA build on a machine without a GPU, `--device cuda` must fail with one line; this
script then prints `SKIP: no GPU ...` and exits 77 (the only kind of skip the suite allows;
.ci/check_skips.py holds CI to that).
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

ROUNDING_ZERO = re.compile(r"(^|\.)pe\.mlp\.fc2\.bias$")


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--encodings", nargs="+", default=["none", "learned", "sinusoidal", "rope"],
                    help="posenc type names or JSON objects, one argument each; a suffix "
                    "'|OPTIONS' adds `grads` options to that one (e.g. 'alibi|--window 8 --sinks 2')")
    ap.add_argument("--emulated", type=int, required=True, help="1 when the build emulates the GPU")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)

    rng = np.random.default_rng(5)
    tokens = rng.integers(0, 256, size=(3, 33), dtype=np.int64)  # B 3, T 32 (odd B)
    tok = os.path.join(a.work, "tokens.npy")
    st_io.save_npy(tok, tokens)

    failures = 0
    for i, enc in enumerate(a.encodings):
        enc, _, extra = enc.partition("|")   # grads options of this case (window, sinks)
        tag = enc if enc.isidentifier() and not extra else f"enc{i}"
        ck = os.path.join(a.work, f"{tag}.safetensors")
        rc, out, err = run([a.bin, "init", "--preset", "tiny", "--posenc", enc, "--seed", "11", "--out", ck])
        if rc != 0:
            print(f"{enc}: init failed: {err.strip()}")
            return 1
        outs = {}
        for dev in ("cpu", "cuda"):
            g = os.path.join(a.work, f"{tag}.{dev}.grads.safetensors")
            if os.path.exists(g):
                os.remove(g)
            rc, out, err = run([a.bin, "grads", "--checkpoint", ck, "--tokens", tok, "--out", g, "--device", dev]
                               + extra.split())
            if dev == "cuda" and rc != 0 and not a.emulated:
                lines = [l for l in err.strip().splitlines() if l.strip()]
                if len(lines) == 1 and "no CUDA GPU" in lines[0]:
                    print(f"SKIP: no GPU on this machine; `--device cuda` said: {lines[0].strip()}")
                    return 77
                print(f"{enc}: --device cuda failed without the one-line 'no CUDA GPU' error: {err!r}")
                return 1
            if rc != 0:
                print(f"{enc}: grads --device {dev} failed (exit {rc}): {err.strip()}")
                return 1
            outs[dev] = g
        cpu_t, cpu_meta = st_io.read_safetensors(outs["cpu"])
        gpu_t, gpu_meta = st_io.read_safetensors(outs["cuda"])
        lc, lg = float(cpu_meta["loss"]), float(gpu_meta["loss"])
        rel = abs(lc - lg) / abs(lc)
        ok = rel <= 1e-5
        worst = ("", 0.0)
        if sorted(cpu_t) != sorted(gpu_t):
            print(f"{enc}: parameter names differ: {sorted(set(cpu_t) ^ set(gpu_t))}")
            ok = False
        else:
            model_scale = max(float(np.max(np.abs(t))) for t in cpu_t.values() if t.size)
            for name in cpu_t:
                c, d = cpu_t[name].astype(np.float64), gpu_t[name].astype(np.float64)
                if c.shape != d.shape:
                    print(f"{enc}: {name}: shape {d.shape} on cuda, {c.shape} on cpu")
                    ok = False
                    continue
                scale = max(float(np.max(np.abs(c))) if c.size else 0.0, 1e-30)
                if ROUNDING_ZERO.search(name):
                    scale = model_scale
                err_t = float(np.max(np.abs(c - d))) / scale if c.size else 0.0
                if not np.all(np.isfinite(d)):
                    err_t = float("inf")
                if err_t > worst[1]:
                    worst = (name, err_t)
                if err_t > 1e-4:
                    print(f"{enc}: {name}: max |cuda - cpu| / max |cpu| = {err_t:.3e} > 1e-4")
                    ok = False
        n = len(cpu_t)
        print(f"{enc}{' ' + extra if extra else ''}: loss cpu {lc:.9g} cuda {lg:.9g} (rel {rel:.2e}); {n} gradients, worst "
              f"{worst[0] or '-'} {worst[1]:.2e}: {'ok' if ok else 'FAILED'}")
        failures += 0 if ok else 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
