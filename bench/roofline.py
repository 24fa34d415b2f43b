#!/usr/bin/env python3
"""Roofline estimate on paper of one training step of a GPT on one GPU (default: GPT-2 small,
B 8, T 1024, on an H100 SXM5), kernel by kernel: FLOPs, HBM bytes, the time each takes at a stated
fraction of the datasheet peaks, which bound it hits, the total, tokens/s and MFU.

Three kernel sets are modelled:
  ctxlab  -- the kernels core/cuda/*.cu has today (docs/results/gpu.md lists what they do):
             GEMMs through cuBLAS (fp32 SIMT, TF32 or bf16 tensor cores), unfused elementwise
             kernels, the bias written into C before a beta=1 GEMM, fused attention on CUDA
             cores (one warp per query row, K/V tiles of 32 in shared memory, rows padded to
             Dh + 1 floats so the lane-strided q.k and dO.v dot products are conflict-free),
             backward by recomputation in two kernels (dq; dk+dv), fused AdamW over flat tiles.
  ctxlab-unpadded -- ctxlab before the padding (tile rows Dh floats apart: a 32-way bank
             conflict in those dot products when Dh is a multiple of 32, bound by shared-memory
             wavefronts, not by FMAs); kept to show what the padding bought.
  target  -- the same step with FlashAttention-2-style attention on tensor cores and the
             elementwise work fused into GEMM epilogues / prologues (bias+GELU, bias+residual,
             LN in one pass), what a tuned implementation (llm.c, torch.compile) does.
Nothing here is measured. Usage:
    bench/roofline.py                       # the tables docs/results/gpu.md shows
    bench/roofline.py --precision bf16 --kernels target --batch 16

--counters FILE replaces the formulas by counts: FILE is what the CUDA emulator wrote under
CTXLAB_EMU_COUNTERS=FILE (core/cuda/emu/emu_counters.h), one record per kernel launch (global
sectors per warp request, shared-memory wavefronts, distinct bytes, mma instructions) or cuBLAS
call (FLOPs, operand bytes). Each launch's roofline time on the datasheet peaks is
max(distinct DRAM bytes / HBM bandwidth, FLOPs / their peak, wavefronts / the SMs' shared-memory
rate); kernels' own SIMT arithmetic is not counted (bytes-, wavefront- and tensor-bound only).
Counted under the emulator: estimates, not measurements.
    CTXLAB_EMU_COUNTERS=c.json build-emu/ctxlab train --device cuda ...
    bench/roofline.py --counters c.json [--per-launch] [--skip N] [--minus c_fewer_steps.json]
"""
import json
import argparse
import sys

# NVIDIA H100 Tensor Core GPU datasheet (H100 SXM5 column), dense (without sparsity):
H100_SXM = {
    "name": "H100 SXM5 80 GB",
    "fp32_tflops": 66.9,      # FP32 (CUDA cores)
    "tf32_tflops": 494.7,     # TF32 Tensor Core, dense (989 with sparsity)
    "bf16_tflops": 989.4,     # BF16 Tensor Core, dense (1,979 with sparsity)
    "f16_tflops": 989.4,      # FP16 Tensor Core, dense
    "fp64_tensor_tflops": 66.9,  # FP64 Tensor Core
    "hbm_tbps": 3.35,         # HBM3 bandwidth, TB/s
    "sms": 132, "boost_ghz": 1.98,  # 66.9 TFLOPS = 132 SMs x 128 FP32 lanes x 2 x 1.98 GHz
    # shared memory: 32 banks x 4 bytes per clock per SM (CUDA C++ Programming Guide,
    # "Shared Memory" of compute capability 9.0) = one warp-wide wavefront per clock
    "smem_wavefronts_per_clk": 1,
}

# Fractions of peak assumed attainable (stated in the doc; change them with the flags):
FRAC = {
    "gemm_tensor": 0.70,   # cuBLAS(Lt) on these shapes (K, N >= 768), tensor cores
    "gemm_simt": 0.80,     # cuBLAS SGEMM on CUDA cores
    "hbm": 0.80,           # streaming elementwise / row kernels
    "smem": 0.80,          # the shared-memory wavefront rate the attention kernels reach
    "fa2": 0.50,           # FlashAttention-2 style on tensor cores (FA2 reports ~35-70% on A100/H100)
}


