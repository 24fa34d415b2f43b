#!/usr/bin/python3
"""PyTorch peer of `ctxlab bench`: the same model, optimizer, batches and timing split, written
as ordinary efficient PyTorch nn.Modules, printing one JSON object with the same keys.

The model is MODEL_SPEC §3 (pre-norm GPT, fused qkv Linear, tanh-GELU MLP, tied head, LayerNorm
with the config's eps) with the encodings of POSENC_SPEC: none, learned, sinusoidal, rope (half
or interleaved, no scaling), alibi, t5, shaw, xl (no memory), deberta and tupe. Parameter names are
the spec's (the state_dict can be handed to tests/python/torch_ref.py), the config is validated
and completed by torch_ref.parse_config, and the init is torch_ref.init_params. Position tables
(rotary angles, slopes, bucket indices) are computed once at construction, not per forward;
relative terms use a [.., T, buckets] product followed by a gather (no [T, T, d] tensors).

    bench/torch_peer.py --preset small --posenc rope --peak-gflops 190
    bench/torch_peer.py --preset tiny --check          # loss/grads against torch_ref (float64)
    bench/.venv/bin/python bench/torch_peer.py --preset small --compile --precision bf16

Runs under Debian's torch 1.13 and under today's 2.x (bench/torch_venv.sh); what differs is
chosen by feature, not by version number: the public F.scaled_dot_product_attention (2.x) or the
private 1.13 one, torch.compile (2.x only), fused AdamW (2.x).

--attention manual: scores = q k^T * scale (+ bias), masked_fill(-inf), softmax, p v.
--attention fast: the fastest attention the installed torch offers for the encoding (see
FAST_NOTES below and bench/README.md).
--attention flex (torch >= 2.5): FlexAttention with the causal mask as a block mask and alibi's
or t5's bias as a score_mod inside the kernel (the peer of ctxlab's in-kernel position terms).
--compile: torch.compile(model) (forward and, through AOTAutograd, backward) and the optimizer
phase (grad clip + AdamW step) as one compiled function; compilation happens in the warm-up
steps (at least 2 then), whose time is reported as compile_s and never in the timed steps.
--precision bf16: forward under torch.autocast(device, dtype=torch.bfloat16), backward outside
it, fp32 master weights, gradients and AdamW state (the AMP recipe PyTorch documents).
--device cuda: everything on the GPU, torch.cuda.synchronize() at each timing point.
"""

import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import torch_ref  # noqa: E402  (spec-faithful reference: config parsing, init, tables)

PRESETS = {  # train/io/config.cpp preset_config
    "tiny": dict(d_model=64, n_layers=2, n_heads=4, context=64),
    "small": dict(d_model=256, n_layers=6, n_heads=8, context=256),
    "medium": dict(d_model=512, n_layers=8, n_heads=8, context=512),
}
DEFAULT_BATCH = {"tiny": 8, "small": 8, "medium": 4}
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")    # public in 2.x (is_causal, attn_mask, scale)
HAS_COMPILE = hasattr(torch, "compile")                    # 2.x
try:  # torch >= 2.5: FlexAttention (score_mod / block masks compiled into one fused kernel)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    HAS_FLEX = True
except ImportError:
    HAS_FLEX = False
SUPPORTED = ("none", "learned", "sinusoidal", "rope", "alibi", "t5", "shaw", "xl", "deberta", "tupe")
FLEX_TYPES = ("none", "learned", "sinusoidal", "rope", "alibi", "t5")  # what --attention flex covers
FLOP_FORMULA = "6*N + 12*n_layers*T*d_model, N = n_layers*(4*d_model^2 + 2*d_model*d_ff) + vocab*d_model"

