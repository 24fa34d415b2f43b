#!/usr/bin/env python3
"""End-to-end checks of `ctxlab train` (and the checkpoint readers it shares with `grads`).

    train_checks.py SUBCOMMAND --bin path/to/ctxlab --work scratch/dir

Subcommands (one ctest each, see tests/cli/train_checks.cmake):

  resume          a run interrupted with --stop-after and continued with --resume ends bit for
                  bit where the uninterrupted run does (model, optimizer state, train/val losses);
                  AdamW and SGD; gradient accumulation (--accum) matches the big batch.
  kill9           SIGKILL a run that checkpoints every step at each point of a checkpoint write
                  (the test hook CTXLAB_TEST_KILL_AT, train/io/kill_point.h): the checkpoint on
                  disk is the one that point implies, loadable, and the run resumes to the end
                  of an uninterrupted run, bit for bit.
  badinput        malformed configs, checkpoints, token files and options: non-zero exit, one
                  line on stderr naming the file and the field/tensor, no crash output, and the
                  files already at the --out location untouched. Also: __metadata__.format
                  wrong or missing, NaN / inf weights, negative token ids (inputs and targets),
                  T = 0 and B = 0 batches, empty / too-short corpora, optimizer state of the
                  wrong shape or step.
  checkpoints     F64, F16 and BF16 checkpoint tensors are read and converted (MODEL_SPEC §5):
                  the same loss and gradients as an F32 file of the converted values.
  main_job_smoke  the README's main job in miniature: every output file is written and the loss
                  goes down.
  bench           `ctxlab bench`: its JSON is self-consistent (tokens/s, GFLOP/s, MFU), --json and
                  --profile write what they say, bad options and CTXLAB_* switches are refused.

Each subcommand prints one line per check, then "N passed, N failed", and exits 1 on failure.
Only NumPy and tests/python/st_io.py are needed.
"""

import argparse
import copy
import csv
import json
import math
import os
import shutil
import signal
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checklib as cl  # noqa: E402
import deps  # noqa: E402
import st_io  # noqa: E402
from checklib import check, fresh_dir, join_st, must_run, run, split_st  # noqa: E402

# A tiny run: fast, and still a real model (learned positions, context 64).
TINY = ["train", "--preset", "tiny", "--quiet", "--no-plot"]


# ---------------------------------------------------------------------------------------------
# helpers

