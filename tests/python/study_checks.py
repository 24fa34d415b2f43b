#!/usr/bin/env python3
"""The numbers of an extrapolation study run (examples/extrapolation_study.sh --quick: a `ctxlab study`
directory, docs/evaluation.md "ctxlab study").

    study_checks.py OUT_DIR

The study's smoke test (tests/cli/study.cmake) runs the wrapper; this checks what it left, with the
standard library only:
  * summary.json: every cell of the study (each encoding, RoPE under each scaling, the two
    baselines, the fine-tunes, the BPE re-run bpe_rope*), each with its label in summary.md and a
    finite row per length (ppl = exp(mean loss), lo <= mean <= hi, every seed counted);
  * every eval file: finite positive loss, ppl = exp(loss), bits_per_byte = loss x tokens / ln 2 /
    bytes, tokens = windows x length (windows = the study's max-windows); byte cells: bytes =
    tokens; BPE cells: the study's own tokenizer (sentencepiece, one fingerprint), > 2 bytes per token;
  * what holds by construction, whatever the training did: the segmented baseline at L is the
    learned model at L (one chunk); the sliding window of L at length L is plain RoPE at L; dynamic
    NTK (factor 1) is plain RoPE at L and static NTK with s = len / L at every longer length (for the
    byte and the BPE RoPE);
  * what the training guarantees: every run's training loss went down by more than 1 nat (a
    fine-tune: finite, not above its start + 0.5), each trained model at L below uniform - 1 nat.
Exit 0 when all hold, 1 otherwise.
"""

import csv
import glob
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checklib as cl  # noqa: E402

check = cl.check


def load(path):
    with open(path) as f:
        return json.load(f)


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().split("\n")[0])
        return 2
    t0, out = time.time(), sys.argv[1]
    study, s = load(os.path.join(out, "study.json")), load(os.path.join(out, "summary.json"))
    L, lengths, seeds = study["train"]["context"], study["lengths"], study["seeds"]
    maxw = int(study.get("eval", {}).get("max-windows", 0))
    tok = s.get("tokenizers", {})
    bpe = sorted(c for c, t in tok.items() if t != "bytes")
    want = [e for e in study["encodings"]] + [f"rope+{x}" for x in study["scalings"]] + \
        ["learned+segmented", "rope+window"] + [f"{e}+{f}" for e in ("rope", "bpe_rope") for f in study["finetunes"]]
    check("summary: every cell of the study, the BPE re-run included", set(want) <= set(s["cells"]) and
          {"bpe_rope", "bpe_rope+pi", "bpe_rope+pi_ft", "bpe_rope+direct_ft"} <= set(bpe), (s["cells"], bpe))
    md = open(os.path.join(out, "summary.md")).read()
    check("summary.md: a row per cell, by its label", all(f"| {s['labels'][c]} |" in md for c in s["cells"]),
          [c for c in s["cells"] if f"| {s['labels'][c]} |" not in md])
    rows = {(r["cell"], r["length"]): r for r in s["ppl"]}
    bad = [k for k, r in rows.items() if not (all(math.isfinite(r["loss"][x]) for x in ("mean", "lo", "hi")) and
                                              r["loss"]["lo"] <= r["loss"]["mean"] <= r["loss"]["hi"] and
                                              close(r["ppl"]["mean"], math.exp(r["loss"]["mean"])) and
                                              r["seeds"] == len(seeds))]
    check("summary: a finite row per cell and length, ppl = exp(mean loss), over every seed",
          len(rows) == len(s["cells"]) * len(lengths) and not bad, bad[:5])

    # every eval file, keyed (cell, seed, length)
    ev, bad, fps = {}, [], set()
    for path in glob.glob(os.path.join(out, "eval", "*", "seed*.json")):
        if path.count(".") > 1 and not os.path.basename(path).split(".")[1].startswith("len"):
            continue  # a task's file
        cell, e = os.path.basename(os.path.dirname(path)), load(path)
        seed = int(os.path.basename(path)[4:].split(".")[0])
        is_bpe = cell in bpe
        if is_bpe:
            fps.add((e["tokenizer"]["type"], e["tokenizer"]["fingerprint"]))
        for r in e["results"]:
            ev[(cell, seed, r["length"])] = (r, e["tokenizer"]["vocab_size"])
            if not (math.isfinite(r["loss"]) and r["loss"] > 0 and close(r["ppl"], math.exp(r["loss"])) and
                    close(r["bits_per_byte"], r["loss"] * r["tokens"] / math.log(2) / r["bytes"]) and
                    r["tokens"] == r["windows"] * r["length"] and (maxw == 0 or r["windows"] == maxw) and
                    (r["bytes"] > 2 * r["tokens"] if is_bpe else r["bytes"] == r["tokens"])):
                bad.append(f"{cell} seed {seed} @{r['length']}: " + str({k: v for k, v in r.items() if k != "per_position"}))
    check("eval: every row finite, ppl = exp(loss), bpb = loss x tokens / ln 2 / bytes (bytes = tokens, BPE: "
          "> 2 bytes per token), tokens = windows x length", ev and not bad, bad[:3])
    check("eval: a result per cell, seed and length", len(ev) == len(s["cells"]) * len(seeds) * len(lengths), len(ev))
    check("BPE: the cells evaluated with the study's own tokenizer (sentencepiece, one fingerprint)",
          len(fps) == 1 and next(iter(fps))[0] == "sentencepiece" and
          len(glob.glob(os.path.join(out, "tokenizers", "*.model"))) == 1, fps)

    same = []  # equal by construction: (cell a, cell b, length)
    for base in ("rope", "bpe_rope"):
        same += [(f"{base}+dynamic-ntk", base, L)] + [(f"{base}+dynamic-ntk", f"{base}+ntk", n) for n in lengths[1:]]
    same += [("learned+segmented", "learned", L), ("rope+window", "rope", L)]
    for a, b, n in same:
        diffs = [(ev[(a, x, n)][0]["loss"], ev[(b, x, n)][0]["loss"]) for x in seeds if (a, x, n) in ev and (b, x, n) in ev]
        check(f"by construction: {a} = {b} at length {n}", len(diffs) == len(seeds) and
              all(close(p, q) for p, q in diffs), diffs)

    for enc in study["encodings"]:
        r = [ev.get((enc, x, L)) for x in seeds]
        check(f"trained: {enc} at L well below uniform", all(v and v[0]["loss"] < math.log(v[1]) - 1 for v in r),
              [(v[0]["loss"], v[1]) if v else None for v in r])
    runs = sorted(glob.glob(os.path.join(out, "runs", "*", "seed*", "train.csv")))
    check("trained: a train.csv for every encoding and fine-tune, per seed",
          len(runs) == (len(study["encodings"]) + 2 * len(study["finetunes"])) * len(seeds), len(runs))
    for path in runs:
        with open(path, newline="") as f:
            losses = [float(r["loss"]) for r in csv.DictReader(f)]
        name = os.path.relpath(os.path.dirname(path), os.path.join(out, "runs"))
        ok = losses and all(math.isfinite(x) for x in losses)
        if "_ft" in name:  # fine-tunes start from a trained model: finite and no blow-up
            check(f"trained: {name} finite, not above its start + 0.5", ok and losses[-1] < losses[0] + 0.5, losses[::5])
        else:
            check(f"trained: {name} loss went down", ok and losses[-1] < losses[0] - 1.0, losses[::10])
    return cl.finish("study_checks", t0)


if __name__ == "__main__":
    sys.exit(main())