# What --attention fast does. torch 1.13 has no public F.scaled_dot_product_attention; its private
# F._scaled_dot_product_attention(q, k, v, is_causal=True) exists (boolean masks only, so no
# additive bias) and on the CPU runs the composite "math" path (q*scale, bmm, softmax, bmm; no
# fused or flash kernel). Timed here (forward+backward of one layer's attention of `small`, B 8,
# H 8, T 256, d 32, interleaved rounds; machine shared, load 4-5) against matmul+mul_+add_,
# baddbmm(mask, q, k^T, alpha) and pre-scaling q: all within ~10% of each other, the private
# SDPA best by minimum at one thread, pre-scaled q + in-place bias add best by median for the
# biased case. Content encodings (shaw, xl, deberta) need the score terms, so fast = manual there.
# torch 2.x: the public F.scaled_dot_product_attention picks a fused kernel (flash / memory-
# efficient on CUDA, the flash CPU kernel on the CPU); it also takes an additive float mask, used
# for alibi (a constant table with the causal mask folded in). tupe's bias carries parameter
# gradients (the fused kernels give none to attn_mask), so tupe stays on the bias path.
FAST_NOTES = {
    "plain": "F._scaled_dot_product_attention(q, k, v, is_causal=True) (torch 1.13 private; CPU math path)",
    "bias": "matmul(q * scale, k^T).add_(bias with the causal -inf mask folded in), softmax, matmul",
    "content": "as manual (content terms need the scores)",
}
FAST_NOTES_SDPA = {
    "plain": "F.scaled_dot_product_attention(q, k, v, is_causal=True) (fused kernel the backend picks)",
    "alibi": "F.scaled_dot_product_attention(q, k, v, attn_mask=alibi table with the causal -inf folded in)",
}
# --attention flex (torch >= 2.5): the causal mask as a block mask (fully masked tiles skipped),
# the position term as a score_mod evaluated inside the fused kernel: alibi -m_h (i - j), t5
# W[b(i - j), h] read from the learned [num_buckets, H] table (its gradient reduced by the
# kernel's backward). What FlexAttention's authors propose for biases SDPA cannot take with
# gradients; compiled (torch.compile(flex_attention)) unless the whole model is.
FLEX_NOTE = "flex_attention(q, k, v, score_mod=<{t} term>, block_mask=causal), compiled"
_FLEX_FN = None  # flex_attention, compiled on first use (eager for --check: float64 on the CPU)


def flex_causal(q, k, v, score_mod, block_mask, compiled=True):
    """FlexAttention over [B, H, T, d] with a causal block mask and an optional score_mod."""
    global _FLEX_FN
    if not compiled:
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
    if _FLEX_FN is None:
        _FLEX_FN = torch.compile(flex_attention, dynamic=False)
    return _FLEX_FN(q, k, v, score_mod=score_mod, block_mask=block_mask)


def prepare_flex(tabs, T, device, compiled=True):
    """Adds what --attention flex reads to the position tables: the causal block mask for length
    T on `device` (built once, outside the timed and compiled steps) and whether to compile."""
    tabs["block_mask"] = create_block_mask(lambda b, h, qi, kj: qi >= kj, None, None, T, T, device=device)
    tabs["flex_compiled"] = compiled


def sdpa_causal(q, k, v, dropout_p=0.0):
    """Causal attention through the installed torch's SDPA, [B, H, T, d] -> [B, H, T, d]
    (dropout_p: on the probabilities, training only)."""
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    return F._scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)[0]


def preset_config(name, posenc, config_file=None):
    """The preset's config (train/io/config.cpp), or MODEL_SPEC JSON from config_file."""
    if config_file is not None:
        try:
            with open(config_file) as f:
                cfg = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"--config {config_file}: {e}") from None
        if not isinstance(cfg, dict):
            raise ValueError(f"--config {config_file}: must be a JSON object")
        cfg.setdefault("posenc", {"type": "learned"})
    else:
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r} (valid presets: tiny, small, medium)")
        cfg = dict(vocab_size=256, norm="layernorm", tie_embeddings=True, posenc={"type": "learned"},
                   **PRESETS[name])
        cfg["d_ff"] = 4 * cfg["d_model"]
    if posenc is not None:
        cfg["posenc"] = json.loads(posenc) if posenc.lstrip().startswith("{") else {"type": posenc}
    cfg = torch_ref.parse_config(cfg)
    t = cfg["posenc"]["type"]
    if t not in SUPPORTED:
        raise ValueError(f"posenc {t!r} is not in the PyTorch peer (supported: {', '.join(SUPPORTED)})")
    if t == "rope" and cfg["posenc"]["scaling"] is not None:
        raise ValueError("posenc rope: scaling is not in the PyTorch peer")
    if cfg["norm"] != "layernorm":
        raise ValueError("the PyTorch peer implements norm = layernorm only")
    return cfg


def as_f32(a):
    return torch.as_tensor(a).to(torch.float32)


# ------------------------------------------------------------------------------------------
# The model
# ------------------------------------------------------------------------------------------
class SharedPE(nn.Module):
    """Encoding parameters of the whole model (named pe.*) and per-forward shared terms."""

    def __init__(self, cfg):
        super().__init__()
        t, D, H = cfg["posenc"]["type"], cfg["d_model"], cfg["n_heads"]
        d = D // H
        self.type = t
        if t == "xl":
            self.r_w_bias = nn.Parameter(torch.zeros(H, d))
            self.r_r_bias = nn.Parameter(torch.zeros(H, d))
        elif t == "deberta":
            A = cfg["posenc"]["position_buckets"]
            self.rel_embeddings = nn.Embedding(2 * A, D)
            self.rel_norm = nn.LayerNorm(D, eps=cfg["norm_eps"])
        elif t == "t5":
            self.rel_bias = nn.Embedding(cfg["posenc"]["num_buckets"], H)   # W [num_buckets, H]
        elif t == "tupe":
            self.pos_emb = nn.Embedding(cfg["context"], D)
            self.pos_norm = nn.LayerNorm(D, eps=cfg["norm_eps"])
            self.pos_proj = nn.Linear(D, 2 * D)
            self.rel_bias = nn.Embedding(32, H)