class Step:
    def __init__(self, a):
        self.a = a
        self.rows = []

    def add(self, name, count, flop, hbm, unit, smem_wf=0.0, note=""):
        """unit: 'gemm' (tensor or SIMT by precision), 'simt' (CUDA-core math), 'mem' (streaming),
        'fa2' (tensor-core attention). flop / hbm / smem_wf are per call."""
        self.rows.append(dict(name=name, count=count, flop=flop * count, hbm=hbm * count,
                              smem=smem_wf * count, unit=unit, note=note))

    def times(self, hw, frac):
        p = self.a.precision
        gemm_peak = {"fp32": hw["fp32_tflops"] * frac["gemm_simt"],
                     "tf32": hw["tf32_tflops"] * frac["gemm_tensor"],
                     "bf16": hw["bf16_tflops"] * frac["gemm_tensor"]}[p] * 1e12
        simt_peak = hw["fp32_tflops"] * 1e12  # elementwise math: never the bound here
        fa2_peak = (hw["bf16_tflops"] if p == "bf16" else hw["tf32_tflops"] if p == "tf32"
                    else hw["fp32_tflops"]) * frac["fa2"] * 1e12
        bw = hw["hbm_tbps"] * 1e12 * frac["hbm"]
        wf_rate = hw["sms"] * hw["smem_wavefronts_per_clk"] * hw["boost_ghz"] * 1e9 * frac["smem"]
        out = []
        for r in self.rows:
            peak = {"gemm": gemm_peak, "simt": simt_peak, "mem": simt_peak, "fa2": fa2_peak}[r["unit"]]
            t_c = r["flop"] / peak
            t_m = r["hbm"] / bw
            t_s = r["smem"] / wf_rate
            t = max(t_c, t_m, t_s)
            bound = "compute" if t == t_c else "memory" if t == t_m else "shared mem"
            out.append(dict(r, t=t, bound=bound))
        return out


