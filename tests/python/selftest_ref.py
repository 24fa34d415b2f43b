#!/usr/bin/python3
"""Self-test of the PyTorch reference (torch_ref.py) and st_io.py, without ctxlab.

    /usr/bin/python3 tests/python/selftest_ref.py [-k SUBSTRING] [-v]

Checks, all in float64:
  * gradients: torch.autograd.gradcheck of the full model on a tiny config for every
    encoding (fast mode over all parameters, full mode over the encoding's own parameters
    and the attention input bias), at T = context and T > context where allowed; and that
    loss_and_grads returns exactly those gradients for every parameter;
  * the encodings against independent formulas: RoPE logits depend only on i - j and
    equal an explicit complex-number form (both pairings), HF's rotate_half form, ReRoPE /
    leaky ReRoPE against rotations at (fractional) positions, YaRN against HF's
    `_compute_yarn_parameters`, NTK/dynamic-NTK bases, xPos scale against torchscale and its
    i - j invariance, ALiBi slopes (H = 8: 1/2..1/256; H = 12: fairseq), T5 buckets against
    HF and hand values, DeBERTa buckets against DeBERTa-v2, Sandwich against its formula,
    Shaw / XL / DeBERTa / TUPE logits against per-(i, j) loops, hierarchical learned
    positions, KERPLE's in-place projection; rnn against torch.nn.GRU, FLOATER with zero /
    constant dynamics and against a fine integration, complex-order with zero frequencies
    (the token embedding) and against the complex form z e^{i omega t};
  * config parsing (defaults, unknown keys, bad values), length limits, init shapes and
    statistics, checkpoint and safetensors round trips and the reader's validation.

Prints one line per test and exits non-zero if any fails; a missing torch fails too (77, skipped, only where
CTXLAB_ALLOW_MISSING=torch: tests/python/deps.py).
"""

import argparse
import json
import math
import os
import struct
import sys
import tempfile
import traceback
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import deps  # noqa: E402

deps.require("torch", "numpy", "torch")  # fails (exit 1) when missing, unless allowed: 77
import numpy as np  # noqa: E402
import torch  # noqa: E402

import st_io
import torch_ref as R

torch.set_default_dtype(torch.float64)
DT = torch.float64

TINY = {"vocab_size": 11, "d_model": 8, "n_layers": 1, "n_heads": 2, "d_ff": 12,
        "context": 6, "norm_eps": 1e-5, "dropout": 0.0}

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def close(a, b, tol, what=""):
    a, b = torch.as_tensor(a, dtype=DT), torch.as_tensor(b, dtype=DT)
    scale = max(float(b.abs().max()), 1e-300) if b.numel() else 1.0
    err = float((a - b).abs().max()) / scale if a.numel() else 0.0
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e}"


def draw_params(cfg, seed, dtype=DT):
    """Parameters with O(1) effects everywhere (as the parity driver draws them)."""
    gen = torch.Generator().manual_seed(seed)
    P = {}
    for s in R.param_specs(cfg):
        fan_in = s.shape[-1]
        init = {"embedding": ("normal", 0.5), "logit_table": ("normal", 0.5),
                "linear": ("normal", 1 / math.sqrt(fan_in)),
                "residual": ("normal", 0.5 / math.sqrt(fan_in)),
                "bias": ("normal", 0.1), "norm_bias": ("normal", 0.1),
                "norm_weight": ("normal", 0.1)}.get(s.role, s.init)
        t = R.sample_init(init, s.shape, gen, dtype)
        P[s.name] = t + 1 if s.role == "norm_weight" else t
    if "pe.r1" in P:  # keep KERPLE away from its clamps (no projection in gradcheck)
        P["pe.r1"] = P["pe.r1"].clamp(min=0.05)
        P["pe.r2"] = P["pe.r2"].clamp(min=0.05, max=1.9)
    return P


def tokens_for(cfg, T, seed):
    return np.random.default_rng(seed).integers(0, cfg["vocab_size"], size=(2, T + 1))


def tiny(posenc, **over):
    return {**TINY, "posenc": posenc, **over}


def enc_of(cfg):
    return R.make_encoding(R.parse_config(cfg))


# ---------------------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------------------
L = TINY["context"]
GRAD_CASES = {
    "none": ({"type": "none"}, (L, L + 3)),
    "learned": ({"type": "learned"}, (L,)),
    "learned-hier": ({"type": "learned", "hierarchical": True}, (L + 3,)),
    "sinusoidal": ({"type": "sinusoidal"}, (L, L + 3)),
    "rope": ({"type": "rope"}, (L, L + 3)),
    "rope-interleaved": ({"type": "rope", "pairing": "interleaved"}, (L + 3,)),
    "rope-pi": ({"type": "rope", "scaling": {"type": "pi", "factor": 2.0}}, (L + 3,)),
    "rope-ntk": ({"type": "rope", "scaling": {"type": "ntk", "factor": 2.0}}, (L + 3,)),
    "rope-dynamic-ntk": ({"type": "rope", "scaling": {"type": "dynamic-ntk", "factor": 2.0}}, (L + 3,)),
    "rope-yarn": ({"type": "rope", "scaling": {"type": "yarn", "factor": 4.0, "beta_slow": 0.25}}, (L + 3,)),
    "rope-rerope": ({"type": "rope", "scaling": {"type": "rerope"}}, (L + 3,)),
    "rope-leaky-rerope": ({"type": "rope", "scaling": {"type": "leaky-rerope", "window": 2,
                                                       "factor": 3.0}}, (L + 3,)),
    "rope-logn": ({"type": "rope", "scaling": {"type": "pi", "factor": 2.0, "original_context": 3,
                                               "log_n": True}}, (L + 3,)),
    "xpos": ({"type": "xpos", "scale_base": 4.0}, (L, L + 3)),
    "alibi": ({"type": "alibi"}, (L + 3,)),
    "kerple": ({"type": "kerple"}, (L + 3,)),
    "kerple-power": ({"type": "kerple", "variant": "power"}, (L + 3,)),
    "sandwich": ({"type": "sandwich"}, (L + 3,)),
    "t5": ({"type": "t5", "num_buckets": 4, "max_distance": 6}, (L + 3,)),
    "shaw": ({"type": "shaw", "max_relative_position": 2}, (L + 3,)),
    "xl": ({"type": "xl"}, (L + 3,)),
    "deberta": ({"type": "deberta", "position_buckets": 4, "max_relative_positions": 6}, (L + 3,)),
    "tupe": ({"type": "tupe"}, (L,)),
    "rnn": ({"type": "rnn"}, (L + 3,)),
    "floater": ({"type": "floater", "hidden": 5, "dt": 0.3, "substeps": 2}, (L + 3,)),
    "complex-order": ({"type": "complex-order"}, (L + 3,)),
}


