#!/usr/bin/env python3
""".ci/check_skips.py BUILD_DIR [--no-skips] — fails CI when a test skipped for anything but a GPU.

ctest counts a skip as success, so after the README's test command .ci/run reads the log of
that run (BUILD_DIR/Testing/Temporary/LastTest.log) and lists every test that skipped: a
GoogleTest GTEST_SKIP ("[  SKIPPED ]"), or a script test that printed "SKIP:" (ctest's
SKIP_RETURN_CODE 77, which the log records as passed). Allowed are only the device probe's own
"no GPU" results, word for word (no CI machine has a GPU; docs/testing.md): a GoogleTest skip
with CTX_NO_GPU_REASON (tests/test_util.h, cuda::device_count() is 0), a script's
"SKIP: no GPU on this machine; `--device cuda` said: <the CLI's one-line no-GPU error>"
(tests/python/device_checks.py and its siblings), and the pytest suite's "SKIP: no GPU on this
machine; ctxlab said: <the library's no-GPU error>" (python/tests/conftest.py, cuda_device).
Everything scripts/setup.sh installs is required, so any other skip is a failure (a CTXLAB_ALLOW_MISSING skip included). Exit 0 when none, 1 otherwise, 2 when
the log is missing or holds no test. With --no-skips (the emulated-GPU build, where the CUDA
tests have their device and must run) every skip is a failure.
"""

import re
import sys

# the probe's reasons, whole: GoogleTest's (tests/test_util.h) and the scripts' (the CLI's error
# from core/cuda/cuda_runtime.cu, quoted after the scripts' prefix)
GTEST_NO_GPU = "skipped: no GPU (cuda::device_count() is 0)"
SCRIPT_NO_GPU = re.compile(r"no GPU on this machine; (`--device cuda` said: ctxlab( [a-z]+)?: error: |ctxlab said: )"
                           r"(--device cuda: )?no CUDA GPU available \(cudaGetDeviceCount found none\): [^\n]*")


def probe_said_no_gpu(reason, gtest):
    return reason == GTEST_NO_GPU if gtest else SCRIPT_NO_GPU.fullmatch(reason) is not None


def main():
    no_skips = "--no-skips" in sys.argv[2:]
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and not no_skips):
        print(__doc__.strip().split("\n")[0], file=sys.stderr)
        return 2
    path = f"{sys.argv[1]}/Testing/Temporary/LastTest.log"
    try:
        with open(path, errors="replace") as f:
            log = f.read()
    except OSError as e:
        print(f"check_skips: cannot read {path}: {e}")
        return 2
    # one block per test: "N/M Test: NAME" ... up to the next "N/M Testing:"
    blocks = re.split(r"^\d+/\d+ Testing: ", log, flags=re.M)[1:]
    if not blocks:
        print(f"check_skips: {path} records no test")
        return 2
    allowed, bad = [], []
    for b in blocks:
        name = b.split("\n", 1)[0].strip()
        out = b.split("<end of output>", 1)[0]
        gtest_skip = "Skip regular expression found in output" in b
        script_skip = re.search(r"^SKIP:", out, flags=re.M) is not None
        if not (gtest_skip or script_skip):
            continue
        # the reason: gtest prints it on the line after "...: Skipped"; scripts after "SKIP:"
        m = re.search(r": Skipped\n(.*)", out) or re.search(r"^SKIP:(.*)", out, flags=re.M)
        reason = m.group(1).strip() if m else "(no reason printed)"
        ok = probe_said_no_gpu(reason, gtest_skip) and not no_skips
        (allowed if ok else bad).append(f"{name}: {reason}")
    for s in allowed:
        print(f"check_skips: allowed (no GPU on this machine): {s}")
    for s in bad:
        print(f"check_skips: NOT ALLOWED: {s}")
    print(f"check_skips: {len(blocks)} tests, {len(allowed)} GPU skips, {len(bad)} other skips")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