def build(a):
    B, T, D, L, H, F, V = a.batch, a.context, a.d_model, a.n_layers, a.n_heads, a.d_ff, a.vocab
    Dh = D // H
    N = B * T
    f4 = 4                                  # fp32 activations (ctxlab keeps them fp32 in bf16 mode too)
    g = 2 if a.precision == "bf16" else 4   # bytes of a GEMM operand as the GEMM reads it
    s = Step(a)
    target = a.kernels == "target"
    bf16 = a.precision == "bf16"
    # shared-memory wavefronts per 32 lane-FMAs of a lane-strided dot product (q.k, dO.v): one
    # broadcast + one conflict-free read with the K / V / Q / dO tiles padded to Dh + 1 floats
    # per row (ctxlab), or one broadcast + a 32-way conflicted row read without the padding
    # (ctxlab-unpadded, Dh a multiple of 32)
    cf = 33 if a.kernels == "ctxlab-unpadded" else 2

    def gemm(name, count, M, Nn, K, bias=False, out_accumulate=False, note=""):
        """C[M, Nn] = A[M, K] B[K, Nn]: 2 M Nn K FLOP; reads A, B (+ C when beta = 1), writes C.
        bf16: both operands cast from fp32 first (read 4, write 2 bytes each, one kernel each)."""
        flop = 2.0 * M * Nn * K
        beta1 = (bias and not target) or out_accumulate
        hbm = g * (M * K + K * Nn) + f4 * M * Nn * (2 if beta1 else 1)
        s.add(name, count, flop, hbm, "gemm", note=note)
        if bias and not target:  # ctxlab: bias broadcast into C, then the GEMM with beta = 1
            s.add(name + ": bias into C", count, 0, f4 * (M * Nn + Nn), "mem")
        if bf16 and not target:  # target: the producers write bf16 copies (fused)
            s.add(name + ": cast A, B to bf16", count, M * K + K * Nn, (f4 + 2) * (M * K + K * Nn), "mem")

    def ew(name, count, elems, reads, writes, flop_per=1.0):
        s.add(name, count, flop_per * elems, f4 * elems * (reads + writes), "mem")

    # ---------------------------------------------------------------- forward
    ew("embedding: gather wte rows + add wpe", 1, N * D, 2, 1, 1)
    for _ in (0,):
        ln = "layernorm fwd (x -> y, mean, rstd)"
        ew(ln, L, N * D, 1, 1, 8)
        gemm("QKV GEMM fwd  [N,D]x[D,3D]", L, N, 3 * D, D, bias=True)
        if not target:
            ew("split heads (qkv -> q, k, v [B,H,T,Dh])", L, 3 * N * D, 1, 1, 0)
        att_flop = 2 * 2.0 * B * H * (T * (T + 1) / 2) * Dh      # q.k and p.v over the causal half
        att_hbm = f4 * (4 * N * D + B * H * T)                      # q, k, v in; o, lse out
        if target:
            s.add("attention fwd (FA2, tensor cores)", L, att_flop, att_hbm, "fa2")
        else:
            fma_half = att_flop / 4                                 # FMAs of one of the two products
            # q.k: per 32 lane-FMAs one broadcast load of q + 32 conflicted loads of K (33 wavefronts);
            # p.v: one broadcast of p + one conflict-free row of V (2 wavefronts)
            wf = fma_half / 32 * (cf + 2)
            s.add("attention fwd (CUDA cores, smem-bound)", L, att_flop, att_hbm, "simt", wf)
            ew("merge heads (o -> [N, D])", L, N * D, 1, 1, 0)
        gemm("out-proj GEMM fwd [N,D]x[D,D]", L, N, D, D, bias=True)
        ew("residual add", L, N * D, 2, 1)
        ew("layernorm fwd (x -> y, mean, rstd)", L, N * D, 1, 1, 8)
        gemm("MLP up GEMM fwd [N,D]x[D,4D]", L, N, F, D, bias=True)
        if not target:
            ew("GELU fwd (tanh)", L, N * F, 1, 1, 16)
        gemm("MLP down GEMM fwd [N,4D]x[4D,D]", L, N, D, F, bias=True)
        ew("residual add", L, N * D, 2, 1)
    ew("final layernorm fwd", 1, N * D, 1, 1, 8)
    gemm("LM head GEMM fwd [N,D]x[D,V] (tied)", 1, N, V, D)
    ew("cross-entropy fwd (logsumexp per row)", 1, N * V, 1, 0, 4)
    # ---------------------------------------------------------------- backward
    ew("cross-entropy bwd (softmax - onehot -> dlogits)", 1, N * V, 1, 1, 4)
    gemm("LM head GEMM bwd dX [N,V]x[V,D]", 1, N, D, V)
    gemm("LM head GEMM bwd dW [V,N]x[N,D]", 1, V, D, N, out_accumulate=True,
         note="accumulates into the tied wte gradient")
    ew("final layernorm bwd (dx; dgamma/dbeta partials)", 1, N * D, 3, 1, 10)
    for kind in ("MLP down", "MLP up", "out-proj", "QKV"):
        M, Nn, K = {"MLP down": (N, D, F), "MLP up": (N, F, D), "out-proj": (N, D, D),
                    "QKV": (N, 3 * D, D)}[kind]
        gemm(f"{kind} GEMM bwd dX", L, M, K, Nn)
        gemm(f"{kind} GEMM bwd dW", L, Nn, K, M)
        if not target:  # bias gradient: column sums of dY
            ew(f"{kind} bias grad (column sum)", L, M * Nn, 1, 0, 1)
        if kind == "MLP down" and not target:
            ew("GELU bwd", L, N * F, 2, 1, 20)
        if kind in ("MLP up", "QKV"):
            ew("layernorm bwd (dx; dgamma/dbeta partials)", L, N * D, 3, 1, 10)
            ew("residual: gradient accumulate", L, N * D, 2, 1)
        if kind == "out-proj":
            if target:
                s.add("attention bwd (FA2, tensor cores)", L, 2.5 * att_flop,
                      f4 * (8 * N * D + 2 * B * H * T), "fa2")
            else:
                ew("merge heads bwd", L, N * D, 1, 1, 0)
                ew("attention bwd: rowdot D = sum(dO * O)", L, N * D, 2, 0, 2)
                fma_half = att_flop / 4
                # dq kernel: q.k and dO.v conflicted (33 each), dS.K clean (2);
                # dk/dv kernel: q.k and dO.v conflicted (33 each), P^T dO and dS^T Q clean (2 each)
                wf_dq = fma_half / 32 * (cf + cf + 2)
                wf_dkdv = fma_half / 32 * (cf + cf + 2 + 2)
                s.add("attention bwd dq (recompute S, dP; dS K)", L, 3 * att_flop / 2,
                      f4 * (4 * N * D + 2 * B * H * T), "simt", wf_dq)
                s.add("attention bwd dk,dv (recompute S, dP; P^T dO, dS^T Q)", L, 4 * att_flop / 2,
                      f4 * (5 * N * D + 2 * B * H * T), "simt", wf_dkdv)
                ew("split heads bwd (dq, dk, dv -> dqkv)", L, 3 * N * D, 1, 1, 0)
    ew("embedding bwd: wpe grad + index_add into wte grad", 1, N * D, 2, 1, 1)
    # ---------------------------------------------------------------- optimizer
    P = L * (4 * D * D + 2 * D * F + 4 * D + F + 4 * D) + V * D + a.context * D + 2 * D
    s.add("grad norm: sum of squares over all grads", 1, 2.0 * P, 4.0 * P, "mem")
    s.add("AdamW (fused, flat): p, g, m, v in; p, m, v out", 1, 12.0 * P, 28.0 * P, "mem")
    return s, P


