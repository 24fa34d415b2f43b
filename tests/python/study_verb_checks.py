#!/usr/bin/env python3
"""End-to-end checks of `ctxlab study` (docs/evaluation.md, "ctxlab study").

    study_verb_checks.py {run,errors,finetune,plugin} --bin path/to/ctxlab --work scratch/dir [--plugin-lib LIB]

  run     examples/studies/quick.json (3 encodings, PI and YaRN on rope, 2 seeds, passkey): stopped
          by --max-jobs (exit 3, nothing summarised), resumed by the same command (the finished jobs
          skipped, a half-finished run dir restarted), then held to an uninterrupted run of the same
          study: identical eval files and summary; the summary recomputed here from the eval JSON
          (mean, 95% t interval with t(0.975, 1), ppl = exp(mean loss), the best per length, every
          cell x length, the task grid); the split really holds out the tail of the corpus; the
          dry run lists the jobs and marks them done.
  errors  one-line errors naming the file and field: an unknown key, a reserved training option,
          a directory-escaping name, a duplicate seed, a bad depth, bad "variants", "finetunes",
          "tokenizers" and scaling "encodings" entries (a scaling's "encodings" limits its cells, dry
          run), an encoding's unknown "tokenizer", a config
          field the study sets in "train.set", another
          study in the same --out, a failing job (named, with its log).
  finetune  fine-tune cells (FT_STUDY: rope with a PI fine-tune and a direct one, alibi with a
          direct one, a few steps; and a sliding-window eval variant of the rope runs): each base run trained once and fine-tuned from, the fine-tuned
          checkpoint at the longer context with its scaling, evaluated like every cell, labelled in
          summary.json, ppl.csv and summary.md; a fine-tune interrupted at a checkpoint resumed (and
          one killed before it restarted) to the same results as an uninterrupted study; a finished
          study run again does nothing; the dry run lists the finetune commands.
  tokenizers  a study's "tokenizers" (TOK_STUDY: rope with bytes, bpe_rope with a BPE tokenizer the
          study trains on its training split): the tokenizer job first, the BPE run trained, scaled,
          fine-tuned and evaluated with it (the eval files record it), the byte run without it;
          interrupted after the tokenizer job and resumed; the summary says which cell uses which.
  plugin  `ctxlab --plugin LIB study`: an encoding registered by the plugin (--plugin-lib,
          tests/tools/alias_posenc_plugin.cpp) trained, fine-tuned and evaluated by the jobs,
          which load the plugin too; without --plugin the study fails on it.

Prints one line per check, then "N passed, N failed"; exits 1 on failure. Standard library only.
"""

import argparse
import csv
import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checklib as cl  # noqa: E402

check, run, must_run, expect_failure = cl.check, cl.run, cl.must_run, cl.expect_failure
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
QUICK = os.path.join(ROOT, "examples", "studies", "quick.json")
T975_1 = 12.706204736174698  # Student t quantile 0.975 at 1 degree of freedom (two seeds)


# A study with fine-tune cells, small enough for seconds: L = 128 (the passkey needs 67 tokens).
FT_STUDY = {
    "train": {"preset": "tiny", "context": 128, "steps": 8, "set": {"d_ff": 128},
              "args": {"lr": 0.003, "warmup": 2, "batch": 4, "eval-interval": 0}},
    "encodings": {"rope": "rope", "alibi": "alibi"},
    "scalings": {"pi": {"type": "pi", "factor": "len/L"}},
    "variants": {"window": {"eval": {"window": 128}, "encodings": ["rope"]}},
    "finetunes": {
        "pi_ft": {"scaling": {"type": "pi", "factor": "len/L"}, "length": "2L", "steps": 4,
                  "args": {"lr": 0.0003, "warmup": 1, "batch": 2, "eval-interval": 0, "ckpt-interval": 2}},
        "direct_ft": {"length": 256, "steps": 4, "encodings": ["rope", "alibi"],
                      "args": {"batch": 2, "eval-interval": 0}},
    },
    "seeds": [1],
    "lengths": [128, 256],
    "tasks": {"passkey": {"depths": [0, 1], "trials": 2}},
    "eval": {"max-windows": 2},
}
# Byte-level and BPE runs of the same model in one grid: "tokenizers" and an encoding naming one.
TOK_STUDY = {k: v for k, v in FT_STUDY.items() if k not in ("variants", "finetunes")}
TOK_STUDY.update(tokenizers={"bpe": {"type": "bpe", "vocab": 1000}},
                 encodings={"rope": "rope", "bpe_rope": {"posenc": "rope", "tokenizer": "bpe"}},
                 finetunes={"pi_ft": FT_STUDY["finetunes"]["pi_ft"]})
