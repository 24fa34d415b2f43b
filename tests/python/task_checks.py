#!/usr/bin/env python3
"""End-to-end checks of the retrieval tasks and the per-position loss (docs/evaluation.md).

    task_checks.py {eval,train,positions,attn,window,learn} --bin path/to/ctxlab --work scratch/dir

  eval       `ctxlab eval --task`: the table, CSV and JSON per (length, depth) with the Wilson
             interval; a random model scores 0 (it cannot know a 5-digit key); the same seed gives
             the same cells, another seed other sequences; bad requests are one-line errors naming
             the option (unknown task, depth outside [0, 1], length too short, --trials 0, task
             options without --task, --task with --segmented).
  train      `ctxlab train --task-mix`: runs and says so; an interrupted run resumed gives the
             checkpoint of the run that was not interrupted, bit for bit (the task draws are in the
             saved sampler state); --resume cannot change the mix; bad mixes are one-line errors.
  positions  `ctxlab eval --per-position`: the buckets' count-weighted mean is the length's loss,
             the CSV matches the JSON; a rope model trained at 32 and evaluated at 128 has a higher
             loss at positions 64..127 than at 16..31 (same windows). (A learned-position model with
             --hierarchical, 150 steps, rises by only ~0.02 nats: too little to test.)
  attn       `ctxlab eval --attn-stats`: a table per length, one JSON / CSV row per (length, layer,
             head) that agree; entropies within [0, log L], sink masses in [0, 1], mean distances
             within [0, L); a sliding window of 8 lowers the entropy and the distance at 64; the
             options need --attn-stats and are one-line errors otherwise or with --task.
  window     `ctxlab train --window W`: the window is saved in the checkpoint (metadata
             attention_window and train_options) and changes the training; eval and sample use it
             by default (eval --window 0 overrides it); --resume cannot change it; --window 0 is
             an error.
  learn      a tiny model learns `copy`: `train --task-mix copy:1 --task-span 2` at context 20 for
             1000 steps (about 15 s on 2 cores) answers 57-80% of the trials exactly at every depth
             (measured; chance 1/26^2 = 0.15%); asserted: >= 25% at every depth, token accuracy
             >= 50% (chance 1/26).

Prints one line per check, then "N passed, N failed"; exits 1 on failure. Standard library only.
"""

import argparse
import csv
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checklib as cl  # noqa: E402

check, run, must_run, expect_failure = cl.check, cl.run, cl.must_run, cl.expect_failure
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "pride_and_prejudice.txt")
Z = 1.959963984540054


def load(path):
    with open(path) as f:
        return json.load(f)


def init(d, name, extra=()):
    ck = os.path.join(d, name + ".safetensors")
    must_run(f"init {name}", ["init", "--preset", "tiny", "--seed", 3, "--out", ck] + list(extra))
    return ck


def task_eval(ck, out, extra):
    return run(["eval", "--checkpoint", ck, "--json", out] + extra, check_rc=0)


