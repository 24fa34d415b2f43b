#!/usr/bin/env python3
"""The CLI under hostile input, signals and faults (issue 34; docs/reliability.md).

    reliability_checks.py SUBCOMMAND --bin path/to/ctxlab --work scratch/dir

Subcommands (one ctest each, see tests/cli/reliability.cmake):

  injection   run directories named like shell or gnuplot commands: nothing runs (plot_loss
              spawns gnuplot with an argument vector and an escaped string)
  nonfinite   a NaN in the optimizer state: no checkpoint is written from it, the last good one
              and its .prev scheme stay, the error names the tensor and the step; NaN or negative
              exp_avg_sq is refused when loading
  overwrite   `train --out` / `finetune --out` over an existing run refuses unless --resume or
              --force
  lock        two trainings on one --out: the second refuses at once, naming the holder's pid
  signals     SIGINT / SIGTERM: the current step finishes, a checkpoint is written, exit 130 / 143;
              --resume then continues bit-equal to an uninterrupted run
  strict      checkpoint metadata and RNG states are parsed strictly (step, optimizer_steps,
              data_rng, extra optimizer tensors)
  plugin      a plugin whose factory returns nullptr, the same plugin twice: one-line errors
  escapes     `report` escapes control characters echoed from a damaged metrics.jsonl
  early       output locations checked before the work starts (read-only --out, eval --json into
              a missing directory); a corrupted SentencePiece model names the reason
  limits      configs, batches and lengths that cannot fit are refused up front, naming the option

Each subcommand prints one line per check, then "N passed, N failed", and exits 1 on failure.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checklib as cl  # noqa: E402
import st_io  # noqa: E402
from checklib import check, dir_hashes, expect_failure, fresh_dir, join_st, must_run, run, sha, split_st  # noqa: E402

PLUGIN_LIB = ""
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["train", "--preset", "tiny", "--quiet", "--no-plot"]


def set_meta(path, **kv):
    h, data = split_st(path)
    h["__metadata__"].update(kv)
    join_st(path, h, data)


# ---------------------------------------------------------------------------------------------

def cmd_injection():
    d = fresh_dir("injection")
    pwned = os.path.join(d, "PWNED")
    have_gnuplot = shutil.which("gnuplot") is not None
    outs = [os.path.join(d, "run_$(touch${IFS}" + pwned + ")"),
            os.path.join(d, "run_`touch " + pwned + "`"),
            os.path.join(d, "g'; system('touch " + pwned + "'); x='"),
            os.path.join(d, 'q"; touch ' + pwned + '; "'),
            os.path.join(d, "nl\nsystem('touch " + pwned + "')")]
    for i, out in enumerate(outs):
        p = run(["train", "--preset", "tiny", "--quiet", "--steps", 2, "--batch", 2, "--eval-interval", 0,
                 "--out", out])
        check(f"injection {i}: the run succeeds", p.returncode == 0, p.stderr.strip()[-300:])
        check(f"injection {i}: nothing ran", not os.path.exists(pwned), repr(out))
        if have_gnuplot:
            check(f"injection {i}: loss.png written in the run directory", os.path.exists(os.path.join(out, "loss.png")),
                  p.stdout.strip()[-300:])
        # --resume plots too
        p = run(["train", "--resume", out, "--quiet", "--steps", 3])
        check(f"injection {i}: --resume succeeds, nothing ran", p.returncode == 0 and not os.path.exists(pwned),
              p.stderr.strip()[-300:])


def read_meta(path):
    h, _ = split_st(path)
    return h.get("__metadata__", {})


def patch_tensor(path, name, values):
    """Overwrites the first elements of F32 tensor `name` in place with `values`."""
    h, data = split_st(path)
    info = h[name]
    assert info["dtype"] == "F32"
    b0 = info["data_offsets"][0]
    raw = bytearray(data)
    arr = np.array(values, dtype="<f4").tobytes()
    raw[b0:b0 + len(arr)] = arr
    join_st(path, h, bytes(raw))


def cmd_nonfinite():
    d = fresh_dir("nonfinite")
    R = os.path.join(d, "run")
    must_run("nonfinite: a 5-step run, a checkpoint every step",
             TINY + ["--steps", 10, "--batch", 2, "--eval-interval", 0, "--ckpt-interval", 1, "--stop-after", 5,
                     "--out", R])
    op = os.path.join(R, "model.optim.safetensors")
    # a finite state that blows the next update up: a huge first moment over a tiny second moment
    patch_tensor(op, "exp_avg.wte.weight", [3e38] * 8)
    before = dir_hashes(R)
    p = run(["train", "--resume", R, "--quiet", "--no-plot"])
    err = p.stderr.strip()
    check("nonfinite: the run stops with an error (not a crash)", 0 < p.returncode < 126 and "std::" not in err, err[-400:])
    check("nonfinite: the error names the tensor and the step", "'wte.weight'" in err and "after step 6" in err, err[-400:])
    check("nonfinite: no checkpoint written from a non-finite state (files unchanged, no .prev / .tmp)",
          {k: v for k, v in dir_hashes(R).items() if k not in ("metrics.jsonl", "train.csv", "val.csv", ".lock")} ==
          {k: v for k, v in before.items() if k not in ("metrics.jsonl", "train.csv", "val.csv", ".lock")},
          str(sorted(os.listdir(R))))
    m = read_meta(os.path.join(R, "model.safetensors"))
    check("nonfinite: model.safetensors still the step-5 checkpoint", m.get("step") == "5", m.get("step"))
    tensors, _ = st_io.read_safetensors(os.path.join(R, "model.safetensors"))
    check("nonfinite: its weights are finite", all(np.isfinite(t).all() for t in tensors.values()))
    # loading refuses NaN / inf / negative second moments, naming the tensor
    for label, vals, subs in [("NaN exp_avg_sq", [float("nan")], ["exp_avg_sq.wte.weight", "nan"]),
                              ("negative exp_avg_sq", [-1.0], ["exp_avg_sq.wte.weight", "non-negative"]),
                              ("inf exp_avg", [float("inf")], ["exp_avg.wte.weight", "inf"])]:
        R2 = os.path.join(d, label.replace(" ", "_"))
        shutil.copytree(R, R2)
        name = "exp_avg_sq.wte.weight" if "sq" in label else "exp_avg.wte.weight"
        patch_tensor(os.path.join(R2, "model.optim.safetensors"), name, vals)
        expect_failure(f"nonfinite: --resume with {label} refused", ["train", "--resume", R2, "--quiet", "--no-plot"],
                       ["model.optim.safetensors"] + subs, guard_dir=R2)


def cmd_overwrite():
    d = fresh_dir("overwrite")
    R = os.path.join(d, "run")
    base = TINY + ["--steps", 2, "--batch", 2, "--eval-interval", 0]
    must_run("overwrite: a finished 2-step run", base + ["--out", R])
    expect_failure("overwrite: train --out over it refused", base + ["--out", R],
                   ["already holds a run", "--resume", "--force"], guard_dir=R)
    ck = os.path.join(d, "ck.safetensors")
    must_run("overwrite: init a checkpoint for finetune", ["init", "--preset", "tiny", "--out", ck])
    expect_failure("overwrite: finetune --out over it refused",
                   ["finetune", "--checkpoint", ck, "--context", 64, "--steps", 1, "--batch", 2, "--quiet", "--no-plot",
                    "--eval-interval", 0, "--out", R], ["already holds a run", "--force"], guard_dir=R)
    before = sha(os.path.join(R, "model.safetensors"))
    must_run("overwrite: --force replaces it", base + ["--seed", 7, "--out", R, "--force"])
    check("overwrite: --force wrote a new checkpoint", sha(os.path.join(R, "model.safetensors")) != before)
    E = os.path.join(d, "empty")
    os.makedirs(E)
    must_run("overwrite: an existing empty directory is fine", base + ["--out", E])
    expect_failure("overwrite: --force with --resume refused", ["train", "--resume", R, "--force", "--steps", 3],
                   ["--force"], guard_dir=R)


def cmd_lock():
    d = fresh_dir("lock")
    R = os.path.join(d, "run")
    first = subprocess.Popen([cl.BIN] + [str(a) for a in TINY + ["--steps", 100000, "--batch", 2, "--eval-interval", 0,
                                                             "--log-interval", 1, "--ckpt-interval", 0, "--out", R]],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.time()
        while time.time() - t0 < 60 and not (os.path.exists(os.path.join(R, "train.csv")) and
                                             os.path.getsize(os.path.join(R, "train.csv")) > 40):
            time.sleep(0.1)
        p = run(TINY + ["--steps", 2, "--batch", 2, "--eval-interval", 0, "--out", R, "--force"])
        err = p.stderr
        check("lock: a second training on the same --out refuses", p.returncode not in (0,) and 0 < p.returncode < 126,
              f"rc {p.returncode} {err.strip()[-300:]}")
        check("lock: the message names the holder's pid", f"pid {first.pid}" in err and "in use" in err, err.strip()[-300:])
        p = run(["train", "--resume", R, "--steps", 5, "--quiet", "--no-plot"])
        check("lock: --resume of a running run refuses too", p.returncode != 0 and f"pid {first.pid}" in p.stderr,
              p.stderr.strip()[-300:])
        with open(os.path.join(R, "train.csv")) as f:
            rows = f.read().split("\n")
        check("lock: train.csv holds one run's rows", rows[0] == "step,loss,lr,grad_norm,ms,tok_s" and
              all(r == "" or r.count(",") == 5 for r in rows), rows[:3])
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # the lock dies with its holder: a kill -9'd run's directory resumes
    p = run(["train", "--resume", R, "--steps", 3, "--quiet", "--no-plot"])
    check("lock: released when the holder dies (no stale lock)", "in use" not in p.stderr, p.stderr.strip()[-300:])


def wait_rows(path, n, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            with open(path) as f:
                if len([ln for ln in f.read().split("\n")[1:] if ln.count(",") == 5]) >= n:
                    return True
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    return False


def cmd_signals():
    d = fresh_dir("signals")
    opts = TINY + ["--steps", 100000, "--batch", 2, "--eval-interval", 0, "--log-interval", 1, "--ckpt-interval", 0]
    for sig, rc in [(signal.SIGINT, 130), (signal.SIGTERM, 143)]:
        R = os.path.join(d, f"run_{sig.name}")
        p = subprocess.Popen([cl.BIN] + [str(a) for a in opts + ["--out", R]], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        ok = wait_rows(os.path.join(R, "train.csv"), 3)
        p.send_signal(sig)
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        check(f"signals: {sig.name} exits {rc}", ok and p.returncode == rc, f"rc {p.returncode}: {err.strip()[-300:]}")
        mp = os.path.join(R, "model.safetensors")
        step = read_meta(mp).get("step") if os.path.exists(mp) else None
        check(f"signals: {sig.name} wrote a checkpoint and says how to resume", step is not None and step != "0" and
              "--resume" in err, f"step {step}: {err.strip()[-300:]}")
        if step is None:
            continue
        with open(os.path.join(R, "train.csv")) as f:
            logged = len(f.read().strip().split("\n")) - 1
        check(f"signals: {sig.name}: the checkpoint is the last logged step (nothing lost)", int(step) == logged,
              f"step {step}, {logged} rows")
        if sig == signal.SIGINT:
            # the interrupted run equals an uninterrupted one stopped at the same step, and resumes exactly
            S = os.path.join(d, "ref")
            must_run("signals: reference run stopped at the same step", opts + ["--out", S, "--stop-after", step])
            must_run("signals: reference continued 3 steps", ["train", "--resume", S, "--stop-after", int(step) + 3,
                                                               "--quiet", "--no-plot"])
            must_run("signals: the interrupted run resumed 3 steps", ["train", "--resume", R, "--stop-after",
                                                                      int(step) + 3, "--quiet", "--no-plot"])
            for f in ("model.safetensors", "model.optim.safetensors"):
                a, _ = st_io.read_safetensors(os.path.join(R, f))
                b, _ = st_io.read_safetensors(os.path.join(S, f))
                same = sorted(a) == sorted(b) and all(np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)) for k in a)
                check(f"signals: after resuming, {f} is bit-equal to the uninterrupted run", same)
    # a second Ctrl-C ends the process at once
    R = os.path.join(d, "twice")
    p = subprocess.Popen([cl.BIN] + [str(a) for a in opts + ["--out", R]], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    wait_rows(os.path.join(R, "train.csv"), 2)
    p.send_signal(signal.SIGINT)
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    check("signals: a second SIGINT exits at once (killed by SIGINT)", p.returncode in (-signal.SIGINT, 130),
          f"rc {p.returncode}")


def cmd_strict():
    d = fresh_dir("strict")
    R = os.path.join(d, "run")
    must_run("strict: a 2-step run", TINY + ["--steps", 4, "--batch", 2, "--eval-interval", 0, "--stop-after", 2,
                                             "--out", R])
    op = os.path.join(R, "model.optim.safetensors")
    mp = os.path.join(R, "model.safetensors")
    good_rng = read_meta(op)["data_rng"]
    # decimal options: a number to the last character (cxxopts alone reads "2x" as 2)
    for args, flag, value in ((TINY + ["--lr", "2x", "--out", os.path.join(d, "x1")], "--lr", "2x"),
                              (TINY + ["--val-fraction", "0.1.2", "--out", os.path.join(d, "x2")], "--val-fraction", "0.1.2"),
                              (["sample", "--checkpoint", R, "--temperature", "1.5e", "--max-tokens", 2], "--temperature", "1.5e")):
        expect_failure(f"strict: {flag} {value} refused", args, [f"{flag}: '{value}' is not a valid value"])
    cases = [
        ("all-zero data_rng", op, {"data_rng": "0 0 0 0 0 0x0p+0"}, ["data_rng", "all zero"]),
        ("junk after data_rng", op, {"data_rng": good_rng + " junk"}, ["data_rng", "malformed"]),
        ("data_rng missing a word", op, {"data_rng": " ".join(good_rng.split()[:3])}, ["data_rng", "malformed"]),
        ("negative data_rng word", op, {"data_rng": "-" + good_rng}, ["data_rng", "malformed"]),
        ("cached flag 7", op, {"dropout_rng": "1 2 3 4 7 0x0p+0"}, ["dropout_rng", "malformed"]),
        ("optimizer_steps 2x", op, {"optimizer_steps": "2x"}, ["optimizer_steps", "2x"]),
        ("optimizer_steps -2", op, {"optimizer_steps": "-2"}, ["optimizer_steps"]),
        ("optimizer_steps +2", op, {"optimizer_steps": "+2"}, ["optimizer_steps"]),
        ("step 2abc", mp, {"step": "2abc"}, ["step", "2abc"]),
        ("step -5", mp, {"step": "-5"}, ["step", "-5"]),
        ("step 99999999999999999999", mp, {"step": "99999999999999999999"}, ["step"]),
    ]
    for i, (label, path, kv, subs) in enumerate(cases):
        R2 = os.path.join(d, f"case{i}")
        shutil.copytree(R, R2)
        set_meta(os.path.join(R2, os.path.basename(path)), **kv)
        expect_failure(f"strict: {label} refused", ["train", "--resume", R2, "--quiet", "--no-plot"], subs, guard_dir=R2)
    # an extra tensor in the optimizer file
    R2 = os.path.join(d, "extra_tensor")
    shutil.copytree(R, R2)
    tensors, meta = st_io.read_safetensors(os.path.join(R2, "model.optim.safetensors"))
    tensors["exp_avg.bogus"] = np.zeros(3, np.float32)
    st_io.write_safetensors(os.path.join(R2, "model.optim.safetensors"), tensors, meta)
    expect_failure("strict: an extra optimizer tensor refused", ["train", "--resume", R2, "--quiet", "--no-plot"],
                   ["exp_avg.bogus", "unexpected"], guard_dir=R2)
    must_run("strict: the untouched run still resumes", ["train", "--resume", R, "--quiet", "--no-plot"])


def cmd_plugin():
    d = fresh_dir("plugin")
    lib = PLUGIN_LIB
    expect_failure("plugin: a factory returning nullptr is refused in one line",
                   ["--plugin", lib, "init", "--preset", "tiny", "--posenc", "nullfactory", "--out",
                    os.path.join(d, "x.safetensors")], ["--plugin", "nullfactory", "nullptr"])
    expect_failure("plugin: ... also when no model names it", ["--plugin", lib, "init", "--preset", "tiny", "--out",
                                                             os.path.join(d, "y.safetensors")], ["nullptr"])
    lib2 = os.path.join(d, "copy.so")
    shutil.copy(lib, lib2)
    p = run(["--plugin", lib, "--plugin", lib, "init", "--preset", "tiny", "--out", os.path.join(d, "z.safetensors")])
    check("plugin: the same plugin twice does not claim it registered nothing",
          "registered no positional encoding" not in p.stderr and "nullptr" in p.stderr, p.stderr.strip()[-300:])


def cmd_escapes():
    d = fresh_dir("escapes")
    R = os.path.join(d, "run")
    must_run("escapes: a 2-step run", TINY + ["--steps", 2, "--batch", 2, "--eval-interval", 0, "--out", R])
    with open(os.path.join(R, "metrics.jsonl"), "ab") as f:
        f.write(b'{"step": 3, "loss": \x1b]0;PWNED\x07\x1b[31mred\x1b[0m}\nmore\n')
    p = subprocess.run([cl.BIN, "report", R, "--out", os.path.join(d, "r.html")], capture_output=True)
    err = p.stderr
    check("escapes: report refuses the damaged line", p.returncode == 1, err[-300:])
    check("escapes: no ESC / BEL byte reaches the terminal", b"\x1b" not in err + p.stdout and b"\x07" not in err,
          repr(err[-300:]))
    check("escapes: the bytes are shown escaped", b"\\x1b" in err, repr(err[-300:]))
    with open(os.path.join(R, "train.csv"), "ab") as f:
        f.write(b"4,\x1b[2J,1,1,1,1\n")
    os.remove(os.path.join(R, "metrics.jsonl"))
    p = subprocess.run([cl.BIN, "report", R, "--out", os.path.join(d, "r.html")], capture_output=True)
    check("escapes: a CSV cell with ESC is escaped too", p.returncode == 1 and b"\x1b" not in p.stderr,
          repr(p.stderr[-300:]))
    p = subprocess.run([cl.BIN, "no\x1b[2Jverb"], capture_output=True)
    check("escapes: an unknown verb is echoed escaped", b"\x1b" not in p.stderr, repr(p.stderr[-300:]))


def cmd_early():
    d = fresh_dir("early")
    # a read-only --out: refused before training (an unwritable directory stands in for a read-only
    # file system when running as root cannot be prevented from writing: then a file in the way)
    blocker = os.path.join(d, "file")
    with open(blocker, "w") as f:
        f.write("x")
    expect_failure("early: --out under a regular file refused", TINY + ["--steps", 50, "--out", os.path.join(blocker, "run")],
                   ["run directory"])
    ro = os.path.join(d, "ro")
    os.makedirs(ro)
    os.chmod(ro, 0o555)
    if os.access(ro, os.W_OK):
        print("note early: running as root, a read-only directory is writable; /proc (read-only) stands in")
        expect_failure("early: --out on a read-only file system (/proc) refused before training",
                       TINY + ["--steps", 50, "--out", "/proc"], ["cannot write in the run directory", "'/proc'"])
    else:
        expect_failure("early: --out in a read-only directory refused before training",
                       TINY + ["--steps", 50, "--out", os.path.join(ro, "run")], ["run directory"])
    ck = os.path.join(d, "ck.safetensors")
    must_run("early: init", ["init", "--preset", "tiny", "--out", ck])
    p = expect_failure("early: eval --json into a missing directory refused before the evaluation",
                       ["eval", "--checkpoint", ck, "--lengths", 64, "--json", os.path.join(d, "missing", "e.json")],
                       ["--json", "does not exist"])
    check("early: ... and no evaluation ran", "windows" not in p.stdout, p.stdout[-200:])
    expect_failure("early: eval --csv into a missing directory", ["eval", "--checkpoint", ck, "--lengths", 64, "--csv",
                                                               os.path.join(d, "missing", "e.csv")], ["--csv"])
    expect_failure("early: init --out into a missing directory",
                   ["init", "--preset", "tiny", "--out", os.path.join(d, "missing", "x.safetensors")], ["--out"])
    expect_failure("early: report --out into a missing directory",
                   ["report", d, "--out", os.path.join(d, "missing", "r.html")], ["--out"])
    # a corrupted SentencePiece model says why
    bad = os.path.join(d, "bad.model")
    with open(bad, "wb") as f:
        f.write(bytes(range(256)) * 4)
    expect_failure("early: a corrupted SentencePiece model names the reason",
                   TINY + ["--steps", 1, "--tokenizer", bad, "--out", os.path.join(d, "sp")],
                   ["not a SentencePiece model (the bytes do not parse"])


def cmd_limits():
    d = fresh_dir("limits")
    ck = os.path.join(d, "ck.safetensors")
    must_run("limits: init a tiny checkpoint", ["init", "--preset", "tiny", "--out", ck])
    big = os.path.join(d, "big.safetensors")
    shutil.copy(ck, big)
    h, data = split_st(big)
    cfg = json.loads(h["__metadata__"]["config"])
    cfg["n_layers"] = 1000000
    h["__metadata__"]["config"] = json.dumps(cfg)
    join_st(big, h, data)
    cases = [
        ("init --set n_layers=1e6", ["init", "--preset", "tiny", "--set", "n_layers=1000000", "--out", os.path.join(d, "a")],
         ["--set n_layers=1000000", "GiB", "machine's memory"]),
        ("train --set d_model=5e8", TINY + ["--set", "d_model=500000000", "--out", os.path.join(d, "r0")],
         ["--set d_model=500000000", "machine's memory"]),
        ("a checkpoint whose config has 1e6 layers", ["eval", "--checkpoint", big, "--lengths", 64],
         ["__metadata__.config", "1000000 layers", "machine's memory"]),
        ("train --batch 1e12", TINY + ["--batch", 1000000000000, "--steps", 2, "--out", os.path.join(d, "r1")],
         ["--batch 1000000000000", "machine's memory"]),
        ("train --log-interval 1e10", TINY + ["--log-interval", 10000000000, "--steps", 20000000000,
                                             "--out", os.path.join(d, "r2")], ["--log-interval", "machine's memory"]),
        ("sample --max-tokens 4e18", ["sample", "--checkpoint", ck, "--max-tokens", 4000000000000000000],
         ["--max-tokens", "machine's memory"]),
    ]
    for label, args, subs in cases:
        t0 = time.time()
        expect_failure(f"limits: {label} refused up front", args, subs)
        check(f"limits: {label}: within seconds", time.time() - t0 < 20, f"{time.time() - t0:.1f} s")
    must_run("limits: a --log-interval far above --steps is fine (histories sized by the run)",
             TINY + ["--log-interval", 10000000000, "--steps", 3, "--batch", 2, "--eval-interval", 0,
                     "--out", os.path.join(d, "r3")])


COMMANDS = {"limits": cmd_limits, "injection": cmd_injection, "nonfinite": cmd_nonfinite, "overwrite": cmd_overwrite, "lock": cmd_lock,
            "signals": cmd_signals, "strict": cmd_strict, "plugin": cmd_plugin, "escapes": cmd_escapes,
            "early": cmd_early}


def main():
    global PLUGIN_LIB
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=sorted(COMMANDS))
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--plugin-lib", default="", help="the nullptr-factory plugin (tests/tools/null_posenc_plugin.cpp)")
    a = ap.parse_args()
    cl.configure(a.bin, a.work)
    PLUGIN_LIB = os.path.abspath(a.plugin_lib) if a.plugin_lib else ""
    return cl.run_subcommand(a.command, COMMANDS[a.command])


if __name__ == "__main__":
    sys.exit(main())