PLUGIN_LIB = None  # --plugin-lib
FT_LABELS = {"rope+pi_ft": "rope + pi s=2 ft 4@2L", "rope+direct_ft": "rope ft 4@256",
             "alibi+direct_ft": "alibi ft 4@256"}


def load(path):
    with open(path) as f:
        return json.load(f)


def files_under(d):
    out = {}
    for base, _, names in os.walk(d):
        for n in names:
            p = os.path.join(base, n)
            out[os.path.relpath(p, d)] = cl.sha(p)
    return out


def cells_of(spec):
    cells = []
    for name, enc in spec["encodings"].items():
        cells.append(name)
        pe = enc.get("posenc", enc)
        rotary = (pe if isinstance(pe, str) else pe.get("type")) == "rope"
        # a scaling applies to the rotary encodings, or to those its "encodings" names
        cells += [f"{name}+{sc}" for sc, v in spec["scalings"].items()
                  if (name in v["encodings"] if isinstance(v, dict) and "encodings" in v else rotary)]
    return cells


def check_summary(out, spec):
    """The summary against the eval files, recomputed here."""
    s = load(os.path.join(out, "summary.json"))
    cells = cells_of(spec)
    check("summary: the cells in the study's order", s["cells"] == cells, s["cells"])
    rows = {(r["cell"], r["length"]): r for r in s["ppl"]}
    check("summary: one ppl row per cell and length", len(rows) == len(cells) * len(spec["lengths"]))
    worst = 0.0
    for c in cells:
        for L in spec["lengths"]:
            losses = []
            for seed in spec["seeds"]:
                # one file per seed, or one per seed and length for a "len/L" scaling
                d = os.path.join(out, "eval", c)
                names = [f"seed{seed}.json"] if os.path.exists(os.path.join(d, f"seed{seed}.json")) \
                    else [f"seed{seed}.len{L}.json"]
                for n in names:
                    e = load(os.path.join(d, n))
                    losses += [r["loss"] for r in e["results"] if r["length"] == L]
            m = sum(losses) / len(losses)
            sd = math.sqrt(sum((x - m) ** 2 for x in losses) / (len(losses) - 1))
            half = T975_1 * sd / math.sqrt(len(losses))
            r = rows[(c, L)]
            worst = max(worst, abs(r["loss"]["mean"] - m), abs(r["loss"]["lo"] - (m - half)),
                        abs(r["loss"]["hi"] - (m + half)), abs(r["ppl"]["mean"] - math.exp(m)))
    check("summary: mean, 95% t interval and ppl recomputed from the eval files", worst < 1e-6, f"off by {worst}")
    for L in spec["lengths"]:
        best = min(cells, key=lambda c: rows[(c, L)]["loss"]["mean"])
        flagged = [c for c in cells if rows[(c, L)]["best"]]
        check(f"summary: the best at {L} is the lowest mean loss", flagged == [best], f"{flagged} vs {best}")
        check(f"summary: p = 1 for the best itself at {L}", rows[(best, L)]["p_vs_best"] == 1.0)
    task = spec["tasks"]["passkey"]
    cellsk = {(t["cell"], t["length"], t["depth"]) for t in s["tasks"]}
    want = {(c, L, d) for c in cells for L in spec["lengths"] for d in task["depths"]}
    check("summary: one passkey cell per (cell, length, depth)", cellsk == want, len(cellsk))
    check("summary: each task cell counts the trials of every seed",
          all(t["trials"] == task["trials"] * len(spec["seeds"]) for t in s["tasks"]))
    with open(os.path.join(out, "ppl.csv")) as f:
        csv_rows = list(csv.DictReader(f))
    check("ppl.csv: the same rows as the JSON", len(csv_rows) == len(rows) and
          all(abs(float(r["loss_mean"]) - rows[(r["cell"], int(r["length"]))]["loss"]["mean"]) < 1e-6
              for r in csv_rows))
    md = open(os.path.join(out, "summary.md")).read()
    check("summary.md: a row per cell and the passkey grid", all(f"| {c} |" in md for c in cells) and
          "## Task passkey" in md)
    pos = load(os.path.join(out, "summary.json"))["positions"]
    check("summary: per-position curves for every cell", {p["cell"] for p in pos} == set(cells))


