#!/usr/bin/env python3
"""Writes the extrapolation study's report from the CSVs examples/extrapolation_study.sh left.

    extrapolation_report.py --out runs/extrapolation --doc docs/results/extrapolation.md

Tables (perplexity per length), the five expected-shape checks of the issue with their numbers,
the comparison with the papers, and three gnuplot PNGs next to the report:
  extrapolation.png     perplexity vs length, one line per encoding (+ the two baselines)
  rope_scaling.png      the RoPE model with each context-extension method, no training
  pi_finetune.png       validation loss at 4L during the PI fine-tune (and the direct fine-tune)
Text below the line "<!-- notes: kept across runs -->" of an existing report is kept.
Standard library only (csv, json, subprocess for gnuplot).
"""

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys

NOTES_MARK = "<!-- notes: kept across runs -->"
ENC_NAMES = {
    "learned": "learned (hierarchical beyond L)", "sinusoidal": "sinusoidal", "rope": "RoPE", "alibi": "ALiBi",
    "kerple": "KERPLE (log)", "t5": "T5 buckets", "xpos": "XPOS", "sandwich": "Sandwich",
    "rnn": "GRU before the blocks (rnn)", "floater": "FLOATER (RK4 ODE)", "complex-order": "complex-order",
    "learned_segmented": "learned, segmented (chunks of L)", "rope_window": "RoPE, sliding window L",
}
SCALING_NAMES = {
    "rope": "none (plain RoPE)", "rope_pi": "PI (s = len/L)", "rope_ntk": "NTK-aware (s = len/L)",
    "rope_dynamic-ntk": "dynamic NTK (s = 1)", "rope_yarn": "YaRN (s = len/L)", "rope_rerope": "ReRoPE (w = L/2)",
    "rope_leaky-rerope": "Leaky ReRoPE (w = L/2, k = 16)",
}


def read_eval(path):
    """length -> ppl from a `ctxlab eval --csv` file (None when missing)."""
    if not os.path.exists(path):
        return None
    with open(path, newline="") as f:
        return {int(r["length"]): float(r["ppl"]) for r in csv.DictReader(f)}


