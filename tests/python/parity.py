#!/usr/bin/python3
"""PyTorch parity test driver: ctxlab's loss and gradients against torch_ref.py.

    parity.py --ctxlab PATH_TO_BINARY --workdir DIR [--cases none,learned,...] [--list]

For each case (an encoding config x norm {layernorm, rmsnorm} x {tied, untied} x sequence
length T in {16, 24 where the encoding allows T > context}) on a tiny model (d_model 32,
2 layers, 4 heads, d_ff 64, vocab 256, context 16, batch 2) it

  1. draws random parameters with torch, scaled so that a wrong sign or index cannot hide
     (token and position tables std 0.5, attention logits O(1), non-trivial norm weights
     and biases) and writes DIR/<case>/ckpt.safetensors with __metadata__
     {"format": "ctxlab/1", "config": <json>, "step": "0"};
  2. writes DIR/<case>/tokens.npy, int32 [B, T+1] with values in [0, 256) (int64 for the
     `defaults` case, whose config gives only the five size keys);
  3. runs `ctxlab grads --checkpoint ckpt.safetensors --tokens tokens.npy --out g.safetensors`;
  4. checks, against torch_ref in float64 on the same checkpoint: the loss in the output's
     __metadata__ "loss" has relative error < 1e-5; the output holds exactly one F32 tensor
     per parameter (same name and shape, no others); and for every parameter
     max|g - ref| / max|ref| < 1e-4.

Must-reject cases (reject-*) expect `ctxlab grads` to exit non-zero with a one-line message
and to write no output: a `learned` model given T > context, an unknown config key, an
unknown posenc key, and so on.

One line per case (PASS/FAIL with the errors), then a summary. Exit status 0 when every
case passes, 1 otherwise (a torch that does not import included), 2 on bad usage; 77 (ctest's
skip) only when torch is missing and CTXLAB_ALLOW_MISSING=torch (tests/python/deps.py).
"""

import argparse
import math
import os
import re
import subprocess
import sys
import zlib
from collections import namedtuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
# Gradients that are zero in exact arithmetic (FIRE's mlp.fc2.bias shifts a whole softmax row,
# POSENC_SPEC §7.1): both sides hold rounding noise, so their error is measured against the
# largest gradient of the model instead of their own (~1e-17 in the f64 reference).
ROUNDING_ZERO = re.compile(r"(^|\.)pe\.mlp\.fc2\.bias$")
BATCH = 2
RUN_TIMEOUT_S = 120

BASE_CONFIG = {"vocab_size": 256, "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64,
               "context": 16, "norm_eps": 1e-5, "dropout": 0.0}
SHORT, LONG = (16,), (16, 24)   # sequence lengths; 24 > context exercises extrapolation