def cmd_eval():
    d = cl.fresh_dir("eval")
    ck = init(d, "rope", ["--posenc", "rope"])
    js, cv = os.path.join(d, "pk.json"), os.path.join(d, "pk.csv")
    args = ["--task", "passkey", "--lengths", "96,128", "--depths", "0,0.5,1", "--trials", 10, "--seed", 4]
    p = task_eval(ck, js, args + ["--csv", cv])
    check("eval --task passkey runs", p.returncode == 0, p.stderr[-300:])
    j = load(js)
    cells = j["task_results"]
    check("JSON: one cell per (length, depth), in order",
          [(c["length"], c["depth"]) for c in cells] == [(L, dd) for L in (96, 128) for dd in (0, 0.5, 1)], cells)
    check("JSON: the task and its parameters are recorded",
          j["task"]["name"] == "passkey" and j["task"]["digits"] == 5 and j["task"]["trials"] == 10
          and j["task"]["seed"] == 4 and "checkpoint" in j and "posenc" in j, j["task"])
    check("a random model scores 0 exact matches (a 5-digit key: chance 1e-5)",
          all(c["correct"] == 0 and c["accuracy"] == 0 and c["trials"] == 10 for c in cells), cells)
    hi = Z * Z / (10 + Z * Z)
    check("the 95% Wilson interval of 0/10 is [0, z^2/(n+z^2)]",
          all(c["ci_low"] == 0 and abs(c["ci_high"] - hi) < 1e-9 for c in cells), cells[0])
    check("each answer has 5 tokens", all(c["answer_tokens"] == 50 for c in cells), cells[0])
    with open(cv) as f:
        rows = list(csv.DictReader(f))
    check("CSV: the same cells", len(rows) == 6 and rows[0]["length"] == "96" and "ci_high" in rows[0]
          and int(rows[5]["answer_tokens"]) == 50, rows[:1])
    check("the table is printed", "95% interval" in p.stdout and p.stdout.count("\n     128 ") == 3, p.stdout[-600:])
    js2 = os.path.join(d, "pk2.json")
    task_eval(ck, js2, ["--task", "passkey", "--lengths", "128", "--depths", "0.5", "--trials", 10, "--seed", 4])
    same = [c for c in cells if c["length"] == 128 and c["depth"] == 0.5][0]
    check("same seed, same cell, whatever the other lengths and depths asked for",
          load(js2)["task_results"][0] == same, (load(js2)["task_results"][0], same))
    for task in ("kv-recall", "copy"):
        jt = os.path.join(d, task + ".json")
        p = task_eval(ck, jt, ["--task", task, "--lengths", 64, "--depths", "0,1", "--trials", 4])
        c = load(jt)["task_results"] if p.returncode == 0 else []
        check(f"eval --task {task} runs (answers of {5 if task == 'kv-recall' else 16} tokens)",
              len(c) == 2 and c[0]["answer_tokens"] == 4 * (5 if task == "kv-recall" else 16), c)
    base = ["eval", "--checkpoint", ck]
    expect_failure("unknown task", base + ["--task", "needle"], ["--task", "unknown task", "passkey | kv-recall | copy"])
    expect_failure("depth outside [0, 1]", base + ["--task", "passkey", "--depths", "0,1.5"], ["--depths", "1.5", "[0, 1]"])
    expect_failure("depth not a number", base + ["--task", "passkey", "--depths", "half"], ["--depths", "half"])
    expect_failure("length too short for the task", base + ["--task", "passkey", "--lengths", 40],
                   ["passkey", "length 40 is too short", "at least 67"])
    expect_failure("--trials 0", base + ["--task", "copy", "--trials", 0], ["--trials", "got 0"])
    expect_failure("--task-digits 0", base + ["--task", "passkey", "--task-digits", 0], ["--task-digits", "got 0"])
    expect_failure("--depths without --task", base + ["--depths", "0.5"], ["--depths", "needs --task"])
    expect_failure("--task with --segmented", base + ["--task", "copy", "--segmented"], ["--task", "--segmented"])


def train_args(out, steps, extra=(), quiet=True):
    return ["train", "--preset", "tiny", "--posenc", "rope", "--context", 80, "--steps", steps, "--batch", 4,
            "--lr", 3e-3, "--warmup", 2, "--eval-interval", 0, "--log-interval", 5, "--seed", 5, "--out", out,
            "--no-plot"] + (["--quiet"] if quiet else []) + list(extra)


