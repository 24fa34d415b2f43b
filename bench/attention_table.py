#!/usr/bin/env python3
"""The table of scripts/gpu_check.sh's `attention` section: the JSON lines of bench_attention_tc
(ctxlab's tensor-core attention) and bench/torch_attention.py (PyTorch's SDPA flash backend:
FlashAttention-2's kernel) from A B A B rounds on one GPU, as markdown: per shape the median
TFLOP/s of each (FlashAttention's count) and ctxlab / FlashAttention-2, forward + backward and
forward alone.

    attention_table.py attention.jsonl > attention.md
"""

import json
import statistics
import sys
from collections import defaultdict


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    runs = defaultdict(lambda: defaultdict(list))  # shape -> impl -> rows
    devices = set()
    with open(sys.argv[1]) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                shape = (r["B"], r["H"], r["T"], r["D"])
                runs[shape][r["impl"]].append(r)
            except (ValueError, KeyError) as e:
                print(f"attention_table.py: {sys.argv[1]}:{n}: not a result line ({e})", file=sys.stderr)
                return 1
            if r["impl"] != "ctxlab":
                devices.add(r["device"])
    print("# Attention alone, bf16, causal: ctxlab's tensor-core kernels against FlashAttention-2 (PyTorch SDPA flash)")
    print()
    print("| shape (B, H, T, D) | ctxlab fwd+bwd TFLOP/s | FlashAttention-2 (PyTorch SDPA) | ctxlab / FA2 "
          "| forward: ctxlab | FA2 | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for shape in sorted(runs, key=lambda s: (s[2], s[0])):
        by = runs[shape]
        peer = next((k for k in by if k != "ctxlab"), None)
        med = {k: {m: statistics.median(r[m] for r in by[k]) for m in ("fwd_bwd_tflops", "forward_tflops")}
               for k in by}
        c = med.get("ctxlab")
        p = med.get(peer) if peer else None

        def cell(d, m):
            return "-" if not d else f"{d[m]:.1f}" if d[m] >= 10 else f"{d[m]:.3g}"

        def ratio(m):
            return f"{c[m] / p[m]:.2f}" if c and p and p[m] > 0 else "-"

        print(f"| {shape} | {cell(c, 'fwd_bwd_tflops')} | {cell(p, 'fwd_bwd_tflops')} | {ratio('fwd_bwd_tflops')} "
              f"| {cell(c, 'forward_tflops')} | {cell(p, 'forward_tflops')} | {ratio('forward_tflops')} |")
    print()
    print(f"Medians over {max(len(v) for s in runs.values() for v in s.values())} rounds; "
          f"peer: {', '.join(sorted({k for s in runs.values() for k in s if k != 'ctxlab'})) or 'none'} "
          f"on {', '.join(sorted(devices)) or '?'}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