# An encoding case: posenc config, the sequence lengths to run, config overrides, and the
# evaluation aids of POSENC_SPEC §6 given to `ctxlab grads` and torch_ref (window, sinks).
Case = namedtuple("Case", "posenc lengths overrides aids", defaults=((), ()))
_LONGROPE = {"short_factor": [1.0, 1.5, 2.0, 3.0], "long_factor": [2.0, 3.0, 8.0, 20.0]}  # head_dim 8
ENCODING_CASES = {
    "none": Case({"type": "none"}, LONG),
    "learned": Case({"type": "learned"}, SHORT),
    "learned-hier": Case({"type": "learned", "hierarchical": True}, LONG),
    "sinusoidal": Case({"type": "sinusoidal"}, LONG),
    "rope": Case({"type": "rope"}, LONG),
    "rope-interleaved": Case({"type": "rope", "pairing": "interleaved", "base": 500.0}, LONG),
    "rope-pi": Case({"type": "rope", "scaling": {"type": "pi", "factor": 2.0}}, LONG),
    "rope-ntk": Case({"type": "rope", "scaling": {"type": "ntk", "factor": 2.0}}, LONG),
    "rope-dynamic-ntk": Case({"type": "rope", "scaling": {"type": "dynamic-ntk", "factor": 2.0}}, LONG),
    "rope-yarn": Case({"type": "rope", "scaling": {"type": "yarn", "factor": 4.0, "beta_slow": 0.25}}, LONG),
    "rope-rerope": Case({"type": "rope", "scaling": {"type": "rerope"}}, LONG),
    "rope-leaky-rerope": Case({"type": "rope", "pairing": "interleaved",
                               "scaling": {"type": "leaky-rerope", "window": 6, "factor": 4.0}}, LONG),
    "rope-logn": Case({"type": "rope", "scaling": {"type": "pi", "factor": 2.0,
                                                   "original_context": 8, "log_n": True}}, LONG),
    "xpos": Case({"type": "xpos"}, LONG),
    "xpos-gamma8": Case({"type": "xpos", "scale_base": 8.0}, LONG),
    "alibi": Case({"type": "alibi"}, LONG),
    "alibi-h6": Case({"type": "alibi"}, LONG, (("d_model", 48), ("n_heads", 6))),
    "kerple": Case({"type": "kerple"}, LONG),
    "kerple-power": Case({"type": "kerple", "variant": "power"}, LONG),
    "sandwich": Case({"type": "sandwich"}, LONG),
    "t5": Case({"type": "t5"}, LONG),
    "t5-small": Case({"type": "t5", "num_buckets": 8, "max_distance": 12}, LONG),
    "shaw": Case({"type": "shaw", "max_relative_position": 4}, LONG),
    "shaw-k16": Case({"type": "shaw"}, LONG),
    "xl": Case({"type": "xl"}, LONG),
    "deberta": Case({"type": "deberta"}, LONG),
    "deberta-small": Case({"type": "deberta", "position_buckets": 8, "max_relative_positions": 16}, LONG),
    "tupe": Case({"type": "tupe"}, SHORT),
    "rnn": Case({"type": "rnn"}, LONG),
    "floater": Case({"type": "floater", "hidden": 16, "dt": 0.1, "substeps": 2}, LONG),
    "floater-defaults": Case({"type": "floater"}, LONG),
    "complex-order": Case({"type": "complex-order"}, LONG),
    # §7: thresholds below T (rows past it), and 12 = a query position (the 1/2 : 1/2 tie)
    # (c and the widths chosen so that torch's own f32 run is within 3e-5 of its f64 one on every
    # gradient: FIRE's c gradient is a sum with much cancellation, rows of dB summing to 0)
    "fire": Case({"type": "fire", "init_L": 10, "init_c": 0.3}, LONG),
    "fire-shared-tie": Case({"type": "fire", "init_L": 12, "shared": True, "init_c": 0.5}, LONG),
    "cope": Case({"type": "cope"}, LONG),                         # positions past npos saturate at 24
    "cope-shared-npos4": Case({"type": "cope", "npos_max": 4, "shared": True}, LONG),
    # §6 with cope (§7.2): the gates count the visible keys only (npos 5: the sinks' sums reach the clamp)
    "cope-window": Case({"type": "cope"}, LONG, (), (("window", 6),)),
    "cope-sinks": Case({"type": "cope", "npos_max": 5}, LONG, (), (("window", 6), ("sinks", 2))),
    # the 2023-24 scalings (§2): llama3 with all three bands (wavelengths 6.3 < 8 <= 63 <= 64 < 628)
    "rope-llama3": Case({"type": "rope", "scaling": {"type": "llama3", "factor": 4.0, "original_context": 64,
                                                     "high_freq_factor": 8.0}}, LONG),
    "rope-longrope": Case({"type": "rope", "scaling": {"type": "longrope", "original_context": 8, **_LONGROPE}},
                          LONG),  # factor 16/8 = 2: m = sqrt(1 + ln 2 / ln 8); T > 8: the long list
    "rope-longrope-switch": Case({"type": "rope", "scaling": {"type": "longrope", "attention_factor": 1.2,
                                                              **_LONGROPE}}, LONG),  # T 16: short, 24: long
    "rope-self-extend": Case({"type": "rope", "scaling": {"type": "self-extend", "window": 5, "group": 3}}, LONG),
    # sliding window and attention sinks (§6)
    "rope-window": Case({"type": "rope"}, LONG, (), (("window", 6),)),
    "rope-sinks": Case({"type": "rope"}, LONG, (), (("window", 6), ("sinks", 2))),
    "rope-yarn-sinks": Case({"type": "rope", "scaling": {"type": "yarn", "factor": 4.0}}, LONG, (),
                            (("window", 5), ("sinks", 3))),
    "rope-llama3-sinks": Case({"type": "rope", "scaling": {"type": "llama3", "factor": 4.0}}, LONG, (),
                              (("window", 5), ("sinks", 1))),
    "alibi-sinks": Case({"type": "alibi"}, LONG, (), (("window", 6), ("sinks", 2))),
    "kerple-sinks": Case({"type": "kerple", "variant": "power"}, LONG, (), (("window", 6), ("sinks", 2))),
    "sandwich-sinks": Case({"type": "sandwich"}, LONG, (), (("window", 6), ("sinks", 2))),
    "t5-sinks": Case({"type": "t5", "num_buckets": 8, "max_distance": 12}, LONG, (), (("window", 6), ("sinks", 2))),
    "learned-sinks": Case({"type": "learned"}, SHORT, (), (("window", 5), ("sinks", 2))),
    "none-sinks": Case({"type": "none"}, LONG, (), (("window", 4), ("sinks", 2))),
}