def cmd_run():
    spec = load(QUICK)
    a = cl.fresh_dir("interrupted")
    b = cl.fresh_dir("straight")
    shutil.rmtree(a)
    shutil.rmtree(b)
    p = run(["study", "--study", QUICK, "--out", a, "--max-jobs", 4], timeout=300)
    check("--max-jobs 4: exit 3, said so", p.returncode == 3 and "stopped after 4 jobs" in p.stdout,
          f"rc {p.returncode} {p.stdout[-300:]} {p.stderr[-300:]}")
    check("--max-jobs: no summary yet", not os.path.exists(os.path.join(a, "summary.json")))
    p = run(["study", "--study", QUICK, "--out", a, "--dry-run"])
    check("--dry-run: lists every job, the first four done",
          p.returncode == 0 and p.stdout.count("(done)") == 4 and "ctxlab train --preset tiny" in p.stdout, p.stdout[-400:])
    # a run killed before its first checkpoint leaves a directory without one: restarted (--force)
    os.makedirs(os.path.join(a, "runs", "alibi", "seed1"), exist_ok=True)
    open(os.path.join(a, "runs", "alibi", "seed1", "train.csv"), "w").write("step,loss\n")
    p = run(["study", "--study", QUICK, "--out", a], timeout=600, check_rc=0)
    check("resumed: ran to the end", p.returncode == 0)
    total = p.stdout.count("study: [")
    check("resumed: the 4 finished jobs skipped", "4 done before" in p.stdout, p.stdout[-300:])
    p = run(["study", "--study", QUICK, "--out", b], timeout=600, check_rc=0)
    check("uninterrupted: ran to the end", p.returncode == 0 and p.stdout.count("study: [") == total + 4)
    ha, hb = files_under(os.path.join(a, "eval")), files_under(os.path.join(b, "eval"))

    def results(d, rel):  # the numbers of an eval file (its header names the study's own paths)
        j = load(os.path.join(d, "eval", rel))
        return j.get("results"), j.get("task_results")
    check("resumed = uninterrupted: the results of every eval file", ha and sorted(ha) == sorted(hb) and
          all(results(a, k) == results(b, k) for k in ha),
          sorted(k for k in ha if k not in hb or results(a, k) != results(b, k))[:5])
    sa = open(os.path.join(a, "ppl.csv")).read()
    check("resumed = uninterrupted: ppl.csv", sa == open(os.path.join(b, "ppl.csv")).read())
    check_summary(b, spec)
    text = open(os.path.join(ROOT, "data", "pride_and_prejudice.txt"), "rb").read()
    tr = open(os.path.join(b, "data", "train.txt"), "rb").read()
    va = open(os.path.join(b, "data", "val.txt"), "rb").read()
    pi = [load(os.path.join(b, "eval", "rope+pi", f"seed1.len{L}.json")) for L in spec["lengths"]]
    L0 = spec["train"]["context"]
    check("a \"len/L\" scaling: one eval per length, factor max(1, length / L)",
          [p["posenc"]["scaling"]["factor"] for p in pi] == [max(1.0, L / L0) for L in spec["lengths"]],
          [p["posenc"].get("scaling") for p in pi])
    check("split: train + val is the corpus, val its last 10%",
          tr + va == text and len(va) == int(len(text) * 0.1), (len(tr), len(va)))
    page = os.path.join(cl.WORK, "study.html")
    must_run("report --study", ["report", "--study", b, "--out", page])
    check("report --study: the page the study wrote", open(page).read() == open(os.path.join(b, "report.html")).read())
    check("report: a heatmap cell per (cell, length, depth) of the task",
          f'data-cells="{len(cells_of(spec)) * len(spec["lengths"]) * 3}"' in open(page).read())
    p = run(["study", "--study", QUICK, "--out", b], timeout=120, check_rc=0)
    check("a finished study run again: nothing run, summary rewritten",
          p.returncode == 0 and "0 run now" in p.stdout and sa == open(os.path.join(b, "ppl.csv")).read())


def checkpoint_meta(path):
    header, _ = cl.split_st(path)
    return header.get("__metadata__", {})


