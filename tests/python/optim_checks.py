#!/usr/bin/python3
"""ctxlab's optimizers and learning-rate schedule against torch.optim and hand-computed values.

    optim_checks.py --driver PATH_TO_ctxlab_optim_driver --work DIR

tests/tools/optim_driver.cpp runs train/optim.h exactly as the trainer does (gradients
accumulated over micro-batches by backward, loss / accum, clip_and_step with
lr_warmup_cosine, zero_grad). This script gives it parameters and per-micro-batch gradient
coefficients and checks, over several steps:
  * AdamW (per-tensor reference and fused flat path; f64 and f32) against torch.optim.AdamW
    with the same decay / no-decay parameter groups, torch.nn.utils.clip_grad_norm_ and the
    same accumulation: parameters, exp_avg, exp_avg_sq and the pre-clip norms;
  * SGD with momentum and weight decay (and without momentum) against torch.optim.SGD;
  * the warmup + cosine schedule against literal hand-computed values and the closed form.
Every case has weight decay on some parameters, at least one clipped step and accum 2.
Prints one line per check; exit 0 when all pass, 1 otherwise (a missing torch fails too:
tests/python/deps.py).
"""

import argparse
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deps  # noqa: E402

deps.require("torch", "numpy", "torch")
import numpy as np  # noqa: E402
import torch  # noqa: E402

import st_io  # noqa: E402

# name -> shape; which decay follows train/optim.h default_decays (2-D, not wte/wpe/lm_head/pe)
PARAMS = {"blocks.0.attn.qkv.weight": (6, 4), "blocks.0.mlp.fc.weight": (5, 4),
          "blocks.0.mlp.fc.bias": (5,), "norm_f.weight": (4,), "wte.weight": (7, 4)}
DECAYS = {"blocks.0.attn.qkv.weight", "blocks.0.mlp.fc.weight"}

FAILED = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        FAILED.append(name)
    return ok


