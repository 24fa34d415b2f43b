#!/usr/bin/env python3
"""tests/python/precision_checks.py — `ctxlab grads --precision bf16` (or `--tf32`) against exact fp32.

For each encoding, one tiny checkpoint (ctxlab init) and one token batch [3, 33]; the gradients
under the speed mode on --device DEV must be within the speed mode's tolerance of the exact fp32
gradients on the CPU, and must differ from them by at least one unit of the mode's rounding
(else the mode was not engaged). With u the mode's unit (bf16, 8-bit significand: u = 2^-8;
TF32, 11-bit: u = 2^-11):
  loss      |l - l32| / |l32| <= 0.256 u          (bf16 1e-3, TF32 1.25e-4)
  gradients max |g - g32| / max |g32| <= 7.68 u, per tensor  (bf16 3e-2, TF32 3.75e-3)
  engaged   some tensor's max |g - g32| / max |g32| >= u      (bf16 3.9e-3, TF32 4.9e-4)
Derivation (docs/performance.md, "bf16"): an input rounded to the mode carries a relative error
of at most u/2 (round to nearest), a product of two at most u + u^2/4 of |a||b|; fp32 accumulation
adds K 2^-24, negligible here. The tiny model's gradient of a weight goes through at most ~4 GEMMs
in sequence per layer and the errors of independent roundings average out, so the worst tensor's
error is 1.5-3 units: measured bf16 6.0e-3..1.06e-2 (CPU and CUDA), TF32 7.4e-4..1.0e-3 (CUDA
under the emulator); the loss moves by 2e-6..2e-5 relative. The bounds (about 8 worst-case
product errors, 3-4x the worst measured) still fail a wrong rounding (truncation or a wrong
operand layout is off by far more), and the two modes' bands, TF32 [2^-11, 3.75e-3] and bf16
[2^-8, 3e-2], do not overlap: TF32 silently replaced by bf16 fails the TF32 bound, bf16 replaced
by TF32 (or by exact fp32) fails the engaged floor.
On a CPU without avx512_bf16, `--precision bf16 --device cpu` must print its one-line note and
give fp32's gradients bit for bit (checked instead). A real CUDA build on a machine without a
GPU: SKIP (exit 77), as tests/python/device_checks.py. Run by tests/cli/precision.cmake.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

BF16_UNIT, TF32_UNIT = 2.0 ** -8, 2.0 ** -11  # the modes' rounding units (8- and 11-bit significands)


def tolerances(tf32):
    """(loss tol, gradient tol, engaged floor) for the mode (see the docstring)."""
    u = TF32_UNIT if tf32 else BF16_UNIT
    return 0.256 * u, 7.68 * u, u


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", help="the --precision of the run under test")
    ap.add_argument("--tf32", action="store_true", help="give the run under test --tf32")
    ap.add_argument("--encodings", nargs="+", default=["learned", "rope", "alibi"])
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    a.mode = ["--precision", a.precision] + (["--tf32"] if a.tf32 else [])
    loss_tol, grad_tol, engaged = tolerances(a.tf32 and a.precision == "fp32")
    tokens = np.random.default_rng(5).integers(0, 256, size=(3, 33), dtype=np.int64)
    tok = os.path.join(a.work, "tokens.npy")
    st_io.save_npy(tok, tokens)
    failures = 0
    for enc in a.encodings:
        ck = os.path.join(a.work, f"{enc}.safetensors")
        rc, _, err = run([a.bin, "init", "--preset", "tiny", "--posenc", enc, "--seed", "11", "--out", ck])
        if rc != 0:
            print(f"{enc}: init failed: {err.strip()}")
            return 1
        fell_back = False  # a CPU without avx512_bf16: the one-line note, then exact fp32
        ref, fast = os.path.join(a.work, f"{enc}.fp32.st"), os.path.join(a.work, f"{enc}.fast.st")
        for out, extra in ((ref, ["--device", "cpu"]), (fast, ["--device", a.device] + a.mode)):
            rc, _, err = run([a.bin, "grads", "--checkpoint", ck, "--tokens", tok, "--out", out] + extra)
            lines = [l for l in err.strip().splitlines() if l.strip()]
            if rc != 0 and a.device == "cuda" and len(lines) == 1 and "no CUDA GPU" in lines[0]:
                print(f"SKIP: no GPU on this machine; `--device cuda` said: {lines[0].strip()}")
                return 77
            if rc != 0:
                print(f"{enc}: grads {' '.join(extra)} failed (exit {rc}): {err.strip()}")
                return 1
            if out == fast and lines:
                fallback = len(lines) == 1 and "no avx512_bf16; running fp32 instead" in lines[0]
                if not (fallback and a.device == "cpu" and a.precision == "bf16"):
                    print(f"{enc}: grads {' '.join(extra)} printed: {err.strip()}")
                    return 1
                fell_back = True
        t32, m32 = st_io.read_safetensors(ref)
        tf, mf = st_io.read_safetensors(fast)
        l32, lf = float(m32["loss"]), float(mf["loss"])
        rel = abs(lf - l32) / abs(l32)
        ok = rel <= loss_tol and sorted(t32) == sorted(tf)
        worst = ("-", 0.0)
        for name in t32:
            if name not in tf:
                continue
            c, d = t32[name].astype(np.float64), tf[name].astype(np.float64)
            e = float(np.max(np.abs(c - d))) / max(float(np.max(np.abs(c))), 1e-30) if c.size else 0.0
            if not np.all(np.isfinite(d)):
                e = float("inf")
            if e > worst[1]:
                worst = (name, e)
            if e > grad_tol:
                print(f"{enc}: {name}: max |fast - fp32| / max |fp32| = {e:.3e} > {grad_tol}")
                ok = False
        if fell_back:
            ok = ok and worst[1] == 0.0 and rel == 0.0
            print(f"{enc}: this CPU has no avx512_bf16: the one-line note, and gradients bitwise fp32's: "
                  f"{'ok' if ok else 'FAILED'}")
            failures += 0 if ok else 1
            continue
        if worst[1] < engaged:
            print(f"{enc}: every gradient within {engaged:.2e} (one unit of the mode) of fp32: "
                  f"{' '.join(a.mode)} was not engaged")
            ok = False
        print(f"{enc}: {' '.join(a.mode)} on {a.device}: loss {lf:.9g} vs fp32 {l32:.9g} (rel {rel:.2e}, "
              f"tol {loss_tol}); worst gradient {worst[0]} {worst[1]:.2e} (tol {grad_tol}): "
              f"{'ok' if ok else 'FAILED'}")
        failures += 0 if ok else 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