def read_rows(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fmt(v):
    return "—" if v is None else (f"{v:.2f}" if v < 1000 else f"{v:.3g}")


def table(rows, lengths, names, base=None):
    """Markdown table: name | ppl at each length | ppl(8L) / ppl(L)."""
    head = "| encoding | " + " | ".join(f"{n} ({'L' if i == 0 else str(2 ** i) + 'L'})" for i, n in enumerate(lengths))
    out = [head + " | 8L / L |", "|---|" + "---:|" * (len(lengths) + 1)]
    for key, d in rows:
        if d is None:
            continue
        ref = d.get(lengths[0], base)
        last = d.get(lengths[-1])
        ratio = f"{last / ref:.2f}" if (ref and last) else "—"
        cells = [fmt(d.get(n)) for n in lengths]
        out.append(f"| {names.get(key, key)} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(out)


def gnuplot(script):
    if not shutil.which("gnuplot"):
        print("report: gnuplot not found; skipping the PNGs (install gnuplot-nox)")
        return False
    p = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if p.returncode != 0:
        print("report: gnuplot failed:\n" + p.stderr[-1000:])
    return p.returncode == 0


def plot_lines(png, title, series, lengths, ylabel="perplexity (bytes)", logy=True):
    """series: [(label, {length: value})] -> PNG with log2 x axis."""
    dat = png[:-4] + ".dat"
    with open(dat, "w") as f:
        for label, d in series:
            f.write(f"# {label}\n")
            for n in lengths:
                if d and n in d:
                    f.write(f"{n} {d[n]}\n")
            f.write("\n\n")
    plots = ", ".join(f"'{dat}' index {i} with linespoints lw 2 pt 7 title '{label}'"
                      for i, (label, _) in enumerate(series))
    script = f"""set terminal pngcairo size 960,600 noenhanced
set output '{png}'
set title '{title}'
set logscale x 2
{'set logscale y' if logy else ''}
set xlabel 'evaluation length (tokens)'
set ylabel '{ylabel}'
set grid
set key outside right
set xtics ({", ".join(str(n) for n in lengths)})
plot {plots}
"""
    ok = gnuplot(script)
    os.remove(dat)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the study's output directory")
    ap.add_argument("--doc", required=True, help="the Markdown report to write")
    a = ap.parse_args()
    with open(os.path.join(a.out, "study.json")) as f:
        st = json.load(f)
    L = st["context"]
    lengths = [L, 2 * L, 4 * L, 8 * L]
    ev = lambda name: read_eval(os.path.join(a.out, "eval", name + ".csv"))  # noqa: E731
    encs = st["encodings"].split()
    res = {e: ev(e) for e in encs}
    res["learned_segmented"] = ev("learned_segmented")
    res["rope_window"] = ev("rope_window")
    scal = {k: ev(k) for k in SCALING_NAMES if k != "rope"}
    scal["rope"] = res.get("rope")
    ft, ft0, ftd = ev("rope_pi_ft"), ev("rope_pi_ft_step0"), ev("rope_direct_ft")
    timing = {r["stage"]: int(r["seconds"]) for r in read_rows(os.path.join(a.out, "timing.csv"))}
    doc_dir = os.path.dirname(os.path.abspath(a.doc))
    os.makedirs(doc_dir, exist_ok=True)

    # ---- plots ----
    plot_lines(os.path.join(doc_dir, "extrapolation.png"),
               f"Train at L = {L}, evaluate longer (validation split, byte-level perplexity)",
               [(ENC_NAMES.get(k, k), res.get(k)) for k in encs + ["learned_segmented", "rope_window"]], lengths)
    plot_lines(os.path.join(doc_dir, "rope_scaling.png"),
               f"RoPE model trained at L = {L}: context extension without training",
               [(SCALING_NAMES[k], scal.get(k)) for k in SCALING_NAMES] +
               [(f"PI + {st['ft_steps']}-step fine-tune at 4L", ft)], lengths)
    rope_L = res["rope"][L] if res.get("rope") else None
    curves = []
    for name, label in (("rope_pi_ft", "PI (s = 4) fine-tune"), ("rope_direct_ft", "direct fine-tune (no scaling)")):
        rows = read_rows(os.path.join(a.out, name, "val.csv"))
        pts = [(0, math.log(ft0[4 * L]) if (ft0 and name == "rope_pi_ft") else None)] if ft0 else []
        pts += [(int(r["step"]), float(r["val_loss"])) for r in rows]
        curves.append((label, [p for p in pts if p[1] is not None]))
    dat = os.path.join(doc_dir, "pi_finetune.dat")
    with open(dat, "w") as f:
        for label, pts in curves:
            f.write(f"# {label}\n" + "".join(f"{s} {v}\n" for s, v in pts) + "\n\n")
    hline = f"{math.log(rope_L):.6f}" if rope_L else "NaN"
    gnuplot(f"""set terminal pngcairo size 960,600 noenhanced
set output '{os.path.join(doc_dir, "pi_finetune.png")}'
set title 'Fine-tuning the RoPE model at 4L = {4 * L}: validation loss at 4L'
set xlabel 'fine-tune step'
set ylabel 'validation loss at 4L (nats / byte)'
set grid
plot '{dat}' index 0 with linespoints lw 2 pt 7 title '{curves[0][0]}', \\
     '{dat}' index 1 with linespoints lw 2 pt 5 title '{curves[1][0]}', \\
     {hline} with lines dt 2 lw 2 title 'pretrained RoPE at L (no extension)'
""")
    os.remove(dat)

    # ---- expected-shape checks (the list) ----
    def r(k, n):
        d = res.get(k) or scal.get(k)
        return d.get(n) if d else None

    checks = []

    def expect(text, ok, detail):
        checks.append(f"- {'✅' if ok else '❌'} {text} — {detail}")

    for k in ("sinusoidal", "learned"):
        if r(k, L) and r(k, 2 * L):
            expect(f"{k} degrades sharply past L", r(k, 2 * L) > 1.5 * r(k, L),
                   f"ppl {r(k, L):.2f} at L, {r(k, 2 * L):.2f} at 2L, {fmt(r(k, 8 * L))} at 8L")
    if r("rope", L) and r("rope", 4 * L):
        expect("RoPE degrades past L", r("rope", 4 * L) > 1.2 * r("rope", L),
               f"ppl {r('rope', L):.2f} at L, {r('rope', 4 * L):.2f} at 4L")
    for k in ("alibi", "kerple"):
        if r(k, L) and r(k, 8 * L):
            expect(f"{k} stays nearly flat", r(k, 8 * L) < 1.1 * r(k, L),
                   f"ppl {r(k, L):.2f} at L, {r(k, 8 * L):.2f} at 8L")
    if scal.get("rope_pi") and res.get("rope"):
        expect("PI without training beats plain RoPE at 4L", scal["rope_pi"][4 * L] < res["rope"][4 * L],
               f"{scal['rope_pi'][4 * L]:.2f} vs {res['rope'][4 * L]:.2f}")
    if ft and rope_L:
        expect("PI after the short fine-tune comes within ~10% of the model's perplexity at L",
               ft[4 * L] <= 1.10 * rope_L,
               f"fine-tuned at 4L: {ft[4 * L]:.2f}; pretrained at L: {rope_L:.2f} "
               f"({100 * (ft[4 * L] / rope_L - 1):+.1f}%)")
    for k in ("rope_ntk", "rope_yarn"):
        if scal.get(k) and res.get("rope"):
            better = all(scal[k][n] < res["rope"][n] for n in (2 * L, 4 * L, 8 * L))
            expect(f"{SCALING_NAMES[k].split(' (')[0]} improves on plain RoPE without training", better,
                   ", ".join(f"{n}: {scal[k][n]:.2f} vs {res['rope'][n]:.2f}" for n in (2 * L, 4 * L, 8 * L)))

    # ---- the report ----
    notes = ""
    if os.path.exists(a.doc):
        with open(a.doc) as f:
            old = f.read()
        if NOTES_MARK in old:
            notes = old.split(NOTES_MARK, 1)[1]
    total = timing.get("total")
    train_s = sum(v for k, v in timing.items() if k.startswith("train_"))
    quick = " (**--quick smoke run: tiny sizes, numbers are not meaningful**)" if st["quick"] else ""
    ft_rows = ""
    if ft:
        ft_rows = table([("rope", res.get("rope")), ("rope_pi_0", None), ("rope_pi", scal.get("rope_pi")),
                         ("rope_pi_ft", ft), ("rope_direct_ft", ftd)], lengths,
                        {"rope": "pretrained RoPE, no scaling", "rope_pi": "PI s = len/L, no training",
                         "rope_pi_ft": f"PI s = 4 + {st['ft_steps']} fine-tune steps at 4L",
                         "rope_direct_ft": f"no scaling + {st['ft_steps']} fine-tune steps at 4L"})
    md = f"""# Length extrapolation: train at L = {L}, evaluate at L, 2L, 4L, 8L

Produced by `examples/extrapolation_study.sh`{quick} and `examples/extrapolation_report.py`; every
number below comes from the CSVs of that run (`{os.path.relpath(a.out)}/eval/`).

**Setup.** The same GPT (d_model {st['d_model']}, {st['n_layers']} layers, {st['n_heads']} heads, byte tokens, tied
embeddings, LayerNorm) trained per encoding for {st['steps']} steps of {st['batch']} x {L} tokens (AdamW, lr
{st['lr']} with {st['warmup']} warmup steps and cosine decay to a tenth) on the training split of the shipped corpus
(`data/pride_and_prejudice.txt`, first 90%); evaluated with `ctxlab eval` on the validation split (last
10%, {'all' if not st['max_windows'] else 'the first ' + str(st['max_windows'])} non-overlapping windows of each
length; each window is evaluated on its own, positions 0..len-1). Perplexity is per byte. Wall time of
the study: {f'{total // 60} min {total % 60} s' if total else 'not recorded'} (pretraining {train_s // 60} min
{train_s % 60} s of it), 2 cores.

## 1. Encodings, no extension

![perplexity vs length](extrapolation.png)

{table([(k, res.get(k)) for k in encs + ["learned_segmented", "rope_window"]], lengths, ENC_NAMES)}

`learned` is evaluated beyond L with the hierarchical extension (POSENC_SPEC §1; the table has only
L rows). The survey's families run beyond L by their own construction: the GRU (`rnn`) recurs
over the whole window from h_0 = 0, FLOATER integrates its ODE further (position i is p(i dt)),
complex-order turns each word by t * omega at any t (POSENC_SPEC §5). The last two rows are the
baselines of the literature: every window cut into independent
chunks of L (`--segmented`), and sliding-window attention of width L (`--window {L}`).

## 2. The RoPE model with context-extension methods, no training

![rope scaling](rope_scaling.png)

{table([(k, scal.get(k)) for k in SCALING_NAMES], lengths, SCALING_NAMES, base=r("rope", L))}

PI, NTK-aware and YaRN use s = length / L at each length (the value a user would pick for that
length; at L they are plain RoPE, whose value fills the first column). Dynamic NTK recomputes its base
from the sequence length with s = 1. ReRoPE uses window L/2.

## 3. Position Interpolation fine-tune at 4L = {4 * L}

![PI fine-tune](pi_finetune.png)

{ft_rows}

`ctxlab finetune --rope-scaling pi --factor 4 --context {4 * L} --steps {st['ft_steps']} --lr {st['ft_lr']}`
(AdamW 0.9/0.95, no weight decay, short warmup, constant lr: the PI recipe scaled down). The
untuned PI model starts at perplexity {fmt(ft0.get(4 * L) if ft0 else None)} at 4L (step 0 of the curve).

## 4. Does it have the expected shape?

{chr(10).join(checks) if checks else '(no results)'}

## 5. Compared with the papers

- **ALiBi (Press et al. 2022), Tables 2–3**: on WikiText-103 with L = 512, sinusoidal perplexity
  explodes as soon as the input exceeds L, RoPE and T5 degrade more slowly, and ALiBi keeps improving
  slightly up to ~2L and stays flat (≤ +1–2%) out to 16L. Compare rows 1–8 of table 1: the ordering
  sinusoidal/learned ≫ RoPE > T5 > ALiBi ≈ KERPLE is the one to look for.
- **KERPLE (Chi et al. 2022), Table 3**: the log variant extrapolates at least as well as ALiBi
  (OpenWebText2, GitHub, ArXiv, trained at 512, tested to 16x) and T5 is close behind; XPOS and
  Sandwich sit between RoPE and ALiBi.
- **PI (Chen et al. 2023), Tables 1 and 3**: without fine-tuning, PI at s = 2–4 is already far
  better than plain RoPE beyond L (which explodes to perplexity > 10^3 on LLaMA), but worse than the
  model at its own L; after ~1000 steps of fine-tuning (Table 3: ~200 steps already recover most of
  it) the extended model is within a few percent of the original perplexity and keeps improving with
  the longer context. Direct fine-tuning without interpolation recovers far more slowly.
- **YaRN (Peng et al. 2023), Table 1**: without fine-tuning, NTK-aware and YaRN both beat PI at
  s = 2–4 on long inputs, and YaRN beats NTK-aware; dynamic scaling helps any of them beyond L.

{NOTES_MARK}{notes if notes else chr(10) + chr(10) + '## Notes' + chr(10) + chr(10) + '(what the numbers show, written after looking at them)' + chr(10)}"""
    with open(a.doc, "w") as f:
        f.write(md)
    print(f"report: wrote {a.doc} (+ extrapolation.png, rope_scaling.png, pi_finetune.png in {doc_dir})")
    print("\n".join(checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
