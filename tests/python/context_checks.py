#!/usr/bin/env python3
"""End-to-end checks of the context-extension verbs (issue: RoPE scaling, PI fine-tuning).

    context_checks.py --bin path/to/ctxlab --work scratch/dir

  finetune   `ctxlab finetune --rope-scaling pi` writes the longer context and the scaling (with
             original_context = the pretraining L) into the new checkpoint, changes the weights,
             and `ctxlab eval` then needs no flags; an eval-time override keeps original_context;
             the run resumes with `ctxlab train --resume`; alibi fine-tunes without a scaling;
             learned beyond its table, --rope-scaling on a non-rope model, a missing --context
             are one-line errors.
  baselines  `ctxlab eval --window W` / `--segmented`: full-width window == --window 0 == plain eval, segmented
             learned model runs beyond L without --hierarchical, the two together are an error.
  extensions the 2023-24 methods on the CLI (POSENC_SPEC §2, §6): finetune with llama3 and with
             longrope given as JSON writes them; eval with self-extend as a JSON override and with
             --window W --sinks S (differs from the plain window, reported in the JSON; rope and
             cope); sample with sinks gives the same greedy text with and without the KV cache (rope
             and cope); one-line errors.
  xl         `ctxlab train` with xl + mem_len trains on consecutive segments (memory carried over)
             and the loss goes down.

Prints one line per check, then "N passed, N failed"; exits 1 on failure. NumPy + st_io only.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checklib as cl  # noqa: E402
import st_io  # noqa: E402
import train_checks as tc  # noqa: E402  (read_csv)
from checklib import check, fresh_dir, must_run, run  # noqa: E402
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "pride_and_prejudice.txt")


def meta(path):
    return st_io.read_header(path)[1]


def eval_json(ckpt, extra, name):
    out = os.path.join(cl.WORK, name + ".json")
    p = run(["eval", "--checkpoint", ckpt, "--data", DATA, "--max-windows", 3, "--json", out] + extra, check_rc=0)
    if p.returncode != 0:
        return None, p
    with open(out) as f:
        return json.load(f), p


def fails_with(name, args, substrings):
    p = run(args)
    err = p.stderr.strip()
    ok = p.returncode != 0 and all(s in err for s in substrings) and "Traceback" not in err
    check(name, ok, f"rc {p.returncode}, stderr: {err[-400:]}")


def cmd_finetune():
    d = fresh_dir("finetune")
    base = os.path.join(d, "rope.safetensors")
    must_run("init a tiny rope model (context 64)", ["init", "--preset", "tiny", "--posenc", "rope", "--seed", 2,
                                                     "--out", base])
    out = os.path.join(d, "pi128")
    must_run("finetune --context 128 --rope-scaling pi", [
        "finetune", "--checkpoint", base, "--context", 128, "--rope-scaling", "pi", "--steps", 6, "--batch", 2,
        "--eval-interval", 3, "--out", out, "--quiet", "--no-plot"])
    ck = os.path.join(out, "model.safetensors")
    cfg = json.loads(meta(ck)["config"])
    check("finetune: config.context is the new context", cfg["context"] == 128, cfg)
    sc = cfg["posenc"].get("scaling", {})
    check("finetune: scaling written (pi, factor 128/64, original_context 64)",
          sc == {"type": "pi", "factor": 2.0, "original_context": 64}, sc)
    topt = json.loads(meta(ck)["train_options"])
    check("finetune: PI recipe defaults (AdamW 0.9/0.95, no weight decay, constant lr after warmup)",
          topt["beta2"] == 0.95 and topt["weight_decay"] == 0 and topt["min_lr"] == topt["lr"], topt)
    a, b = st_io.read_safetensors(base)[0], st_io.read_safetensors(ck)[0]
    changed = sum(not np.array_equal(a[k], b[k]) for k in a)
    check("finetune: the weights were trained", changed >= len(a) - 1, f"{changed} of {len(a)} changed")
    j, p = eval_json(ck, ["--lengths", "64,128"], "ft_eval")
    check("eval of the fine-tuned checkpoint needs no flags",
          j is not None and j["posenc"].get("scaling", {}).get("type") == "pi" and len(j["results"]) == 2,
          p.stderr[-300:])
    j, p = eval_json(ck, ["--lengths", "256", "--rope-scaling", "yarn", "--factor", 4], "ft_yarn")
    check("eval override of a fine-tuned model keeps original_context 64",
          j is not None and j["posenc"]["scaling"] == {"type": "yarn", "factor": 4.0, "original_context": 64},
          j and j["posenc"])
    must_run("the fine-tune run resumes with train --resume", ["train", "--resume", out, "--steps", 8, "--quiet",
                                                               "--no-plot"])
    cfg2 = json.loads(meta(ck)["config"])
    check("resumed fine-tune keeps context and scaling", cfg2 == cfg, cfg2)
    # A second fine-tune further out keeps the pretraining L.
    out2 = os.path.join(d, "pi256")
    must_run("second finetune to 256", ["finetune", "--checkpoint", ck, "--context", 256, "--rope-scaling", "pi",
                                        "--steps", 2, "--batch", 1, "--out", out2, "--quiet", "--no-plot"])
    sc2 = json.loads(meta(os.path.join(out2, "model.safetensors"))["config"])["posenc"]["scaling"]
    check("second finetune: factor 256/64 against the original L", sc2["original_context"] == 64 and sc2["factor"] == 4.0,
          sc2)

    alibi = os.path.join(d, "alibi.safetensors")
    must_run("init a tiny alibi model", ["init", "--preset", "tiny", "--posenc", "alibi", "--out", alibi])
    must_run("alibi fine-tunes at 128 without a scaling", [
        "finetune", "--checkpoint", alibi, "--context", 128, "--steps", 2, "--batch", 1,
        "--out", os.path.join(d, "alibi128"), "--quiet", "--no-plot"])
    learned = os.path.join(d, "learned.safetensors")
    must_run("init a tiny learned model", ["init", "--preset", "tiny", "--out", learned])
    fails_with("learned cannot be fine-tuned beyond its table", [
        "finetune", "--checkpoint", learned, "--context", 128, "--out", os.path.join(d, "bad1")],
        ["learned", "64", "--context 128"])
    fails_with("--rope-scaling on a non-rope model", [
        "finetune", "--checkpoint", alibi, "--context", 128, "--rope-scaling", "pi", "--out", os.path.join(d, "bad2")],
        ["rope", "alibi"])
    fails_with("finetune without --context", ["finetune", "--checkpoint", base], ["--context"])
    fails_with("finetune with a bad scaling type", [
        "finetune", "--checkpoint", base, "--context", 128, "--rope-scaling", "linear", "--out", os.path.join(d, "bad3")],
        ["linear"])


def cmd_baselines():
    d = fresh_dir("baselines")
    learned = os.path.join(d, "learned.safetensors")
    must_run("init a tiny learned model", ["init", "--preset", "tiny", "--seed", 4, "--out", learned])
    plain, _ = eval_json(learned, ["--lengths", "64"], "plain")
    wide, _ = eval_json(learned, ["--lengths", "64", "--window", 64], "wide")
    narrow, _ = eval_json(learned, ["--lengths", "64", "--window", 8], "narrow")
    ok = plain and wide and narrow
    check("--window L at length L equals full attention",
          ok and abs(plain["results"][0]["loss"] - wide["results"][0]["loss"]) < 1e-6)
    check("--window 8 differs and is reported in the JSON",
          ok and narrow["window"] == 8 and abs(plain["results"][0]["loss"] - narrow["results"][0]["loss"]) > 1e-5)
    seg, p = eval_json(learned, ["--lengths", "64,256", "--segmented"], "seg")
    check("--segmented runs a learned model at 4L without --hierarchical",
          seg is not None and seg["segment"] == 64 and len(seg["results"]) == 2, p.stderr[-300:])
    fails_with("--window with --segmented", ["eval", "--checkpoint", learned, "--window", 8, "--segmented"],
               ["--window", "--segmented"])
    full0, _ = eval_json(learned, ["--lengths", "64", "--window", 0], "full0")
    check("--window 0 is full attention (it overrides a window the checkpoint was trained with)",
          plain and full0 and full0["window"] == 0 and full0["results"][0]["loss"] == plain["results"][0]["loss"])
    fails_with("--window -1", ["eval", "--checkpoint", learned, "--window", -1], ["--window must be >= 0", "-1"])
    fails_with("learned beyond L names both fixes", ["eval", "--checkpoint", learned, "--lengths", 128],
               ["--hierarchical", "--segmented"])


def cmd_extensions():
    d = fresh_dir("extensions")
    # trained a little, so that positions move the loss (an initial model attends almost uniformly)
    must_run("train a tiny rope model (context 64) for 40 steps", [
        "train", "--preset", "tiny", "--posenc", "rope", "--steps", 40, "--lr", 3e-3, "--warmup", 5,
        "--eval-interval", 40, "--out", os.path.join(d, "run"), "--no-plot", "--quiet"])
    base = os.path.join(d, "run", "model.safetensors")
    ft = os.path.join(d, "llama3")
    must_run("finetune --rope-scaling llama3", ["finetune", "--checkpoint", base, "--context", 128, "--rope-scaling",
                                                "llama3", "--steps", 2, "--batch", 1, "--out", ft, "--quiet", "--no-plot"])
    sc = json.loads(meta(os.path.join(ft, "model.safetensors"))["config"])["posenc"]["scaling"]
    check("finetune llama3: factor 128/64 and original_context 64 written",
          sc == {"type": "llama3", "factor": 2.0, "original_context": 64}, sc)
    lists = {"short_factor": [1.0] * 8, "long_factor": [1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 8.0, 8.0]}
    ft2 = os.path.join(d, "longrope")
    must_run("finetune --rope-scaling '{longrope JSON}'", [
        "finetune", "--checkpoint", base, "--context", 128, "--rope-scaling", json.dumps({"type": "longrope", **lists}),
        "--steps", 2, "--batch", 1, "--out", ft2, "--quiet", "--no-plot"])
    sc = json.loads(meta(os.path.join(ft2, "model.safetensors"))["config"])["posenc"]["scaling"]
    check("finetune longrope: the lists, factor 2 and original_context 64 written",
          sc == {"type": "longrope", **lists, "factor": 2.0, "original_context": 64}, sc)
    plain, _ = eval_json(base, ["--lengths", "256"], "rope256")
    se, p = eval_json(base, ["--lengths", "256", "--rope-scaling", '{"type":"self-extend","group":4,"window":32}'], "se")
    check("eval with self-extend as JSON: the scaling is reported and the loss differs from plain rope",
          se is not None and plain is not None
          and se["posenc"]["scaling"] == {"type": "self-extend", "group": 4, "window": 32}
          # (a toy model uses far positions little: ~1e-4 here; rounding between the paths is ~1e-7)
          and abs(se["results"][0]["loss"] - plain["results"][0]["loss"]) > 1e-5,
          (se and se["posenc"], se and se["results"][0]["loss"], plain and plain["results"][0]["loss"]))
    win, _ = eval_json(base, ["--lengths", "128", "--window", 16], "win16")
    sink, p = eval_json(base, ["--lengths", "128", "--window", 16, "--sinks", 4], "sink16")
    check("eval --window 16 --sinks 4: reported, and differs from the plain window",
          win is not None and sink is not None and sink["sinks"] == 4 and "4 sinks" in sink["mode"]
          and abs(sink["results"][0]["loss"] - win["results"][0]["loss"]) > 1e-5, p.stderr[-300:])
    outs = [run(["sample", "--checkpoint", base, "--prompt", "It is a truth", "--max-tokens", 60, "--temperature", 0,
                 "--window", 8, "--sinks", 2] + extra, check_rc=0) for extra in ([], ["--no-cache"])]
    check("sample --window 8 --sinks 2: the rolling cache gives the text of the full recompute",
          all(o.returncode == 0 for o in outs) and outs[0].stdout == outs[1].stdout and len(outs[0].stdout) > 60,
          [o.stdout[-80:] for o in outs])
    # cope (§6, §7.2: the mask only, its gates count the visible keys), trained a little so that its
    # position table E is no longer 0
    must_run("train a tiny cope model for 10 steps", [
        "train", "--preset", "tiny", "--posenc", "cope", "--steps", 10, "--lr", 3e-3, "--warmup", 2,
        "--eval-interval", 10, "--out", os.path.join(d, "cope"), "--no-plot", "--quiet"])
    cope = os.path.join(d, "cope", "model.safetensors")
    cwin, _ = eval_json(cope, ["--lengths", "128", "--window", 16], "cope_win16")
    csink, p = eval_json(cope, ["--lengths", "128", "--window", 16, "--sinks", 4], "cope_sink16")
    check("cope: eval --window 16 --sinks 4 runs, is reported, and differs from the plain window",
          cwin is not None and csink is not None and csink["sinks"] == 4
          and abs(csink["results"][0]["loss"] - cwin["results"][0]["loss"]) > 1e-5, p.stderr[-300:])
    outs = [run(["sample", "--checkpoint", cope, "--prompt", "It is a truth", "--max-tokens", 40, "--temperature", 0,
                 "--window", 8, "--sinks", 2] + extra, check_rc=0) for extra in ([], ["--no-cache"])]
    check("cope: sample --window 8 --sinks 2 with the rolling cache gives the text of the full recompute",
          all(o.returncode == 0 for o in outs) and outs[0].stdout == outs[1].stdout and len(outs[0].stdout) > 40,
          [(o.stdout[-80:], o.stderr[-200:]) for o in outs])
    fails_with("--sinks without --window", ["eval", "--checkpoint", base, "--sinks", 2], ["--sinks", "--window"])
    fails_with("--sinks with a longrope override", [
        "eval", "--checkpoint", base, "--window", 16, "--sinks", 2, "--rope-scaling", json.dumps({"type": "longrope", **lists})],
        ["--sinks is not defined", "longrope"])
    fails_with("sample --sinks -1", ["sample", "--checkpoint", base, "--window", 8, "--sinks", -1], ["--sinks", ">= 0"])
    fails_with("self-extend without its group", ["eval", "--checkpoint", base, "--rope-scaling", "self-extend"],
               ["posenc.scaling.group"])
    fails_with("grads --sinks without --window", ["grads", "--checkpoint", base, "--tokens", "x.npy", "--out",
                                                  os.path.join(d, "g.safetensors"), "--sinks", 2], ["--sinks"])


def cmd_xl():
    d = fresh_dir("xl")
    p = must_run("train xl with mem_len on consecutive segments", [
        "train", "--preset", "tiny", "--posenc", '{"type":"xl","mem_len":64}', "--steps", 40, "--lr", 3e-3,
        "--warmup", 5, "--eval-interval", 40, "--out", os.path.join(d, "run"), "--no-plot", "--log-interval", 40])
    check("xl: the trainer says it feeds consecutive segments", "consecutive segments" in p.stdout, p.stdout[:300])
    rows = tc.read_csv(os.path.join(d, "run", "train.csv"))
    first, last = float(rows[0]["loss"]), float(rows[-1]["loss"])
    check("xl: loss goes down over 40 steps", last < first - 1.0, f"{first} -> {last}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["finetune", "baselines", "extensions", "xl"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    cl.configure(a.bin, a.work)
    return cl.run_subcommand(a.command, {"finetune": cmd_finetune, "baselines": cmd_baselines, "extensions": cmd_extensions,
                                                  "xl": cmd_xl}[a.command])

if __name__ == "__main__":
    sys.exit(main())
