"""What the CLI check scripts share (tests/python/*_checks.py): one PASS/FAIL line per check and
the counts, running the ctxlab binary, scratch directories, file hashes, the clean-failure
assertion and raw safetensors surgery.

A script calls `configure(bin, work)` once, then `check`, `run`, ...; `finish(label, t0)` prints
"label: N passed, N failed (s)" and gives the exit status (1 on a failure or when nothing passed).
"""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import time

BIN = None   # the ctxlab binary, absolute
WORK = None  # the scratch directory, absolute
PASSED = 0
FAILED = 0
CRASH_MARKERS = ("Traceback", "terminate called", "what():", "Segmentation", "Aborted", "core dumped",
                 "AddressSanitizer", "runtime error:", "libc++abi", "std::")


def configure(bin_path, work):
    global BIN, WORK
    BIN = os.path.abspath(bin_path)
    WORK = os.path.abspath(work)
    os.makedirs(WORK, exist_ok=True)


def check(name, ok, detail=""):
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print(f"PASS {name}")
    else:
        FAILED += 1
        print(f"FAIL {name}" + (f": {detail}" if detail else ""))
    sys.stdout.flush()
    return ok


def finish(label, t0):
    print(f"{label}: {PASSED} passed, {FAILED} failed ({time.time() - t0:.1f} s)")
    return 1 if FAILED or not PASSED else 0


def run_subcommand(label, body):
    """Runs body(); an exception counts as a failed check (the summary is still printed)."""
    t0 = time.time()
    try:
        body()
    except Exception as e:  # noqa: BLE001 — count it, still print the summary
        import traceback
        traceback.print_exc()
        check(f"{label}: ran to the end", False, repr(e))
    return finish(label, t0)


def run(args, timeout=120, env=None, cwd=None, check_rc=None):
    """Runs ctxlab with `args` (and `env` added to the environment); returns the CompletedProcess.
    With check_rc, a different exit status prints the command and its output."""
    cmd = [BIN] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace",
                       env=dict(os.environ, **env) if env else None, cwd=cwd)
    if check_rc is not None and p.returncode != check_rc:
        print(f"  command: {' '.join(cmd)}\n  rc {p.returncode}\n  stdout: {p.stdout[-2000:]}\n"
              f"  stderr: {p.stderr[-2000:]}")
    return p


def must_run(name, args, timeout=120, env=None):
    p = run(args, timeout=timeout, env=env, check_rc=0)
    check(name, p.returncode == 0, f"rc {p.returncode}: {p.stderr.strip()[-500:]}")
    return p


def fresh_dir(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def dir_hashes(d):
    return {n: sha(os.path.join(d, n)) for n in sorted(os.listdir(d))
            if os.path.isfile(os.path.join(d, n))}


def expect_failure(name, args, substrings, guard_dir=None, guard_files=(), timeout=60, env=None, cwd=None):
    """Runs ctxlab `args`; asserts a clean one-line failure that contains every substring, and
    that every file in `guard_dir` (and each of `guard_files`) is byte-identical afterwards."""
    before = dir_hashes(guard_dir) if guard_dir else {}
    before_f = {f: sha(f) for f in guard_files}
    p = run(args, timeout=timeout, env=env, cwd=cwd)
    err = p.stderr
    lines = [ln for ln in err.split("\n") if ln.strip()]
    problems = []
    if p.returncode == 0:
        problems.append("exit status 0")
    elif p.returncode < 0 or p.returncode > 125:
        problems.append(f"died of a signal / abnormal rc {p.returncode}")
    if len(lines) != 1 or not err.endswith("\n"):
        problems.append(f"{len(lines)} lines on stderr")
    problems += [f"missing {s!r}" for s in substrings if s not in err]
    problems += [f"crash output {m!r}" for m in CRASH_MARKERS if m in err or m in p.stdout]
    if guard_dir is not None:
        after = dir_hashes(guard_dir)
        if after != before:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            problems.append(f"files changed in {guard_dir}: {changed}")
    for f, h in before_f.items():
        if not os.path.exists(f) or sha(f) != h:
            problems.append(f"{f} changed")
        if os.path.exists(f + ".tmp"):
            problems.append(f"{f}.tmp left behind")
    check(name, not problems, "; ".join(problems) + f" | stderr: {err.strip()[:500]}")
    return p


def split_st(path):
    """A safetensors file as (header dict in file order, data bytes)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n].decode()), raw[8 + n:]


def join_st(path, header, data):
    """Writes a safetensors file from a header dict (padded to 8 bytes) and the data bytes."""
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