def make_grad_test(name, posenc, lengths):
    def fn():
        for norm in ("layernorm", "rmsnorm"):
            cfg = tiny(posenc, norm=norm, tie_embeddings=(norm == "layernorm"))
            enc_names = {s.name for s in enc_of(cfg).shared_specs() + enc_of(cfg).layer_specs(0)}
            for T in lengths:
                seed = zlib.crc32(f"{name}/{norm}/{T}".encode())
                P = draw_params(cfg, seed)
                tok = tokens_for(cfg, T, seed)
                names = list(P)

                def loss_of(*xs, fixed=P, which=names):
                    return R.forward_loss(cfg, {**fixed, **dict(zip(which, xs))}, tok)

                xs = [P[n].clone().requires_grad_(True) for n in names]
                assert torch.autograd.gradcheck(loss_of, xs, fast_mode=True), "fast gradcheck"
                sel = sorted(enc_names) + ["blocks.0.attn.qkv.bias"]
                ys = [P[n].clone().requires_grad_(True) for n in sel]
                assert torch.autograd.gradcheck(lambda *y: loss_of(*y, which=sel), ys,
                                                eps=1e-6, atol=1e-5, rtol=1e-3), "full gradcheck"
                # loss_and_grads returns autograd's gradient of that loss for every parameter
                loss, grads = R.loss_and_grads(cfg, {n: t.clone() for n, t in P.items()}, tok)
                ref = torch.autograd.grad(loss_of(*xs), xs)
                assert set(grads) == set(P)
                assert abs(loss - float(loss_of(*xs))) <= 1e-12 * abs(loss)
                for n, g in zip(names, ref):
                    assert grads[n].shape == P[n].shape and grads[n].dtype == DT
                    close(grads[n], g, 1e-12, n)
    fn.__name__ = f"gradcheck[{name}]"
    return fn


for _name, (_pe, _lengths) in GRAD_CASES.items():
    test(make_grad_test(_name, _pe, _lengths))


# ---------------------------------------------------------------------------------------
# Rotary family
# ---------------------------------------------------------------------------------------
def rope_scores(posenc, T, d=8, same_rows=False, seed=0):
    """Logits [T, T] of one head for random q, k (identical rows if same_rows)."""
    cfg = {**TINY, "d_model": 2 * d, "n_heads": 2, "context": 8, "posenc": posenc}
    g = torch.Generator().manual_seed(seed)
    shape = (1, 1, 1 if same_rows else T, d)
    q = torch.randn(shape, generator=g).expand(1, 1, T, d)
    k = torch.randn(shape, generator=g).expand(1, 1, T, d)
    return enc_of(cfg).scores(q, k, {}, 0)[0, 0], q[0, 0], k[0, 0], enc_of(cfg)


def assert_toeplitz(S, tol, what):
    T = S.shape[0]
    scale = float(S.abs().max())
    for i in range(1, T):
        for j in range(i):
            err = abs(float(S[i, j] - S[i - 1, j - 1])) if j > 0 else 0.0
            err = max(err, abs(float(S[i, j] - S[i - j, 0])))
            assert err <= tol * scale, f"{what}: S[{i},{j}] differs from S[{i - j},0]"


@test
def rope_logits_depend_only_on_i_minus_j():
    for pe in ({"type": "rope"}, {"type": "rope", "pairing": "interleaved"},
               {"type": "rope", "scaling": {"type": "pi", "factor": 3.0}},
               {"type": "rope", "scaling": {"type": "ntk", "factor": 3.0}},
               {"type": "rope", "scaling": {"type": "dynamic-ntk", "factor": 3.0}},
               {"type": "rope", "scaling": {"type": "yarn", "factor": 3.0}},
               {"type": "xpos", "scale_base": 8.0}):
        S, *_ = rope_scores(pe, 20, same_rows=True)
        assert_toeplitz(S, 1e-5, json.dumps(pe))


def complex_pairs(x, pairing):
    a, b = R.split_pairs(x, pairing)
    return torch.complex(a, b)