def model_flop_per_token(a):
    D, L, F, V, T = a.d_model, a.n_layers, a.d_ff, a.vocab, a.context
    Nm = L * (4 * D * D + 2 * D * F) + V * D
    return 6.0 * Nm + 12.0 * L * T * D


def fmt_si(x, unit):
    for k, s in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= k:
            return f"{x / k:.2f} {s}{unit}"
    return f"{x:.0f} {unit}"


def report(a, hw, frac, detail=True):
    s, P = build(a)
    rows = s.times(hw, frac)
    total = sum(r["t"] for r in rows)
    tok = a.batch * a.context / total
    peak = {"fp32": hw["fp32_tflops"], "tf32": hw["tf32_tflops"], "bf16": hw["bf16_tflops"]}[a.precision]
    mfu = model_flop_per_token(a) * tok / (peak * 1e12)
    out = []
    if detail:
        out.append(f"### {a.kernels} kernels, {a.precision}: B {a.batch}, T {a.context}, d {a.d_model}, "
                   f"{a.n_layers} layers, {a.n_heads} heads, V {a.vocab} ({P / 1e6:.1f} M parameters)\n")
        out.append("| kernel | calls | FLOP | HBM bytes | smem wavefronts | bound | ms | share |")
        out.append("|---|---|---|---|---|---|---|---|")
        merged = {}
        for r in rows:  # same-named rows (e.g. the two residual adds) are summed
            m = merged.setdefault(r["name"], dict(r, t=0.0, flop=0.0, hbm=0.0, smem=0.0, count=0))
            for k in ("t", "flop", "hbm", "smem", "count"):
                m[k] += r[k]
            m["bound"] = r["bound"]
        for r in merged.values():
            out.append(f"| {r['name']} | {r['count']} | {fmt_si(r['flop'], 'FLOP')} | {fmt_si(r['hbm'], 'B')} | "
                       f"{fmt_si(r['smem'], '') if r['smem'] else '-'} | {r['bound']} | {1e3 * r['t']:.3f} | "
                       f"{100 * r['t'] / total:.1f}% |")
        flop = sum(r["flop"] for r in rows)
        hbm = sum(r["hbm"] for r in rows)
        groups = {}
        for r in rows:
            key = ("attention" if "attention" in r["name"] else "GEMM" if r["unit"] == "gemm"
                   else "optimizer" if r["name"].startswith(("AdamW", "grad norm")) else "elementwise/row")
            groups[key] = groups.get(key, 0.0) + r["t"]
        out.append(f"| **total** | | {fmt_si(flop, 'FLOP')} | {fmt_si(hbm, 'B')} | | | **{1e3 * total:.2f}** | 100% |\n")
        out.append("time by group: " + ", ".join(f"{k} {1e3 * v:.2f} ms ({100 * v / total:.0f}%)"
                                                 for k, v in sorted(groups.items(), key=lambda kv: -kv[1])))
        out.append(f"\n**{1e3 * total:.2f} ms per step, {tok:,.0f} tokens/s, MFU {100 * mfu:.1f}%** "
                   f"(6N + 12 L T D = {model_flop_per_token(a) / 1e6:.1f} MFLOP/token against the "
                   f"{a.precision} dense peak {peak} TFLOPS)\n")
    return total, tok, mfu, "\n".join(out)