def cmd_train():
    d = cl.fresh_dir("train")
    mix = ["--task-mix", "passkey:0.5,copy:0.25"]
    a, b = os.path.join(d, "straight"), os.path.join(d, "resumed")
    p = run(train_args(a, 12, mix, quiet=False), check_rc=0)  # the start line
    check("train --task-mix runs and says so", p.returncode == 0 and "task mix: passkey:0.5,copy:0.25" in p.stdout,
          p.stdout[-400:])
    topt = json.loads(cl.split_st(os.path.join(a, "model.safetensors"))[0]["__metadata__"]["train_options"])
    check("the mix is saved with the run", topt["task_mix"] == "passkey:0.5,copy:0.25" and topt["task_digits"] == 5,
          topt)
    must_run("interrupted at step 6", train_args(b, 12, mix + ["--stop-after", 6]))
    must_run("resumed to step 12", ["train", "--resume", b, "--quiet", "--no-plot"])
    for f in ("model.safetensors", "model.optim.safetensors"):  # the tensors' bytes (the metadata names --out)
        check(f"interrupted + resumed == straight: {f}'s tensors bit for bit (the task rows are drawn the same)",
              cl.split_st(os.path.join(a, f))[1] == cl.split_st(os.path.join(b, f))[1])
    rng = [cl.split_st(os.path.join(x, "model.optim.safetensors"))[0]["__metadata__"]["data_rng"] for x in (a, b)]
    check("... and the batch sampler's state", rng[0] == rng[1], rng)
    c = os.path.join(d, "plain")
    must_run("the same run without the mix", train_args(c, 12))
    check("the mix changes the training", cl.split_st(os.path.join(a, "model.safetensors"))[1] != cl.split_st(
        os.path.join(c, "model.safetensors"))[1])
    expect_failure("--resume cannot change the mix", ["train", "--resume", b, "--steps", 20, "--task-mix", "copy:1"],
                   ["--task-mix", "cannot change a resumed run"])
    e = os.path.join(d, "bad")
    expect_failure("P outside [0, 1]", train_args(e, 2, ["--task-mix", "copy:1.5"]), ["--task-mix", "[0, 1]", "1.5"])
    expect_failure("unknown task", train_args(e, 2, ["--task-mix", "needle:0.5"]), ["--task-mix", "unknown task"])
    expect_failure("not NAME:P", train_args(e, 2, ["--task-mix", "copy"]), ["--task-mix", "NAME:P"])
    expect_failure("rates past 1", train_args(e, 2, ["--task-mix", "copy:0.7,passkey:0.7"]), ["add up to 1.4"])
    expect_failure("training length too short for the task",
                   train_args(e, 2, ["--task-mix", "passkey:0.5", "--context", 48]),
                   ["--task-mix passkey", "training length 48", "too short"])


def mean_of_buckets(res):
    bs = res["per_position"]["buckets"]
    return sum(b["loss"] * b["count"] for b in bs) / sum(b["count"] for b in bs)


def cmd_positions():
    d = cl.fresh_dir("positions")
    run_dir = os.path.join(d, "rope32")
    must_run("train a tiny rope model at context 32 (150 steps)", [
        "train", "--preset", "tiny", "--posenc", "rope", "--set", "context=32", "--steps", 150, "--batch", 8, "--lr", 3e-3,
        "--warmup", 10, "--eval-interval", 0, "--seed", 2, "--out", run_dir, "--no-plot", "--quiet"])
    ck = os.path.join(run_dir, "model.safetensors")
    js, cv = os.path.join(d, "pos.json"), os.path.join(d, "pos.csv")
    p = run(["eval", "--checkpoint", ck, "--lengths", "32,128",
             "--per-position", "--bucket", 16, "--json", js, "--per-position-csv", cv], check_rc=0)
    check("eval --per-position runs", p.returncode == 0, p.stderr[-300:])
    res = load(js)["results"]
    check("buckets of 16 for every length: 2 at 32, 8 at 128",
          [len(r["per_position"]["buckets"]) for r in res] == [2, 8] and res[1]["per_position"]["bucket"] == 16,
          [r.get("per_position") for r in res][:1])
    check("the buckets' count-weighted mean is each length's loss",
          all(abs(mean_of_buckets(r) - r["loss"]) < 1e-6 * r["loss"] for r in res),
          [(mean_of_buckets(r), r["loss"]) for r in res])
    check("every bucket counts windows x its positions",
          all(b["count"] == r["windows"] * (b["end"] - b["begin"]) for r in res for b in r["per_position"]["buckets"]))
    with open(cv) as f:
        rows = list(csv.DictReader(f))
    check("the CSV has the JSON's buckets", len(rows) == 10 and rows[2]["length"] == "128"
          and abs(float(rows[2]["loss"]) - res[1]["per_position"]["buckets"][0]["loss"]) < 1e-6, rows[:3])
    # the same windows at 128: the last bucket inside L (positions 16..31, which have context) against
    # the buckets past 2L (measured: 2.44 -> 2.60 nats)
    bs = res[1]["per_position"]["buckets"]
    inside = bs[1]["loss"]
    past = sum(b["loss"] * b["count"] for b in bs[4:]) / sum(b["count"] for b in bs[4:])
    check("rope past 2L = 64: the loss rises in the buckets past 64", past > inside + 0.1,
          f"positions 16..31: {inside:.3f}, 64..127: {past:.3f}")
    expect_failure("--per-position without a file", ["eval", "--checkpoint", ck, "--per-position"],
                   ["--per-position needs --json"])
    expect_failure("--bucket without --per-position", ["eval", "--checkpoint", ck, "--bucket", 4],
                   ["--bucket needs --per-position"])


