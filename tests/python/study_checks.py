#!/usr/bin/env python3
"""The numbers of an extrapolation study run (examples/extrapolation_study.sh --quick).

    study_checks.py OUT_DIR

The study's smoke test (tests/cli/study.cmake) checks that the report and files exist; this
checks what is in them, with the standard library only:
  * every eval/*.csv row: finite positive loss, ppl = exp(loss), bits_per_byte = loss * tokens /
    ln 2 / bytes (bytes = tokens for byte models; BPE runs, bpe_*: more than 2 bytes per token),
    tokens = windows x length, windows = study.json max_windows; each encoding evaluated at
    L, 2L, 4L, 8L;
  * what holds by construction, whatever the training did (equal to the printed precision):
    the segmented baseline at L is the learned model at L (one chunk); the sliding window of L
    at length L is plain RoPE at L; dynamic NTK (factor 1) is plain RoPE at L and static NTK
    with s = len / L at every longer length; the PI fine-tune's step-0 point is PI at 4L;
  * what 150 training steps guarantee: every run's training loss at its last step is below
    its step-1 loss, and each trained model at L is below the uniform 8 bits per byte by a
    margin (loss < ln 256 - 1).
Exit 0 when all hold, 1 otherwise.
"""

import csv
import json
import math
import os
import sys

FAILED = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail and not ok else ""), flush=True)
    if not ok:
        FAILED.append(name)
    return ok


def read_eval(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {int(r["length"]): r for r in rows}


def close(a, b, rel=2e-8):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().split("\n")[0])
        return 2
    out = sys.argv[1]
    with open(os.path.join(out, "study.json")) as f:
        study = json.load(f)
    L, maxw = study["context"], study["max_windows"]
    lengths = [L, 2 * L, 4 * L, 8 * L]
    evals = {}
    for name in sorted(os.listdir(os.path.join(out, "eval"))):
        if name.endswith(".csv"):
            evals[name[:-4]] = read_eval(os.path.join(out, "eval", name))
    check("eval: at least one CSV per encoding plus the baselines and scalings",
          len(evals) >= len(study["encodings"].split()) + 4, str(sorted(evals)))

    # every row
    bad = []
    for name, rows in evals.items():
        for n, r in rows.items():
            loss, ppl, bpb = float(r["loss"]), float(r["ppl"]), float(r["bits_per_byte"])
            w, tok = int(r["windows"]), int(r["tokens"])
            if not (math.isfinite(loss) and loss > 0):
                bad.append(f"{name}@{n}: loss {loss}")
            # bits per byte: total nats / ln 2 / the UTF-8 bytes of the predicted tokens (bytes: loss / ln 2)
            elif not close(ppl, math.exp(loss), 1e-7) or not close(bpb, loss * tok / math.log(2) / float(r["bytes"]), 1e-7) \
                    or (not name.startswith("bpe_") and int(r["bytes"]) != tok) \
                    or (name.startswith("bpe_") and int(r["bytes"]) <= 2 * tok):
                bad.append(f"{name}@{n}: ppl {ppl} / bpb {bpb} do not follow from loss {loss}")
            if tok != w * n or (maxw > 0 and w != maxw):
                bad.append(f"{name}@{n}: {w} windows, {tok} tokens")
    check("eval: every row finite, ppl = exp(loss), bpb = loss x tokens / ln 2 / bytes (bytes = tokens, BPE: "
          "> 2 bytes per token), tokens = windows x length",
          not bad, "; ".join(bad[:5]))
    for enc in study["encodings"].split():
        check(f"eval: {enc} evaluated at L..8L = {lengths}", sorted(evals.get(enc, {})) == lengths,
              str(sorted(evals.get(enc, {}))))

    def loss(name, n):
        return float(evals[name][n]["loss"])

    # equalities by construction
    same = [("learned_segmented", "learned", L), ("rope_window", "rope", L), ("rope_dynamic-ntk", "rope", L),
            ("rope_pi_ft_step0", "rope_pi", 4 * L)]
    same += [("rope_dynamic-ntk", "rope_ntk", n) for n in lengths[1:]]
    for a, b, n in same:
        try:
            check(f"by construction: {a} = {b} at length {n}", close(loss(a, n), loss(b, n)),
                  f"{loss(a, n)} vs {loss(b, n)}")
        except KeyError as e:
            check(f"by construction: {a} = {b} at length {n}", False, f"missing {e}")
    # what the training guarantees
    uniform = math.log(256)
    for enc in study["encodings"].split():
        try:
            check(f"trained: {enc} at L is well below uniform ({loss(enc, L):.3f} < {uniform - 1:.3f})",
                  loss(enc, L) < uniform - 1)
        except KeyError as e:
            check(f"trained: {enc} at L", False, f"missing {e}")
    runs = [d for d in sorted(os.listdir(out)) if os.path.isfile(os.path.join(out, d, "train.csv"))]
    check("trained: a train.csv for every encoding and both fine-tunes",
          len(runs) >= len(study["encodings"].split()) + 2, str(runs))
    for d in runs:
        with open(os.path.join(out, d, "train.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        first, last = float(rows[0]["loss"]), float(rows[-1]["loss"])
        ok = all(math.isfinite(float(r["loss"])) for r in rows)
        if d.endswith("_ft"):  # fine-tunes start from a trained model: finite and no blow-up
            check(f"trained: {d} loss finite and not above its start + 0.5 ({first:.3f} -> {last:.3f})",
                  ok and last < first + 0.5)
        else:
            check(f"trained: {d} loss went down ({first:.3f} -> {last:.3f})", ok and last < first - 1.0)
    print(f"study_checks: {len(FAILED)} failed" if FAILED else "study_checks: all passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