def cmd_finetune():
    d = cl.fresh_dir("finetune")
    study = os.path.join(d, "ft.json")
    with open(study, "w") as f:
        json.dump(FT_STUDY, f, indent=1)
    a, b = os.path.join(d, "interrupted"), os.path.join(d, "straight")
    p = run(["study", "--study", study, "--out", b, "--dry-run"])
    base = os.path.join(b, "runs", "rope", "seed1", "model.safetensors")
    check("--dry-run: the finetune commands, from the base run, at the fine-tune's context and scaling",
          p.returncode == 0 and f"ctxlab finetune --checkpoint {base} --context 256 --rope-scaling pi --steps 4 "
          f"--seed 1 --data {b}/data/train.txt --out {b}/runs/rope+pi_ft/seed1" in p.stdout and
          f"ctxlab finetune --checkpoint {base} --context 256 --steps 4" in p.stdout and
          "finetune alibi+direct_ft seed 1" in p.stdout, p.stdout[-1500:])
    p = run(["study", "--study", study, "--out", b], timeout=300, check_rc=0)
    jobs = [ln.split("] ", 1)[1].split(" ...")[0] for ln in p.stdout.splitlines() if ln.startswith("study: [")]
    check("each base run trained once (2 encodings x 1 seed), 3 fine-tunes",
          [j for j in jobs if j.startswith("train")] == ["train rope seed 1", "train alibi seed 1"] and
          [j for j in jobs if j.startswith("finetune")] ==
          ["finetune rope+pi_ft seed 1", "finetune rope+direct_ft seed 1", "finetune alibi+direct_ft seed 1"], jobs)
    check("a fine-tune after its base run, its evals after it",
          jobs.index("train rope seed 1") < jobs.index("finetune rope+pi_ft seed 1") <
          jobs.index("eval rope+pi_ft seed 1") and jobs.index("train alibi seed 1") <
          jobs.index("finetune alibi+direct_ft seed 1"), jobs)
    ft = checkpoint_meta(os.path.join(b, "runs", "rope+pi_ft", "seed1", "model.safetensors"))
    cfg = json.loads(ft.get("config", "{}"))
    check("the PI fine-tune: 4 steps at context 256, PI s = 256 / 128 over original_context 128",
          ft.get("step") == "4" and cfg.get("context") == 256 and cfg.get("posenc", {}).get("scaling") ==
          {"type": "pi", "factor": 2.0, "original_context": 128}, (ft.get("step"), cfg))
    check("train.set: the model's d_ff 128 over the tiny preset's 256, kept by the fine-tune",
          cfg.get("d_ff") == 128 and cfg.get("d_model") == 64, cfg)
    e = load(os.path.join(b, "eval", "rope+pi_ft", "seed1.json"))
    check("the PI fine-tune evaluated from its own checkpoint at every length, with its scaling",
          e["checkpoint"].endswith("runs/rope+pi_ft/seed1/model.safetensors") and e["step"] == 4 and
          [r["length"] for r in e["results"]] == FT_STUDY["lengths"] and "per_position" in e["results"][0] and
          e["posenc"]["scaling"]["factor"] == 2.0, {k: e[k] for k in ("checkpoint", "step", "posenc")})
    direct = load(os.path.join(b, "eval", "alibi+direct_ft", "seed1.json"))
    check("a direct fine-tune (no scaling) of alibi: step 4, no scaling",
          direct["step"] == 4 and "scaling" not in direct["posenc"], direct["posenc"])
    s = load(os.path.join(b, "summary.json"))
    check("summary: the variant and fine-tune cells after their encoding's", s["cells"] ==
          ["rope", "rope+pi", "rope+window", "rope+pi_ft", "rope+direct_ft", "alibi", "alibi+direct_ft"], s["cells"])
    w = load(os.path.join(b, "eval", "rope+window", "seed1.json"))
    plain = load(os.path.join(b, "eval", "rope", "seed1.json"))
    check("a variant: the rope run (not retrained) under eval --window 128: = rope at 128, not at 256",
          w["checkpoint"] == plain["checkpoint"] and w["window"] == 128 and
          w["results"][0]["loss"] == plain["results"][0]["loss"] and
          w["results"][1]["loss"] != plain["results"][1]["loss"], (w["window"], w["results"], plain["results"]))
    check("summary: the fine-tune cells' labels", all(s["labels"].get(c) == lab for c, lab in FT_LABELS.items()),
          s["labels"])
    with open(os.path.join(b, "ppl.csv")) as f:
        rows = list(csv.DictReader(f))
    check("ppl.csv: each fine-tune cell at each length, with its label and the eval's loss",
          all(sum(1 for r in rows if r["cell"] == c and r["label"] == lab) == 2 for c, lab in FT_LABELS.items()) and
          all(abs(float(r["loss_mean"]) - x["loss"]) < 1e-6 for r in rows if r["cell"] == "rope+pi_ft"
              for x in e["results"] if x["length"] == int(r["length"])), [r for r in rows if "ft" in r["cell"]])
    check("summary.json: passkey results for the fine-tune cells",
          {t["cell"] for t in s["tasks"] if "ft" in t["cell"]} == set(FT_LABELS))
    md = open(os.path.join(b, "summary.md")).read()
    check("summary.md: a row per fine-tune cell, by label", all(f"| {lab} |" in md for lab in FT_LABELS.values()))
    page = open(os.path.join(b, "report.html")).read()
    check("report.html: the labels in the legends", all(lab in page for lab in FT_LABELS.values()))
    # interrupted: the base run and the eval-time cells done, then the PI fine-tune stopped at its step-2
    # checkpoint, the direct one killed before its first checkpoint
    p = run(["study", "--study", study, "--out", a, "--max-jobs", 7], timeout=300)
    check("--max-jobs 7: stopped before the first fine-tune", p.returncode == 3 and
          not os.path.exists(os.path.join(a, "runs", "rope+pi_ft")), p.stdout[-300:])
    lines = run(["study", "--study", study, "--out", a, "--dry-run"]).stdout.splitlines()
    cmd = lines[[i for i, ln in enumerate(lines) if "finetune rope+pi_ft seed 1" in ln][0] + 1].split()[1:]
    cmd[cmd.index("--steps") + 1] = "2"
    must_run("the PI fine-tune's own command (from --dry-run) run by hand for 2 of its 4 steps", cmd)
    os.makedirs(os.path.join(a, "runs", "rope+direct_ft", "seed1"))
    open(os.path.join(a, "runs", "rope+direct_ft", "seed1", "train.csv"), "w").write("step,loss\n")
    p = run(["study", "--study", study, "--out", a], timeout=300, check_rc=0)
    log = open(os.path.join(a, "logs", "finetune_rope_pi_ft_seed_1.log")).read()
    check("resumed: the base runs not trained again, the PI fine-tune resumed at step 2",
          "7 done before" in p.stdout and "train rope seed 1 ..." not in p.stdout and
          "at step 2 of 4" in log, p.stdout[-600:] + log[-300:])
    check("resumed: the fine-tunes at their last step",
          all(checkpoint_meta(os.path.join(a, "runs", c, "seed1", "model.safetensors")).get("step") == "4"
              for c in FT_LABELS))
    same = all(load(os.path.join(a, "eval", c, "seed1.json"))["results"] ==
               load(os.path.join(b, "eval", c, "seed1.json"))["results"] for c in FT_LABELS)
    check("resumed = uninterrupted: the fine-tune cells' results", same)
    p = run(["study", "--study", study, "--out", b], timeout=120, check_rc=0)
    check("a finished study run again: nothing run, no fine-tune redone", "0 run now" in p.stdout and
          "study: [" not in p.stdout and "21 done before" in p.stdout, p.stdout[-400:])