def cmd_attn():
    d = cl.fresh_dir("attn")
    ck = init(d, "rope", ["--posenc", "rope"])
    js, cv = os.path.join(d, "attn.json"), os.path.join(d, "attn.csv")
    p = run(["eval", "--checkpoint", ck, "--lengths", "16,64", "--max-windows", 4, "--attn-stats", "--attn-sinks", 2,
             "--json", js, "--attn-stats-csv", cv], check_rc=0)
    check("eval --attn-stats runs and prints a table per length",
          p.returncode == 0 and p.stdout.count("attention at length") == 2 and "sink mass" in p.stdout, p.stdout[-400:])
    res = load(js)["results"]
    heads = [r["attn_stats"]["heads"] for r in res]
    check("JSON: 2 layers x 4 heads per length, sinks 2, 4 windows of L rows each",
          [len(h) for h in heads] == [8, 8] and res[0]["attn_stats"]["sink_keys"] == 2
          and all(x["rows"] == 4 * r["length"] for r, h in zip(res, heads) for x in h), heads[0][:2])
    ok = all(0 <= x["entropy"] <= math.log(r["length"]) + 1e-6 and 0 <= x["sink_mass"] <= 1 + 1e-6
             and 0 <= x["distance"] < r["length"] for r, h in zip(res, heads) for x in h)
    check("entropy in [0, log L], sink mass in [0, 1], distance in [0, L)", ok, heads)
    with open(cv) as f:
        rows = list(csv.DictReader(f))
    check("the CSV has the JSON's rows", len(rows) == 16 and rows[9]["length"] == "64"
          and abs(float(rows[9]["entropy"]) - heads[1][1]["entropy"]) < 1e-6, rows[:2])
    js2 = os.path.join(d, "win.json")
    run(["eval", "--checkpoint", ck, "--lengths", 64, "--max-windows", 4, "--attn-stats", "--window", 8,
         "--json", js2], check_rc=0)
    w = load(js2)["results"][0]["attn_stats"]["heads"]
    check("a window of 8: every head's entropy <= log 8 and distance < 8, below full attention's",
          all(x["entropy"] <= math.log(8) + 1e-6 and x["distance"] < 8 for x in w)
          and sum(x["distance"] for x in w) < sum(x["distance"] for x in heads[1]), w[:2])
    base = ["eval", "--checkpoint", ck]
    expect_failure("--attn-sinks without --attn-stats", base + ["--attn-sinks", 4], ["--attn-sinks needs --attn-stats"])
    expect_failure("--attn-sinks 0", base + ["--attn-stats", "--attn-sinks", 0], ["--attn-sinks must be >= 1", "got 0"])
    expect_failure("--attn-stats with --task", base + ["--attn-stats", "--task", "copy"],
                   ["--attn-stats", "does not apply to --task"])