def launch_time(r, hw):
    """Roofline seconds of one counted record on hw's datasheet peaks, and its bound."""
    peak = {"bf16": hw["bf16_tflops"], "f16": hw["f16_tflops"], "tf32": hw["tf32_tflops"],
            "f64": hw["fp64_tensor_tflops"]}
    t_c = sum(f / (peak[t] * 1e12) for t, f in r["tensor_flops"].items()) + r["fp32_flops"] / (hw["fp32_tflops"] * 1e12)
    t_m = (r["dram_read_bytes"] + r["dram_write_bytes"]) / (hw["hbm_tbps"] * 1e12)
    t_s = r["shared_wavefronts"] / (hw["sms"] * hw["smem_wavefronts_per_clk"] * hw["boost_ghz"] * 1e9)
    t = max(t_c, t_m, t_s)
    return t, ("compute" if t == t_c and t > 0 else "memory" if t == t_m else "shared mem")


def ratio(ideal, actual):
    return f"{ideal / actual:.2f}" if actual else "-"


def aggregate(recs, hw, per_launch, sign=1):
    """Records summed per kernel name (or one row per launch), each row's roofline time the sum of
    its launches'; sign -1 subtracts (--minus)."""
    rows = {}
    for i, r in enumerate(recs):
        key = i if per_launch else r["kernel"]
        m = rows.setdefault(key, dict(kernel=r["kernel"], shapes=set(), calls=0, t=0.0, bounds=set(),
                                      **{k: 0 for k in COUNTED}))
        m["calls"] += sign
        m["shapes"].add(("x".join(map(str, r["grid"])) + " x " + "x".join(map(str, r["block"])))
                        if r["grid"][0] else "(cuBLAS)")
        for k in COUNTED:
            m[k] += sign * (r[k] if not isinstance(r[k], dict) else sum(r[k].values()))
        t, bound = launch_time(r, hw)
        m["t"] += sign * t
        m["bounds"].add(bound)
    return rows