def cmd_tokenizers():
    d = cl.fresh_dir("tokenizers")
    study = os.path.join(d, "tok.json")
    with open(study, "w") as f:
        json.dump(TOK_STUDY, f, indent=1)
    out = os.path.join(d, "out")
    tok = os.path.join(out, "tokenizers", "bpe.model")
    lines = run(["study", "--study", study, "--out", out, "--dry-run"]).stdout.splitlines()
    cmds = {lines[i].split("] ", 1)[1]: lines[i + 1].strip() for i in range(0, len(lines) - 1, 2)}
    check("--dry-run: the tokenizer job first, on the training split only",
          lines[0].endswith("tokenizer bpe") and cmds.get("tokenizer bpe") ==
          f"ctxlab tokenizer train --data {out}/data/train.txt --vocab 1000 --type bpe --out {tok}", lines[:2])
    check("--dry-run: bpe_rope trains with it, rope with bytes",
          f"--tokenizer {tok}" in cmds.get("train bpe_rope seed 1", "") and
          "--tokenizer" not in cmds.get("train rope seed 1", "--tokenizer"), cmds)
    p = run(["study", "--study", study, "--out", out, "--max-jobs", 1], timeout=120)
    check("--max-jobs 1: the tokenizer trained, then stopped", p.returncode == 3 and os.path.getsize(tok) > 0 and
          not os.path.exists(os.path.join(out, "runs")), p.stdout[-300:])
    log = open(os.path.join(out, "logs", "tokenizer_bpe.log")).read()
    train_bytes = os.path.getsize(os.path.join(out, "data", "train.txt"))
    check("the tokenizer learnt from train.txt only (its bytes, not the corpus')",
          f"vocab 1000, {train_bytes} bytes ->" in log and "data/train.txt" in log, log[-300:])
    p = run(["study", "--study", study, "--out", out], timeout=300, check_rc=0)
    check("resumed: the tokenizer not trained again", p.returncode == 0 and "1 done before" in p.stdout and
          "tokenizer bpe ..." not in p.stdout, p.stdout[-300:])
    bpe_cells = ["bpe_rope", "bpe_rope+pi", "bpe_rope+pi_ft"]
    evals = {c: load(os.path.join(out, "eval", c, "seed1.json" if c != "bpe_rope+pi" else "seed1.len256.json"))
             for c in ["rope"] + bpe_cells}
    fp = {e["tokenizer"].get("fingerprint") for c, e in evals.items() if c != "rope"}
    check("the BPE cells (plain, scaled, fine-tuned) evaluated with the study's BPE tokenizer, one fingerprint",
          all(evals[c]["tokenizer"]["type"] == "sentencepiece" and evals[c]["tokenizer"]["vocab_size"] == 1000
              for c in bpe_cells) and len(fp) == 1, {c: e["tokenizer"] for c, e in evals.items()})
    check("the byte cell: bytes", evals["rope"]["tokenizer"]["type"] == "bytes", evals["rope"]["tokenizer"])
    r = evals["bpe_rope"]["results"][0]
    check("BPE: a window of 128 tokens holds > 2 bytes per token (word pieces, not bytes)",
          r["length"] == 128 and r["bytes"] > 2 * r["tokens"], r)
    check("BPE: a passkey result for the BPE cell", all(
        load(os.path.join(out, "eval", "bpe_rope", "seed1.passkey.json"))["task_results"][i]["trials"] == 2
        for i in range(4)))
    s = load(os.path.join(out, "summary.json"))
    check("summary: the BPE cells after the byte ones, each cell's tokenizer named",
          s["cells"] == ["rope", "rope+pi", "rope+pi_ft"] + bpe_cells and
          s.get("tokenizers") == dict({c: "bytes" for c in ["rope", "rope+pi", "rope+pi_ft"]},
                                      **{c: "bpe" for c in bpe_cells}), (s["cells"], s.get("tokenizers")))
    md = open(os.path.join(out, "summary.md")).read()
    check("summary.md: says the tokenizers differ and what to compare across them",
          "bytes, bpe (bpe, vocab 1000)" in md and "bits_per_byte" in md and "| bpe_rope + pi s=2 ft 4@2L |" in md)
    p = run(["study", "--study", study, "--out", out], timeout=120, check_rc=0)
    check("a finished study run again: nothing run", "0 run now" in p.stdout and "study: [" not in p.stdout)