# Must-reject cases: name -> (config, T, valid config the tensors are drawn from). ctxlab
# must exit non-zero with a one-line message; the tensors fit, so only the named fault is wrong.
_SINUSOIDAL = {**BASE_CONFIG, "posenc": {"type": "sinusoidal"}}
REJECT_CASES = {
    "reject-learned-long": ({**BASE_CONFIG, "posenc": {"type": "learned"}}, 24, None),
    "reject-learned-hier-long": ({**BASE_CONFIG, "context": 4,
                                  "posenc": {"type": "learned", "hierarchical": True}}, 17, None),
    "reject-tupe-long": ({**BASE_CONFIG, "posenc": {"type": "tupe"}}, 24, None),
    "reject-unknown-key": ({**BASE_CONFIG, "n_layer": 2}, 16, BASE_CONFIG),
    "reject-unknown-posenc-key": ({**BASE_CONFIG, "posenc": {"type": "sinusoidal", "base": 10000.0}},
                                  16, _SINUSOIDAL),
    "reject-bad-heads": ({**BASE_CONFIG, "n_heads": 5}, 16, BASE_CONFIG),
    "reject-floater-bad-dt": ({**BASE_CONFIG, "posenc": {"type": "floater", "dt": 0}}, 16,
                              {**BASE_CONFIG, "posenc": {"type": "floater"}}),
    "reject-rnn-key": ({**BASE_CONFIG, "posenc": {"type": "rnn", "hidden": 8}}, 16,
                       {**BASE_CONFIG, "posenc": {"type": "rnn"}}),
    "reject-fire-bad-init-L": ({**BASE_CONFIG, "posenc": {"type": "fire", "init_L": 0}}, 16,
                               {**BASE_CONFIG, "posenc": {"type": "fire"}}),
    "reject-llama3-key": ({**BASE_CONFIG, "posenc": {"type": "rope", "scaling": {"type": "llama3", "factor": 2.0,
                                                                                  "beta_fast": 8.0}}},
                          16, BASE_CONFIG),
    "reject-longrope-list": ({**BASE_CONFIG, "posenc": {"type": "rope", "scaling": {
                                 "type": "longrope", "short_factor": [1.0] * 3, "long_factor": [1.0] * 4}}},
                             16, BASE_CONFIG),
    "reject-self-extend-no-group": ({**BASE_CONFIG, "posenc": {"type": "rope", "scaling": {"type": "self-extend"}}},
                                    16, BASE_CONFIG),
}
# Must-reject `grads` options (name -> (config, T, the options)): sinks where §6 leaves them out.
REJECT_AIDS = {
    "reject-sinks-longrope": ({**BASE_CONFIG, "posenc": {"type": "rope", "scaling": {"type": "longrope",
                                                                                     **_LONGROPE}}},
                              16, (("window", 6), ("sinks", 2))),
    "reject-sinks-xpos": ({**BASE_CONFIG, "posenc": {"type": "xpos"}}, 16, (("window", 6), ("sinks", 2))),
    "reject-sinks-no-window": ({**BASE_CONFIG, "posenc": {"type": "alibi"}}, 16, (("sinks", 2),)),
}