def cmd_window():
    d = cl.fresh_dir("window")
    a, b = os.path.join(d, "w16"), os.path.join(d, "full")
    p = run(train_args(a, 8, ["--window", 16]), check_rc=0)
    check("train --window 16 runs", p.returncode == 0, p.stderr[-300:])
    meta = cl.split_st(os.path.join(a, "model.safetensors"))[0]["__metadata__"]
    check("the checkpoint records the window (attention_window, train_options.window)",
          meta.get("attention_window") == "16" and json.loads(meta["train_options"])["window"] == 16, meta.keys())
    must_run("the same run without the window", train_args(b, 8))
    check("the window changes the training", cl.split_st(os.path.join(a, "model.safetensors"))[1] != cl.split_st(
        os.path.join(b, "model.safetensors"))[1])
    check("no window, no attention_window",
          "attention_window" not in cl.split_st(os.path.join(b, "model.safetensors"))[0]["__metadata__"])
    ck = os.path.join(a, "model.safetensors")
    outs = {}
    for name, extra in (("default", []), ("w16", ["--window", 16]), ("full", ["--window", 0])):
        js = os.path.join(d, name + ".json")
        run(["eval", "--checkpoint", ck, "--lengths", 80, "--max-windows", 3, "--json", js] + extra, check_rc=0)
        outs[name] = load(js)
    check("eval uses the trained window by default", outs["default"]["window"] == 16
          and outs["default"]["mode"] == "sliding window 16"
          and outs["default"]["results"][0]["loss"] == outs["w16"]["results"][0]["loss"], outs["default"]["mode"])
    check("eval --window 0 evaluates with full attention",
          outs["full"]["mode"] == "full causal attention" and outs["full"]["window"] == 0
          and outs["full"]["results"][0]["loss"] != outs["default"]["results"][0]["loss"], outs["full"]["mode"])
    # drawn at temperature 1 from one seed: the same draws unless the logits differ (an 8-step
    # model's greedy text is spaces whatever the window)
    sargs = ["sample", "--checkpoint", ck, "--prompt", "It is a truth universally acknowledged", "--max-tokens", 60,
             "--temperature", 1, "--seed", 3]
    s_def, s16 = run(sargs, check_rc=0).stdout, run(sargs + ["--window", 16], check_rc=0).stdout
    s0 = run(sargs + ["--window", 0], check_rc=0).stdout
    check("sample uses the trained window by default (same text as --window 16)", s_def == s16 and s_def, s_def[-80:])
    check("... and --window 0 samples with full attention (other text)", s0 != s_def, s0[-80:])
    expect_failure("--resume cannot change the window", ["train", "--resume", a, "--steps", 12, "--window", 8],
                   ["--window", "cannot change a resumed run"])
    expect_failure("train --window 0", train_args(os.path.join(d, "bad"), 2, ["--window", 0]),
                   ["--window must be a positive number", "got 0"])


def cmd_learn():
    d = cl.fresh_dir("learn")
    run_dir = os.path.join(d, "copy")
    must_run("train a tiny rope model on copy only (span 2, context 20, 1000 steps)", [
        "train", "--preset", "tiny", "--posenc", "rope", "--context", 20, "--task-mix", "copy:1", "--task-span", 2,
        "--steps", 1000, "--batch", 32, "--lr", 1e-2, "--warmup", 50, "--eval-interval", 0, "--seed", 1,
        "--out", run_dir, "--no-plot", "--quiet"], timeout=200)
    js = os.path.join(d, "copy.json")
    run(["eval", "--checkpoint", os.path.join(run_dir, "model.safetensors"), "--task", "copy", "--task-span", 2,
         "--lengths", 20, "--depths", "0,0.5,1", "--trials", 100, "--json", js], check_rc=0)
    cells = load(js)["task_results"]
    check("copy learned: >= 25% exact at every depth (chance 0.15%), token accuracy >= 50% (chance 3.8%)",
          len(cells) == 3 and all(c["accuracy"] >= 0.25 and c["token_accuracy"] >= 0.5 for c in cells),
          [(c["depth"], c["accuracy"], c["token_accuracy"]) for c in cells])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["eval", "train", "positions", "attn", "window", "learn"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    cl.configure(a.bin, a.work)
    body = {"eval": cmd_eval, "train": cmd_train, "positions": cmd_positions, "attn": cmd_attn,
            "window": cmd_window, "learn": cmd_learn}[a.command]
    return cl.run_subcommand(a.command, body)


if __name__ == "__main__":
    sys.exit(main())