def cmd_plugin():
    d = cl.fresh_dir("plugin")
    spec = {k: v for k, v in FT_STUDY.items() if k not in ("scalings", "variants", "tasks")}
    spec["encodings"] = {"alias": {"type": "study-alias"}}
    spec["finetunes"] = {"direct_ft": {"length": "2L", "steps": 2, "encodings": ["alias"], "args": {"batch": 2}}}
    study = os.path.join(d, "plugin.json")
    with open(study, "w") as f:
        json.dump(spec, f)
    out = os.path.join(d, "out")
    p = run(["study", "--study", study, "--out", os.path.join(d, "without")])
    check("without --plugin: the study refuses the plugin's encoding (its train job fails)",
          p.returncode != 0 and "study-alias" in p.stderr, p.stderr[-300:])
    p = run(["--plugin", PLUGIN_LIB, "study", "--study", study, "--out", out, "--dry-run"])
    check("--dry-run: every job's command loads the plugin",
          p.returncode == 0 and p.stdout.count(f"ctxlab --plugin {PLUGIN_LIB} ") == 4, p.stdout[-600:])
    p = run(["--plugin", PLUGIN_LIB, "study", "--study", study, "--out", out], timeout=300, check_rc=0)
    check("with --plugin: trained, fine-tuned and evaluated by child processes",
          p.returncode == 0 and "4 run now" in p.stdout, p.stdout[-400:])
    e = load(os.path.join(out, "eval", "alias+direct_ft", "seed1.json"))
    check("the fine-tuned plugin encoding evaluated", e["posenc"]["type"] == "study-alias" and e["step"] == 2,
          e["posenc"])


def check_presets(d):
    """Every study file shipped in examples/studies/ parses and plans (--dry-run lists its jobs)."""
    folder = os.path.join(ROOT, "examples", "studies")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
    check("the shipped presets are found", len(names) >= 4, str(names))
    for n in names:
        p = run(["study", "--study", os.path.join(folder, n), "--out", os.path.join(d, "preset-" + n[:-5]), "--dry-run"])
        check(f"preset {n} plans its jobs", p.returncode == 0 and "[1/" in p.stdout, (p.stdout + p.stderr)[-400:])


def check_scaling_encodings(d, study):
    """A scaling's "encodings" limits its cells to the rotary encodings it names (a randomized rope
    takes no self-extend, POSENC_SPEC 7.3), and is the study's key: eval's --rope-scaling never sees it."""
    path = study("scaling_encodings", lambda j: j.update(
        encodings={"rope": "rope", "rope_rand": {"type": "rope", "randomized": 512}},
        scalings={"se": {"type": "self-extend", "group": 4, "encodings": ["rope"]}, "pi": {"type": "pi", "factor": 2}}))
    p = run(["study", "--study", path, "--out", os.path.join(d, "scaling-encodings"), "--dry-run"])
    jobs = [ln.split("] ", 1)[1] for ln in p.stdout.splitlines() if ln.startswith("[")]
    check("a scaling's \"encodings\": its cells only for the encodings it names, the others' as before",
          p.returncode == 0 and "eval rope+se seed 1" in jobs and not any(j.startswith("eval rope_rand+se") for j in jobs)
          and "eval rope_rand+pi seed 1" in jobs and "eval rope+pi seed 1" in jobs, (p.stdout + p.stderr)[-600:])
    check("a scaling's \"encodings\" is not passed to eval --rope-scaling",
          '--rope-scaling {"type":"self-extend","group":4}' in p.stdout and '"encodings"' not in p.stdout,
          [ln for ln in p.stdout.splitlines() if "self-extend" in ln][:1])