def counted_report(path, hw, per_launch, skip, minus):
    """The counted records of `path` as markdown: per kernel name (or per launch), their
    coalescing (ideal / actual sectors), shared-memory efficiency (ideal / actual wavefronts),
    bytes, FLOPs and roofline time. Records before index `skip` are left out; with `minus`, the
    per-kernel sums of that file are subtracted (a run of n + 1 steps minus one of n steps: the
    records of one warm step, whatever the first step and the end of a run add)."""
    with open(path) as f:
        recs = json.load(f)[skip:]
    if not recs:
        sys.exit(f"roofline.py: no records in {path} (after --skip {skip})")
    rows = aggregate(recs, hw, per_launch)
    if minus:
        with open(minus) as f:
            for key, m in aggregate(json.load(f), hw, False, -1).items():
                if key not in rows:
                    sys.exit(f"roofline.py: {minus} has kernel {key}, which {path} has not")
                for k in ("calls", "t", *COUNTED):
                    rows[key][k] += m[k]
                if rows[key]["calls"] < 0:
                    sys.exit(f"roofline.py: {minus} has more launches of {key} than {path}")
        rows = {k: m for k, m in rows.items() if m["calls"] > 0}
    total = sum(m["t"] for m in rows.values())
    calls = sum(m["calls"] for m in rows.values())
    what = f"{path} minus {minus}" if minus else path
    out = [f"Counted under the CUDA emulator ({what}, {calls} records): estimates on the {hw['name']} "
           "datasheet peaks, not measurements.\n",
           "| kernel | grid x block | calls | global ld / st efficiency | shared efficiency | DRAM bytes "
           "(distinct) | FLOP (tensor + fp32) | bound | roofline us | share |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for m in sorted(rows.values(), key=lambda m: -m["t"]):
        shape = next(iter(m["shapes"])) if len(m["shapes"]) == 1 else f"{len(m['shapes'])} shapes"
        ld = ratio(m["ld_ideal_sectors"], m["ld_sectors"])
        st = ratio(m["st_ideal_sectors"], m["st_sectors"])
        out.append(f"| {m['kernel']} | {shape} | {m['calls']} | "
                   f"{ld} / {st} | {ratio(m['shared_ideal_wavefronts'], m['shared_wavefronts'])} | "
                   f"{fmt_si(m['dram_read_bytes'] + m['dram_write_bytes'], 'B')} | "
                   f"{fmt_si(m['tensor_flops'] + m['fp32_flops'], 'FLOP')} | {'/'.join(sorted(m['bounds']))} | "
                   f"{1e6 * m['t']:.1f} | {100 * m['t'] / total if total else 0:.1f}% |")
    out.append(f"| **total** | | {calls} | | | | | | **{1e6 * total:.1f}** | 100% |")
    return "\n".join(out)


# The count fields summed per kernel (dicts by type are summed over their types).
COUNTED = ("ld_requests", "ld_sectors", "ld_ideal_sectors", "st_requests", "st_sectors", "st_ideal_sectors",
           "atom_requests", "atom_sectors", "atom_ideal_sectors", "bytes_read", "bytes_written",
           "dram_read_bytes", "dram_write_bytes", "shared_requests", "shared_wavefronts",
           "shared_ideal_wavefronts", "mma", "tensor_flops", "fp32_flops")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--n-layers", type=int, default=12)
    ap.add_argument("--n-heads", type=int, default=12)
    ap.add_argument("--d-ff", type=int, help="default 4 d_model")
    ap.add_argument("--vocab", type=int, default=50304, help="default 50304 (GPT-2's 50257 padded to 64)")
    ap.add_argument("--precision", choices=("fp32", "tf32", "bf16"), help="one precision (default: all)")
    ap.add_argument("--kernels", choices=("ctxlab-unpadded", "ctxlab", "target"),
                    help="one kernel set (default: all three)")
    for k, v in FRAC.items():
        ap.add_argument(f"--frac-{k.replace('_', '-')}", type=float, default=v, help=f"default {v}")
    ap.add_argument("--counters", metavar="FILE", help="report the emulator's counted records instead (see above)")
    ap.add_argument("--per-launch", action="store_true", help="with --counters: one row per launch")
    ap.add_argument("--skip", type=int, default=0, help="with --counters: leave out the first N records")
    ap.add_argument("--minus", metavar="FILE2", help="with --counters: subtract FILE2's per-kernel sums")
    a = ap.parse_args()
    if a.counters:
        if a.minus and a.per_launch:
            sys.exit("roofline.py: --minus sums per kernel; it cannot be combined with --per-launch")
        print(counted_report(a.counters, H100_SXM, a.per_launch, max(0, a.skip), a.minus))
        return
    a.d_ff = a.d_ff or 4 * a.d_model
    for name in ("batch", "context", "d_model", "n_layers", "n_heads", "d_ff", "vocab"):
        if getattr(a, name) < 1:
            sys.exit(f"roofline.py: --{name.replace('_', '-')} must be at least 1")
    if a.d_model % a.n_heads:
        sys.exit(f"roofline.py: --n-heads {a.n_heads} does not divide --d-model {a.d_model}")
    frac = {k: getattr(a, "frac_" + k) for k in FRAC}
    for k, v in frac.items():
        if not 0 < v <= 1:
            sys.exit(f"roofline.py: --frac-{k.replace('_', '-')} must be in (0, 1], got {v}")
    hw = H100_SXM
    precs = [a.precision] if a.precision else ["fp32", "tf32", "bf16"]
    kerns = [a.kernels] if a.kernels else ["ctxlab-unpadded", "ctxlab", "target"]
    print(f"Device: {hw['name']} (datasheet, dense): FP32 {hw['fp32_tflops']} TFLOPS, TF32 {hw['tf32_tflops']}, "
          f"BF16 {hw['bf16_tflops']}, HBM3 {hw['hbm_tbps']} TB/s; {hw['sms']} SMs at {hw['boost_ghz']} GHz, "
          f"shared memory 1 wavefront (128 B) per clock per SM.")
    print("Fractions of peak assumed: " + ", ".join(f"{k} {v:.2f}" for k, v in frac.items()) + "\n")
    summary = ["| kernels | precision | ms / step | tokens/s | MFU |", "|---|---|---|---|---|"]
    details = []
    for k in kerns:
        for p in precs:
            a.kernels, a.precision = k, p
            total, tok, mfu, text = report(a, hw, frac)
            summary.append(f"| {k} | {p} | {1e3 * total:.1f} | {tok:,.0f} | {100 * mfu:.1f}% |")
            details.append(text)
    print("\n".join(summary) + "\n")
    print("\n".join(details))


if __name__ == "__main__":
    main()