class Attention(nn.Module):
    def __init__(self, cfg, T, attention):
        super().__init__()
        D, H = cfg["d_model"], cfg["n_heads"]
        self.D, self.H, self.d = D, H, D // H
        self.type = cfg["posenc"]["type"]
        self.pec = cfg["posenc"]
        self.fast = attention != "manual"
        self.flex = attention == "flex"
        self.drop = cfg["dropout"]  # on the probabilities, as nn/attention.cpp
        self.scale = 1.0 / math.sqrt(self.d)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.pe = nn.Module()
        if self.type == "shaw":
            n = 2 * self.pec["max_relative_position"] + 1
            self.pe.rel_k = nn.Parameter(torch.zeros(n, self.d))
            self.pe.rel_v = nn.Parameter(torch.zeros(n, self.d))
        elif self.type == "xl":
            self.pe.r_net = nn.Linear(D, D, bias=False)
        elif self.type == "deberta":
            self.scale = 1.0 / math.sqrt(3 * self.d)
        elif self.type == "tupe":
            self.scale = 1.0 / math.sqrt(2 * self.d)

    def forward(self, x, tabs, shared):
        B, T, D = x.shape
        H, d = self.H, self.d
        qkv = self.qkv(x).view(B, T, 3, H, d).permute(2, 0, 3, 1, 4)   # [3, B, H, T, d]
        q, k, v = qkv[0], qkv[1], qkv[2]
        t = self.type
        mask = tabs["mask"][:T, :T]                                       # float: 0 / -inf
        extra_v = None
        if t == "rope":
            cos, sin = tabs["cos"][:T], tabs["sin"][:T]
            q, k = rope_rotate(q, cos, sin, self.pec["pairing"]), rope_rotate(k, cos, sin, self.pec["pairing"])
        pdrop = self.drop if self.training else 0.0
        if self.flex:
            o = flex_causal(q, k, v, self.score_mod(tabs, shared), tabs["block_mask"], tabs["flex_compiled"])
            return self.proj(o.transpose(1, 2).reshape(B, T, D))
        if self.fast and t in ("none", "learned", "sinusoidal", "rope"):
            o = sdpa_causal(q, k, v, pdrop)
            return self.proj(o.transpose(1, 2).reshape(B, T, D))
        if self.fast and HAS_SDPA and t == "alibi":
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=tabs["alibi"][:, :T, :T].to(q.dtype),
                                               dropout_p=pdrop)
            return self.proj(o.transpose(1, 2).reshape(B, T, D))
        if t == "rope":
            s = self.scores(q, k, mask)
        elif t == "alibi":
            s = self.scores(q, k, tabs["alibi"][:, :T, :T])               # mask folded in
        elif t == "t5":
            s = self.scores(q, k, shared)                                  # [H, T, T], mask folded in
        elif t == "tupe":
            s = self.scores(q, k, shared)                                  # [H, T, T], mask folded in
        elif t == "shaw":
            idx = tabs["shaw_idx"][:T, :T]                                 # [T, T] in 0..2K
            qr = torch.matmul(q, self.pe.rel_k.t())                        # [B, H, T, 2K+1]
            rel = torch.gather(qr, 3, idx.expand(B, H, T, T))
            s = torch.matmul(q, k.transpose(-1, -2)).add_(rel).mul_(self.scale).add_(mask)
            extra_v = idx
        elif t == "xl":
            WR = self.pe.r_net(tabs["xl_R"][:T]).view(T, H, d).transpose(0, 1)     # [H, T(r), d]
            ac = torch.matmul(q + shared["u"], k.transpose(-1, -2))
            bd = torch.matmul(q + shared["v"], WR.transpose(-1, -2))                # [B, H, T, T(r)]
            bd = torch.gather(bd, 3, tabs["delta"][:T, :T].expand(B, H, T, T))     # r = i - j
            s = (ac + bd).mul_(self.scale).add_(mask)
        elif t == "deberta":
            rel = shared                                                          # LN(rel_emb) [2A, D]
            W, b = self.qkv.weight, self.qkv.bias
            Qr = F.linear(rel, W[:D], b[:D]).view(-1, H, d).transpose(0, 1)       # [H, 2A, d]
            Kr = F.linear(rel, W[D:2 * D], b[D:2 * D]).view(-1, H, d).transpose(0, 1)
            idx = tabs["deb_idx"][:T, :T]
            c2p = torch.gather(torch.matmul(q, Kr.transpose(-1, -2)), 3, idx.expand(B, H, T, T))
            p2c = torch.gather(torch.matmul(k, Qr.transpose(-1, -2)), 3, idx.t().expand(B, H, T, T))
            s = (torch.matmul(q, k.transpose(-1, -2)) + c2p + p2c.transpose(-1, -2))
            s = s.mul_(self.scale).add_(mask)
        else:  # none, learned, sinusoidal
            s = self.scores(q, k, mask)
        p = torch.softmax(s, dim=-1)
        if pdrop > 0:
            p = F.dropout(p, pdrop, True)
        o = torch.matmul(p, v)
        if extra_v is not None:  # shaw value term: bucket the probabilities, then one small matmul
            n = self.pe.rel_v.shape[0]
            pb = torch.zeros(B, H, T, n, dtype=p.dtype, device=p.device).scatter_add_(3, extra_v.expand(B, H, T, T), p)
            o = o + torch.matmul(pb, self.pe.rel_v)
        return self.proj(o.transpose(1, 2).reshape(B, T, D))

    def score_mod(self, tabs, shared):
        """The position term as FlexAttention's score_mod (None: plain causal attention)."""
        if self.type == "alibi":
            slopes = tabs["slopes"]                                        # [H]
            return lambda score, b, h, qi, kj: score - slopes[h] * (qi - kj)
        if self.type == "t5":
            bucket, W = tabs["t5_bucket"], shared                          # [T] of delta, [nb, H]
            return lambda score, b, h, qi, kj: score + W[bucket[(qi - kj).clamp(min=0)], h]
        return None

    def scores(self, q, k, bias):
        """scale * q k^T + bias (bias [.., T, T] holds the causal -inf mask)."""
        if self.fast:
            return torch.matmul(q * self.scale, k.transpose(-1, -2)).add_(bias)
        return torch.matmul(q, k.transpose(-1, -2)).mul_(self.scale).add_(bias)