def cmd_errors():
    d = cl.fresh_dir("errors")
    check_presets(d)
    base = load(QUICK)

    def study(name, change):
        j = json.loads(json.dumps(base))
        change(j)
        path = os.path.join(d, name + ".json")
        with open(path, "w") as f:
            json.dump(j, f)
        return path

    cases = [
        ("unknown key", lambda j: j.update(lenghts=[1]), ["unknown key \"lenghts\""]),
        ("reserved option", lambda j: j["train"]["args"].update(seed=3), [".train.args.seed", "set by the study"]),
        ("escaping name", lambda j: j["encodings"].update({"../x": "rope"}), ["'../x'", "names a directory"]),
        ("duplicate seed", lambda j: j.update(seeds=[1, 1]), [".seeds: seed 1 twice"]),
        ("bad depth", lambda j: j["tasks"]["passkey"].update(depths=[2]), [".tasks.passkey.depths", "[0, 1]"]),
        ("no encodings", lambda j: j.pop("encodings"), ["missing \"encodings\""]),
        ("bad task", lambda j: j["tasks"].update(needle={"depths": [0]}), [".tasks.needle", "unknown task"]),
        ("train.set: context", lambda j: j["train"].update(set={"context": 64}),
         [".train.set.context", "set by the study itself"]),
        ("finetune: unknown key", lambda j: j.update(finetunes={"ft": {"length": "2L", "steps": 5, "lr": 1}}),
         [".finetunes.ft: unknown key \"lr\"", "(scaling, length, steps, args, encodings)"]),
        ("finetune: bad length", lambda j: j.update(finetunes={"ft": {"length": "4x", "steps": 5}}),
         [".finetunes.ft.length", "expected an integer >= 1 or \"kL\"", "\"4x\""]),
        ("finetune: no steps", lambda j: j.update(finetunes={"ft": {"length": 512}}),
         [".finetunes.ft: missing \"steps\""]),
        ("finetune: bad steps", lambda j: j.update(finetunes={"ft": {"length": 512, "steps": 0}}),
         [".finetunes.ft.steps", "expected an integer >= 1, got 0"]),
        ("finetune: bad factor", lambda j: j.update(finetunes={"ft": {"length": "4L", "steps": 5,
                                                                       "scaling": {"type": "pi", "factor": "L/len"}}}),
         [".finetunes.ft.scaling.factor", "\"len/L\"", "\"L/len\""]),
        ("finetune: reserved option", lambda j: j.update(finetunes={"ft": {"length": "4L", "steps": 5,
                                                                           "args": {"checkpoint": "x"}}}),
         [".finetunes.ft.args.checkpoint", "set by the study"]),
        ("finetune: unknown encoding", lambda j: j.update(finetunes={"ft": {"length": "4L", "steps": 5,
                                                                            "encodings": ["ropee"]}}),
         [".finetunes.ft.encodings", "\"ropee\" is not one of the study's"]),
        ("finetune: scaling on alibi", lambda j: j.update(finetunes={"ft": {"length": "4L", "steps": 5, "scaling": "pi",
                                                                            "encodings": ["alibi"]}}),
         [".finetunes.ft.encodings", "rotary (rope) encodings only"]),
        ("finetune: no encoding", lambda j: j.update(encodings={"alibi": "alibi"},
                                                     finetunes={"ft": {"length": "4L", "steps": 5}}),
         [".finetunes.ft: applies to no encoding"]),
        ("variant: no eval", lambda j: j.update(variants={"seg": {"encodings": ["learned"]}}),
         [".variants.seg: missing \"eval\""]),
        ("variant: reserved eval option", lambda j: j.update(variants={"seg": {"eval": {"rope-scaling": "pi"},
                                                                                "encodings": ["rope"]}}),
         [".variants.seg.eval.rope-scaling", "set by the study"]),
        ("variant: unknown encoding", lambda j: j.update(variants={"seg": {"eval": {"segmented": True},
                                                                            "encodings": ["nope"]}}),
         [".variants.seg.encodings", "\"nope\" is not one of the study's"]),
        ("variant: a scaling's name", lambda j: j.update(variants={"yarn": {"eval": {"window": 64},
                                                                             "encodings": ["rope"]}}),
         [".variants.yarn", "also a scaling's"]),
        ("finetune: a scaling's name", lambda j: j.update(finetunes={"pi": {"length": "4L", "steps": 5}}),
         [".finetunes.pi", "also a scaling's"]),
        ("scaling: on alibi", lambda j: j["scalings"].update(pi={"type": "pi", "encodings": ["rope", "alibi"]}),
         [".scalings.pi.encodings", "a scaling applies to rotary (rope) encodings only", "'alibi' is not one"]),
        ("scaling: unknown encoding", lambda j: j["scalings"].update(pi={"type": "pi", "encodings": ["ropee"]}),
         [".scalings.pi.encodings", "\"ropee\" is not one of the study's"]),
        ("scaling: no encodings", lambda j: j["scalings"].update(pi={"type": "pi", "encodings": []}),
         [".scalings.pi.encodings", "a non-empty array of encoding names"]),
        ("tokenizers: bad type", lambda j: j.update(tokenizers={"bpe": {"type": "wordpiece", "vocab": 1000}}),
         [".tokenizers.bpe.type: expected \"bpe\" or \"unigram\"", "\"wordpiece\""]),
        ("tokenizers: unknown key", lambda j: j.update(tokenizers={"bpe": {"type": "bpe", "vocab": 1000, "lines": 5}}),
         [".tokenizers.bpe: unknown key \"lines\" (type, vocab)"]),
        ("tokenizers: bad vocab", lambda j: j.update(tokenizers={"bpe": {"type": "bpe", "vocab": 0}}),
         [".tokenizers.bpe.vocab", "expected an integer >= 1, got 0"]),
        ("tokenizers: escaping name", lambda j: j.update(tokenizers={"../t": {"type": "bpe", "vocab": 1000}}),
         [".tokenizers", "'../t'", "names a directory"]),
        ("tokenizers: unused", lambda j: j.update(tokenizers={"bpe": {"type": "bpe", "vocab": 1000}}),
         [".tokenizers.bpe: no encoding uses it", "\"tokenizer\": \"bpe\""]),
        ("encoding tokenizer: unknown name", lambda j: j.update(
            tokenizers={"bpe": {"type": "bpe", "vocab": 1000}},
            encodings={"bpe_rope": {"posenc": "rope", "tokenizer": "bpe4k"}}),
         [".encodings.bpe_rope.tokenizer", "\"bpe4k\" is not one of the study's \"tokenizers\" (bpe)"]),
        ("encoding tokenizer: not a name", lambda j: j.update(
            tokenizers={"bpe": {"type": "bpe", "vocab": 1000}},
            encodings={"bpe_rope": {"posenc": "rope", "tokenizer": {"type": "bpe"}}}),
         [".encodings.bpe_rope.tokenizer: expected the name of one of the study's \"tokenizers\" (bpe)"]),
        ("encoding tokenizer: no tokenizers", lambda j: j.update(
            encodings={"bpe_rope": {"posenc": "rope", "tokenizer": "bpe"}}),
         [".encodings.bpe_rope.tokenizer: names a tokenizer, and the study has no \"tokenizers\""]),
    ]
    for name, change, subs in cases:
        path = study(name.replace(" ", "_"), change)
        expect_failure(f"error: {name}", ["study", "--study", path, "--out", os.path.join(d, "never")], [path] + subs)
    check("errors: nothing created for a bad study", not os.path.exists(os.path.join(d, "never")))
    check_scaling_encodings(d, study)
    out = os.path.join(d, "claimed")
    one = study("one_seed", lambda j: j.update(seeds=[5], encodings={"alibi": "alibi"}, tasks={}, scalings={}) or
                j.pop("tasks") or j.pop("scalings"))
    p = run(["study", "--study", one, "--out", out, "--max-jobs", 1])
    check("a one-seed study starts (one job, then --max-jobs stops it)", p.returncode == 3, p.stderr[-300:])
    other = study("other", lambda j: j.update(seeds=[6]))
    expect_failure("error: another study in the same --out", ["study", "--study", other, "--out", out],
                   [out, "holds another study"])
    bad = study("bad_job", lambda j: j.update(encodings={"typo": "ropee"}))
    p = run(["study", "--study", bad, "--out", os.path.join(d, "badjob")])
    check("a failing job: exit 1, the job and its log named, the child's error shown",
          p.returncode == 1 and "job 'train typo seed 1' failed" in p.stderr and "train_typo_seed_1.log" in p.stderr
          and "ropee" in p.stderr, p.stderr[-500:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["run", "errors", "finetune", "tokenizers", "plugin"])
    ap.add_argument("--plugin-lib", help="plugin: tests/tools/alias_posenc_plugin.cpp built")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    cl.configure(a.bin, os.path.join(a.work, a.cmd))
    global PLUGIN_LIB
    PLUGIN_LIB = a.plugin_lib
    return cl.run_subcommand(f"study_verb {a.cmd}", {"run": cmd_run, "errors": cmd_errors, "finetune": cmd_finetune,
                                                        "tokenizers": cmd_tokenizers, "plugin": cmd_plugin}[a.cmd])


if __name__ == "__main__":
    sys.exit(main())
