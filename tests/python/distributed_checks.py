#!/usr/bin/env python3
"""End-to-end checks of data-parallel training over MPI (docs/distributed.md), run by ctest
(tests/cli/distributed.cmake). Each sub-command is one ctest test:

  same_run [--btl LIST]  (shm also: threads per rank fit the cores, CTXLAB_THREADS kept)
                         `mpirun -np 2 ctxlab train --batch 32` gives the parameters of the single
                         process with --batch 32 after 20 steps (max |a-b| / max |b| <= 1e-5 for every
                         tensor, SGD and AdamW; bit for bit in practice), and so do 1 vs 2 threads and
                         `--batch 16 --accum 2`; a different global batch (16) does not (the comparison
                         can fail). --deterministic's leaves are sequences (train/dist/grad_tree.h).
  small_batch            --deterministic --batch 8 (12 steps): 1, 2 and 4 ranks give the same bits
                         (model and optimizer state) and the same logged losses.
                         --btl self,tcp forces the TCP transport of a multi-node run.
  resume_across_n        a run stopped at step 10 with N = 2 resumes with N = 1 (and the other way
                         round) and ends where the uninterrupted single process ends.
  kill9                  kill -9 of one rank mid-run: mpirun and the other rank exit non-zero within
                         seconds, and the last checkpoint still loads and resumes.
  stopped_rank           SIGSTOP of the last rank mid-run (alive but silent, as a network partition),
                         with 2 and 3 ranks: the others give up after --dist-timeout (3 s here),
                         naming the collective, the timeout, the rank count and the stopped rank
                         alone (it does not answer the ping that follows a timeout; with 3 ranks,
                         rank 1 does); mpirun exits 124 within the timeout + 10 s.
  stopped_start_end      rank 1 stopped (SIGSTOP, the test hook CTXLAB_TEST_KILL_AT=NAME@1:STOP,
                         train/io/kill_point.h) where no collective of the run waits: before MPI_Init,
                         before the end-of-run barrier, between it and MPI_Finalize. Rank 0 names the
                         operation, rank 1 and the timeout (3 s), mpirun exits 124 within the timeout
                         + 10 s, no rank is left behind, and a finished run's checkpoint is complete.
  signal_one_rank        SIGINT to rank 1 alone: the ranks agree on it, rank 0 checkpoints that step,
                         the job exits 130, and the checkpoint resumes with N = 2.
  bad_split              --batch 7 on 2 ranks: one clear error, exit non-zero.
  slicing                each rank trains on its own rows of the global batch: at step 1 (same
                         parameters everywhere) rank 0's loss (metrics.jsonl "rank_loss") equals the
                         loss of one process with --batch 4 (the first 4 rows of the same draw),
                         rank 1's differs, and the reported loss is their mean. Ranks that each
                         trained on the whole batch would pass same_run but fail this.

Uses NumPy and tests/python/st_io.py only. Runs as root in CI through OMPI_ALLOW_RUN_AS_ROOT.
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
import st_io  # noqa: E402

BIN = WORK = MPIRUN = None
FAILED = 0
TINY = ["train", "--preset", "tiny", "--quiet", "--no-plot", "--eval-interval", "10", "--eval-batches", "4"]


def check(name, ok, detail=""):
    global FAILED
    print(("PASS " if ok else "FAIL ") + name + ("" if ok or not detail else ": " + detail))
    sys.stdout.flush()
    FAILED += 0 if ok else 1
    return ok


def mpi(n, args, btl=None, timeout=120):
    cmd = [MPIRUN, "-np", str(n), "--oversubscribe"]
    if btl:
        cmd += ["--mca", "btl", btl]
    cmd += [BIN] + [str(a) for a in args]
    return cmd


def run(cmd, timeout=120):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace")
    if p.returncode != 0:
        print(f"  command: {' '.join(cmd)}\n  rc {p.returncode}\n  stdout: {p.stdout[-1500:]}\n"
              f"  stderr: {p.stderr[-1500:]}")
    return p


def single(args, timeout=120):
    return [BIN] + [str(a) for a in args]


def params(d):
    t, _ = st_io.read_safetensors(os.path.join(d, "model.safetensors"))
    return t


def max_rel(a, b):
    """max over tensors of max|a-b| / max|b|."""
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    worst, name = 0.0, ""
    for k in a:
        r = float(np.max(np.abs(a[k].astype(np.float64) - b[k])) / max(float(np.max(np.abs(b[k]))), 1e-30))
        if r > worst:
            worst, name = r, k
    return worst, name


def fresh(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def same_run(btl):
    """Every tensor within 1e-5 of the single process, with SGD and with AdamW. AdamW divides by
    sqrt(v): where a gradient is pure rounding noise (the key part of the qkv bias: softmax ignores
    a constant added to every key score) any change in the order of a sum would move the weight by
    a fraction of lr. The bias-gradient sums are canonical (core/cpu/ref_kernels.h colsum_tree:
    a tree over rows that two ranks' allreduce reproduces bit for bit), so the noise is the same
    noise, and the same run follows whatever N, whatever the thread count, and with --accum 2."""
    tag = "tcp" if btl else "shm"
    sgd = ["--optimizer", "sgd", "--lr", "0.05"]
    d = {k: fresh(f"{k}_{tag}") for k in ("sgd1", "sgd2", "adam1", "adam1t1", "adam1t3", "adam2", "adam1b4", "adam1acc",
                                          "fast1", "fast2")}
    base = TINY + ["--steps", 20, "--batch", 32, "--deterministic"]  # 32 leaves: 16 per rank, two subtrees
    fast = TINY + ["--steps", 20, "--batch", 32]  # the default: no shards, no tree
    env1 = dict(os.environ, CTXLAB_THREADS="1")
    ok = run(single(base + sgd + ["--out", d["sgd1"]])).returncode == 0
    ok &= run(single(base + ["--out", d["adam1"]])).returncode == 0
    ok &= subprocess.run(single(base + ["--out", d["adam1t1"]]), env=env1, capture_output=True).returncode == 0
    env3 = dict(os.environ, CTXLAB_THREADS="3")  # an odd count: the GEMMs' blocks follow the shape only
    ok &= subprocess.run(single(base + ["--out", d["adam1t3"]]), env=env3, capture_output=True).returncode == 0
    ok &= run(single(TINY + ["--steps", 20, "--batch", 16, "--deterministic", "--out", d["adam1b4"]])).returncode == 0
    ok &= run(single(TINY + ["--steps", 20, "--batch", 16, "--accum", 2, "--deterministic", "--out", d["adam1acc"]])).returncode == 0
    ok &= run(single(fast + ["--out", d["fast1"]])).returncode == 0
    ok &= check(f"np2 ({tag}) runs (sgd)", run(mpi(2, base + sgd + ["--out", d["sgd2"]], btl)).returncode == 0)
    ok &= check(f"np2 ({tag}) runs (adamw)", run(mpi(2, base + ["--out", d["adam2"]], btl)).returncode == 0)
    ok &= check(f"np2 ({tag}) runs (adamw, default mode)", run(mpi(2, fast + ["--out", d["fast2"]], btl)).returncode == 0)
    if not ok:
        return
    r, name = max_rel(params(d["sgd2"]), params(d["sgd1"]))
    check(f"sgd: np2 ({tag}) == np1 after 20 steps, batch 32 (worst rel {r:.2e} in {name})", r <= 1e-5)
    r, name = max_rel(params(d["adam2"]), params(d["adam1"]))
    check(f"adamw --deterministic: np2 ({tag}) == np1 after 20 steps, batch 32 (worst rel {r:.2e} in {name})", r <= 1e-5)
    r, name = max_rel(params(d["adam1t1"]), params(d["adam1"]))
    check(f"adamw --deterministic: one process, 1 thread == 2 threads (worst rel {r:.2e} in {name})", r <= 1e-5)
    r, name = max_rel(params(d["adam1t3"]), params(d["adam1"]))
    check(f"adamw --deterministic: one process, 3 threads == 2 threads (worst rel {r:.2e} in {name})", r <= 1e-5)
    r, name = max_rel(params(d["adam1acc"]), params(d["adam2"]))
    check(f"adamw --deterministic: --batch 16 --accum 2 == np2 ({tag}) --batch 32 (worst rel {r:.2e} in {name})",
          r <= 1e-5)
    r, name = max_rel(params(d["fast2"]), params(d["fast1"]))
    print(f"INFO adamw, default mode: np2 ({tag}) vs np1 worst rel {r:.2e} in {name} (summation order moves the "
          f"noise-only key bias; docs/distributed.md)")
    check(f"adamw, default mode: np2 ({tag}) within 1e-3 of np1 (worst rel {r:.2e})", r <= 1e-3)
    r4, _ = max_rel(params(d["adam1b4"]), params(d["adam1"]))
    check(f"control: batch 16 differs from batch 32 (rel {r4:.2e})", r4 > 1e-3)
    with open(os.path.join(d["adam2"], "train.csv")) as f:
        rows = f.read().strip().split("\n")
    check(f"np2 ({tag}) train.csv has one header + 20 rows (rank 0 alone writes)", len(rows) == 21, str(len(rows)))


def threads_per_rank():
    """Without CTXLAB_THREADS / OMP_NUM_THREADS, 2 ranks x T threads fit the cores (T >= 1); with
    CTXLAB_THREADS set, the user's count is kept."""
    import re
    env = {k: v for k, v in os.environ.items() if k not in ("CTXLAB_THREADS", "OMP_NUM_THREADS")}
    cores = len(os.sched_getaffinity(0))
    args = ["train", "--preset", "tiny", "--no-plot", "--steps", 1, "--batch", 2, "--out", fresh("threads")]
    p = subprocess.run(mpi(2, args), capture_output=True, text=True, env=env, timeout=60)
    m = re.search(r"MPI: 2 ranks \(.*\), (\d+) threads? per rank", p.stdout)
    t = int(m.group(1)) if m else 0
    check(f"2 ranks x {t} threads fit {cores} cores", p.returncode == 0 and 1 <= t and 2 * t <= max(cores, 2),
          p.stdout[-300:] + p.stderr[-300:])
    env["CTXLAB_THREADS"] = "3"
    p = subprocess.run(mpi(2, args[:-1] + [fresh("threads3")]), capture_output=True, text=True, env=env, timeout=60)
    check("CTXLAB_THREADS=3 is kept under mpirun", p.returncode == 0 and "3 threads per rank" in p.stdout,
          p.stdout[-300:])


def metrics_losses(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [json.loads(ln)["loss"] for ln in f if '"loss"' in ln]


def small_batch():
    """--deterministic with a small batch (8 sequences, 1024 rows: one piece for the old canonical
    shards on one process, two on two ranks) gives the same bits on 1, 2 and 4 ranks: the leaves
    of the gradient tree are sequences, whatever N (train/dist/grad_tree.h)."""
    args = TINY + ["--steps", 12, "--batch", 8, "--deterministic", "--eval-interval", 0, "--log-interval", 1]
    d = {n: fresh(f"small_np{n}") for n in (1, 2, 4)}
    if not check("small batch: one process runs", run(single(args + ["--out", d[1]])).returncode == 0):
        return
    for n in (2, 4):
        if not check(f"small batch: np{n} runs", run(mpi(n, args + ["--out", d[n]])).returncode == 0):
            continue
        for f in ("model.safetensors", "model.optim.safetensors"):
            a, _ = st_io.read_safetensors(os.path.join(d[n], f))
            b, _ = st_io.read_safetensors(os.path.join(d[1], f))
            diff = [k for k in b if k not in a or a[k].tobytes() != b[k].tobytes()]
            r, name = max_rel(a, b) if sorted(a) == sorted(b) else (float("inf"), "names")
            check(f"small batch: np{n} == np1 bit for bit in {f} after 12 steps ({len(diff)} tensors differ, worst rel "
                  f"{r:.2e} in {name})", not diff and sorted(a) == sorted(b))
        la, lb = metrics_losses(d[n]), metrics_losses(d[1])
        worst = max(abs(x - y) / abs(y) for x, y in zip(la, lb)) if la and len(la) == len(lb) else float("inf")
        check(f"small batch: np{n}'s logged losses == np1's (12 steps, worst rel {worst:.1e}; the mean of the ranks' "
              f"means is rounded in another order)", worst <= 1e-6)


def resume_across_n():
    sgd = ["--optimizer", "sgd", "--lr", "0.05"]  # linear in the gradient: 1e-5 applies (see same_run)
    ref = fresh("resume_ref")
    if run(single(TINY + sgd + ["--steps", 20, "--batch", 8, "--out", ref])).returncode != 0:
        return check("reference run", False)
    for first, second in ((2, 1), (1, 2)):
        d = fresh(f"resume_{first}to{second}")
        start = TINY + sgd + ["--steps", 20, "--batch", 8, "--out", d, "--stop-after", 10]
        p = run(mpi(first, start) if first > 1 else single(start))
        if not check(f"N={first} stops at step 10", p.returncode == 0):
            continue
        cont = ["train", "--resume", d]
        p = run(mpi(second, cont) if second > 1 else single(cont))
        if not check(f"N={second} resumes the N={first} run", p.returncode == 0):
            continue
        r, name = max_rel(params(d), params(ref))
        check(f"resumed N={first}->{second} == uninterrupted np1 (worst rel {r:.2e} in {name})", r <= 1e-5)


def ranks_of(mpirun_pid):
    """{rank: pid} of the ctxlab processes that mpirun started (children in /proc)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            if b"OMPI_COMM_WORLD_RANK" in env:
                out[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
        except (OSError, ValueError, IndexError):
            pass
    return out


def gone_within(pid, seconds):
    """True once `pid` no longer runs (absent, or a zombie waiting for its reaper)."""
    t0 = time.time()
    while time.time() - t0 < seconds:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def kill9():
    for victim in (1, 0):
        d = fresh(f"kill9_rank{victim}")
        args = TINY + ["--steps", 5000, "--batch", 8, "--out", d, "--ckpt-interval", 5, "--eval-interval", 0]
        p = subprocess.Popen(mpi(2, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ckpt = os.path.join(d, "model.safetensors")
        t0 = time.time()
        while time.time() - t0 < 60 and p.poll() is None:  # wait for the second checkpoint
            if os.path.exists(ckpt) and st_io.read_header(ckpt)[1].get("step") not in (None, "5"):
                break
            time.sleep(0.05)
        ranks = ranks_of(p.pid)
        if not check(f"kill9: found both ranks ({ranks})", p.poll() is None and len(ranks) == 2):
            p.kill()
            p.communicate()
            continue
        time.sleep(0.3)  # mid-run: between checkpoints or while one is written
        os.kill(ranks[victim], signal.SIGKILL)
        t_kill = time.time()
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            check(f"kill9 rank {victim}: mpirun ends within 30 s", False, "hung")
            continue
        took = time.time() - t_kill
        check(f"kill9 rank {victim}: mpirun exits non-zero (rc {p.returncode}) in {took:.1f} s", p.returncode != 0 and took < 15)
        other = ranks[1 - victim]
        check(f"kill9 rank {victim}: the other rank (pid {other}) ends within 5 s", gone_within(other, 5))
        q = run(single(["train", "--resume", d, "--quiet", "--no-plot", "--steps",
                        int(st_io.read_header(ckpt)[1]["step"]) + 2]))
        check(f"kill9 rank {victim}: the last checkpoint loads and resumes", q.returncode == 0)


def start_and_find_ranks(d, extra, n=2):
    """mpirun -np n of a long tiny run into `d`; once step 3 is logged: (Popen, {rank: pid})."""
    args = TINY + ["--steps", 100000, "--batch", 12 if n == 3 else 8, "--out", d, "--eval-interval", 0,
                   "--ckpt-interval", 0, "--log-interval", 1] + extra
    p = subprocess.Popen(mpi(n, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    csv = os.path.join(d, "train.csv")
    t0 = time.time()
    while time.time() - t0 < 60 and p.poll() is None:
        if os.path.exists(csv) and len(open(csv).read().strip().split("\n")) > 3:
            break
        time.sleep(0.05)
    return p, ranks_of(p.pid)


def stopped_rank():
    """SIGSTOP of the last rank (alive but silent: mpirun never notices, as a partition): the others
    give up after --dist-timeout seconds in their collective, name it, the rank count, the timeout
    and the stopped rank, and the whole job ends with 124 within the timeout + slack."""
    for bad in ("0", "-1", "2x", "nan", ""):
        d = fresh("stopped_bad")
        q = run(single(TINY + ["--steps", 1, "--dist-timeout", bad, "--out", d]))
        check(f"stopped: --dist-timeout {bad!r} is refused in one line before any work",
              q.returncode != 0 and "--dist-timeout" in q.stderr and "expected a positive number of seconds" in q.stderr
              and not os.path.exists(d), q.stderr[-300:])
    for n in (2, 3):
        stop_one_rank(n)


def stop_one_rank(n, timeout=3):
    """SIGSTOP of the last of n ranks mid-run; with 3 ranks, rank 1 answers the ping that follows the
    timeout and rank 2 does not: the message names rank 2 alone."""
    victim = n - 1
    name = f"stopped (np {n}, rank {victim})"
    p, ranks = start_and_find_ranks(fresh(f"stopped_np{n}"), ["--dist-timeout", timeout], n)
    if not check(f"{name}: found the ranks ({ranks})", p.poll() is None and len(ranks) == n):
        p.kill()
        return p.communicate()
    os.kill(ranks[victim], signal.SIGSTOP)
    t_stop = time.time()
    try:
        out, err = p.communicate(timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        for pid in ranks.values():
            os.kill(pid, signal.SIGKILL)
        p.kill()
        p.communicate()
        return check(f"{name}: mpirun ends within {timeout + 30} s", False, "hung")
    took = time.time() - t_stop
    for pid in ranks.values():  # nothing left behind, stopped or not
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    msg = (f"did not complete within {timeout} s (--dist-timeout) on rank {{}} of {n}: waited for rank {victim} "
           "(no answer")
    named = [r for r in range(victim) if f"error (rank {r} of {n}): MPI: MPI_" in err and msg.format(r) in err]
    check(f"{name}: mpirun exits 124 (rc {p.returncode}) in {took:.1f} s (timeout {timeout} s + 10 s slack)",
          p.returncode == 124 and took < timeout + 10)
    check(f"{name}: a waiting rank ({named}) names the collective, the timeout, the rank count and rank {victim} "
          "alone", named and "waited for ranks" not in err, err[-800:])
    check(f"{name}: the waiting ranks gave up no earlier than the timeout", took >= timeout - 0.5, f"{took:.1f} s")


# Where rank 1 stops (kill points of train/dist/distributed.cpp) and what rank 0 then reports.
STOP_POINTS = [("dist:init", "MPI_Init_thread (start-up)"),
               ("dist:finalize", "MPI_Barrier (end of the run, before MPI_Finalize)"),
               ("dist:mpi_finalize", "MPI_Finalize")]


def stopped_start_end():
    """Rank 1 stops (SIGSTOP from the test hook) outside the collectives of the steps: rank 0 does
    not wait for it longer than --dist-timeout in MPI_Init, the last barrier or MPI_Finalize."""
    timeout, steps = 3, 3
    for point, op in STOP_POINTS:
        d = fresh("stopped_" + point.replace(":", "_"))
        # rank 1 alone gets the hook (mpirun passes one environment to every rank)
        only_rank1 = ('[ "$OMPI_COMM_WORLD_RANK" = 1 ] && export CTXLAB_TEST_KILL_AT="$STOP_AT"; exec "$0" "$@"')
        cmd = mpi(2, TINY + ["--steps", steps, "--batch", 8, "--out", d, "--eval-interval", 0,
                             "--dist-timeout", timeout])
        at = cmd.index(BIN)
        cmd = cmd[:at] + ["-x", "STOP_AT", "/bin/sh", "-c", only_rank1] + cmd[at:]
        env = dict(os.environ, STOP_AT=point + "@1:STOP")
        t0 = time.time()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        ranks = {}
        while p.poll() is None and time.time() - t0 < timeout + 30:  # the ranks' pids, for the cleanup
            ranks.update(ranks_of(p.pid))
            time.sleep(0.05)
        hung = p.poll() is None
        if hung:
            p.kill()
        out, err = p.communicate()
        took = time.time() - t0
        left = [pid for pid in ranks.values() if not gone_within(pid, 5)]
        for pid in left:  # a stopped rank ignores everything but SIGKILL
            os.kill(pid, signal.SIGKILL)
        name = f"stopped at {point}"
        if not check(f"{name}: mpirun ends within {timeout + 30} s", not hung, err[-800:]):
            continue
        check(f"{name}: mpirun exits 124 (rc {p.returncode}) in {took:.1f} s (timeout {timeout} s + 10 s slack)",
              p.returncode == 124 and took < timeout + 10, err[-800:])
        msg = f"MPI: {op} did not complete within {timeout} s (--dist-timeout) on rank 0 of 2: waited for rank 1"
        check(f"{name}: rank 0 names the operation, rank 1 and the timeout in one line",
              f"error (rank 0 of 2): {msg}" in err, err[-800:])
        check(f"{name}: no rank is left behind ({left})", not left)
        if point != "dist:init":
            ckpt = os.path.join(d, "model.safetensors")
            step = st_io.read_header(ckpt)[1].get("step") if os.path.exists(ckpt) else None
            check(f"{name}: the finished run's checkpoint is complete (step {step})", step == str(steps))


def signal_one_rank():
    """SIGINT to rank 1 alone: the ranks agree on it at the end of the step, rank 0 writes the
    checkpoint of that step, both exit 130, and the checkpoint resumes with N = 2."""
    d = fresh("signal_one_rank")
    p, ranks = start_and_find_ranks(d, [])
    if not check(f"signal: found both ranks ({ranks})", p.poll() is None and len(ranks) == 2):
        p.kill()
        return p.communicate()
    os.kill(ranks[1], signal.SIGINT)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return check("signal: the job ends within 60 s of SIGINT to rank 1", False, "hung")
    check(f"signal: the job exits 130 (rc {p.returncode}), rank 0 says how to resume",
          p.returncode == 130 and "stopped by SIGINT" in err and "--resume" in err, err[-800:])
    check("signal: both ranks ended", all(gone_within(pid, 5) for pid in ranks.values()))
    ckpt = os.path.join(d, "model.safetensors")
    step = int(st_io.read_header(ckpt)[1]["step"]) if os.path.exists(ckpt) else 0
    with open(os.path.join(d, "train.csv")) as f:
        logged = len(f.read().strip().split("\n")) - 1
    check(f"signal: the checkpoint is the last logged step ({step} == {logged})", step > 0 and step == logged)
    q = run(mpi(2, ["train", "--resume", d, "--quiet", "--no-plot", "--steps", step + 2]))
    check("signal: the checkpoint resumes with N = 2", q.returncode == 0)


def bad_split():
    d = fresh("bad_split")
    p = run(mpi(2, TINY + ["--steps", 2, "--batch", 7, "--out", d]))
    msg = "does not split evenly across 2 MPI ranks"
    check(f"--batch 7 on 2 ranks fails (rc {p.returncode}) naming the split", p.returncode != 0 and msg in p.stderr,
          p.stderr[-500:])
    check("--batch 7 on 2 ranks writes no checkpoint", not os.path.exists(os.path.join(d, "model.safetensors")))


def first_row(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if row.get("step") == 1 and "loss" in row:
                return row
    return {}


def slicing():
    d2, d1 = fresh("slice_np2"), fresh("slice_b4")
    args = TINY + ["--steps", 2, "--log-interval", 1]
    ok = check("np2 --batch 8 runs", run(mpi(2, args + ["--batch", 8, "--out", d2])).returncode == 0)
    env1 = dict(os.environ, CTXLAB_THREADS="1")
    p = subprocess.run(single(args + ["--batch", 4, "--out", d1]), env=env1, capture_output=True, text=True)
    ok &= check("one process --batch 4 runs", p.returncode == 0, p.stderr[-500:])
    if not ok:
        return
    r2, r1 = first_row(d2), first_row(d1)
    rl = r2.get("rank_loss")
    if not check("np2 metrics.jsonl step 1 has rank_loss for 2 ranks", isinstance(rl, list) and len(rl) == 2, str(r2)):
        return
    l0, l1, mean, single_b4 = rl[0], rl[1], r2["loss"], r1["loss"]
    check(f"the reported loss {mean:.8f} is the mean of the ranks' {l0:.8f}, {l1:.8f}",
          abs(mean - (l0 + l1) / 2) <= 1e-12 * abs(mean))
    check(f"rank 0 (rows 0-3) {l0:.8f} == one process on the first 4 rows {single_b4:.8f}",
          abs(l0 - single_b4) <= 1e-5 * abs(single_b4))
    check(f"rank 1 trains on other rows: {l1:.8f} != {l0:.8f}", abs(l1 - l0) > 1e-4 * abs(l0))


def main():
    global BIN, WORK, MPIRUN
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["same_run", "small_batch", "resume_across_n", "kill9", "stopped_rank",
                                     "stopped_start_end", "signal_one_rank",
                                     "bad_split", "slicing"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--btl", default=None)
    a = ap.parse_args()
    BIN, WORK, MPIRUN = os.path.abspath(a.bin), a.work, a.mpirun
    os.makedirs(WORK, exist_ok=True)
    if a.what == "same_run":
        same_run(a.btl)
        if not a.btl:
            threads_per_rank()
    else:
        globals()[a.what]()
    print("FAILED" if FAILED else "OK")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