def rope_rotate(x, cos, sin, pairing):
    """x [.., T, d] rotated by angles cos/sin [T, d/2] (POSENC_SPEC §2)."""
    if pairing == "half":
        h = x.shape[-1] // 2
        a, b = x[..., :h], x[..., h:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)


class MLP(nn.Module):
    def __init__(self, D, Fd):
        super().__init__()
        self.fc = nn.Linear(D, Fd)
        self.proj = nn.Linear(Fd, D)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg, T, attention):
        super().__init__()
        D, eps = cfg["d_model"], cfg["norm_eps"]
        self.norm1 = nn.LayerNorm(D, eps=eps)
        self.attn = Attention(cfg, T, attention)
        self.norm2 = nn.LayerNorm(D, eps=eps)
        self.mlp = MLP(D, cfg["d_ff"])
        self.drop = cfg["dropout"]  # on both residual branches, as nn/gpt.cpp

    def forward(self, x, tabs, shared):
        if self.drop == 0:  # the graph without dropout nodes at all
            x = x + self.attn(self.norm1(x), tabs, shared)
            return x + self.mlp(self.norm2(x))
        x = x + F.dropout(self.attn(self.norm1(x), tabs, shared), self.drop, self.training)
        return x + F.dropout(self.mlp(self.norm2(x)), self.drop, self.training)