# The minimal config: every other key takes its default (posenc none, layernorm, tied, d_ff 4D).
DEFAULTS_CASE = {"vocab_size": 256, "d_model": 32, "n_layers": 2, "n_heads": 4, "context": 16}

# What ctxlab supports now; widen as encodings land (or run with --cases all).
DEFAULT_CASES = ["defaults", "none", "learned", "learned-hier", "sinusoidal",
                 "rope", "rope-interleaved", "rope-pi", "rope-ntk", "rope-dynamic-ntk", "rope-yarn",
                 "rope-rerope", "rope-leaky-rerope", "rope-logn", "xpos", "xpos-gamma8",
                 "alibi", "alibi-h6", "kerple", "kerple-power", "sandwich", "t5", "t5-small",
                 "shaw", "shaw-k16", "xl", "deberta", "deberta-small", "tupe",
                 "rnn", "floater", "floater-defaults", "complex-order",
                 "fire", "fire-shared-tie", "cope", "cope-shared-npos4", "cope-window", "cope-sinks",
                 "reject-fire-bad-init-L",
                 "reject-learned-long", "reject-learned-hier-long", "reject-tupe-long",
                 "reject-unknown-key", "reject-unknown-posenc-key", "reject-bad-heads",
                 "reject-floater-bad-dt", "reject-rnn-key",
                 "rope-llama3", "rope-longrope", "rope-longrope-switch", "rope-self-extend",
                 "rope-window", "rope-sinks", "rope-yarn-sinks", "rope-llama3-sinks", "alibi-sinks",
                 "kerple-sinks", "sandwich-sinks", "t5-sinks", "learned-sinks", "none-sinks",
                 "reject-llama3-key", "reject-longrope-list", "reject-self-extend-no-group",
                 "reject-sinks-longrope", "reject-sinks-xpos", "reject-sinks-no-window"]
ALL_CASES = ["defaults"] + list(ENCODING_CASES) + list(REJECT_CASES) + list(REJECT_AIDS)


# ---------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------
def expand(name):
    """Variants of a case name: (label, config, T, must_reject, config the tensors fit, aids)."""
    if name == "defaults":
        return [(f"defaults/T{T}", dict(DEFAULTS_CASE), T, False, None, ()) for T in LONG]
    if name in REJECT_CASES:
        cfg, T, tensors_cfg = REJECT_CASES[name]
        return [(name, cfg, T, True, tensors_cfg, ())]
    if name in REJECT_AIDS:
        cfg, T, aids = REJECT_AIDS[name]
        return [(name, cfg, T, True, None, aids)]
    case = ENCODING_CASES[name]
    out = []
    for norm in ("layernorm", "rmsnorm"):
        for tied in (True, False):
            cfg = {**BASE_CONFIG, "norm": norm, "tie_embeddings": tied, "posenc": case.posenc,
                   **dict(case.overrides)}
            for T in case.lengths:
                label = f"{name}/{norm}/{'tied' if tied else 'untied'}/T{T}"
                out.append((label, cfg, T, False, None, case.aids))
    return out


def seed_of(label):
    return zlib.crc32(label.encode())