def hand_lr(step, warmup, total, lr, min_lr):
    """The schedule written out: linear warmup over `warmup` steps (step + 1) / warmup, then a
    half cosine from lr down to min_lr at `total`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= total:
        return min_lr
    t = (step - warmup) / max(1, total - warmup)
    return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * t)) / 2


def make_inputs(spec, dtype, seed):
    """Initial parameters and gradient coefficients; the coefficients of some steps are scaled
    up so that clipping (spec max_norm) acts on those steps and not on the others."""
    rng = np.random.default_rng(seed)
    params = {n: rng.normal(0, 1, s).astype(dtype) for n, s in PARAMS.items()}
    coefs = {}
    for step in range(spec["steps"]):
        big = 8.0 if step % 2 == 1 else 0.3  # odd steps: norm >> max_norm
        for a in range(spec["accum"]):
            for n, s in PARAMS.items():
                coefs[(step, a, n)] = (big * rng.normal(0, 1, s)).astype(dtype)
    return params, coefs


def run_driver(driver, work, label, spec, params, coefs):
    tensors = {f"param.{n}": v for n, v in params.items()}
    for (step, a, n), c in coefs.items():
        tensors[f"coef.{step}.{a}.{n}"] = c
    inp, out = os.path.join(work, f"{label}.in.safetensors"), os.path.join(work, f"{label}.out.safetensors")
    st_io.write_safetensors(inp, tensors, {"spec": json.dumps(spec)})
    p = subprocess.run([driver, inp, out], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"driver exit {p.returncode}: {p.stderr.strip()}")
    t, meta = st_io.read_safetensors(out)
    return t, json.loads(meta["lrs"]), json.loads(meta["norms"]), int(meta["steps"])


def run_torch(spec, params, coefs, tdtype):
    """The same steps with torch.optim: returns (params, optimizer, norms)."""
    P = {n: torch.tensor(v, dtype=tdtype, requires_grad=True) for n, v in params.items()}
    names = sorted(P)  # the driver's order (write_safetensors sorts by name)
    dec = [P[n] for n in names if n in DECAYS]
    nodec = [P[n] for n in names if n not in DECAYS]
    wd = spec["weight_decay"]
    groups = [{"params": dec, "weight_decay": wd}, {"params": nodec, "weight_decay": 0.0}]
    if spec["optimizer"] == "adamw":
        opt = torch.optim.AdamW(groups, lr=spec["lr"], betas=(spec["beta1"], spec["beta2"]),
                                eps=spec["eps"], foreach=False)
    else:
        opt = torch.optim.SGD(groups, lr=spec["lr"], momentum=spec["momentum"], foreach=False)
    norms = []
    for step in range(spec["steps"]):
        for a in range(spec["accum"]):
            loss = sum((P[n] * torch.tensor(coefs[(step, a, n)], dtype=tdtype)).sum() for n in names)
            (loss / spec["accum"]).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_([P[n] for n in names], spec["max_norm"])))
        lr = hand_lr(step, spec["warmup"], spec["steps"], spec["lr"], spec["min_lr"])
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        opt.zero_grad(set_to_none=True)
    return P, opt, norms


def max_rel(got, want, scale):
    return float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)))) / scale


def compare(label, spec, dtype, tol, driver, work, seed):
    tdtype = torch.float64 if dtype == np.float64 else torch.float32
    params, coefs = make_inputs(spec, dtype, seed)
    got, lrs, norms, steps = run_driver(driver, work, label, spec, params, coefs)
    P, opt, tnorms = run_torch(spec, params, coefs, tdtype)
    check(f"{label}: {spec['steps']} optimizer steps counted", steps == spec["steps"], str(steps))
    # the update (final - initial) is what is compared, relative to its own size
    worst, what = 0.0, ""
    for n in PARAMS:
        want = P[n].detach().numpy()
        moved = float(np.max(np.abs(want.astype(np.float64) - params[n])))
        e = max_rel(got[f"param.{n}"], want, moved)
        if e > worst:
            worst, what = e, n
    check(f"{label}: parameters match torch.optim after {spec['steps']} steps (rel {worst:.1e} <= {tol:g})",
          worst <= tol, what)
    # optimizer state
    worst, what = 0.0, ""
    for n in PARAMS:
        st = opt.state[P[n]]
        keys = (("exp_avg", "exp_avg"), ("exp_avg_sq", "exp_avg_sq")) if spec["optimizer"] == "adamw" \
            else (("momentum_buffer", "momentum_buffer"),) if spec["momentum"] else ()
        for ours, theirs in keys:
            want = st[theirs].numpy()
            e = max_rel(got[f"{ours}.{n}"], want, float(np.max(np.abs(want))) + 1e-300)
            if e > worst:
                worst, what = e, f"{ours}.{n}"
    check(f"{label}: optimizer state matches torch's (rel {worst:.1e} <= {tol:g})", worst <= tol, what)
    # clipping: the same pre-clip norms, and it acted on some steps and not on others
    e = max(abs(a - b) / b for a, b in zip(norms, tnorms))
    clipped = [n > spec["max_norm"] for n in tnorms]
    check(f"{label}: pre-clip grad norms match torch's (rel {e:.1e})", e <= tol, f"{norms} vs {tnorms}")
    check(f"{label}: clipping acted on some steps and not on others", any(clipped) and not all(clipped),
          str([round(n, 3) for n in tnorms]))
    hand = [hand_lr(s, spec["warmup"], spec["steps"], spec["lr"], spec["min_lr"]) for s in range(spec["steps"])]
    check(f"{label}: learning rates are the warmup + cosine schedule",
          all(abs(a - b) <= 1e-15 * max(1.0, abs(b)) for a, b in zip(lrs, hand)), f"{lrs} vs {hand}")


def schedule_by_hand(driver, work):
    """lr_warmup_cosine at warmup 3, 8 steps, lr 1, min_lr 0.1: the values worked out by hand
    (steps 3..7: 0.1 + 0.45 (1 + cos(pi k / 5)), k = 0..4)."""
    spec = dict(ADAMW, steps=8, warmup=3, lr=1.0, min_lr=0.1, accum=1)
    params, coefs = make_inputs(spec, np.float64, 5)
    _, lrs, _, _ = run_driver(driver, work, "schedule", spec, params, coefs)
    want = [1 / 3, 2 / 3, 1.0, 1.0, 0.9140576475, 0.6890576475, 0.4109423525, 0.1859423525]
    e = max(abs(a - b) for a, b in zip(lrs, want))
    check("schedule: warmup 3 / 8 steps / lr 1 / min 0.1 equals the hand-computed values",
          len(lrs) == 8 and e < 1e-9, f"{lrs}")
    check("schedule: hand_lr (used above) agrees with the same hand values",
          max(abs(hand_lr(s, 3, 8, 1.0, 0.1) - w) for s, w in enumerate(want)) < 1e-9)


ADAMW = {"optimizer": "adamw", "fused": False, "steps": 6, "accum": 2, "lr": 0.05, "min_lr": 0.005,
         "warmup": 2, "max_norm": 5.0, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
         "momentum": 0.0}
SGD = dict(ADAMW, optimizer="sgd", momentum=0.9, weight_decay=0.05, lr=0.1, min_lr=0.01)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--driver", required=True, help="the ctxlab_optim_driver binary")
    ap.add_argument("--work", required=True, help="scratch directory")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    torch.set_num_threads(1)
    cases = [
        ("adamw_reference_f64", ADAMW, np.float64, 1e-10),
        ("adamw_fused_f64", dict(ADAMW, fused=True), np.float64, 1e-10),
        ("adamw_fused_f32", dict(ADAMW, fused=True), np.float32, 2e-4),
        ("adamw_reference_f32", ADAMW, np.float32, 2e-4),
        ("sgd_momentum_f64", SGD, np.float64, 1e-10),
        ("sgd_plain_f64", dict(SGD, momentum=0.0), np.float64, 1e-10),
    ]
    for i, (label, spec, dtype, tol) in enumerate(cases):
        try:
            compare(label, spec, dtype, tol, os.path.abspath(a.driver), a.work, 100 + i)
        except Exception as e:  # a driver or script error is a failure, never a pass
            check(f"{label}: ran", False, f"{type(e).__name__}: {e}")
    try:
        schedule_by_hand(os.path.abspath(a.driver), a.work)
    except Exception as e:
        check("schedule: ran", False, f"{type(e).__name__}: {e}")
    print(f"optim_checks: {len(FAILED)} failed" if FAILED else "optim_checks: all passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
