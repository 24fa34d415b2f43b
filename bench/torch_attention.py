#!/usr/bin/env python3
"""The peer of bench/attention_tc.cpp: PyTorch's causal scaled_dot_product_attention in bf16 on
CUDA, on its flash backend (FlashAttention-2's kernel, as PyTorch ships it) unless --backend says
otherwise, at the same shapes: FlashAttention-2's benchmark (head dim 64, 32 heads, batch x seqlen =
16k tokens) and GPT-2 small's attention (--gpt2). Forward alone and forward + backward (dout given,
q, k, v requiring gradients), ms per call (median and best of rounds of --calls calls, each round
ended by a synchronize) and TFLOP/s by FlashAttention's count; one JSON line per shape with the
keys bench_attention_tc writes, so that scripts/gpu_check.sh's `attention` section pairs them.

    torch_attention.py [--seqlens 512,1024,...] [--tokens 16384] [--heads 32] [--dim 64] [--gpt2]
                       [--repeats 10] [--calls 5] [--backend flash|efficient|cudnn|math] [--json FILE]

Exit 2 without torch or without a CUDA device (the message says which).
"""

import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--gpt2", action="store_true")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--backend", default="flash", choices=["flash", "efficient", "cudnn", "math"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a smoke run of this script")
    ap.add_argument("--json", help="also append the JSON lines to this file")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(f"torch_attention.py: PyTorch is not importable ({e})", file=sys.stderr)
        return 2
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_attention.py: no CUDA device", file=sys.stderr)
        return 2
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
               "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[a.backend]
    shapes = []
    for t in (int(x) for x in a.seqlens.split(",")):
        if a.tokens % t:
            print(f"torch_attention.py: --tokens {a.tokens} is not a multiple of seqlen {t}", file=sys.stderr)
            return 2
        shapes.append((f"seqlen {t}", a.tokens // t, a.heads, t, a.dim))
    if a.gpt2:
        shapes.append(("gpt2-small", 8, 12, 1024, 64))
    dev = torch.device(a.device)
    name = torch.cuda.get_device_name(dev) if a.device == "cuda" else "cpu"
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    print(f"torch_attention.py: torch {torch.__version__} on {name}, sdpa backend {a.backend}, causal, bf16; "
          f"{a.repeats} rounds of {a.calls} calls; ms per call, median (best)")
    lines = []
    for label, B, H, T, D in shapes:
        g = torch.Generator(device=dev).manual_seed(1)
        q, k, v, dout = (torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(4))
        for x in (q, k, v):
            x.requires_grad_(True)

        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwd_bwd():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.backward(dout)

        times = {"forward": [], "fwd_bwd": []}
        with sdpa_kernel(backend):
            for r in range(-1, a.repeats):  # one warm-up round, then A B rounds alternating
                order = [("forward", fwd), ("fwd_bwd", fwd_bwd)]
                if r % 2:
                    order.reverse()
                for key, f in order:
                    sync()
                    t0 = time.perf_counter()
                    for _ in range(a.calls):
                        f()
                    sync()
                    if r >= 0:
                        times[key].append((time.perf_counter() - t0) * 1e3 / a.calls)
        flop = 4.0 * B * H * T * T * D / 2
        f_ms, fb_ms = statistics.median(times["forward"]), statistics.median(times["fwd_bwd"])
        print(f"{label:<12} {B:5d} {H:4d} {T:6d} {D:4d} | {f_ms:7.3f} ({min(times['forward']):7.3f}) "
              f"{flop / f_ms / 1e9:8.1f} | {fb_ms:7.3f} ({min(times['fwd_bwd']):7.3f}) {3.5 * flop / fb_ms / 1e9:8.1f}")
        lines.append(json.dumps({"impl": f"torch-sdpa-{a.backend}", "device": name, "B": B, "H": H, "T": T, "D": D,
                                 "forward_ms": round(f_ms, 4), "fwd_bwd_ms": round(fb_ms, 4),
                                 "forward_tflops": round(flop / f_ms / 1e9, 2),
                                 "fwd_bwd_tflops": round(3.5 * flop / fb_ms / 1e9, 2), "torch": torch.__version__}))
    for line in lines:
        print(line)
    if a.json:
        with open(a.json, "a") as f:
            f.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