def random_params(ref, cfg, seed):
    """Random parameters for a parity case, sized so that errors show (see the docstring)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for s in ref.param_specs(cfg):
        fan_in = s.shape[-1]
        init = {
            "embedding": ("normal", 0.5),
            "logit_table": ("normal", 0.5),
            "linear": ("normal", 1.0 / math.sqrt(fan_in)),
            "residual": ("normal", 0.5 / math.sqrt(fan_in)),
            "bias": ("normal", 0.1),
            "norm_bias": ("normal", 0.1),
            "norm_weight": ("normal", 0.1),
            "frequency": ("normal", 0.5),          # complex-order: phases that turn visibly
        }.get(s.role, s.init)                      # the spec's init: kerple r1/r2, floater time, FIRE's c, L, fc1.bias
        t = ref.sample_init(init, s.shape, gen)
        params[s.name] = t + 1.0 if s.role == "norm_weight" else t
    if "pe.r1" in params:                         # exercise KERPLE's in-place projection
        params["pe.r1"][0], params["pe.r2"][0] = -0.2, 0.004
        if cfg.get("posenc", {}).get("variant") == "power":
            params["pe.r2"][-1] = 2.5
    return params


def write_inputs(ref, st_io, case_dir, cfg, T, seed, tensors_cfg=None, token_dtype="<i4"):
    """Write ckpt.safetensors (config cfg, tensors drawn for tensors_cfg or cfg) and
    tokens.npy (token_dtype); returns their paths."""
    import numpy as np
    os.makedirs(case_dir, exist_ok=True)
    ckpt = os.path.join(case_dir, "ckpt.safetensors")
    tokens = os.path.join(case_dir, "tokens.npy")
    params = random_params(ref, tensors_cfg or cfg, seed)
    ref.save_checkpoint(ckpt, cfg, params, step=0)
    rng = np.random.default_rng(seed)
    st_io.save_npy(tokens, rng.integers(0, cfg["vocab_size"], size=(BATCH, T + 1)).astype(token_dtype))
    return ckpt, tokens


def run_grads(ctxlab, ckpt, tokens, out, aids=()):
    """Run `ctxlab grads` (aids: (option, value) pairs, e.g. (("window", 6),)); returns
    (returncode or None on timeout, combined output)."""
    if os.path.exists(out):
        os.remove(out)
    cmd = [ctxlab, "grads", "--checkpoint", ckpt, "--tokens", tokens, "--out", out]
    for opt, value in aids:
        cmd += [f"--{opt}", str(value)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {RUN_TIMEOUT_S} s"
    return p.returncode, (p.stderr + p.stdout).strip()


# ---------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------
def check_reject(ctxlab, ckpt, tokens, out, aids=()):
    rc, msg = run_grads(ctxlab, ckpt, tokens, out, aids)
    lines = msg.splitlines()
    if rc is None:
        return False, msg
    if rc == 0:
        return False, "ctxlab grads exited 0 (expected a rejection)"
    if len(lines) != 1:
        return False, f"exit {rc} but the message has {len(lines)} lines (expected one): {msg[:200]!r}"
    if os.path.exists(out):
        return False, f"exit {rc} but {out} was written"
    return True, f"exit {rc}: {lines[0][:160]}"


def check_grads(ref, st_io, ctxlab, ckpt, tokens_path, out, aids=()):
    rc, msg = run_grads(ctxlab, ckpt, tokens_path, out, aids)
    if rc is None:
        return False, msg
    if rc != 0:
        return False, f"ctxlab grads exited {rc}: {msg.splitlines()[-1][:200] if msg else '(no message)'}"
    try:
        entries, meta, _ = st_io.read_header(out)
        got, _ = st_io.read_safetensors(out)
    except (OSError, ValueError) as e:
        return False, f"unreadable output: {e}"

    cfg, params = ref.load_checkpoint(ckpt)
    loss, grads = ref.loss_and_grads(cfg, params, st_io.load_npy(tokens_path), **dict(aids))

    errors = []
    missing = sorted(set(grads) - set(entries))
    extra = sorted(set(entries) - set(grads))
    if missing:
        errors.append(f"missing {missing}")
    if extra:
        errors.append(f"unexpected {extra}")
    try:
        got_loss = float(meta["loss"])
    except (KeyError, ValueError):
        got_loss = float("nan")
        errors.append(f"__metadata__ loss missing or not a number: {meta.get('loss')!r}")
    loss_err = abs(got_loss - loss) / abs(loss)
    if not loss_err < LOSS_RTOL:
        errors.append(f"loss {got_loss!r} vs {loss:.9g} (rel {loss_err:.2e})")

    worst, worst_name = 0.0, None
    model_scale = max(float(abs(g.numpy()).max()) for g in grads.values())
    for name in sorted(set(grads) & set(entries)):
        e, r = entries[name], grads[name].numpy()
        if e["dtype"] != "F32":
            errors.append(f"{name}: dtype {e['dtype']}, expected F32")
            continue
        if tuple(e["shape"]) != tuple(r.shape):
            errors.append(f"{name}: shape {tuple(e['shape'])}, expected {tuple(r.shape)}")
            continue
        scale = model_scale if ROUNDING_ZERO.search(name) else float(abs(r).max())
        err = float(abs(got[name].astype("float64") - r).max()) / (scale if scale > 0 else 1.0)
        if not err < GRAD_RTOL:           # also catches NaN
            errors.append(f"{name}: grad rel err {err:.2e}")
        if not err <= worst:
            worst, worst_name = err, name
    if errors:
        more = f" (+{len(errors) - 6} more)" if len(errors) > 6 else ""
        return False, "; ".join(errors[:6]) + more
    return True, f"loss rel {loss_err:.1e}, worst grad rel {worst:.1e} ({worst_name})"


# ---------------------------------------------------------------------------------------
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ctxlab", help="path to the ctxlab binary")
    ap.add_argument("--workdir", help="directory for checkpoints, tokens and outputs")
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES),
                    help="comma-separated case names, or 'all' (default: %(default)s)")
    ap.add_argument("--list", action="store_true", help="list the case names and exit")
    args = ap.parse_args(argv)
    if args.list:
        return args
    if not args.ctxlab or not args.workdir:
        ap.error("--ctxlab and --workdir are required")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.list:
        print("\n".join(ALL_CASES))
        return 0
    names = ALL_CASES if args.cases == "all" else [c for c in args.cases.split(",") if c]
    unknown = [n for n in names if n not in ALL_CASES]
    if unknown:
        print(f"parity: unknown case(s) {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 2
    import deps
    deps.require("torch", "numpy", "torch")  # exit 1 when missing (77 only where allowed)
    import st_io
    import torch_ref as ref

    ctxlab = os.path.abspath(args.ctxlab)
    if not (os.path.isfile(ctxlab) and os.access(ctxlab, os.X_OK)):
        print(f"FAIL: ctxlab binary not found or not executable: {ctxlab}")
        return 1

    failed = passed = 0
    for name in names:
        for label, cfg, T, must_reject, tensors_cfg, aids in expand(name):
            case_dir = os.path.join(args.workdir, re.sub(r"[^A-Za-z0-9_.-]", "_", label))
            try:
                token_dtype = "<i8" if name == "defaults" else "<i4"   # both are allowed
                ckpt, tokens = write_inputs(ref, st_io, case_dir, cfg, T, seed_of(label),
                                            tensors_cfg, token_dtype)
                out = os.path.join(case_dir, "g.safetensors")
                if must_reject:
                    ok, detail = check_reject(ctxlab, ckpt, tokens, out, aids)
                else:
                    ok, detail = check_grads(ref, st_io, ctxlab, ckpt, tokens, out, aids)
            except Exception as e:  # a bug in the driver or reference must not hide a case
                ok, detail = False, f"driver error: {type(e).__name__}: {e}"
            print(f"{'PASS' if ok else 'FAIL'} {label}: {detail}", flush=True)
            passed, failed = passed + ok, failed + (not ok)
    print(f"parity: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
