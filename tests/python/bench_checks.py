#!/usr/bin/python3
"""Checks of the benchmark scripts (bench/): no timing, only what they compute and refuse.

- bench/roofline.py: the GEMM FLOPs of a step are exactly 6 x tokens x the matmul weights, the
  attention backward is 3.5x (ctxlab's two recomputing kernels) or 2.5x (FlashAttention-2) the
  forward, the padded attention is faster than the bank-conflicted one, and the summary that
  docs/results/gpu.md shows is the script's output, line for line.
- bench/gpu_compare.sh: bad arguments exit 2 naming the option; no GPU (no nvidia-smi, an
  nvidia-smi listing nothing, a torch without CUDA) exits 3 with the reason; --dry-run lists
  every run, A and B, in order.
- bench/ab_steps.sh: the pair ratios and medians from two commands' JSON; refusals.
- bench/compare.sh: bad --peer / --peer-mode / --precision exit 2 with the reason (before any
  run); compile mode refuses torch 1.13.
- bench/torch_peer.py (Debian's torch): --precision bf16 runs under autocast with fp32 master
  weights; --config gives the preset's model; tf32 off CUDA, --compile on 1.13 and a missing
  config are refused.
Run by ctest (tests/cli/bench_scripts.cmake), a few seconds.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import deps  # noqa: E402

deps.require("torch", "torch")
FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)


def run(cmd, env=None, timeout=120):
    e = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if env:
        e.update(env)
    p = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout, cwd=ROOT)
    return p.returncode, p.stdout, p.stderr


# ---------------------------------------------------------------- roofline.py
spec = importlib.util.spec_from_file_location("roofline", os.path.join(ROOT, "bench", "roofline.py"))
rl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rl)


class A:  # the script's defaults: GPT-2 small, B 8, T 1024
    batch, context, d_model, n_layers, n_heads, d_ff, vocab = 8, 1024, 768, 12, 12, 3072, 50304


for kernels in ("ctxlab-unpadded", "ctxlab", "target"):
    for prec in ("fp32", "tf32", "bf16"):
        a = A()
        a.kernels, a.precision = kernels, prec
        step, _ = rl.build(a)
        gemm = sum(r["flop"] for r in step.rows if r["unit"] == "gemm")
        Nm = a.n_layers * (4 * a.d_model ** 2 + 2 * a.d_model * a.d_ff) + a.vocab * a.d_model
        want = 6.0 * a.batch * a.context * Nm
        check(abs(gemm - want) <= 1e-12 * want, f"roofline {kernels} {prec}: GEMM FLOP {gemm:.6g} == 6 x tokens x N {want:.6g}")
        fwd = sum(r["flop"] for r in step.rows if r["name"].startswith("attention fwd"))
        bwd = sum(r["flop"] for r in step.rows if r["name"].startswith("attention bwd") and "rowdot" not in r["name"])
        ratio = 2.5 if kernels == "target" else 3.5
        check(abs(bwd / fwd - ratio) < 1e-12, f"roofline {kernels} {prec}: attention bwd / fwd FLOP {bwd / fwd:.3f} == {ratio}")
a = A()
a.precision = "fp32"
times = {}
for kernels in ("ctxlab-unpadded", "ctxlab"):
    a.kernels = kernels
    times[kernels] = rl.report(a, rl.H100_SXM, rl.FRAC, detail=False)[0]
check(times["ctxlab"] < times["ctxlab-unpadded"] / 3,
      f"roofline: padded attention tiles ({times['ctxlab']:.3f} s) well under the 32-way conflicted ones ({times['ctxlab-unpadded']:.3f} s)")
rc, out, err = run([sys.executable, "bench/roofline.py"])
doc = open(os.path.join(ROOT, "docs", "results", "gpu.md")).read()
summary = [l for l in out.splitlines() if l.startswith(("| ctxlab", "| target", "Device:", "Fractions"))]
check(rc == 0 and len(summary) == 11 and all(l in doc for l in summary),
      "roofline: docs/results/gpu.md shows the script's summary verbatim (rerun bench/roofline.py and paste it if not)")
rc, out, err = run([sys.executable, "bench/roofline.py", "--n-heads", "7"])
check(rc != 0 and "does not divide" in (out + err), "roofline: --n-heads 7 with d 768 is refused")

# ---------------------------------------------------------------- gpu_compare.sh
G = os.path.join(ROOT, "bench", "gpu_compare.sh")
for args, msg in ((["--rounds", "0"], "--rounds must be a positive integer"),
                  (["--models", "small,gpt3"], "--models: unknown 'gpt3'"),
                  (["--precisions", "fp16"], "--precisions: unknown 'fp16'"),
                  (["--peer-modes", "jit"], "--peer-modes: unknown 'jit'"),
                  (["--warmup", "1"], "compile needs --warmup 2"),
                  (["--steps"], "--steps needs a value"),
                  (["--bogus"], "unknown option '--bogus'")):
    rc, out, err = run([G] + args)
    check(rc == 2 and msg in err, f"gpu_compare.sh {' '.join(args)}: exit 2 with \"{msg}\" (got {rc}: {err.strip()[-120:]})")
tmp = tempfile.mkdtemp()
try:
    empty_smi = os.path.join(tmp, "empty")
    os.makedirs(empty_smi)
    with open(os.path.join(empty_smi, "nvidia-smi"), "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(os.path.join(empty_smi, "nvidia-smi"), 0o755)
    rc, out, err = run([G], env={"PATH": empty_smi + os.pathsep + os.environ["PATH"]})
    check(rc == 3 and "no GPU: nvidia-smi lists no device" in err, f"gpu_compare.sh: an nvidia-smi with no device -> exit 3 ({rc}: {err.strip()})")
    if not shutil.which("nvidia-smi", path="/usr/bin:/bin"):
        rc, out, err = run([G], env={"PATH": "/usr/bin:/bin"})
        check(rc == 3 and "no GPU: nvidia-smi is not installed" in err, f"gpu_compare.sh: no nvidia-smi -> exit 3 ({rc}: {err.strip()})")
    one_smi = os.path.join(tmp, "one")
    os.makedirs(one_smi)
    with open(os.path.join(one_smi, "nvidia-smi"), "w") as f:
        f.write("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-test)'\n")
    os.chmod(os.path.join(one_smi, "nvidia-smi"), 0o755)
    import torch
    if not torch.cuda.is_available():  # Debian's torch here: a GPU listed but torch cannot see it
        rc, out, err = run([G, "--peer", "/usr/bin/python3"], env={"PATH": one_smi + os.pathsep + os.environ["PATH"]})
        check(rc == 3 and "has no CUDA device" in err, f"gpu_compare.sh: GPU listed, torch without CUDA -> exit 3 ({rc}: {err.strip()})")
    rc, out, err = run([G, "--dry-run", "--rounds", "2", "--peer", "/usr/bin/python3", "--out", os.path.join(tmp, "t.md")],
                       env={"PATH": empty_smi + os.pathsep + os.environ["PATH"]})
    runs = [l for l in out.splitlines() if l.startswith("  [")]
    check(rc == 0 and len(runs) == 2 * 2 * 2 * 2 * 2, f"gpu_compare.sh --dry-run: 32 runs (2 models x 2 precisions x 2 modes x 2 rounds x A,B), got {len(runs)}")
    check(len(runs) == 32 and all(("A: " in runs[i]) == (i % 2 == 0) for i in range(len(runs)))
          and "--device cuda --config" in runs[-1] and runs[-1].endswith("--warmup 3") and "--compile" in runs[-1]
          and "--precision bf16" in runs[-2], "gpu_compare.sh --dry-run: A B alternate, the last pair is gpt2 bf16 compiled")
    check(not os.path.exists(os.path.join(tmp, "t.md")), "gpu_compare.sh --dry-run writes no table")
    rc, out, err = run([G, "--dry-run", "--rounds", "2", "--peer", "/usr/bin/python3", "--posencs", "alibi,t5",
                        "--peer-modes", "flex", "--precisions", "bf16"], env={"PATH": empty_smi + os.pathsep + os.environ["PATH"]})
    runs = [l for l in out.splitlines() if l.startswith("  [")]
    check(rc == 0 and len(runs) == 2 * 2 * 2 * 2 and all("--posenc " in l for l in runs)
          and all("--attention flex --compile" in l for l in runs[1::2]) and "--posenc t5" in runs[-1],
          f"gpu_compare.sh --posencs alibi,t5 --peer-modes flex: 16 runs, both programs given the encoding, the peer "
          f"FlexAttention compiled ({rc}: {len(runs)} runs, {err.strip()[-120:]})")
    rc, out, err = run([G, "--posencs", "alibi,fire"])
    check(rc == 2 and "--posencs: unknown 'fire'" in err, f"gpu_compare.sh --posencs alibi,fire: refused naming it ({rc}: {err.strip()})")

    # ------------------------------------------------------------ gpu_check.sh / gpu_pack.sh (no GPU needed)
    GC, GP = os.path.join(ROOT, "scripts", "gpu_check.sh"), os.path.join(ROOT, "scripts", "gpu_pack.sh")
    rc, out, err = run([GC])
    check(rc == 2 and "compare-bias" in out and "report" in out, f"gpu_check.sh without OUTDIR: the usage, exit 2 ({rc})")
    gcout = os.path.join(tmp, "gc")
    rc, out, err = run([GC, gcout, "env", "tests", "report"], env={"GPU_CHECK_BUDGET_S": "15"})
    rep = [f for f in os.listdir(gcout) if f.startswith("gpu-") and f.endswith(".md")] if os.path.isdir(gcout) else []
    text = open(os.path.join(gcout, rep[0])).read() if rep else ""
    check(rc == 2 and "not run (budget): section env" in out and "not run (budget): section tests" in out
          and "not run (budget)" in text, f"gpu_check.sh in a 15 s budget: env and tests not run, counted as failed (exit 2), "
          f"the report says so ({rc}: {out.strip()[-200:]})")
    rc, out, err = run([GP, tmp, os.path.join(tmp, "x.tar.xz")])
    check(rc == 2 and "has no libctxlab_cuda.so" in err and not os.path.exists(os.path.join(tmp, "x.tar.xz")),
          f"gpu_pack.sh on a directory without the CUDA module: refused, nothing written ({rc}: {err.strip()})")

    # ------------------------------------------------------------ compare.sh (refusals first)
    C = os.path.join(ROOT, "bench", "compare.sh")
    for args, msg in ((["--peer-mode", "jit"], "--peer-mode must be eager or compile"),
                      (["--precision", "fp16"], "--precision must be fp32 or bf16"),
                      (["--peer", "/nonexistent/python"], "is not an executable python"),
                      (["--peer", "debian", "--peer-mode", "compile"], "has no torch.compile"),
                      (["--config", "/nonexistent/model.json"], "--config: no such file")):
        rc, out, err = run([C] + args)
        check(rc == 2 and msg in err, f"compare.sh {' '.join(args)}: exit 2 with \"{msg}\" (got {rc}: {err.strip()[-120:]})")

    # ------------------------------------------------------------ ab_steps.sh (arithmetic, refusals)
    AB = os.path.join(ROOT, "bench", "ab_steps.sh")
    fake = lambda ms: f"echo '{{\"ms_per_step\":{{\"median\":{ms}}}}}'"
    rc, out, err = run([AB, "2", fake(10), fake(4)])
    check(rc == 0 and sum(l.startswith("pair") and l.endswith("A/B 2.5") for l in out.splitlines()) == 2 and "median pair ratio A/B 2.500" in out,
          f"ab_steps.sh: 2 pairs of 10 / 4 ms -> ratio 2.500 ({rc}: {out.strip()[-160:]} {err.strip()[-120:]})")
    rc, out, err = run([AB, "1", "true", fake(4)])
    check(rc == 1 and "no bench JSON line (ms_per_step) from: true" in err, f"ab_steps.sh: a command without bench's JSON -> exit 1 naming it ({rc}: {err.strip()})")
    rc, out, err = run([AB, "0", "true", "true"])
    check(rc == 2 and "usage" in err, f"ab_steps.sh 0 pairs -> exit 2 with the usage ({rc}: {err.strip()})")

    # ------------------------------------------------------------ torch_peer.py (Debian's torch)
    P = [sys.executable, os.path.join(ROOT, "bench", "torch_peer.py")]
    base = ["--preset", "tiny", "--steps", "1", "--warmup", "1", "--batch", "2", "--context", "16", "--threads", "1"]
    rc, out, err = run(P + base + ["--precision", "bf16"])
    j = json.loads(out) if rc == 0 else {}
    check(rc == 0 and j.get("precision") == "bf16" and "autocast" in (j.get("autocast") or "")
          and 5.0 < j.get("final_loss", 0) < 6.2, f"torch_peer --precision bf16: runs under autocast, loss ~ ln 256 ({rc}: {err.strip()[-200:]})")
    cfg = os.path.join(tmp, "tiny.json")
    with open(cfg, "w") as f:
        json.dump({"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4, "context": 64}, f)
    rc2, out2, err2 = run(P + base[2:] + ["--config", cfg])
    rc1, out1, err1 = run(P + base)
    j1, j2 = (json.loads(out1) if rc1 == 0 else {}), (json.loads(out2) if rc2 == 0 else {})
    check(rc1 == 0 and rc2 == 0 and j1.get("params") == j2.get("params") and j1.get("final_loss") == j2.get("final_loss"),
          f"torch_peer --config (tiny's fields) == --preset tiny: params {j1.get('params')} / {j2.get('params')}, "
          f"loss {j1.get('final_loss')} / {j2.get('final_loss')}")
    # the config's dropout is applied (embedding, probabilities, residual branches, as nn/gpt.cpp)
    cfgd = os.path.join(tmp, "tiny_dropout.json")
    with open(cfgd, "w") as f:
        json.dump({"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4, "context": 64, "dropout": 0.3}, f)
    rc3, out3, err3 = run(P + base[2:] + ["--config", cfgd])
    j3 = json.loads(out3) if rc3 == 0 else {}
    check(rc3 == 0 and rc2 == 0 and j3.get("params") == j2.get("params") and j3.get("final_loss") != j2.get("final_loss"),
          f"torch_peer --config with dropout 0.3: runs, another loss than without ({j3.get('final_loss')} vs "
          f"{j2.get('final_loss')}; {rc3}: {err3.strip()[-160:]})")
    # t5 in the peer: loss and every gradient against torch_ref in float64
    rc, out, err = run(P + ["--preset", "tiny", "--posenc", "t5", "--check"])
    check(rc == 0 and "check t5 attention=manual" in err and "-> OK" in err, f"torch_peer --posenc t5 --check ({rc}: {err.strip()[-160:]})")
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
        has_flex = True
    except ImportError:
        has_flex = False
    if not has_flex:  # Debian's torch 1.13 (FlexAttention itself runs on a GPU: scripts/gpu_check.sh)
        rc, out, err = run(P + base + ["--posenc", "alibi", "--attention", "flex"])
        check(rc == 1 and "--attention flex needs torch >= 2.5" in err, f"torch_peer --attention flex on torch {torch.__version__}: refused ({rc}: {err.strip()[-120:]})")
    rc, out, err = run(P + base + ["--posenc", "shaw", "--attention", "flex"])
    check(rc == 1 and ("is not covered" in err or "needs torch >= 2.5" in err), f"torch_peer --posenc shaw --attention flex: refused ({rc}: {err.strip()[-120:]})")
    for args, msg in ((["--precision", "tf32"], "--precision tf32 is a CUDA mode"),
                      (["--config", os.path.join(tmp, "missing.json")], "missing.json"),
                      (["--compile"] if not hasattr(torch, "compile") else ["--compile", "--warmup", "1"],
                       "needs torch 2.x" if not hasattr(torch, "compile") else "needs --warmup 2")):
        rc, out, err = run(P + base + args)
        check(rc == 1 and msg in err, f"torch_peer {' '.join(args)}: refused with \"{msg}\" ({rc}: {err.strip()[-120:]})")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

print(f"{len(FAILS)} failure(s)" if FAILS else "all bench script checks passed")
sys.exit(1 if FAILS else 0)