class GPT(nn.Module):
    """MODEL_SPEC §3 with parameter names of §4 (tied head)."""

    def __init__(self, cfg, T, attention="manual"):
        super().__init__()
        self.cfg = cfg
        V, D, H = cfg["vocab_size"], cfg["d_model"], cfg["n_heads"]
        t = cfg["posenc"]["type"]
        self.type = t
        self.wte = nn.Embedding(V, D)
        if t == "learned":
            self.wpe = nn.Embedding(cfg["context"], D)
        if t in ("xl", "deberta", "tupe", "t5"):
            self.pe = SharedPE(cfg)
        if attention == "flex" and t not in FLEX_TYPES:
            raise ValueError(f"--attention flex: posenc {t} is not a score_mod here (flex covers {', '.join(FLEX_TYPES)})")
        self.flex = attention == "flex"
        self.blocks = nn.ModuleList([Block(cfg, T, attention) for _ in range(cfg["n_layers"])])
        self.norm_f = nn.LayerNorm(D, eps=cfg["norm_eps"])
        if not cfg["tie_embeddings"]:
            self.lm_head = nn.Linear(D, V, bias=False)
        self.tabs = self.make_tables(cfg, T)

    @staticmethod
    def make_tables(cfg, T, dtype=torch.float32):
        """Position tables for sequences up to T, built once: float32 frequencies, slopes and
        buckets as POSENC_SPEC says (via torch_ref), sin/cos in float64, then cast to dtype."""
        D, H = cfg["d_model"], cfg["n_heads"]
        d, pe, t = D // H, cfg["posenc"], cfg["posenc"]["type"]
        mask = torch.zeros(T, T, dtype=dtype).masked_fill_(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        tabs = {"mask": mask}
        pos = torch.arange(T)
        delta = (pos[:, None] - pos[None, :]).clamp(min=0)                    # i - j, masked -> 0
        if t == "sinusoidal":
            ang = torch.as_tensor(torch_ref.angles(range(T), torch_ref.inv_freqs(10000.0, D, range(D // 2)))).double()
            tab = torch.empty(T, D, dtype=torch.float64)
            tab[:, 0::2], tab[:, 1::2] = ang.sin(), ang.cos()
            tabs["sin_pe"] = tab.to(dtype)
        elif t == "rope":
            ang = torch.as_tensor(torch_ref.angles(range(T), torch_ref.inv_freqs(pe["base"], d, range(d // 2)))).double()
            tabs["cos"], tabs["sin"] = ang.cos().to(dtype), ang.sin().to(dtype)
        elif t == "alibi":
            m = torch.as_tensor(torch_ref.alibi_slopes(H)).double()
            tabs["alibi"] = (-m[:, None, None] * delta.double()).to(dtype) + mask
            tabs["slopes"] = m.to(dtype)
        elif t == "t5":
            tabs["delta_c"] = delta
            tabs["t5_bucket"] = torch.tensor([torch_ref.t5_bucket(n, pe["num_buckets"], pe["max_distance"])
                                              for n in range(T)])
        elif t == "shaw":
            K = pe["max_relative_position"]
            tabs["shaw_idx"] = (pos[None, :] - pos[:, None]).clamp(-K, K) + K
        elif t == "xl":
            ang = torch.as_tensor(torch_ref.angles(range(T), torch_ref.inv_freqs(10000.0, D, range(D // 2)))).double()
            tabs["xl_R"] = torch.cat([ang.sin(), ang.cos()], 1).to(dtype)                 # R_r, r = 0..T-1
            tabs["delta"] = delta
        elif t == "deberta":
            A, M = pe["position_buckets"], pe["max_relative_positions"]
            bucket = {x: torch_ref.deberta_bucket(x, A, M) for x in range(-T + 1, T)}
            rel = (pos[:, None] - pos[None, :]).tolist()
            tabs["deb_idx"] = torch.tensor([[min(max(bucket[x] + A, 0), 2 * A - 1) for x in row] for row in rel])
        elif t == "tupe":
            b = torch.tensor([torch_ref.t5_bucket(n, 32, 128) for n in range(T)])
            tabs["t5_idx"] = b[delta]
        return tabs

    def forward(self, idx, targets):
        B, T = idx.shape
        t, tabs = self.type, self.tabs
        x = self.wte(idx)
        if t == "learned":
            if T > self.cfg["context"]:
                raise ValueError(f"learned: sequence length {T} exceeds context {self.cfg['context']}")
            x = x + self.wpe.weight[:T]
        elif t == "sinusoidal":
            x = x + tabs["sin_pe"][:T]
        shared = None
        if t == "xl":
            shared = {"u": self.pe.r_w_bias[None, :, None, :], "v": self.pe.r_r_bias[None, :, None, :]}
        elif t == "deberta":
            shared = self.pe.rel_norm(self.pe.rel_embeddings.weight)
        elif t == "t5":
            W = self.pe.rel_bias.weight                                                  # [nb, H]
            shared = W if self.flex else W[tabs["t5_bucket"][tabs["delta_c"][:T, :T]]].permute(2, 0, 1) + tabs["mask"][:T, :T]
        elif t == "tupe":
            if T > self.cfg["context"]:
                raise ValueError(f"tupe: sequence length {T} exceeds context {self.cfg['context']}")
            D, H = self.cfg["d_model"], self.cfg["n_heads"]
            d = D // H
            u = self.pe.pos_proj(self.pe.pos_norm(self.pe.pos_emb.weight[:T]))        # [T, 2D]
            uq = u[:, :D].view(T, H, d).transpose(0, 1)
            uk = u[:, D:].view(T, H, d).transpose(0, 1)
            scale = 1.0 / math.sqrt(2 * d)
            rel = self.pe.rel_bias(tabs["t5_idx"][:T, :T]).permute(2, 0, 1)             # [H, T, T]
            shared = torch.baddbmm(rel + tabs["mask"][:T, :T], uq, uk.transpose(1, 2), alpha=scale)
        if self.cfg["dropout"] > 0:  # the embedding's, as nn/gpt.cpp
            x = F.dropout(x, self.cfg["dropout"], self.training)
        for blk in self.blocks:
            x = blk(x, tabs, shared)
        w = self.wte.weight if self.cfg["tie_embeddings"] else self.lm_head.weight
        logits = F.linear(self.norm_f(x), w)
        return F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))


def decays(name, p):
    """train/optim.cpp default_decays: Linear matrices only."""
    if p.dim() < 2:
        return False
    if name.startswith(("wte.", "wpe.", "lm_head.")):
        return False
    return not (name.startswith("pe.") or ".pe." in name)


def matmul_params(cfg):
    D, L, Fd, V = cfg["d_model"], cfg["n_layers"], cfg["d_ff"], cfg["vocab_size"]
    return L * (4 * D * D + 2 * D * Fd) + V * D


# ------------------------------------------------------------------------------------------
# --check: loss and gradients against torch_ref (float64)
# ------------------------------------------------------------------------------------------
def check(cfg, T, attention, seed):
    params = torch_ref.init_params(cfg, seed, torch.float64)
    # the zero-initialised tables and biases would hide mistakes: perturb every parameter
    g = torch.Generator().manual_seed(seed + 1)
    params = {n: p + 0.05 * torch.randn(p.shape, generator=g, dtype=torch.float64) for n, p in params.items()}
    tokens = torch.randint(0, cfg["vocab_size"], (2, T + 1), generator=g)
    ref_loss, ref_grads = torch_ref.loss_and_grads(cfg, params, tokens.numpy())
    model = GPT(cfg, T, attention).double()
    model.tabs = GPT.make_tables(cfg, T, torch.float64)
    if attention == "flex":
        prepare_flex(model.tabs, T, "cpu", compiled=False)
    model.load_state_dict(params)
    if attention == "flex":  # FlexAttention has no backward on the CPU: the loss only
        with torch.no_grad():
            loss = model(tokens[:, :-1], tokens[:, 1:])
        lerr = abs(loss.item() - ref_loss) / abs(ref_loss)
        print(f"check {cfg['posenc']['type']} attention=flex: loss rel err {lerr:.2e} -> "
              f"{'OK' if lerr < 1e-9 else 'MISMATCH'} (gradients: FlexAttention has no CPU backward)",
              file=sys.stderr)
        return lerr < 1e-9
    loss = model(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    worst = 0.0
    for n, p in model.named_parameters():
        gr = p.grad if p.grad is not None else torch.zeros_like(p)
        ref = ref_grads[n]
        err = (gr - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
        worst = max(worst, err)
    lerr = abs(loss.item() - ref_loss) / abs(ref_loss)
    ok = lerr < 1e-9 and worst < 1e-7
    print(f"check {cfg['posenc']['type']} attention={attention}: loss rel err {lerr:.2e}, "
          f"worst grad rel err {worst:.2e} -> {'OK' if ok else 'MISMATCH'}", file=sys.stderr)
    return ok


# ------------------------------------------------------------------------------------------
# The benchmark
# ------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  bench/torch_peer.py --preset small --posenc rope --peak-gflops 190\n"
               "  bench/torch_peer.py --preset tiny --posenc alibi --attention fast --steps 5\n"
               "  bench/torch_peer.py --preset tiny --posenc deberta --check\n"
               "bench/compare.sh runs it against `ctxlab bench` (bench/README.md).")
    ap.add_argument("--preset", default="small", help="tiny | small | medium (default small)")
    ap.add_argument("--config", help="model config JSON (MODEL_SPEC §2) instead of --preset, as ctxlab's --config")
    ap.add_argument("--posenc", help="type name or JSON (default: the preset's, learned)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    ap.add_argument("--batch", type=int, help="sequences per step (default: small 8, medium 4, tiny 8)")
    ap.add_argument("--context", type=int, help="sequence length (default: the config's context)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--attention", choices=("manual", "fast", "flex"), default="manual",
                    help="manual (default) | fast (SDPA where the encoding allows) | flex "
                         "(FlexAttention, torch >= 2.5: none/learned/sinusoidal/rope/alibi/t5)")
    ap.add_argument("--foreach", choices=("on", "off"), default="on",
                    help="AdamW foreach (multi-tensor) implementation (default on; see --fused-adamw)")
    ap.add_argument("--fused-adamw", action="store_true",
                    help="torch.optim.AdamW(fused=True) (2.x; CPU from 2.4) instead of foreach")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model and the optimizer phase (torch 2.x); compile time "
                         "is reported as compile_s, outside the timed steps")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode: default | reduce-overhead | max-autotune (default default)")
    ap.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32",
                    help="bf16: forward under torch.autocast(device, torch.bfloat16); fp32 master "
                         "weights, grads and AdamW state. tf32 (cuda only): fp32 with "
                         "torch.backends.cuda.matmul.allow_tf32 (default fp32)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="default cpu")
    ap.add_argument("--peak-gflops", type=float, help="peak GFLOP/s for MFU (e.g. from ctxlab bench --peak-only)")
    ap.add_argument("--json", help="also write the JSON object to this file")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--check", action="store_true", help="compare loss/grads with torch_ref (float64) and exit")
    a = ap.parse_args()

    try:
        cfg = preset_config(a.preset, a.posenc, a.config)
        if a.steps < 1:
            raise ValueError(f"--steps must be at least 1, got {a.steps}")
        if a.warmup < 0:
            raise ValueError(f"--warmup must be non-negative, got {a.warmup}")
        B = a.batch if a.batch is not None else 8 if a.config else DEFAULT_BATCH[a.preset]
        T = a.context if a.context is not None else cfg["context"]
        if B < 1 or T < 1:
            raise ValueError("--batch and --context must be at least 1")
        if a.threads < 1:
            raise ValueError("--threads must be at least 1")
        if a.peak_gflops is not None and not a.peak_gflops > 0:
            raise ValueError("--peak-gflops must be positive")
        torch_ref.make_encoding(cfg).check_length(T)
        if a.compile and not HAS_COMPILE:
            raise ValueError(f"--compile needs torch 2.x (torch.compile); this is torch {torch.__version__}")
        if a.compile and a.warmup < 2:
            raise ValueError(f"--compile needs --warmup 2 or more (compilation and the recompile after "
                             f"AdamW creates its state happen there), got {a.warmup}")
        if a.fused_adamw and "fused" not in torch.optim.AdamW.__init__.__code__.co_varnames:
            raise ValueError(f"--fused-adamw: torch {torch.__version__} has no AdamW(fused=...)")
        if a.device == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"--device cuda: no CUDA device visible to torch {torch.__version__} "
                             f"(build CUDA {torch.version.cuda})")
        if a.precision == "tf32" and a.device != "cuda":
            raise ValueError("--precision tf32 is a CUDA mode (tensor cores); use it with --device cuda")
        if a.attention == "flex" and not HAS_FLEX:
            raise ValueError(f"--attention flex needs torch >= 2.5 (FlexAttention); this is torch {torch.__version__}")
        if a.attention == "flex" and cfg["posenc"]["type"] not in FLEX_TYPES:
            raise ValueError(f"--attention flex: posenc {cfg['posenc']['type']} is not covered (flex: {', '.join(FLEX_TYPES)})")
        if a.check and (a.device != "cpu" or a.compile or a.precision != "fp32"):
            raise ValueError("--check runs on the CPU in float64: drop --device, --compile and --precision")
    except (ValueError, torch_ref.ConfigError, torch_ref.LengthError) as e:
        print(f"torch_peer: error: {e}", file=sys.stderr)
        return 1
    torch.set_num_threads(a.threads)
    if a.device == "cuda":  # exact fp32 unless asked (PyTorch's default for matmuls, made explicit)
        torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    fast = a.attention != "manual"
    if a.check:
        return 0 if check(cfg, min(T, 24), a.attention, a.seed) else 1

    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    model = GPT(cfg, T, a.attention)
    model.load_state_dict(torch_ref.init_params(cfg, a.seed, torch.float32))
    model.to(dev)
    model.tabs = {k: v.to(dev) for k, v in model.tabs.items()}
    if a.attention == "flex":
        prepare_flex(model.tabs, T, dev)
    model.train()
    named = list(model.named_parameters())
    params = [p for _, p in named]
    groups = [{"params": [p for n, p in named if decays(n, p)], "weight_decay": 0.1},
              {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0}]
    # lr stays a float: constant here (as in ctxlab bench), so baking it into the compiled step
    # costs no recompile (a tensor lr would need capturable=True, a different AdamW path)
    lr = 1e-3
    impl = {"fused": True} if a.fused_adamw else {"foreach": a.foreach == "on"}
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99), eps=1e-8, **impl)
    gen = torch.Generator().manual_seed(a.seed)
    V = cfg["vocab_size"]

    def optimizer_phase():
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    fwd_model = model
    if a.compile:
        fwd_model = torch.compile(model, mode=a.compile_mode)
        optimizer_phase = torch.compile(optimizer_phase, mode=a.compile_mode)
    autocast = (lambda: torch.autocast(a.device, dtype=torch.bfloat16)) if a.precision == "bf16" else None
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()

    fwd, bwd, optim_ms, total, warm_ms = [], [], [], [], []
    loss_v = float("nan")
    for s in range(a.warmup + a.steps):
        tok = torch.randint(0, V, (B, T + 1), generator=gen)
        x, y = tok[:, :-1].contiguous().to(dev), tok[:, 1:].contiguous().to(dev)
        sync()
        t0 = time.perf_counter()
        if autocast is not None:
            with autocast():
                loss = fwd_model(x, y)
        else:
            loss = fwd_model(x, y)
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        optimizer_phase()
        opt.zero_grad(set_to_none=True)
        sync()
        t3 = time.perf_counter()
        loss_v = loss.item()
        if not math.isfinite(loss_v):
            print(f"torch_peer: error: loss became {loss_v} at step {s + 1}", file=sys.stderr)
            return 1
        if s < a.warmup:
            warm_ms.append((t3 - t0) * 1e3)
            continue
        fwd.append((t1 - t0) * 1e3)
        bwd.append((t2 - t1) * 1e3)
        optim_ms.append((t3 - t2) * 1e3)
        total.append((t3 - t0) * 1e3)

    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    med = statistics.median(total)
    # compile time: what the warm-up steps took beyond as many ordinary steps (compilation of the
    # forward, the backward and the optimizer phase, and the recompile of the second step)
    compile_s = max(0.0, (sum(warm_ms) - len(warm_ms) * med) / 1e3) if a.compile else None
    tok_s = B * T / (med / 1e3)
    N = matmul_params(cfg)
    L, D = cfg["n_layers"], cfg["d_model"]
    flop_per_token = 6.0 * N + 12.0 * L * T * D
    achieved = flop_per_token * tok_s / 1e9
    mfu = achieved / a.peak_gflops if a.peak_gflops else None
    t = cfg["posenc"]["type"]
    if a.attention == "flex":
        att_impl = FLEX_NOTE.format(t=t)
    elif not fast:
        att_impl = "matmul q k^T * scale (+ bias), add -inf mask, softmax, matmul p v"
    elif HAS_SDPA and t in ("none", "learned", "sinusoidal", "rope", "alibi"):
        att_impl = FAST_NOTES_SDPA["alibi" if t == "alibi" else "plain"]
    else:
        att_impl = FAST_NOTES["bias" if t in ("alibi", "tupe", "t5") else "content" if t in ("shaw", "xl", "deberta") else "plain"]
    out = {
        "framework": "pytorch",
        "preset": a.config if a.config else a.preset,
        "posenc": t,
        "posenc_config": cfg["posenc"],
        "batch": B, "context": T, "threads": torch.get_num_threads(),
        "warmup": a.warmup, "steps": a.steps,
        "tokens_per_s": round(tok_s, 1),
        "ms_per_step": {"median": round(med, 3), "mean": round(statistics.fmean(total), 3),
                        "min": round(min(total), 3)},
        "forward_ms": round(statistics.median(fwd), 3),
        "backward_ms": round(statistics.median(bwd), 3),
        "optimizer_ms": round(statistics.median(optim_ms), 3),
        "peak_rss_mb": round(rss_mb, 1),
        "params": sum(p.numel() for p in params),
        "matmul_params": N,
        "flop_per_token": flop_per_token,
        "flop_formula": FLOP_FORMULA,
        "achieved_gflops": round(achieved, 2),
        "peak_gflops": a.peak_gflops,
        "peak_source": "given" if a.peak_gflops else "none",
        "mfu": round(mfu, 4) if mfu is not None else None,
        "tokens_per_s_basis": "batch*context / median step",
        "final_loss": round(loss_v, 4),
        "attention": a.attention,
        "attention_impl": att_impl,
        "adamw_foreach": a.foreach == "on" and not a.fused_adamw,
        "adamw_fused": a.fused_adamw,
        "device": a.device,
        "precision": a.precision,
        "autocast": f"torch.autocast({a.device!r}, dtype=torch.bfloat16) around the forward" if autocast else None,
        "compile": {"mode": a.compile_mode, "what": "torch.compile(model) + torch.compile(clip + AdamW step)"}
                   if a.compile else None,
        "compile_s": round(compile_s, 2) if compile_s is not None else None,
        "warmup_ms": [round(w, 1) for w in warm_ms],
        "cuda_max_allocated_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1) if a.device == "cuda" else None,
        "gpu": torch.cuda.get_device_name() if a.device == "cuda" else None,
        "torch_version": torch.__version__,
        "env": {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "OPENBLAS_CORETYPE", "OMP_NUM_THREADS",
                                               "OPENBLAS_NUM_THREADS")},
    }
    print(f"torch_peer: torch {torch.__version__}, {out['preset']}, posenc {t}, {out['params']} params, B {B} x T {T}, "
          f"{a.device}, {out['threads']} threads, attention {a.attention}, {a.precision}"
          + (f", compiled ({a.compile_mode}; compile {compile_s:.1f} s)" if a.compile else ", eager")
          + f", {a.steps} timed steps after {a.warmup} warm-up\n"
          f"  {tok_s:.0f} tokens/s | step {med:.1f} ms median (mean {out['ms_per_step']['mean']:.1f}, "
          f"min {min(total):.1f}) | forward {out['forward_ms']:.1f}, backward {out['backward_ms']:.1f}, "
          f"optimizer {out['optimizer_ms']:.1f} ms\n"
          f"  {flop_per_token / 1e6:.2f} MFLOP/token -> {achieved:.1f} GFLOP/s achieved | "
          + (f"peak {a.peak_gflops:.1f} GFLOP/s (given) | MFU {100 * mfu:.1f}%" if mfu is not None
             else "no --peak-gflops: no MFU")
          + f" | peak RSS {rss_mb:.0f} MB", file=sys.stderr)
    text = json.dumps(out)
    print(text, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