def xoshiro_draws_between(a, b, limit):
    """How many next_u64() calls of xoshiro256** (core/rng.cpp) take state a to state b (None
    when more than limit)."""
    M = (1 << 64) - 1
    s = list(a)
    for n in range(limit + 1):
        if s == b:
            return n
        s0, s1, s2, s3 = s
        t = (s1 << 17) & M
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = ((s3 << 45) | (s3 >> 19)) & M
        s = [s0, s1, s2, s3]
    return None


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def tensors_equal(a_path, b_path):
    """Bit-for-bit comparison of every tensor; returns a list of differences (empty: equal)."""
    ta, _ = st_io.read_safetensors(a_path)
    tb, _ = st_io.read_safetensors(b_path)
    diffs = []
    if sorted(ta) != sorted(tb):
        diffs.append(f"names differ: {sorted(set(ta) ^ set(tb))}")
    for k in sorted(set(ta) & set(tb)):
        x, y = ta[k], tb[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            diffs.append(f"{k}: {x.dtype}{x.shape} vs {y.dtype}{y.shape}")
        elif not np.array_equal(x.view(np.uint8), y.view(np.uint8)):
            diffs.append(f"{k}: max |diff| {np.max(np.abs(x.astype(np.float64) - y)):.3g}")
    return diffs


def write_tokens(path, shape, seed=0, dtype=np.int32, high=256):
    rng = np.random.default_rng(seed)
    st_io.save_npy(path, rng.integers(0, high, size=shape).astype(dtype))


# Raw safetensors surgery (st_io only writes valid files).

# ---------------------------------------------------------------------------------------------
# resume

def cmd_resume():
    d = fresh_dir("resume")
    A, B = os.path.join(d, "A"), os.path.join(d, "B")
    base = TINY + ["--steps", 20, "--batch", 4, "--eval-interval", 7]
    must_run("resume: uninterrupted run A (20 steps)", base + ["--out", A])
    p = must_run("resume: run B stopped after 10 steps", base + ["--out", B, "--stop-after", 10])
    _, mb = st_io.read_safetensors(os.path.join(B, "model.safetensors"))
    check("resume: B's checkpoint is at step 10", mb.get("step") == "10", f"step {mb.get('step')}")
    p = must_run("resume: --resume B runs to step 20", ["train", "--resume", B, "--quiet"])
    check("resume: --resume says where it starts", "at step 10 of 20" in p.stdout, p.stdout[:300])

    for f in ("model.safetensors", "model.optim.safetensors"):
        diffs = tensors_equal(os.path.join(A, f), os.path.join(B, f))
        check(f"resume: every tensor of {f} equal bit for bit", not diffs, "; ".join(diffs[:5]))
    _, oa = st_io.read_safetensors(os.path.join(A, "model.optim.safetensors"))
    _, ob = st_io.read_safetensors(os.path.join(B, "model.optim.safetensors"))
    for k in ("step", "optimizer_steps", "data_rng", "dropout_rng"):
        check(f"resume: optimizer metadata '{k}' equal", oa.get(k) == ob.get(k),
              f"{oa.get(k)!r} vs {ob.get(k)!r}")

    ra, rb = read_csv(os.path.join(A, "train.csv")), read_csv(os.path.join(B, "train.csv"))
    check("resume: train.csv has one row per step in both runs",
          [r["step"] for r in ra] == [str(i) for i in range(1, 21)] and
          [r["step"] for r in rb] == [str(i) for i in range(1, 21)],
          f"A steps {[r['step'] for r in ra]}, B steps {[r['step'] for r in rb]}")
    for col in ("loss", "lr", "grad_norm"):
        ca, cb = [r[col] for r in ra], [r[col] for r in rb]
        bad = [i + 1 for i, (x, y) in enumerate(zip(ca, cb)) if x != y]
        check(f"resume: train.csv column '{col}' identical", ca == cb and not bad,
              f"first differing steps {bad[:5]}")
    with open(os.path.join(A, "val.csv")) as fa, open(os.path.join(B, "val.csv")) as fb:
        va, vb = fa.read(), fb.read()
    check("resume: val.csv identical (steps 7, 14, 20)", va == vb and va.count("\n") == 4,
          f"A {va!r} B {vb!r}")

    def jsonl_no_timing(path):
        out = []
        with open(path) as f:
            for line in f:
                j = json.loads(line)
                j.pop("ms", None)
                j.pop("tok_s", None)
                out.append(j)
        return out
    check("resume: metrics.jsonl identical but for timings",
          jsonl_no_timing(os.path.join(A, "metrics.jsonl")) ==
          jsonl_no_timing(os.path.join(B, "metrics.jsonl")))

    # Resuming a finished run is refused with a hint.
    p = run(["train", "--resume", A, "--quiet"])
    check("resume: a finished run is refused, pointing at --steps",
          p.returncode != 0 and "--steps" in p.stderr, f"rc {p.returncode}: {p.stderr.strip()}")

    # SGD: runs, and resumes exactly too (the momentum buffers are saved).
    S1, S2 = os.path.join(d, "S1"), os.path.join(d, "S2")
    sgd = TINY + ["--steps", 6, "--batch", 2, "--eval-interval", 0, "--optimizer", "sgd", "--lr", "0.05"]
    must_run("resume: --optimizer sgd runs", sgd + ["--out", S1])
    losses = [float(r["loss"]) for r in read_csv(os.path.join(S1, "train.csv"))]
    check("resume: sgd losses finite", len(losses) == 6 and all(map(math.isfinite, losses)), str(losses))
    ts, _ = st_io.read_safetensors(os.path.join(S1, "model.optim.safetensors"))
    check("resume: sgd state is momentum buffers",
          ts and all(k.startswith("momentum_buffer.") for k in ts), str(sorted(ts)[:3]))
    must_run("resume: sgd stopped after 3", sgd + ["--out", S2, "--stop-after", 3])
    must_run("resume: sgd --resume", ["train", "--resume", S2, "--quiet"])
    for f in ("model.safetensors", "model.optim.safetensors"):
        diffs = tensors_equal(os.path.join(S1, f), os.path.join(S2, f))
        check(f"resume: sgd {f} equal bit for bit after resume", not diffs, "; ".join(diffs[:5]))

    # Dropout: the masks come from the dropout Rng's state (one seed per call), saved with the
    # optimizer state, so a resumed run with dropout ends bit for bit like the uninterrupted one;
    # and dropout is on (the first loss differs from the run without it).
    cfg = os.path.join(d, "tiny_dropout.json")
    with open(cfg, "w") as f:
        json.dump({"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 256, "context": 64,
                   "norm": "layernorm", "tie_embeddings": True, "dropout": 0.2,
                   "posenc": {"type": "rope"}}, f)
    D1, D2, D0 = os.path.join(d, "D1"), os.path.join(d, "D2"), os.path.join(d, "D0")
    drop = ["train", "--config", cfg, "--quiet", "--no-plot", "--steps", 6, "--batch", 2, "--eval-interval", 0]
    must_run("resume: dropout 0.2 runs", drop + ["--out", D1])
    must_run("resume: dropout stopped after 3", drop + ["--out", D2, "--stop-after", 3])
    must_run("resume: dropout --resume", ["train", "--resume", D2, "--quiet"])
    for f in ("model.safetensors", "model.optim.safetensors"):
        diffs = tensors_equal(os.path.join(D1, f), os.path.join(D2, f))
        check(f"resume: dropout {f} equal bit for bit after resume", not diffs, "; ".join(diffs[:5]))
    with open(cfg) as f:
        c0 = json.load(f)
    c0["dropout"] = 0.0
    cfg0 = os.path.join(d, "tiny_nodropout.json")
    with open(cfg0, "w") as f:
        json.dump(c0, f)
    must_run("resume: the same model without dropout", [a if a != cfg else cfg0 for a in drop] + ["--out", D0])
    l_drop = read_csv(os.path.join(D1, "train.csv"))[0]["loss"]
    l_none = read_csv(os.path.join(D0, "train.csv"))[0]["loss"]
    check("resume: dropout changes the first loss", l_drop != l_none, f"{l_drop} vs {l_none}")
    # Where: every dropout site draws one seed from the dropout stream per forward (the embedding,
    # and per layer the attention probabilities, the attention output and the MLP output: 1 + 3
    # n_layers = 7), so after 6 steps the stream of the run with dropout is exactly 42 draws past
    # the one without, which never draws (xoshiro256**, core/rng.cpp).
    def dropout_rng(run_dir):
        return st_io.read_safetensors(os.path.join(run_dir, "model.optim.safetensors"))[1]["dropout_rng"].split()

    r_drop, r_none = dropout_rng(D1), dropout_rng(D0)
    draws = xoshiro_draws_between([int(x) for x in r_none[:4]], [int(x) for x in r_drop[:4]], 1000)
    check("resume: the dropout stream advanced by 6 steps x 7 sites = 42 draws", draws == 42,
          f"{draws} draws (None: not within 1000) from {r_none[:4]} to {r_drop[:4]}")
    # The same model from the command line (--preset tiny --posenc rope --dropout 0.2) is the same
    # run as the config file's, bit for bit; --set changes the fields it names (d_ff follows d_model).
    D3 = os.path.join(d, "D3")
    must_run("resume: --dropout 0.2 from the command line", ["train", "--preset", "tiny", "--posenc", "rope",
                                                            "--dropout", 0.2] + drop[3:] + ["--out", D3])
    for f in ("model.safetensors", "model.optim.safetensors"):
        diffs = tensors_equal(os.path.join(D1, f), os.path.join(D3, f))
        check(f"resume: --dropout 0.2 gives the config file's run ({f} bit for bit)", not diffs, "; ".join(diffs[:5]))
    I = os.path.join(d, "set.safetensors")
    must_run("resume: init with --set", ["init", "--preset", "tiny", "--set", "d_model=32", "--set", "n_layers=1",
                                         "--set", "norm=rmsnorm", "--out", I])
    c = json.loads(st_io.read_safetensors(I)[1]["config"])
    check("resume: --set d_model=32 n_layers=1 norm=rmsnorm lands in the config, d_ff follows (128)",
          (c["d_model"], c["n_layers"], c["norm"], c["d_ff"]) == (32, 1, "rmsnorm", 128), str(c))
    # --quiet / --no-plot are honoured on --resume (output only): a run trained with progress lines
    # and a plot, resumed with both turned off, prints no step lines and writes no loss.png
    D4 = os.path.join(d, "D4")
    p = must_run("resume: a run with progress lines and a plot", ["train", "--preset", "tiny", "--steps", 3, "--batch", 2,
                                                                  "--log-interval", 1, "--out", D4])
    check("resume: it printed progress lines", "step     1/3" in p.stdout or "step 1/3" in p.stdout.replace("  ", " "),
          p.stdout[:300])
    if os.path.exists(os.path.join(D4, "loss.png")):
        os.remove(os.path.join(D4, "loss.png"))
    p = must_run("resume: --resume with --quiet --no-plot", ["train", "--resume", D4, "--steps", 5, "--quiet", "--no-plot"])
    check("resume: --quiet on --resume: no progress lines", "/5" not in p.stdout, p.stdout[:300])
    check("resume: --no-plot on --resume: no loss.png", not os.path.exists(os.path.join(D4, "loss.png")))
    check("resume: the resumed run reached step 5",
          [r["step"] for r in read_csv(os.path.join(D4, "train.csv"))][-1:] == ["5"])

    # Gradient accumulation: --batch 4 --accum 2 draws the same 8 windows as --batch 8 (the
    # sampler draws window starts in order), so losses agree to float rounding.
    G1, G2 = os.path.join(d, "G1"), os.path.join(d, "G2")
    acc = TINY + ["--steps", 3, "--eval-interval", 0]
    must_run("resume: --batch 4 --accum 2 runs", acc + ["--batch", 4, "--accum", 2, "--out", G1])
    must_run("resume: --batch 8 reference runs", acc + ["--batch", 8, "--out", G2])
    l1 = [float(r["loss"]) for r in read_csv(os.path.join(G1, "train.csv"))]
    l2 = [float(r["loss"]) for r in read_csv(os.path.join(G2, "train.csv"))]
    check("resume: accum losses finite", len(l1) == 3 and all(map(math.isfinite, l1)), str(l1))
    check("resume: accum 2 x batch 4 losses match batch 8 (rel 1e-4)",
          len(l1) == len(l2) and all(abs(a - b) <= 1e-4 * abs(b) for a, b in zip(l1, l2)),
          f"{l1} vs {l2}")
    gn1 = [float(r["grad_norm"]) for r in read_csv(os.path.join(G1, "train.csv"))]
    gn2 = [float(r["grad_norm"]) for r in read_csv(os.path.join(G2, "train.csv"))]
    check("resume: accum grad norms match batch 8 (rel 1e-3)",
          all(abs(a - b) <= 1e-3 * abs(b) for a, b in zip(gn1, gn2)), f"{gn1} vs {gn2}")


# ---------------------------------------------------------------------------------------------
# kill9

# The points of a checkpoint write where the kill lands (train/io/kill_point.h; the order of
# Checkpointer::save): the name, the step of model.safetensors on disk after a kill at the save
# of step N (N - 1 until the new model is renamed into place), the files that must be left
# beside it, and whether --resume must take the optimizer state kept as model.optim.prev.
KILL_POINTS = [
    ("ckpt:optim_aside", -1, ["model.optim.prev.safetensors"], True),
    ("write:model.optim.safetensors", -1, ["model.optim.prev.safetensors", "model.optim.safetensors.tmp"], True),
    ("ckpt:optim_saved", -1, ["model.optim.prev.safetensors", "model.optim.safetensors"], True),
    ("write:model.safetensors", -1, ["model.optim.prev.safetensors", "model.safetensors.tmp"], True),
    ("ckpt:model_saved", 0, ["model.optim.prev.safetensors", "model.optim.safetensors"], False),
    ("ckpt:done", 0, ["model.optim.safetensors"], False),
]


def cmd_kill9(at_save=3):
    """A run that checkpoints every step is killed (SIGKILL, by the test hook CTXLAB_TEST_KILL_AT)
    at each point of its save of step `at_save`; each time the checkpoint on disk is the one
    the point implies, loadable, and --resume continues it to the end of an uninterrupted run,
    bit for bit."""
    d = fresh_dir("kill9")
    toks = os.path.join(d, "t.npy")
    write_tokens(toks, (2, 65), seed=1)
    # A constant learning rate (no warmup, min-lr = lr) makes the schedule independent of
    # --steps, so a killed and resumed run must end bit for bit where one uninterrupted run of
    # the same length does.
    same = ["--eval-interval", 0, "--batch", 2, "--lr", "1e-3", "--min-lr", "1e-3", "--warmup", 0]
    refs = {}

    def reference(steps):
        if steps not in refs:
            refs[steps] = os.path.join(d, f"ref{steps}")
            must_run(f"kill9: uninterrupted reference run of {steps} steps",
                     TINY + same + ["--steps", steps, "--ckpt-interval", 0, "--out", refs[steps]])
        return refs[steps]

    def step_of(path):
        _, m = st_io.read_safetensors(path)
        return int(m.get("step", "-1"))

    for point, dstep, left, recovered in KILL_POINTS:
        K = os.path.join(d, point.replace(":", "_"))
        ckpt, optf = os.path.join(K, "model.safetensors"), os.path.join(K, "model.optim.safetensors")
        p = run(TINY + same + ["--steps", 100000, "--ckpt-interval", 1, "--out", K], timeout=120,
                env={"CTXLAB_TEST_KILL_AT": f"{point}@{at_save}"})
        if not check(f"kill9 {point}: the run was killed there (SIGKILL)", p.returncode == -signal.SIGKILL,
                     f"rc {p.returncode}: {p.stderr.strip()[-300:]}"):
            continue
        want = at_save + dstep
        names = sorted(os.listdir(K))
        check(f"kill9 {point}: model.safetensors is step {want}, beside it {left}",
              os.path.exists(ckpt) and step_of(ckpt) == want and all(n in names for n in left) and
              ("model.optim.prev.safetensors" in names) == ("model.optim.prev.safetensors" in left),
              f"step {step_of(ckpt) if os.path.exists(ckpt) else None}, files {names}")
        for n in left:  # a half-written file is what the point says: half of its bytes
            if n.endswith(".tmp"):
                with open(os.path.join(K, n), "rb") as f:
                    data = f.read()
                # the whole file's size from its own header: 8 + header length + the data's end
                hlen = struct.unpack("<Q", data[:8])[0]
                header = json.loads(data[8:8 + hlen])
                whole = 8 + hlen + max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
                check(f"kill9 {point}: {n} holds half of the file's {whole} bytes", len(data) == whole // 2,
                      f"{len(data)} bytes")
        try:
            ts, meta = st_io.read_safetensors(ckpt)
            ok = bool(ts) and all(np.isfinite(t).all() for t in ts.values()) and "config" in meta
            detail = "" if ok else "empty, non-finite or without config"
        except Exception as e:  # noqa: BLE001
            ok, detail = False, str(e)
        check(f"kill9 {point}: model.safetensors readable and finite", ok, detail)
        g = run(["grads", "--checkpoint", ckpt, "--tokens", toks, "--out", os.path.join(d, "g.safetensors")])
        check(f"kill9 {point}: grads on the checkpoint exits 0", g.returncode == 0, g.stderr.strip())
        target = want + 3
        r = run(["train", "--resume", K, "--steps", target, "--quiet"], timeout=60)
        if not check(f"kill9 {point}: --resume --steps {target} works", r.returncode == 0, r.stderr.strip()):
            continue
        took_prev = "interrupted while checkpointing" in r.stdout
        check(f"kill9 {point}: the resume {'took' if recovered else 'did not need'} the kept optimizer state",
              took_prev == recovered, r.stdout.strip()[-300:])
        check(f"kill9 {point}: resumed run reached step {target}",
              step_of(ckpt) == target and step_of(optf) == target, f"model {step_of(ckpt)}, optimizer {step_of(optf)}")
        # Steps logged after the checkpoint by the killed run are not logged twice.
        steps = [int(x["step"]) for x in read_csv(os.path.join(K, "train.csv"))]
        with open(os.path.join(K, "metrics.jsonl")) as f:
            jsteps = [j["step"] for j in map(json.loads, f) if "loss" in j]
        vsteps = [int(x["step"]) for x in read_csv(os.path.join(K, "val.csv"))]
        check(f"kill9 {point}: train.csv and metrics.jsonl hold steps 1..{target} once each",
              steps == list(range(1, target + 1)) and jsteps == steps and
              vsteps == sorted(set(vsteps)) and vsteps[-1:] == [target],
              f"train.csv steps ..{steps[-8:]}, metrics.jsonl steps ..{jsteps[-8:]}, val.csv steps {vsteps}")
        ref = reference(target)
        for f in ("model.safetensors", "model.optim.safetensors"):
            diffs = tensors_equal(os.path.join(ref, f), os.path.join(K, f))
            check(f"kill9 {point}: {f} equals the uninterrupted run's bit for bit", not diffs, "; ".join(diffs[:5]))
        la = [x["loss"] for x in read_csv(os.path.join(ref, "train.csv"))]
        lb = [x["loss"] for x in read_csv(os.path.join(K, "train.csv"))]
        check(f"kill9 {point}: train.csv losses equal the uninterrupted run's", la == lb, f"{len(la)} vs {len(lb)} rows")


# ---------------------------------------------------------------------------------------------
# badinput

def expect_failure(name, args, substrings, guard_dir=None, guard_files=()):
    """checklib.expect_failure, named as a bad-input check."""
    return cl.expect_failure(f"badinput: {name}", args, substrings, guard_dir, guard_files)


def cmd_badinput():
    d = fresh_dir("badinput")
    P = lambda n: os.path.join(d, n)  # noqa: E731
    good = P("good.safetensors")
    must_run("badinput: init a good tiny checkpoint", ["init", "--preset", "tiny", "--seed", 1, "--out", good])
    toks = P("t.npy")
    write_tokens(toks, (2, 65), seed=2)
    # A finished run whose files must survive every failing command aimed at it.
    R = P("run")
    must_run("badinput: a good 2-step run", TINY + ["--steps", 2, "--batch", 2, "--eval-interval", 0, "--out", R])
    gout = P("grads_out.safetensors")  # an existing --out of grads: must stay as it is
    must_run("badinput: grads on the good checkpoint", ["grads", "--checkpoint", good, "--tokens", toks,
                                                        "--out", gout])

    def grads(ckpt, tokens=toks):
        return ["grads", "--checkpoint", ckpt, "--tokens", tokens, "--out", gout]

    # ---- configs: `train --config` into the good run dir, `init --config` over the good checkpoint
    base_cfg = {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4, "context": 64,
                "posenc": {"type": "learned"}}
    cfg_cases = [
        ("config with an unknown key", "cfg_unknown.json", dict(base_cfg, n_layrs=2), ["n_layrs"]),
        ("config field of the wrong type", "cfg_type.json", dict(base_cfg, d_model="256"), ["d_model"]),
        ("d_model not divisible by n_heads", "cfg_div.json", dict(base_cfg, d_model=66),
         ["d_model", "n_heads"]),
    ]
    for name, fn, cfg, subs in cfg_cases:
        with open(P(fn), "w") as f:
            json.dump(cfg, f)
        expect_failure(f"train: {name}", ["train", "--config", P(fn), "--steps", 2, "--quiet", "--no-plot",
                                          "--out", R], [P(fn)] + subs, guard_dir=R)
        expect_failure(f"init: {name}", ["init", "--config", P(fn), "--out", good], [P(fn)] + subs,
                       guard_files=[good])

    # ---- checkpoints (read by `grads`, whose existing --out must survive)
    with open(good, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header, data = split_st(good)
    meta = header["__metadata__"]
    names = [k for k in header if k != "__metadata__"]

    bad = P("trunc_data.safetensors")
    cut = len(raw) - 1000
    with open(bad, "wb") as f:
        f.write(raw[:cut])
    beyond = [n for n in names if 8 + hlen + header[n]["data_offsets"][1] > cut]
    expect_failure("checkpoint truncated in the data section", grads(bad), [bad, "tensor", "data_offsets"],
                   guard_files=[gout])
    p = run(grads(bad))
    check("badinput: truncation names a tensor that no longer fits",
          any(f"'{n}'" in p.stderr for n in beyond), f"{beyond} / {p.stderr.strip()}")

    bad = P("trunc_header.safetensors")
    with open(bad, "wb") as f:
        f.write(raw[:8 + hlen // 2])
    expect_failure("checkpoint truncated inside the header", grads(bad), [bad, "header length"],
                   guard_files=[gout])

    bad = P("hlen.safetensors")
    with open(bad, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw[8:])
    expect_failure("header length beyond the file", grads(bad), [bad, "header length"], guard_files=[gout])

    # Overlap: point one tensor at another's bytes (same size, so the span is consistent).
    h = copy.deepcopy(header)
    a, b = "blocks.0.attn.proj.weight", "blocks.1.attn.proj.weight"
    h[b]["data_offsets"] = list(h[a]["data_offsets"])
    bad = P("overlap.safetensors")
    join_st(bad, h, data)
    expect_failure("overlapping data_offsets", grads(bad), [bad, "overlap", "blocks.", "attn.proj.weight"],
                   guard_files=[gout])

    h = copy.deepcopy(header)
    b0, e0 = h["norm_f.bias"]["data_offsets"]
    h["norm_f.bias"]["data_offsets"] = [len(data) + 64, len(data) + 64 + (e0 - b0)]
    bad = P("oob.safetensors")
    join_st(bad, h, data)
    expect_failure("out-of-bounds data_offsets", grads(bad), [bad, "norm_f.bias", "data_offsets"],
                   guard_files=[gout])

    ts, _ = st_io.read_safetensors(good)

    def variant(fn, change):
        t2 = dict(ts)
        m2 = dict(meta)
        change(t2, m2)
        st_io.write_safetensors(P(fn), t2, m2)
        return P(fn)

    bad = variant("i32.safetensors", lambda t, m: t.__setitem__(
        "blocks.0.mlp.fc.weight", t["blocks.0.mlp.fc.weight"].astype(np.int32)))
    expect_failure("I32 tensor for a weight", grads(bad), [bad, "blocks.0.mlp.fc.weight", "dtype"],
                   guard_files=[gout])
    bad = variant("shape.safetensors", lambda t, m: t.__setitem__(
        "blocks.0.mlp.fc.weight", np.ascontiguousarray(t["blocks.0.mlp.fc.weight"].T)))
    expect_failure("wrong shape for the config", grads(bad), [bad, "blocks.0.mlp.fc.weight", "shape"],
                   guard_files=[gout])
    bad = variant("missing.safetensors", lambda t, m: t.pop("norm_f.bias"))
    expect_failure("missing tensor", grads(bad), [bad, "norm_f.bias", "missing"], guard_files=[gout])
    bad = variant("extra.safetensors", lambda t, m: t.__setitem__("extra.weight", np.zeros((3,), np.float32)))
    expect_failure("unknown extra tensor", grads(bad), [bad, "extra.weight"], guard_files=[gout])
    bad = variant("nocfg.safetensors", lambda t, m: m.pop("config"))
    expect_failure("metadata config missing", grads(bad), [bad, "config"], guard_files=[gout])

    # --resume with an option that would change the saved run: refused, naming it; the run's
    # files untouched. Config overrides that are malformed: refused, naming the key or value.
    R_steps = ["train", "--resume", R, "--steps", 4, "--quiet"]
    expect_failure("train --resume with --lr", R_steps + ["--lr", "1e-4"], ["--resume", "--lr", "model.safetensors"],
                   guard_dir=R)
    expect_failure("train --resume with --dropout", R_steps + ["--dropout", "0.1"], ["--resume", "--dropout"],
                   guard_dir=R)
    expect_failure("train --resume with --preset", R_steps + ["--preset", "small"], ["--resume", "--preset"],
                   guard_dir=R)
    tiny_into_R = TINY + ["--steps", 2, "--out", R]
    expect_failure("train --set of an unknown key", tiny_into_R + ["--set", "n_layer=4"],
                   ["n_layer", "did you mean 'n_layers'"], guard_dir=R)
    expect_failure("train --set without '='", tiny_into_R + ["--set", "n_layers"], ["--set", "KEY=VALUE", "n_layers"],
                   guard_dir=R)
    expect_failure("train --set of a bad value", tiny_into_R + ["--set", "n_heads=four"], ["n_heads", "four"],
                   guard_dir=R)
    expect_failure("train --dropout 1", tiny_into_R + ["--dropout", "1"], ["dropout", "[0, 1)"], guard_dir=R)
    # Training options out of range: refused before any work, naming the flag and the value
    for flag, val, subs in (("--lr", "-1", ["--lr", "> 0", "-1"]), ("--context", "0", ["--context", "0"]),
                            ("--eval-batches", "0", ["--eval-batches", "0"]), ("--beta2", "1", ["--beta2", "[0, 1)"]),
                            ("--min-lr", "0.5", ["--min-lr", "at most --lr"]), ("--warmup", "-1", ["--warmup", "-1"]),
                            ("--grad-clip", "-1", ["--grad-clip", "-1"]), ("--batch", "0", ["--batch", "0"]),
                            ("--lr", "fast", ["--lr", "'fast'"])):
        expect_failure(f"train {flag} {val}", tiny_into_R + [flag, val], subs, guard_dir=R)
    # --stop-after counts the run's steps from its start: at or below a resumed run's step it is refused
    expect_failure("train --resume --stop-after at the run's step", R_steps + ["--stop-after", 2],
                   ["--stop-after 2", "already at step 2"], guard_dir=R)
    expect_failure("eval --rope-scaling on a learned model", ["eval", "--checkpoint", good, "--lengths", 64,
                                                              "--rope-scaling", "pi", "--factor", 2],
                   [good, "--rope-scaling needs a rope model", "learned"])
    corpus = P("corpus.txt")
    with open(corpus, "w") as f:
        f.write("".join(chr(0x41 + (i * 7) % 40) for i in range(4000)) + "\n")
    expect_failure("tokenizer train --vocab below the corpus's characters", ["tokenizer", "train", "--data", corpus,
                                                                             "--vocab", 10, "--out", P("t.model")],
                   [corpus, "--vocab 10", "raise --vocab"])
    p = run(["tokenizer", "train", "--data", corpus, "--vocab", 10, "--out", P("t.model")])
    check("badinput: the tokenizer's error names no SentencePiece-only option", "character_coverage" not in p.stderr,
          p.stderr.strip())

    # A damaged checkpoint in a run directory: --resume fails and leaves the run's files alone.
    R2 = P("run_damaged")
    shutil.copytree(R, R2)
    with open(os.path.join(R2, "model.safetensors"), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(R2, "model.safetensors")) - 1000)
    expect_failure("train --resume of a truncated checkpoint", ["train", "--resume", R2, "--quiet"],
                   [os.path.join(R2, "model.safetensors"), "tensor"], guard_dir=R2)
    R3 = P("run_bad_optim")
    shutil.copytree(R, R3)
    oh, od = split_st(os.path.join(R3, "model.optim.safetensors"))
    oh.pop("exp_avg.norm_f.bias")
    join_st(os.path.join(R3, "model.optim.safetensors"), oh, od)
    expect_failure("train --resume with an optimizer tensor missing",
                   ["train", "--resume", R3, "--steps", 4, "--quiet"],
                   [os.path.join(R3, "model.optim.safetensors"), "exp_avg.norm_f.bias"], guard_dir=R3)

    # ---- token files
    t = P("t_vocab.npy")
    arr = np.random.default_rng(3).integers(0, 256, size=(2, 65)).astype(np.int32)
    arr[1, 7] = 256
    st_io.save_npy(t, arr)
    expect_failure("token ids >= vocab", grads(good, t), [t, "256", "vocab"], guard_files=[gout])
    t = P("t_f32.npy")
    write_tokens(t, (2, 65), dtype=np.float32)
    expect_failure("token file of float32", grads(good, t), [t, "dtype"], guard_files=[gout])
    t = P("t_i16.npy")
    write_tokens(t, (2, 65), dtype=np.int16)
    expect_failure("token file of int16", grads(good, t), [t, "<i2"], guard_files=[gout])
    t = P("t_1d.npy")
    write_tokens(t, (65,))
    expect_failure("token file 1-D", grads(good, t), [t, "shape"], guard_files=[gout])
    t = P("t_long.npy")
    write_tokens(t, (2, 66))  # T = 65 > context 64 of a learned table
    expect_failure("sequence longer than the learned table", grads(good, t), [t, "65", "64"],
                   guard_files=[gout])

    # ---- checkpoint metadata and values
    bad = variant("fmt_wrong.safetensors", lambda t, m: m.__setitem__("format", "ctxlab/2"))
    expect_failure("__metadata__.format of another version", grads(bad), [bad, "format", "ctxlab/2", "ctxlab/1"],
                   guard_files=[gout])
    bad = variant("fmt_missing.safetensors", lambda t, m: m.pop("format"))
    expect_failure("__metadata__.format missing", grads(bad), [bad, "format", "missing"], guard_files=[gout])
    bad = variant("step_text.safetensors", lambda t, m: m.__setitem__("step", "three"))
    expect_failure("__metadata__.step not an integer", grads(bad), [bad, "step", "three"], guard_files=[gout])

    def poison(value):
        def change(t, m):
            w = t["blocks.1.attn.qkv.weight"].copy()
            w.reshape(-1)[37] = value
            t["blocks.1.attn.qkv.weight"] = w
        return change
    for label, value in (("NaN", np.nan), ("+inf", np.inf)):
        bad = variant(f"nonfinite_{label[-3:]}.safetensors", poison(value))
        # documented behaviour (train/io/checkpoint.h): a non-finite parameter is a load error
        expect_failure(f"{label} weight in a checkpoint (grads)", grads(bad),
                       [bad, "blocks.1.attn.qkv.weight", "non-finite", "37"], guard_files=[gout])
        expect_failure(f"{label} weight in a checkpoint (eval)",
                       ["eval", "--checkpoint", bad, "--lengths", 16, "--max-windows", 1],
                       [bad, "blocks.1.attn.qkv.weight", "non-finite"])

    # ---- token batches: negative ids (cross_entropy's ignore index -1 must not be accepted
    # as "skip this target"), an id that is only a target (last column), empty batches
    for label, pos, val in (("-1 as an input and a target", (1, 7), -1), ("-1 only as a target", (0, 64), -1),
                            ("-7", (1, 30), -7)):
        t = P(f"t_neg_{pos[0]}_{pos[1]}.npy")
        arr = np.random.default_rng(4).integers(0, 256, size=(2, 65)).astype(np.int32)
        arr[pos] = val
        st_io.save_npy(t, arr)
        expect_failure(f"token id {label}", grads(good, t), [t, str(val), f"[{pos[0]}, {pos[1]}]", "vocab"],
                       guard_files=[gout])
    t = P("t_T0.npy")
    write_tokens(t, (2, 1))  # [B, T+1] with T = 0
    expect_failure("token batch with T = 0", grads(good, t), [t, "[2, 1]", "T >= 1"], guard_files=[gout])
    t = P("t_B0.npy")
    write_tokens(t, (0, 65))
    expect_failure("empty token batch (B = 0)", grads(good, t), [t, "[0, 65]", "B >= 1"], guard_files=[gout])
    t = P("t_empty.npy")
    write_tokens(t, (0, 0))
    expect_failure("token array of shape [0, 0]", grads(good, t), [t, "[0, 0]"], guard_files=[gout])

    # ---- corpora: empty, and too short for a window in both splits
    for label, text in (("empty", b""), ("too short", b"It is a truth universally acknowledged.\n" * 2)):
        c = P(f"corpus_{label.replace(' ', '_')}.txt")
        with open(c, "wb") as f:
            f.write(text)
        expect_failure(f"train on an {label} corpus", TINY + ["--data", c, "--steps", 2, "--out", R],
                       [c, "too short"], guard_dir=R)

    # ---- optimizer state: wrong shape, wrong step, unreadable optimizer_steps (--resume)
    def damaged_run(name, change):
        Rx = P(name)
        shutil.copytree(R, Rx)
        of = os.path.join(Rx, "model.optim.safetensors")
        ts_o, meta_o = st_io.read_safetensors(of)
        change(ts_o, meta_o)
        st_io.write_safetensors(of, ts_o, meta_o)
        return Rx, of
    Rx, of = damaged_run("run_optim_shape", lambda t, m: t.__setitem__(
        "exp_avg_sq.blocks.0.mlp.fc.weight", np.ascontiguousarray(t["exp_avg_sq.blocks.0.mlp.fc.weight"].T)))
    expect_failure("train --resume with an optimizer tensor of the wrong shape",
                   ["train", "--resume", Rx, "--steps", 4, "--quiet"],
                   [of, "exp_avg_sq.blocks.0.mlp.fc.weight", "shape"], guard_dir=Rx)
    Rx, of = damaged_run("run_optim_step", lambda t, m: m.__setitem__("step", "1"))
    expect_failure("train --resume with optimizer state of another step",
                   ["train", "--resume", Rx, "--steps", 4, "--quiet"], [of, "step 1", "step 2"], guard_dir=Rx)
    Rx, of = damaged_run("run_optim_steps_text", lambda t, m: m.__setitem__("optimizer_steps", "2x"))
    expect_failure("train --resume with a non-integer optimizer_steps",
                   ["train", "--resume", Rx, "--steps", 4, "--quiet"], [of, "optimizer_steps", "2x"], guard_dir=Rx)

    # ---- train options (the run dir R must not be touched)
    expect_failure("train --posenc bogus", ["train", "--preset", "tiny", "--posenc", "bogus", "--steps", 2,
                                            "--quiet", "--no-plot", "--out", R], ["bogus", "posenc"], guard_dir=R)
    expect_failure("train --preset nope", ["train", "--preset", "nope", "--steps", 2, "--quiet", "--no-plot",
                                           "--out", R], ["'nope'", "preset"], guard_dir=R)
    expect_failure("train --data /nonexistent", ["train", "--preset", "tiny", "--data", "/nonexistent",
                                                 "--steps", 2, "--quiet", "--no-plot", "--out", R],
                   ["/nonexistent"], guard_dir=R)


# ---------------------------------------------------------------------------------------------
# checkpoints: F64 / F16 / BF16 tensors (MODEL_SPEC §5 allows reading and converting them)

def bf16_file(path, tensors, meta):
    """Writes every tensor as BF16 (the top 16 bits of its float32, round to nearest even),
    which NumPy cannot name; returns the float32 values the file holds."""
    header, blobs, held, off = {"__metadata__": meta}, [], {}, 0
    for name in sorted(tensors):
        x = np.ascontiguousarray(tensors[name], dtype="<f4")
        u = x.view("<u4").astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
        held[name] = (r.astype("<u4") << 16).view("<f4").reshape(x.shape)
        blob = r.tobytes()
        header[name] = {"dtype": "BF16", "shape": list(x.shape), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    join_st(path, header, b"".join(blobs))
    return held


def cmd_checkpoints():
    d = fresh_dir("checkpoints")
    P = lambda n: os.path.join(d, n)  # noqa: E731
    good = P("f32.safetensors")
    must_run("checkpoints: init a tiny checkpoint", ["init", "--preset", "tiny", "--seed", 5, "--out", good])
    toks = P("t.npy")
    write_tokens(toks, (2, 33), seed=6)
    ts, meta = st_io.read_safetensors(good)

    def grads_of(ckpt, name):
        out = P(name + ".grads.safetensors")
        p = must_run(f"checkpoints: grads on the {name} checkpoint",
                     ["grads", "--checkpoint", ckpt, "--tokens", toks, "--out", out])
        if p.returncode != 0:
            return None, None
        g, m = st_io.read_safetensors(out)
        return float(m["loss"]), g

    # Each converted file against an F32 file holding exactly the values it converts to: the same
    # loss and gradients bit for bit (the conversion is exact and nothing else differs).
    f16 = {k: v.astype(np.float16) for k, v in ts.items()}
    cases = [("F64", {k: v.astype(np.float64) for k, v in ts.items()}, ts),
             ("F16", f16, {k: v.astype(np.float32) for k, v in f16.items()})]
    for label, stored, as_f32 in cases:
        f, ref = P(f"{label}.safetensors"), P(f"{label}_as_f32.safetensors")
        st_io.write_safetensors(f, stored, meta)
        st_io.write_safetensors(ref, as_f32, meta)
        l1, g1 = grads_of(f, label)
        l2, g2 = grads_of(ref, label + "_as_f32")
        if g1 is None or g2 is None:
            continue
        same = l1 == l2 and all(np.array_equal(g1[k], g2[k]) for k in g2)
        check(f"checkpoints: {label} tensors are converted (loss {l1} == {l2}, gradients equal)", same)
    f, ref = P("BF16.safetensors"), P("BF16_as_f32.safetensors")
    held = bf16_file(f, ts, meta)
    st_io.write_safetensors(ref, held, meta)
    l1, g1 = grads_of(f, "BF16")
    l2, g2 = grads_of(ref, "BF16_as_f32")
    if g1 is not None and g2 is not None:
        same = l1 == l2 and all(np.array_equal(g1[k], g2[k]) for k in g2)
        check(f"checkpoints: BF16 tensors are converted (loss {l1} == {l2}, gradients equal)", same)
        # The rounding is real and is what moved the loss: to first order the loss moves by
        # pred = sum g . (bf16(w) - w) (g: the F32 checkpoint's gradients); the rest is second order
        # (measured 1.2e-3 of pred) and the two losses' own fp32 rounding (2^-24 |l| each):
        # |l1 - l0 - pred| <= 0.02 |pred| + 4 2^-24 |l0| (measured 8e-8 against 2.7e-6).
        l0, g0 = grads_of(good, "F32")
        if g0 is not None:
            f64 = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
            delta = {k: f64(held[k]) - f64(ts[k]) for k in g0}
            pred = sum(float(np.sum(f64(g0[k]) * delta[k])) for k in g0)
            bound = sum(float(np.sum(np.abs(f64(g0[k]) * delta[k]))) for k in g0)
            check(f"checkpoints: BF16 rounding moves the loss by the first-order amount ({l1 - l0:.3e} vs "
                  f"sum g.delta {pred:.3e}, bound {bound:.3e})",
                  l1 != l0 and sorted(g0) == sorted(ts) and
                  abs((l1 - l0) - pred) <= 0.02 * abs(pred) + 4 * 2.0 ** -24 * abs(l0))
    # A converted checkpoint resumes nothing but loads everywhere: eval and sample accept it.
    p = must_run("checkpoints: eval of the F16 checkpoint",
                 ["eval", "--checkpoint", P("F16.safetensors"), "--lengths", 32, "--max-windows", 2])
    check("checkpoints: eval prints a finite loss for the F16 checkpoint",
          p.returncode == 0 and "nan" not in p.stdout.lower(), p.stdout[-300:])


# ---------------------------------------------------------------------------------------------
# main_job_smoke

def cmd_main_job_smoke():
    d = fresh_dir("smoke")
    S = os.path.join(d, "S")
    p = must_run("smoke: train --preset tiny --steps 30", ["train", "--preset", "tiny", "--steps", 30, "--out", S])
    check("smoke: progress lines with loss and tok/s", "loss" in p.stdout and "tok/s" in p.stdout,
          p.stdout[:300])
    for f in ("model.safetensors", "model.optim.safetensors", "metrics.jsonl", "train.csv", "val.csv"):
        check(f"smoke: wrote {f}", os.path.isfile(os.path.join(S, f)) and os.path.getsize(os.path.join(S, f)) > 0)
    leftovers = [n for n in os.listdir(S) if n.endswith(".tmp") or ".prev." in n]
    check("smoke: no temporary or .prev files left in the run directory", not leftovers, str(leftovers))
    ts, meta = st_io.read_safetensors(os.path.join(S, "model.safetensors"))
    check("smoke: checkpoint metadata (format, config, step 30)",
          meta.get("format") == "ctxlab/1" and meta.get("step") == "30" and "config" in meta, str(meta)[:300])
    train_rows, val_rows, bad = {}, [], []
    with open(os.path.join(S, "metrics.jsonl")) as f:
        for i, line in enumerate(f):
            try:
                j = json.loads(line)
            except ValueError as e:
                bad.append(f"line {i + 1}: {e}")
                continue
            if "loss" in j and isinstance(j.get("step"), int):
                train_rows[j["step"]] = j["loss"]
            elif "val_loss" in j and isinstance(j.get("step"), int):
                val_rows.append(j)
            else:
                bad.append(f"line {i + 1}: {line.strip()[:100]}")
    check("smoke: metrics.jsonl lines are JSON with step/loss or step/val_loss", not bad, "; ".join(bad[:3]))
    check("smoke: metrics.jsonl has steps 1..30 and a final val_loss",
          sorted(train_rows) == list(range(1, 31)) and val_rows and val_rows[-1]["step"] == 30,
          f"{sorted(train_rows)[:3]}.., val {val_rows}")
    rows = read_csv(os.path.join(S, "train.csv"))
    check("smoke: train.csv has 30 rows", [int(r["step"]) for r in rows] == list(range(1, 31)))
    vrows = read_csv(os.path.join(S, "val.csv"))
    check("smoke: val.csv has the step-30 validation loss",
          vrows and vrows[-1]["step"] == "30" and math.isfinite(float(vrows[-1]["val_loss"])), str(vrows))
    if train_rows:
        # At init (weights of std 0.02) the predictions are near uniform over the 256 bytes: the
        # first loss is ln 256 = 5.545 (measured 5.540). 30 steps of warmup to lr 3e-4 learn the
        # corpus's byte frequencies: measured 4.866 at step 30, a drop of 0.67 nats; at least
        # half of it must be there (half the learning rate: 0.17; no update: 0).
        l1, l30 = train_rows.get(1, math.nan), train_rows.get(30, math.nan)
        check(f"smoke: loss at step 1 ({l1:.4f}) is ln 256 = {math.log(256):.4f} within 0.02", abs(l1 - math.log(256)) < 0.02)
        check(f"smoke: loss at step 30 ({l30:.4f}) at least 0.33 below step 1's ({l1:.4f})", l30 < l1 - 0.33)
    if shutil.which("gnuplot"):
        png = os.path.join(S, "loss.png")
        ok = os.path.isfile(png)
        if ok:
            with open(png, "rb") as f:
                ok = f.read(8) == b"\x89PNG\r\n\x1a\n"
        check("smoke: loss.png written (gnuplot installed)", ok, p.stdout[-300:])
    elif deps.missing_allowed("gnuplot"):
        print("smoke: loss.png not checked: gnuplot missing, allowed by CTXLAB_ALLOW_MISSING")
    else:
        check("smoke: gnuplot installed for loss.png (scripts/setup.sh installs gnuplot-nox; "
              "CTXLAB_ALLOW_MISSING=gnuplot where it cannot be)", False)


# ---------------------------------------------------------------------------------------------
# bench

def cmd_bench():
    """`ctxlab bench`: its JSON is self-consistent, --json writes the same object, --profile adds the
    per-op table (stderr) and "profile" (JSON); bad options and a bad CTXLAB_* switch are refused."""
    d = fresh_dir("bench")
    jf = os.path.join(d, "b.json")
    base = ["bench", "--preset", "tiny", "--steps", 3, "--warmup", 1, "--peak-gflops", 100]
    p = must_run("bench: tiny, 3 timed steps, --profile, --json", base + ["--profile", "--json", jf])
    try:
        j = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as e:
        check("bench: the last stdout line is the JSON object", False, f"{e}: {p.stdout[-300:]}")
        return
    with open(jf) as f:
        check("bench: --json writes the object printed on stdout", json.load(f) == j)
    B, T, med = j["batch"], j["context"], j["ms_per_step"]["median"]
    check("bench: batch 8 x context 64 (tiny), 3 timed steps", (B, T, j["steps"]) == (8, 64, 3), str((B, T, j["steps"])))
    tok = B * T / (med / 1000.0)
    check(f"bench: tokens/s = B T / median step ({j['tokens_per_s']} vs {tok:.1f})",
          abs(j["tokens_per_s"] - tok) <= 1e-3 * tok + 0.1)
    # tiny (V 256, D 64, L 2, d_ff 256, T 64): 6 N + 12 L T D, N = L (4 D^2 + 2 D d_ff) + V D
    V, D, L, F = 256, 64, 2, 256
    flop = 6 * (L * (4 * D * D + 2 * D * F) + V * D) + 12 * L * T * D
    check(f"bench: FLOP/token is 6 N + 12 L T D = {flop} for tiny", j["flop_per_token"] == flop,
          str(j["flop_per_token"]))
    ach = flop * j["tokens_per_s"] / 1e9
    check(f"bench: achieved GFLOP/s = FLOP/token x tokens/s ({j['achieved_gflops']} vs {ach:.2f})",
          abs(j["achieved_gflops"] - ach) <= 1e-3 * ach + 0.01)
    check(f"bench: MFU = achieved / the given peak 100 ({j['mfu']})",
          j["peak_gflops"] == 100 and abs(j["mfu"] - j["achieved_gflops"] / 100) <= 1e-3)
    check("bench: the final loss is finite and about ln 256 for a fresh model",
          math.isfinite(j["final_loss"]) and abs(j["final_loss"] - math.log(256)) < 1.0, str(j["final_loss"]))
    prof = j.get("profile")
    rows = {(r["phase"], r["op"]): r for r in prof} if isinstance(prof, list) else {}
    check("bench --profile: the JSON's profile has forward and backward rows for linear",
          ("forward", "linear") in rows and ("backward", "linear") in rows, str(prof)[:300])
    lin = rows.get(("forward", "linear"), {})
    check("bench --profile: 8 Linear calls a step in the forward (2 layers x qkv, proj, fc, mproj)",
          lin.get("calls_per_step") == 8, str(lin))
    check("bench --profile: the per-op table goes to stderr", "per-op profile, mean of 3 timed steps" in p.stderr,
          p.stderr[-300:])
    p = must_run("bench: without --profile", base)
    check("bench: no profile without --profile", "profile" not in json.loads(p.stdout.strip().splitlines()[-1]))
    expect_failure("bench --steps 0", base[:3] + ["--steps", 0], ["--steps", "0"])
    expect_failure("bench --peak-gflops x", base + ["--peak-gflops", "x"], ["--peak-gflops", "'x'"])
    p = run(base, env={"CTXLAB_FUSED_ATTENTION": "off"})
    check("bench with CTXLAB_FUSED_ATTENTION=off: refused, naming it and 0 or 1",
          p.returncode == 1 and "CTXLAB_FUSED_ATTENTION=off: expected 0 or 1" in p.stderr, p.stderr.strip()[-300:])
    cmd_bench_memory()


def cmd_bench_memory():
    """`bench --peak-only`'s copy bandwidth over the model's GEMM weights, and `bench --decode`: its
    JSON's arithmetic (tokens/s, the weight bytes of tiny, the bound and the fractions), the path
    taken (the graph-free decoder; the graph with CTXLAB_FUSED_DECODE=0), --num-samples."""
    # tiny: V 256, D 64, L 2, d_ff 256: L (4 D^2 + 2 D d_ff) + V D weights
    V, D, L, F = 256, 64, 2, 256
    wts = L * (4 * D * D + 2 * D * F) + V * D
    p = must_run("bench --peak-only (tiny)", ["bench", "--preset", "tiny", "--peak-only"])
    j = json.loads(p.stdout.strip().splitlines()[-1])
    check(f"bench --peak-only: copy over the fp32 weights of tiny ({4 * wts} bytes)", j.get("copy_bytes") == 4 * wts,
          str(j))
    check("bench --peak-only: copy bandwidths positive, on all threads and on one",
          j.get("copy_gbps", 0) > 0 and j.get("copy_gbps_1thread", 0) > 0, str(j))
    for samples, env in ((1, {}), (3, {}), (1, {"CTXLAB_FUSED_DECODE": "0"})):
        args = ["bench", "--preset", "tiny", "--decode", "--decode-tokens", 16, "--steps", 2,
                "--num-samples", samples]
        p = must_run(f"bench --decode, {samples} sample(s) {env}", args, env=env)
        j = json.loads(p.stdout.strip().splitlines()[-1])
        graph = bool(env)
        check(f"bench --decode: the path ({j['path']})",
              j["path"] == ("kv cache, through the graph: CTXLAB_FUSED_DECODE=0" if graph
                            else "kv cache, graph-free decoder, one backend call a step"))
        med = sorted(j["rounds_s"])[len(j["rounds_s"]) // 2] if len(j["rounds_s"]) % 2 else \
            sum(sorted(j["rounds_s"])[:2]) / 2
        tps = samples * 16 / med
        check(f"bench --decode: tokens/s = samples x tokens / the median round ({j['tokens_per_s']} vs {tps:.1f})",
              abs(j["tokens_per_s"] - tps) <= 1e-3 * tps + 0.1)
        check("bench --decode: weight bytes per step = tiny's fp32 GEMM weights", j["weight_bytes_per_step"] == 4 * wts)
        bound = samples * j["copy_gbps"] * 1e9 / (4 * wts)
        check(f"bench --decode: bound = samples x copy / weight bytes ({j['bound_tokens_per_s']} vs {bound:.1f})",
              abs(j["bound_tokens_per_s"] - bound) <= 1e-3 * bound + 1)
        check("bench --decode: fraction of the bound = its tokens/s over the bound's",
              abs(j["fraction_of_bound"] - j["tokens_per_s"] / j["bound_tokens_per_s"]) <= 2e-3, str(j))
        check("bench --decode: with the KV cache's bytes the fraction is larger",
              j["fraction_of_bound_with_kv"] > j["fraction_of_bound"], str(j))
        check("bench --decode: the first call (engine made, weights packed) timed on its own",
              isinstance(j.get("first_call_s"), float) and 0 < j["first_call_s"] < 60, str(j))
    p = run(["bench", "--preset", "tiny", "--decode", "--decode-tokens", 1])
    check("bench --decode --decode-tokens 1: refused, naming the option",
          p.returncode == 1 and "--decode-tokens" in p.stderr, p.stderr.strip()[-300:])
    p = run(["bench", "--preset", "tiny", "--decode", "--posenc", "alibi", "--num-samples", 2, "--decode-tokens", 4])
    check("bench --decode: two samples of an alibi model: refused, naming the graph-free decoder",
          p.returncode == 1 and "graph-free decoder" in p.stderr and "alibi" in p.stderr, p.stderr.strip()[-300:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["resume", "kill9", "badinput", "checkpoints", "main_job_smoke", "bench"])
    ap.add_argument("--bin", required=True, help="the ctxlab binary")
    ap.add_argument("--work", required=True, help="scratch directory")
    a = ap.parse_args()
    cl.configure(a.bin, a.work)

    commands = {"resume": cmd_resume, "kill9": cmd_kill9, "badinput": cmd_badinput,
                "checkpoints": cmd_checkpoints, "bench": cmd_bench, "main_job_smoke": cmd_main_job_smoke}
    return cl.run_subcommand(a.command, commands[a.command])

if __name__ == "__main__":
    sys.exit(main())