@test
def rope_matches_complex_form():
    """(R_i q) . (R_j k) = Re(sum_k q_k conj(k_k) e^{i (i-j) theta_k}) * scale."""
    for pairing in ("half", "interleaved"):
        T, d = 12, 8
        S, q, k, enc = rope_scores({"type": "rope", "pairing": pairing, "base": 100.0}, T, d)
        theta = torch.tensor([100.0 ** (-2 * kk / d) for kk in range(d // 2)])
        pos = torch.arange(T, dtype=DT)
        rel = pos[:, None] - pos[None, :]
        z = complex_pairs(q, pairing)[:, None, :] * complex_pairs(k, pairing).conj()[None, :, :]
        ref = (z * torch.exp(1j * rel[:, :, None] * theta)).real.sum(-1) / math.sqrt(d)
        close(S, ref, 2e-6, pairing)


@test
def rope_half_matches_hf_rotate_half():
    x = torch.randn(3, 5, 8)
    ang = torch.rand(5, 4) * 6
    cos, sin = torch.cos(ang), torch.sin(ang)
    C, S = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    rotate_half = torch.cat([-x[..., 4:], x[..., :4]], -1)
    close(R.rotate(x, cos, sin, "half"), x * C + rotate_half * S, 1e-15, "half")
    # RoFormer interleaved, written out
    y = R.rotate(x, cos, sin, "interleaved")
    close(y[..., 0::2], x[..., 0::2] * cos - x[..., 1::2] * sin, 1e-15, "interleaved even")
    close(y[..., 1::2], x[..., 1::2] * cos + x[..., 0::2] * sin, 1e-15, "interleaved odd")


@test
def rope_theta_tables_are_float32_powf():
    enc = enc_of(tiny({"type": "rope", "base": 10000.0}, d_model=16))
    th, m = enc.theta(4)
    assert th.dtype == np.float32 and m == 1.0
    ref = np.float32(1) / np.power(np.float32(10000), np.arange(0, 8, 2, dtype=np.float32) / np.float32(8))
    assert np.allclose(th, ref, rtol=2e-7, atol=0)


@test
def rope_scaling_bases():
    d, L, s, base = 8, 16, 2.0, 10000.0
    cfg = lambda sc: {**TINY, "d_model": 2 * d, "context": L, "posenc": {"type": "rope", "scaling": sc}}
    th0 = R.inv_freqs(base, d, range(d // 2)).astype(np.float64)
    pi, _ = enc_of(cfg({"type": "pi", "factor": s})).theta(20)
    assert np.allclose(pi, th0 / s, rtol=1e-6)
    ntk, _ = enc_of(cfg({"type": "ntk", "factor": s})).theta(20)
    b2 = base * s ** (d / (d - 2))
    assert np.allclose(ntk, [b2 ** (-2 * k / d) for k in range(d // 2)], rtol=1e-5)
    dyn = enc_of(cfg({"type": "dynamic-ntk", "factor": s}))
    assert np.array_equal(dyn.theta(L)[0], R.inv_freqs(base, d, range(d // 2)))
    T = 24
    b3 = base * (s * T / L - (s - 1)) ** (d / (d - 2))
    assert np.allclose(dyn.theta(T)[0], [b3 ** (-2 * k / d) for k in range(d // 2)], rtol=1e-5)


@test
def yarn_matches_hf():
    """HF `_compute_yarn_parameters`, transcribed."""
    for d, L, factor, bf, bs in ((8, 16, 4.0, 32, 0.25), (32, 64, 2.0, 32, 1), (16, 2048, 8.0, 32, 1)):
        base = 10000.0
        sc = {"type": "yarn", "factor": factor, "beta_fast": bf, "beta_slow": bs}
        enc = enc_of({**TINY, "d_model": 2 * d, "context": L, "posenc": {"type": "rope", "scaling": sc}})
        theta, m = enc.theta(L)

        def fcd(n):
            return (d * math.log(L / (n * 2 * math.pi))) / (2 * math.log(base))
        low, high = max(math.floor(fcd(bf)), 0), min(math.ceil(fcd(bs)), d - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        pos_freqs = base ** (torch.arange(0, d, 2).float() / d)
        extra, inter = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
        ef = 1 - ramp
        hf = inter * (1 - ef) + extra * ef
        assert np.allclose(theta, hf.numpy(), rtol=1e-6), (theta, hf)
        assert abs(m - (0.1 * math.log(factor) + 1.0)) < 1e-12
    # the attention factor scales logits by m^2
    pe = {"type": "rope", "scaling": {"type": "yarn", "factor": 4.0}}
    pe_m1 = {"type": "rope", "scaling": {"type": "yarn", "factor": 4.0, "attention_factor": 1.0}}
    S, *_ = rope_scores(pe, 10)
    S1, *_ = rope_scores(pe_m1, 10)
    close(S, S1 * (0.1 * math.log(4.0) + 1) ** 2, 1e-12, "m^2")


def rotated_dot(q, k, pq, pk, theta, pairing):
    """(R_pq q) . (R_pk k) for float positions, in float64."""
    def rot(x, p):
        a = p * theta
        return R.rotate(x, torch.cos(a), torch.sin(a), pairing)
    return float(rot(q, pq) @ rot(k, pk))


@test
def rerope_and_leaky_rerope():
    T, d = 14, 8
    for pairing in ("half", "interleaved"):
        plain, *_ = rope_scores({"type": "rope", "pairing": pairing}, T, d, seed=3)
        for kind, w, kf in (("rerope", 5, None), ("leaky-rerope", 4, 3.0)):
            sc = {"type": kind, "window": w}
            if kf:
                sc["factor"] = kf
            S, q, k, enc = rope_scores({"type": "rope", "pairing": pairing, "scaling": sc}, T, d, seed=3)
            theta = torch.as_tensor(enc.theta(T)[0].astype(np.float64))
            for i in range(T):
                for j in range(i + 1):
                    if i - j < w:
                        ref = float(plain[i, j])            # ordinary RoPE inside the window
                    elif kind == "rerope":                  # R_w q . k
                        ref = rotated_dot(q[i], k[j], w, 0, theta, pairing) / math.sqrt(d)
                    else:                                   # relative w + (i - j - w) / k
                        ref = rotated_dot(q[i], k[j], i / kf + w * (1 - 1 / kf), j / kf,
                                          theta, pairing) / math.sqrt(d)
                    assert abs(float(S[i, j]) - ref) <= 1e-5 * max(1.0, abs(ref)), (kind, pairing, i, j)


@test
def log_n_scales_queries():
    T = 10
    base, *_ = rope_scores({"type": "rope", "scaling": {"type": "pi", "factor": 2.0,
                                                        "original_context": 4}}, T)
    S, *_ = rope_scores({"type": "rope", "scaling": {"type": "pi", "factor": 2.0,
                                                     "original_context": 4, "log_n": True}}, T)
    f = torch.tensor([max(1.0, math.log(i + 1) / math.log(4)) for i in range(T)])
    close(S, base * f[:, None], 1e-6, "log_n")


@test
def xpos_scale_matches_torchscale():
    d, T, gamma = 8, 11, 512.0
    enc = enc_of(tiny({"type": "xpos"}, d_model=2 * d))
    s = enc.xpos_scale(T)
    scale = (torch.arange(0, d, 2) + 0.4 * d) / (1.4 * d)
    min_pos = -T // 2
    ref = scale ** torch.arange(min_pos, min_pos + T, 1).to(scale).div(gamma)[:, None]
    assert np.allclose(s, ref.numpy(), rtol=1e-6)
    assert min_pos == math.floor(-T / 2)


# ---------------------------------------------------------------------------------------
# Additive biases
# ---------------------------------------------------------------------------------------
def fairseq_slopes(n):
    def pow2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return pow2(n)
    c = 2 ** math.floor(math.log2(n))
    return pow2(c) + fairseq_slopes(2 * c)[0::2][: n - c]


@test
def alibi_slopes():
    assert list(R.alibi_slopes(8)) == [2.0 ** -i for i in range(1, 9)]
    expect12 = [2.0 ** -i for i in range(1, 9)] + [2.0 ** -(i + 0.5) for i in range(4)]
    assert np.allclose(R.alibi_slopes(12), expect12, rtol=1e-7, atol=0)
    for H in (1, 2, 3, 4, 5, 6, 7, 12, 16, 20):
        assert np.allclose(R.alibi_slopes(H), fairseq_slopes(H), rtol=1e-6, atol=0), H
    enc = enc_of(tiny({"type": "alibi"}, n_heads=4, d_model=8))
    B = enc.bias(5, {}, DT)
    assert float(B[1, 4, 1]) == -(2.0 ** -4) * 3


def hf_t5_bucket(n, num_buckets, max_distance):
    """HF T5 `_relative_position_bucket(bidirectional=False)`, transcribed."""
    rp = -torch.min(-n, torch.zeros_like(n))
    max_exact = num_buckets // 2
    is_small = rp < max_exact
    large = max_exact + (torch.log(rp.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return torch.where(is_small, rp, large)


@test
def t5_buckets():
    b = [R.t5_bucket(n, 32, 128) for n in range(400)]
    assert b[:16] == list(range(16))
    assert (b[16], b[20], b[32], b[64], b[127], b[128], b[399]) == (16, 17, 21, 26, 31, 31, 31), b
    assert all(x <= y for x, y in zip(b, b[1:]))
    for nb, md in ((32, 128), (8, 12), (4, 6), (64, 256)):
        hf = hf_t5_bucket(torch.arange(2000), nb, md).tolist()
        ours = [R.t5_bucket(n, nb, md) for n in range(2000)]
        diff = [n for n in range(2000) if hf[n] != ours[n]]
        assert not diff, f"nb={nb} md={md}: differs from HF at n={diff[:5]}"


def deberta_log_bucket(relative_pos, bucket_size, max_position):
    """DeBERTa-v2 `make_log_bucket_position`, transcribed."""
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = torch.where((relative_pos < mid) & (relative_pos > -mid),
                          torch.tensor(mid - 1).type_as(relative_pos), torch.abs(relative_pos))
    log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid))
                         * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * sign).to(torch.long)


@test
def deberta_buckets():
    for A, M in ((32, 128), (8, 16), (4, 6), (256, 512)):
        x = torch.arange(-700, 701, dtype=torch.float32)
        ref = deberta_log_bucket(x, A, M).tolist()
        ours = [R.deberta_bucket(int(v), A, M) for v in x.tolist()]
        assert ours == ref, (A, M)
        assert all(R.deberta_bucket(v, A, M) == -R.deberta_bucket(-v, A, M) for v in range(700))


@test
def kerple_projection_in_place():
    for variant in ("log", "power"):
        cfg = tiny({"type": "kerple", "variant": variant})
        P = draw_params(cfg, 1)
        P["pe.r1"] = torch.tensor([-1.0, 0.5])
        P["pe.r2"] = torch.tensor([0.001, 3.0])
        r1, r2 = P["pe.r1"], P["pe.r2"]
        tok = tokens_for(cfg, 9, 1)
        _, g = R.loss_and_grads(cfg, P, tok)
        assert P["pe.r1"] is r1 and r1.tolist() == [0.01, 0.5]
        assert r2.tolist() == ([0.01, 3.0] if variant == "log" else [0.01, 2.0])
        # the gradient is the ordinary one at the projected values (not masked)
        Q = {n: t.clone().requires_grad_(True) for n, t in P.items()}
        R.forward_loss(cfg, Q, tok).backward()
        close(g["pe.r1"], Q["pe.r1"].grad, 1e-12, "r1")
        close(g["pe.r2"], Q["pe.r2"].grad, 1e-12, "r2")
        assert float(g["pe.r1"][0]) != 0 and float(g["pe.r2"][0]) != 0
        # biases against the formulas
        enc = enc_of(cfg)
        B = enc.bias(7, P, DT)
        for h in range(2):
            for delta in range(7):
                a, b = float(P["pe.r1"][h]), float(P["pe.r2"][h])
                ref = -a * math.log(1 + b * delta) if variant == "log" else -a * delta ** b
                assert abs(float(B[h, 6, 6 - delta]) - ref) < 1e-12


@test
def sandwich_formula():
    d, H, T = 8, 4, 30
    enc = enc_of(tiny({"type": "sandwich"}, d_model=d * H, n_heads=H))
    B = enc.bias(T, {}, DT)
    for h in range(H):
        for delta in range(T):
            ref = (sum(math.cos(delta * 10000 ** (-2 * k / d)) for k in range(1, d // 2 + 1)) - d / 2) \
                * H / (8 * (h + 1))
            assert abs(float(B[h, T - 1, T - 1 - delta]) - ref) < 1e-5
    assert float(B[:, 3, 3].abs().max()) < 1e-12 and float(B.max()) <= 1e-12


# ---------------------------------------------------------------------------------------
# Content-position encodings against per-(i, j) loops
# ---------------------------------------------------------------------------------------
def qkv_inputs(cfg, T, seed=0):
    c = R.parse_config(cfg)
    g = torch.Generator().manual_seed(seed)
    H, d = c["n_heads"], R.head_dim(c)
    return (torch.randn(2, H, T, d, generator=g), torch.randn(2, H, T, d, generator=g), c, H, d)


@test
def shaw_loops():
    K, T = 2, 7
    cfg = tiny({"type": "shaw", "max_relative_position": K})
    q, k, c, H, d = qkv_inputs(cfg, T)
    P = draw_params(cfg, 2)
    enc = enc_of(cfg)
    S = enc.scores(q, k, P, 0)
    p = torch.softmax(torch.randn(2, H, T, T), -1)
    v = torch.randn(2, H, T, d)
    o = enc.values(p, v, P, 0)
    rk, rv = P["blocks.0.attn.pe.rel_k"], P["blocks.0.attn.pe.rel_v"]
    for b in range(2):
        for h in range(H):
            for i in range(T):
                acc = torch.zeros(d)
                for j in range(T):
                    r = min(max(j - i, -K), K) + K
                    ref = float(q[b, h, i] @ (k[b, h, j] + rk[r])) / math.sqrt(d)
                    assert abs(float(S[b, h, i, j]) - ref) < 1e-12
                    acc += p[b, h, i, j] * (v[b, h, j] + rv[r])
                close(o[b, h, i], acc, 1e-12, "shaw values")
    # under the causal mask only rows 0..K get a gradient
    _, g = R.loss_and_grads(cfg, P, tokens_for(cfg, T, 2))
    for name in ("blocks.0.attn.pe.rel_k", "blocks.0.attn.pe.rel_v"):
        assert float(g[name][K + 1:].abs().max()) == 0 and float(g[name][:K + 1].abs().min()) > 0


@test
def xl_loops():
    T = 7
    cfg = tiny({"type": "xl"})
    q, k, c, H, d = qkv_inputs(cfg, T)
    P = draw_params(cfg, 3)
    S = enc_of(cfg).scores(q, k, P, 0)
    D = c["d_model"]
    W, u, vb = P["blocks.0.attn.pe.r_net.weight"], P["pe.r_w_bias"], P["pe.r_r_bias"]
    for b in range(2):
        for h in range(H):
            for i in range(T):
                for j in range(i + 1):
                    r = i - j
                    Rr = torch.tensor([math.sin(r * 10000 ** (-2 * kk / D)) for kk in range(D // 2)]
                                      + [math.cos(r * 10000 ** (-2 * kk / D)) for kk in range(D // 2)])
                    wr = (W @ Rr)[h * d:(h + 1) * d]
                    ref = (float((q[b, h, i] + u[h]) @ k[b, h, j]) + float((q[b, h, i] + vb[h]) @ wr)) / math.sqrt(d)
                    assert abs(float(S[b, h, i, j]) - ref) < 1e-6 * max(1, abs(ref))


@test
def deberta_loops():
    T, A, M = 9, 4, 6
    cfg = tiny({"type": "deberta", "position_buckets": A, "max_relative_positions": M})
    q, k, c, H, d = qkv_inputs(cfg, T)
    P = draw_params(cfg, 4)
    S = enc_of(cfg).scores(q, k, P, 0)
    D = c["d_model"]
    E = P["pe.rel_embeddings.weight"]
    mu, var = E.mean(-1, keepdim=True), E.var(-1, unbiased=False, keepdim=True)
    rel = (E - mu) / torch.sqrt(var + c["norm_eps"]) * P["pe.rel_norm.weight"] + P["pe.rel_norm.bias"]
    W, bias = P["blocks.0.attn.qkv.weight"], P["blocks.0.attn.qkv.bias"]
    Qr, Kr = rel @ W[:D].T + bias[:D], rel @ W[D:2 * D].T + bias[D:2 * D]
    for b in range(2):
        for h in range(H):
            sl = slice(h * d, (h + 1) * d)
            for i in range(T):
                for j in range(T):
                    x = i - j
                    mid = A // 2
                    bk = x if abs(x) <= mid else int(math.copysign(
                        mid + math.ceil(math.log(abs(x) / mid) / math.log((M - 1) / mid) * (mid - 1)), x))
                    idx = min(max(bk + A, 0), 2 * A - 1)
                    ref = (float(q[b, h, i] @ k[b, h, j]) + float(q[b, h, i] @ Kr[idx, sl])
                           + float(k[b, h, j] @ Qr[idx, sl])) / math.sqrt(3 * d)
                    assert abs(float(S[b, h, i, j]) - ref) < 1e-12 * max(1, abs(ref)), (i, j)


@test
def tupe_loops():
    T = 6
    cfg = tiny({"type": "tupe"})
    q, k, c, H, d = qkv_inputs(cfg, T)
    P = draw_params(cfg, 5)
    S = enc_of(cfg).scores(q, k, P, 0)
    D = c["d_model"]
    E = P["pe.pos_emb.weight"]
    mu, var = E.mean(-1, keepdim=True), E.var(-1, unbiased=False, keepdim=True)
    pt = (E - mu) / torch.sqrt(var + c["norm_eps"]) * P["pe.pos_norm.weight"] + P["pe.pos_norm.bias"]
    U = pt @ P["pe.pos_proj.weight"].T + P["pe.pos_proj.bias"]
    for b in range(2):
        for h in range(H):
            for i in range(T):
                for j in range(i + 1):
                    pos = float(U[i, h * d:(h + 1) * d] @ U[j, D + h * d:D + (h + 1) * d])
                    ref = (float(q[b, h, i] @ k[b, h, j]) + pos) / math.sqrt(2 * d) \
                        + float(P["pe.rel_bias.weight"][R.t5_bucket(i - j, 32, 128), h])
                    assert abs(float(S[b, h, i, j]) - ref) < 1e-12 * max(1, abs(ref))


# ---------------------------------------------------------------------------------------
# Absolute encodings
# ---------------------------------------------------------------------------------------
@test
def learned_hierarchical():
    Lc, D = 5, 8
    cfg = tiny({"type": "learned", "hierarchical": True}, context=Lc, d_model=D)
    W = torch.randn(Lc, D)
    x = torch.zeros(1, Lc * 3 + 2, D)
    p = enc_of(cfg).embed(x, {"wpe.weight": W})[0]
    close(p[:Lc], W, 1e-14, "t < L equals wpe[t]")
    u = (W - 0.4 * W[0]) / 0.6
    for t in range(p.shape[0]):
        close(p[t], 0.4 * u[t // Lc] + 0.6 * u[t % Lc], 1e-14, f"t={t}")


@test
def sinusoidal_table():
    D, T = 8, 30
    p = enc_of(tiny({"type": "sinusoidal"}, d_model=D)).embed(torch.zeros(1, T, D), {})[0]
    for t in range(T):
        for kk in range(D // 2):
            w = 10000 ** (-2 * kk / D)
            assert abs(float(p[t, 2 * kk]) - math.sin(t * w)) < 1e-5
            assert abs(float(p[t, 2 * kk + 1]) - math.cos(t * w)) < 1e-5


# ---------------------------------------------------------------------------------------
# Model pieces, config, init, files
# ---------------------------------------------------------------------------------------
@test
def gelu_is_tanh_form():
    x = torch.linspace(-5, 5, 101)
    ref = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    close(R.gelu_tanh(x), ref, 1e-15, "gelu")
    assert float((R.gelu_tanh(x) - torch.nn.functional.gelu(x)).abs().max()) > 1e-4  # not erf


@test
def forward_matches_torch_modules():
    """The model with no encoding against torch.nn building blocks."""
    for norm in ("layernorm", "rmsnorm"):
        for tied in (True, False):
            cfg = {**TINY, "n_layers": 2, "norm": norm, "tie_embeddings": tied}
            c = R.parse_config(cfg)
            P = draw_params(cfg, 7)
            tok = torch.as_tensor(tokens_for(cfg, 6, 7))
            D, H, d = c["d_model"], c["n_heads"], R.head_dim(c)

            def nrm(x, name):
                if norm == "layernorm":
                    return torch.nn.functional.layer_norm(x, (D,), P[name + ".weight"], P[name + ".bias"], 1e-5)
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * P[name + ".weight"]
            x = P["wte.weight"][tok[:, :-1]]
            B, T, _ = x.shape
            for l in range(2):
                b = f"blocks.{l}."
                qkv = torch.nn.functional.linear(nrm(x, b + "norm1"), P[b + "attn.qkv.weight"], P[b + "attn.qkv.bias"])
                q, k, v = qkv.view(B, T, 3, H, d).permute(2, 0, 3, 1, 4)
                att = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(
                    torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -math.inf).softmax(-1)
                o = (att @ v).transpose(1, 2).reshape(B, T, D)
                x = x + torch.nn.functional.linear(o, P[b + "attn.proj.weight"], P[b + "attn.proj.bias"])
                h = torch.nn.functional.gelu(torch.nn.functional.linear(
                    nrm(x, b + "norm2"), P[b + "mlp.fc.weight"], P[b + "mlp.fc.bias"]), approximate="tanh")
                x = x + torch.nn.functional.linear(h, P[b + "mlp.proj.weight"], P[b + "mlp.proj.bias"])
            logits = nrm(x, "norm_f") @ (P["wte.weight"] if tied else P["lm_head.weight"]).T
            ref = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), tok[:, 1:].reshape(-1))
            assert abs(float(R.forward_loss(cfg, P, tok)) - float(ref)) < 1e-12


@test
def config_defaults_and_errors():
    c = R.parse_config({"d_model": 64, "n_heads": 4})
    assert c["d_ff"] == 256 and c["posenc"] == {"type": "none"} and c["vocab_size"] == 256
    assert c["norm"] == "layernorm" and c["tie_embeddings"] is True and c["context"] == 256
    assert R.parse_config(c) == c  # idempotent
    r = R.parse_config({"posenc": {"type": "rope", "scaling": {"type": "rerope"}}, "context": 100})
    assert r["posenc"]["base"] == 10000.0 and r["posenc"]["pairing"] == "half"
    assert r["posenc"]["scaling"]["window"] == 50 and r["posenc"]["scaling"]["original_context"] == 100
    lk = R.parse_config({"posenc": {"type": "rope", "scaling": {"type": "leaky-rerope"}}})
    assert lk["posenc"]["scaling"]["factor"] == 16.0
    assert R.parse_config({"posenc": {"type": "t5"}})["posenc"] == {"type": "t5", "num_buckets": 32, "max_distance": 128}
    bad = [{"n_layer": 2}, {"d_model": 30, "n_heads": 8}, {"norm": "batchnorm"},
           {"posenc": {"type": "rotary"}}, {"posenc": {"type": "sinusoidal", "base": 1.0}},
           {"posenc": {"type": "rope", "scaling": {"type": "pi", "factr": 2}}},
           {"posenc": {"type": "rope", "scaling": {"type": "linear"}}},
           {"posenc": {"type": "rope", "pairing": "adjacent"}}, {"posenc": {"base": 1.0}},
           {"posenc": {"type": "kerple", "variant": "exp"}}, {"tie_embeddings": 1},
           {"posenc": {"type": "t5", "num_buckets": 7}}, {"vocab_size": 0}]
    for b in bad:
        try:
            R.parse_config(b)
        except R.ConfigError:
            continue
        raise AssertionError(f"accepted {b}")


@test
def length_limits():
    def raises(cfg, T):
        try:
            R.forward_loss(cfg, R.init_params(cfg, 0, DT), tokens_for(cfg, T, 0))
        except R.LengthError:
            return True
        return False
    assert raises(tiny({"type": "learned"}), L + 1) and not raises(tiny({"type": "learned"}), L)
    assert raises(tiny({"type": "tupe"}), L + 1) and not raises(tiny({"type": "tupe"}), L)
    hier = tiny({"type": "learned", "hierarchical": True}, context=3)
    assert not raises(hier, 9) and raises(hier, 10)
    for name in ("none", "sinusoidal", "rope", "xpos", "alibi", "kerple", "sandwich", "t5",
                 "shaw", "xl", "deberta", "rnn", "floater", "complex-order"):
        assert not raises(tiny({"type": name}), 3 * L), name


@test
def init_shapes_and_statistics():
    cfg = {"vocab_size": 256, "d_model": 64, "n_layers": 4, "n_heads": 4, "context": 64,
           "tie_embeddings": False, "posenc": {"type": "learned"}}
    P = R.init_params(cfg, seed=1)
    specs = R.param_specs(cfg)
    assert list(P) == [s.name for s in specs]
    assert all(P[s.name].shape == s.shape and P[s.name].dtype == torch.float32 for s in specs)
    assert "lm_head.weight" in P and P["wpe.weight"].shape == (64, 64)
    assert abs(float(P["blocks.0.attn.qkv.weight"].std()) - 0.02) < 0.001
    assert abs(float(P["blocks.3.mlp.proj.weight"].std()) - 0.02 / math.sqrt(8)) < 0.0005
    assert float(P["blocks.1.attn.qkv.bias"].abs().max()) == 0 and bool((P["norm_f.weight"] == 1).all())
    assert R.init_params(cfg, seed=1)["wte.weight"].equal(P["wte.weight"])
    rms = R.param_specs({**cfg, "norm": "rmsnorm", "tie_embeddings": True})
    names = {s.name for s in rms}
    assert "norm_f.bias" not in names and "blocks.0.norm1.bias" not in names and "lm_head.weight" not in names
    for variant, (a, b) in (("log", (2, 1)), ("power", (1, 2))):
        Pk = R.init_params({**TINY, "n_heads": 512, "d_model": 1024,
                            "posenc": {"type": "kerple", "variant": variant}}, 0)
        for n, hi in (("pe.r1", a), ("pe.r2", b)):
            t = Pk[n]
            assert float(t.min()) >= 0 and float(t.max()) <= hi and float(t.max()) > 0.9 * hi, (variant, n)
    expected = {  # encoding parameters: name -> shape (d_model 8, heads 2, d 4, context 6)
        "shaw": {"blocks.0.attn.pe.rel_k": (33, 4), "blocks.0.attn.pe.rel_v": (33, 4)},
        "xl": {"pe.r_w_bias": (2, 4), "pe.r_r_bias": (2, 4), "blocks.0.attn.pe.r_net.weight": (8, 8)},
        "deberta": {"pe.rel_embeddings.weight": (64, 8), "pe.rel_norm.weight": (8,), "pe.rel_norm.bias": (8,)},
        "tupe": {"pe.pos_emb.weight": (6, 8), "pe.pos_norm.weight": (8,), "pe.pos_norm.bias": (8,),
                 "pe.pos_proj.weight": (16, 8), "pe.pos_proj.bias": (16,), "pe.rel_bias.weight": (32, 2)},
        "t5": {"pe.rel_bias.weight": (32, 2)}, "kerple": {"pe.r1": (2,), "pe.r2": (2,)},
        "learned": {"wpe.weight": (6, 8)}, "rope": {}, "alibi": {}, "sandwich": {}, "xpos": {},
        "rnn": {"pe.weight_ih": (24, 8), "pe.weight_hh": (24, 8), "pe.bias_ih": (24,), "pe.bias_hh": (24,)},
        "floater": {"pe.p0": (8,), "pe.fc.weight": (64, 8), "pe.fc.bias": (64,), "pe.time": (64,),
                    "pe.proj.weight": (8, 64), "pe.proj.bias": (8,)},
        "complex-order": {"pe.freq.weight": (11, 4)},
    }
    base = {s.name for s in R.param_specs(TINY)}
    for name, exp in expected.items():
        got = {s.name: s.shape for s in R.param_specs(tiny({"type": name})) if s.name not in base}
        assert got == exp, (name, got)


@test
def checkpoint_round_trip():
    cfg = tiny({"type": "t5"}, tie_embeddings=False)
    P = R.init_params(cfg, 3)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "c.safetensors")
        R.save_checkpoint(path, cfg, P, step=12)
        c, Q = R.load_checkpoint(path)
        entries, meta, start = st_io.read_header(path)
    assert c == R.parse_config(cfg) and meta["step"] == "12" and meta["format"] == "ctxlab/1"
    assert json.loads(meta["config"]) == cfg and start % 8 == 0
    assert all(e["dtype"] == "F32" for e in entries.values())
    assert set(Q) == set(P) and all(Q[n].dtype == DT and Q[n].equal(P[n].double()) for n in P)


@test
def safetensors_round_trip_and_validation():
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1.5, -2.0]),
              "c": np.array([[7]], dtype=np.int32), "d": np.arange(5, dtype=np.int64),
              "e": np.zeros((0, 3), np.float32), "f": np.array([0.5], np.float16)}
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, "x.safetensors")
        st_io.write_safetensors(p, arrays, {"k": "v"})
        got, meta = st_io.read_safetensors(p)
        assert meta == {"k": "v"} and set(got) == set(arrays)
        for n, a in arrays.items():
            assert got[n].dtype == a.dtype and got[n].shape == a.shape and np.array_equal(got[n], a)
        raw = open(p, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        assert (8 + n) % 8 == 0 and raw[8:8 + n].rstrip(b" ").endswith(b"}")
        header = json.loads(raw[8:8 + n])
        assert header["__metadata__"] == {"k": "v"} and header["d"]["dtype"] == "I64"

        def corrupt(hdr, data=b"\0" * 64, length=None):
            h = json.dumps(hdr).encode()
            q = os.path.join(tmp, "bad.safetensors")
            with open(q, "wb") as f:
                f.write(struct.pack("<Q", len(h) if length is None else length) + h + data)
            try:
                st_io.read_safetensors(q)
            except st_io.SafetensorsError as e:
                assert "bad.safetensors" in str(e)
                return
            raise AssertionError(f"accepted {hdr}")
        t = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
        corrupt({"x": t, "y": {**t, "data_offsets": [4, 12]}})                  # overlap
        corrupt({"x": {**t, "data_offsets": [60, 68]}})                           # out of bounds
        corrupt({"x": {**t, "shape": [3]}})                                       # size mismatch
        corrupt({"x": {**t, "dtype": "Q8"}})                                      # unknown dtype
        corrupt({"__metadata__": {"step": 3}, "x": t})                            # non-string meta
        corrupt({"x": t}, length=10 ** 6)                                         # header too long
        q = os.path.join(tmp, "dup.safetensors")
        h = b'{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'
        with open(q, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"\0" * 8)
        try:
            st_io.read_safetensors(q)
            raise AssertionError("accepted a duplicate tensor name")
        except st_io.SafetensorsError:
            pass
        tok = os.path.join(tmp, "t.npy")
        st_io.save_npy(tok, np.arange(6, dtype=np.int32).reshape(2, 3))
        back = st_io.load_npy(tok)
        assert back.dtype == np.dtype("<i4") and back.shape == (2, 3) and os.path.exists(tok)


# ---------------------------------------------------------------------------------------
# Survey encodings (POSENC_SPEC §5)
# ---------------------------------------------------------------------------------------
@test
def rnn_equals_torch_nn_gru():
    cfg = tiny({"type": "rnn"})
    P = draw_params(cfg, 11)
    x = torch.randn(3, 9, 8, generator=torch.Generator().manual_seed(1))
    gru = torch.nn.GRU(8, 8, batch_first=True).double()
    with torch.no_grad():
        for ours, theirs in (("weight_ih", "weight_ih_l0"), ("weight_hh", "weight_hh_l0"),
                             ("bias_ih", "bias_ih_l0"), ("bias_hh", "bias_hh_l0")):
            getattr(gru, theirs).copy_(P["pe." + ours])
        ref, _ = gru(x)
    close(enc_of(cfg).embed(x, P), ref, 1e-12, "rnn vs torch.nn.GRU")


@test
def floater_zero_and_constant_dynamics():
    cfg = tiny({"type": "floater", "hidden": 4, "dt": 0.25, "substeps": 3})
    enc, P = enc_of(cfg), draw_params(cfg, 5)
    P["pe.proj.weight"], P["pe.proj.bias"] = torch.zeros(8, 4), torch.zeros(8)
    pos = enc.positions(7, P)
    close(pos, P["pe.p0"].expand(7, 8), 1e-15, "zero dynamics: p0 everywhere")
    P["pe.proj.bias"] = torch.linspace(-1, 1, 8)          # h = b2: p(t) = p0 + t b2
    t = 0.25 * torch.arange(7.0)[:, None]
    close(enc.positions(7, P), P["pe.p0"] + t * P["pe.proj.bias"], 1e-13, "constant dynamics: a line")
    # RK4 is exact for dp/dt polynomial in t of degree <= 3; with h = W2 tanh(t w) + b2 it is
    # within O(eta^4) of a fine integration
    P = draw_params(cfg, 6)
    fine = R.make_encoding(R.parse_config(tiny({"type": "floater", "hidden": 4, "dt": 0.25,
                                                "substeps": 96}))).positions(7, P)
    close(enc.positions(7, P), fine, 1e-4, "RK4 vs fine RK4")


@test
def complex_order_zero_frequencies_is_token_embedding():
    cfg = tiny({"type": "complex-order"})
    enc, P = enc_of(cfg), draw_params(cfg, 9)
    ids = torch.as_tensor(tokens_for(cfg, 7, 3))
    P["pe.freq.weight"] = torch.zeros_like(P["pe.freq.weight"])
    close(enc.embed_tokens(ids, P), P["wte.weight"][ids], 0, "freq 0")
    # as complex numbers: z e^{i omega t}
    P = draw_params(cfg, 10)
    w = P["wte.weight"][ids]
    z = torch.complex(w[..., 0::2], w[..., 1::2])
    rot = z * torch.exp(1j * P["pe.freq.weight"][ids] * torch.arange(ids.shape[1])[:, None])
    got = enc.embed_tokens(ids, P)
    close(got, torch.view_as_real(rot).flatten(-2), 1e-12, "complex form")
    # the default init: the sinusoidal frequencies 1 / powf(10000, 2k / D) in every row
    f = R.init_params(cfg, 0)["pe.freq.weight"]
    close(f, (1.0 / 10000.0 ** (torch.arange(4) * 2 / 8.0)).expand(11, 4), 1e-6, "freq init")


# ---------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", default="", help="run only tests whose name contains this")
    ap.add_argument("-v", action="store_true", help="print tracebacks of failures")
    args = ap.parse_args()
    failed = ran = 0
    for fn in TESTS:
        if args.k not in fn.__name__:
            continue
        ran += 1
        try:
            fn()
            print(f"ok   {fn.__name__}", flush=True)
        except Exception as e:  # report and go on
            failed += 1
            print(f"FAIL {fn.__name__}: {type(e).__name__}: {e}", flush=True)
            if args.v:
                traceback.print_exc()
    print(f"selftest_ref: {ran - failed} passed, {failed} failed")
    if ran == 0:
        print(f"selftest_ref: no test name contains {args.k!r}")
    return 1 if failed or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
