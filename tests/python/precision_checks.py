#!/usr/bin/env python3
"""tests/python/precision_checks.py — `ctxlab grads --precision bf16` (or `--tf32`) against exact fp32.

For each encoding, one tiny checkpoint (ctxlab init) and one token batch [3, 33]; the gradients
under the speed mode on --device DEV must be within the speed mode's tolerance of the exact fp32
gradients on the CPU, and must differ from them (else the mode was not engaged):
  loss      |l - l32| / |l32| <= 1e-3
  gradients max |g - g32| / max |g32| <= 3e-2, per tensor
Derivation (docs/performance.md, "bf16"): a bf16 input carries a relative rounding error of at
most u = 2^-8, a product of two at most 2u + u^2 ~ 2^-7 = 7.8e-3 of |a||b|; fp32 accumulation adds
K 2^-24, negligible here. The tiny model's gradient of a weight goes through at most ~4 GEMMs in
sequence per layer and the errors of independent roundings average out, so observed errors are
1-2 units of 2^-8 (2e-3..6e-3); 3e-2 (about 4 worst-case product errors) passes that with margin
and still fails a wrong rounding (truncation or a wrong operand layout is off by far more). TF32
(10-bit mantissa, u = 2^-11) is 8x tighter, held to the same bound.
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

LOSS_TOL = 1e-3
GRAD_TOL = 3e-2
MIN_DIFF = 1e-6  # some gradient must differ from fp32 by more than this: the mode is engaged


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
        ok = rel <= LOSS_TOL and sorted(t32) == sorted(tf)
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
            if e > GRAD_TOL:
                print(f"{enc}: {name}: max |fast - fp32| / max |fp32| = {e:.3e} > {GRAD_TOL}")
                ok = False
        if fell_back:
            ok = ok and worst[1] == 0.0 and rel == 0.0
            print(f"{enc}: this CPU has no avx512_bf16: the one-line note, and gradients bitwise fp32's: "
                  f"{'ok' if ok else 'FAILED'}")
            failures += 0 if ok else 1
            continue
        if worst[1] <= MIN_DIFF:
            print(f"{enc}: every gradient within {MIN_DIFF} of fp32: {' '.join(a.mode)} was not engaged")
            ok = False
        print(f"{enc}: {' '.join(a.mode)} on {a.device}: loss {lf:.9g} vs fp32 {l32:.9g} (rel {rel:.2e}, "
              f"tol {LOSS_TOL}); worst gradient {worst[0]} {worst[1]:.2e} (tol {GRAD_TOL}): "
              f"{'ok' if ok else 'FAILED'}")
        failures += 0 if ok else 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
