"""Independent PyTorch reference of the ctxlab model (docs MODEL_SPEC.md, POSENC_SPEC.md).

Written from the two spec pages only, to check ctxlab's loss and gradients. Float64 by
default (float32 on request). Gradients come from torch.autograd.

Public API
    parse_config(cfg)                       -> config dict with every default filled in
    param_specs(cfg)                        -> [ParamSpec(name, shape, init, role)]
    init_params(cfg, seed, dtype)           -> {name: tensor}, the spec's default init
    load_checkpoint(path, dtype)            -> (config, {name: tensor})
    save_checkpoint(path, cfg, params, step)   F32 safetensors with ctxlab/1 metadata
    forward_loss(cfg, params, tokens)       -> scalar loss tensor (differentiable)
    loss_and_grads(cfg, params, tokens)     -> (loss float, {name: grad})
    ENCODINGS                               the positional-encoding registry (name -> class)

Positional encodings are small classes with a few hooks (see ``PosEnc``): ``embed`` for
absolute encodings, ``scores`` for everything acting on attention logits, ``values`` for
value terms, ``project_`` for in-place constraint projections (KERPLE), ``check_length``.

Implemented: none, learned (+hierarchical), sinusoidal, rope (half/interleaved; scaling
pi, ntk, dynamic-ntk, yarn, rerope, leaky-rerope, llama3, longrope, self-extend; log_n), xpos, alibi, kerple (log,
power), sandwich, t5, shaw, xl (no memory), deberta, tupe, rnn (GRU), floater (RK4),
complex-order, fire, cope (POSENC_SPEC §7: written from the papers' code, torch.maximum and
a flipped cumsum, not from ctxlab's kernels). Sliding window and attention sinks (POSENC_SPEC §6): ``forward_loss`` /
``loss_and_grads`` take ``window`` and ``sinks``; the encodings read their relative positions
from ``PosEnc.rel(T)`` (i - j, or a sink key's distance in the rolling cache).

Float32 tables: frequencies, slopes, buckets and similar tables are computed in float32
with the operation order POSENC_SPEC gives, calling the C library's ``powf``/``logf`` (via
ctypes), as a C++ implementation using those functions would; they are then cast to the
reference dtype. Angles are float32 products ``float(t) * w_k``; their sin/cos are
evaluated in float64. Every ``w_k = b^(-2k/n)`` (sinusoidal, XL, Sandwich, RoPE) uses the
form POSENC_SPEC gives for RoPE, ``1 / powf(b, (2k)/n)``.
"""

import ctypes
import ctypes.util
import functools
import json
import math
from collections import namedtuple

import numpy as np
import torch
import torch.nn.functional as F

try:
    from st_io import read_safetensors, write_safetensors
except ImportError:  # imported as part of a package
    from .st_io import read_safetensors, write_safetensors

f32 = np.float32


class ConfigError(ValueError):
    """An invalid model or positional-encoding config."""


class LengthError(ValueError):
    """A sequence the encoding cannot handle (e.g. longer than a learned table)."""


# ---------------------------------------------------------------------------------------
# float32 scalar math from the C library (powf, logf), so tables match C++ exactly
# ---------------------------------------------------------------------------------------
def _load_libm():
    try:
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        for fn, nargs in (("powf", 2), ("logf", 1)):
            getattr(libm, fn).restype = ctypes.c_float
            getattr(libm, fn).argtypes = [ctypes.c_float] * nargs
        return libm
    except (OSError, AttributeError):
        return None


_LIBM = _load_libm()


@functools.lru_cache(maxsize=None)
def powf(x, y):
    """C ``powf`` on float32 arguments."""
    if _LIBM is None:
        return f32(np.power(f32(x), f32(y)))
    return f32(_LIBM.powf(float(f32(x)), float(f32(y))))


@functools.lru_cache(maxsize=None)
def logf(x):
    """C ``logf`` on a float32 argument."""
    if _LIBM is None:
        return f32(np.log(f32(x)))
    return f32(_LIBM.logf(float(f32(x))))


def inv_freqs(base, dim, ks):
    """``1 / powf(base, (2k)/dim)`` in float32 for each k in ``ks`` (the RoPE form)."""
    return np.array([f32(1) / powf(f32(base), f32(2 * k) / f32(dim)) for k in ks], dtype=f32)


def angles(positions, freqs):
    """float32 outer product ``float(t) * w_k`` -> float32 [len(positions), len(freqs)]."""
    return np.multiply.outer(np.asarray(positions, dtype=f32), np.asarray(freqs, dtype=f32))


@functools.lru_cache(maxsize=None)
def t5_bucket(n, num_buckets, max_distance):
    """Causal T5 bucket of distance n >= 0 (POSENC_SPEC §3, float32 logf, truncation)."""
    me = num_buckets // 2
    if n < me:
        return n
    v = logf(f32(n) / f32(me)) / logf(f32(max_distance) / f32(me)) * f32(num_buckets - me)
    return min(num_buckets - 1, me + int(v))


@functools.lru_cache(maxsize=None)
def deberta_bucket(x, position_buckets, max_relative_positions):
    """DeBERTa-v2 log bucket of a signed relative position x (float32)."""
    mid = position_buckets // 2
    if abs(x) <= mid:
        return x
    v = math.ceil(logf(f32(abs(x)) / f32(mid))
                  / logf(f32(max_relative_positions - 1) / f32(mid)) * f32(mid - 1))
    return int(math.copysign(mid + v, x))


def alibi_slopes(n_heads):
    """ALiBi slopes (float32): 2^(-8 h1 / H), with the non-power-of-two interleave."""
    def pow2_slopes(n):
        return [powf(2.0, f32(-8 * h1) / f32(n)) for h1 in range(1, n + 1)]
    if n_heads & (n_heads - 1) == 0:
        return np.array(pow2_slopes(n_heads), dtype=f32)
    c = 2 ** int(math.floor(math.log2(n_heads)))
    return np.array(pow2_slopes(c) + pow2_slopes(2 * c)[0::2][: n_heads - c], dtype=f32)


# ---------------------------------------------------------------------------------------
# Config (MODEL_SPEC §2)
# ---------------------------------------------------------------------------------------
MODEL_DEFAULTS = {
    "vocab_size": 256, "d_model": 256, "n_layers": 6, "n_heads": 8, "d_ff": None,
    "context": 256, "norm": "layernorm", "norm_eps": 1e-5, "tie_embeddings": True,
    "dropout": 0.0, "posenc": None,
}


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _fill(section, given, defaults):
    """``defaults`` updated with ``given``; unknown keys are a ConfigError."""
    if not isinstance(given, dict):
        raise ConfigError(f"{section}: expected a JSON object, got {given!r}")
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ConfigError(f"{section}: unknown key(s) {', '.join(unknown)}")
    return {**defaults, **given}


def parse_config(cfg):
    """Validate a model config (dict or JSON text) and fill in every default."""
    if isinstance(cfg, (str, bytes)):
        cfg = json.loads(cfg)
    c = _fill("config", cfg, MODEL_DEFAULTS)
    for key in ("vocab_size", "d_model", "n_layers", "n_heads", "context"):
        if not _is_int(c[key]) or c[key] <= 0:
            raise ConfigError(f"config: {key} must be a positive integer, got {c[key]!r}")
    if c["d_ff"] is None:
        c["d_ff"] = 4 * c["d_model"]
    if not _is_int(c["d_ff"]) or c["d_ff"] <= 0:
        raise ConfigError(f"config: d_ff must be a positive integer, got {c['d_ff']!r}")
    if c["d_model"] % c["n_heads"]:
        raise ConfigError(f"config: n_heads {c['n_heads']} does not divide d_model {c['d_model']}")
    if c["norm"] not in ("layernorm", "rmsnorm"):
        raise ConfigError(f"config: norm must be layernorm or rmsnorm, got {c['norm']!r}")
    if not _is_num(c["norm_eps"]) or c["norm_eps"] <= 0:
        raise ConfigError(f"config: norm_eps must be a positive number, got {c['norm_eps']!r}")
    if not isinstance(c["tie_embeddings"], bool):
        raise ConfigError("config: tie_embeddings must be true or false")
    if not _is_num(c["dropout"]) or not 0 <= c["dropout"] < 1:
        raise ConfigError(f"config: dropout must be in [0, 1), got {c['dropout']!r}")
    pe = c["posenc"] if c["posenc"] is not None else {"type": "none"}
    if not isinstance(pe, dict) or "type" not in pe:
        raise ConfigError("config: posenc must be an object with a \"type\"")
    if pe["type"] not in ENCODINGS:
        raise ConfigError(f"posenc: unknown type {pe['type']!r} (known: {', '.join(ENCODINGS)})")
    cls = ENCODINGS[pe["type"]]
    body = _fill(f"posenc {pe['type']}", {k: v for k, v in pe.items() if k != "type"}, cls.KEYS)
    c["posenc"] = {"type": pe["type"], **cls.validate(body, c)}
    return c


def head_dim(cfg):
    return cfg["d_model"] // cfg["n_heads"]


# ---------------------------------------------------------------------------------------
# Small ops (MODEL_SPEC §3)
# ---------------------------------------------------------------------------------------
def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, weight, bias, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)          # biased variance
    return (x - mu) / torch.sqrt(var + eps) * weight + bias


def rms_norm(x, weight, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def linear(x, P, name, bias=True):
    y = x @ P[name + ".weight"].t()
    return y + P[name + ".bias"] if bias else y


def causal_delta(T, clamp=True):
    """delta[i, j] = i - j as float64 [T, T]; with clamp, negatives (masked) become 0."""
    pos = torch.arange(T, dtype=torch.float64)
    d = pos[:, None] - pos[None, :]
    return d.clamp(min=0) if clamp else d


def causal_delta_index(T):
    """delta[i, j] = max(i - j, 0) as long [T, T] (masked entries point at row 0)."""
    pos = torch.arange(T)
    return (pos[:, None] - pos[None, :]).clamp(min=0)


# ---------------------------------------------------------------------------------------
# Parameter specs and init (MODEL_SPEC §4, POSENC_SPEC §0)
# ---------------------------------------------------------------------------------------
# init: ("normal", std) | ("uniform", lo, hi) | ("zeros",) | ("ones",)
# role: embedding | linear | residual | bias | norm_weight | norm_bias | logit_table | kerple_r1/r2
ParamSpec = namedtuple("ParamSpec", "name shape init role")

N02 = ("normal", 0.02)


def _norm_specs(name, D, with_bias=True):
    specs = [ParamSpec(name + ".weight", (D,), ("ones",), "norm_weight")]
    if with_bias:
        specs.append(ParamSpec(name + ".bias", (D,), ("zeros",), "norm_bias"))
    return specs


def _linear_specs(name, n_out, n_in, std=0.02, role="linear", bias=True):
    specs = [ParamSpec(name + ".weight", (n_out, n_in), ("normal", std), role)]
    if bias:
        specs.append(ParamSpec(name + ".bias", (n_out,), ("zeros",), "bias"))
    return specs


# ---------------------------------------------------------------------------------------
# Positional encodings (POSENC_SPEC), a registry of small classes
# ---------------------------------------------------------------------------------------
ENCODINGS = {}


def register(name):
    def deco(cls):
        cls.NAME = name
        ENCODINGS[name] = cls
        return cls
    return deco


class PosEnc:
    """Base class: no position information; plain scaled dot-product attention.

    Hooks (q, k, v are [B, H, T, d]; P maps parameter names to tensors; l is the layer):
        embed(x, P)            x [B, T, D] -> x + absolute position terms
        embed_tokens(ids, P)   ids [B, T] -> input of block 0 (default embed(wte[ids]))
        scores(q, k, P, l)     -> logits [B, H, T, T] before the causal mask
        values(p, v, P, l)     p [B, H, T, T] -> o [B, H, T, d]
        project_(P)            in-place constraint projection before the forward
        check_length(T)        raise LengthError for sequences the encoding cannot take
        shared_specs()         parameters of the whole model (wpe.*, pe.*)
        layer_specs(l)         parameters of layer l (blocks.{l}.attn.pe.*)
    """

    NAME = None
    KEYS = {}  # posenc keys besides "type", with their defaults

    def __init__(self, cfg):
        self.cfg = cfg
        self.pe = cfg["posenc"]
        self.D, self.H = cfg["d_model"], cfg["n_heads"]
        self.d = head_dim(cfg)
        self.L = cfg["context"]
        self.scale = 1.0 / math.sqrt(self.d)

    @classmethod
    def validate(cls, pe, cfg):
        """Check the encoding's keys (defaults already filled); returns the dict."""
        return pe

    def shared_specs(self):
        return []

    def layer_specs(self, l):
        return []

    def check_length(self, T):
        pass

    def project_(self, P):
        pass

    def embed(self, x, P):
        return x

    def embed_tokens(self, ids, P):
        """The input of block 0 from token ids [B, T]: embed(wte[ids]) unless overridden."""
        return self.embed(P["wte.weight"][ids], P)

    def bias(self, T, P, dtype):
        """Additive logit bias [H, T, T] (after the scale), or None."""
        return None

    # §6 window and sinks, set by forward_loss (0 = off)
    window = 0
    sinks = 0
    SINKS_OK = False   # the encodings §6 defines sinks for set True

    def rel(self, T):
        """r[i, j] float64 [T, T]: i - j, a sink key beyond the window (j < S, i - j >= W) at
        min(i, S + W - 1) - j (its distance in StreamingLLM's rolling cache); masked j > i: 0."""
        d = causal_delta(T)
        if self.sinks == 0:
            return d
        i = torch.arange(T, dtype=torch.float64)[:, None].expand(T, T)
        rank = i.clamp(max=float(self.sinks + self.window - 1))
        j = torch.arange(T, dtype=torch.float64)[None, :].expand(T, T)
        return torch.where(self.sink_far(T), rank - j, d)

    def sink_far(self, T):
        """bool [T, T]: the sink keys beyond the window (j < S and i - j >= W)."""
        pos = torch.arange(T)
        i, j = pos[:, None], pos[None, :]
        return (j < self.sinks) & (i - j >= self.window) if self.sinks else torch.zeros(T, T, dtype=torch.bool)

    def visible(self, T):
        """bool [T, T]: key j visible to query i (causal, window, sinks)."""
        pos = torch.arange(T)
        i, j = pos[:, None], pos[None, :]
        v = j <= i
        if self.window:
            v = v & ((i - j < self.window) | (j < self.sinks))
        return v

    def scores(self, q, k, P, l):
        s = (q @ k.transpose(-1, -2)) * self.scale
        b = self.bias(q.shape[2], P, q.dtype)
        return s if b is None else s + b

    def values(self, p, v, P, l):
        return p @ v

    # helpers
    def table(self, arr, dtype):
        return torch.as_tensor(np.asarray(arr, dtype=np.float64)).to(dtype)


def _positive_int(section, key, v):
    if not _is_int(v) or v <= 0:
        raise ConfigError(f"{section}: {key} must be a positive integer, got {v!r}")


def _require_even(section, what, n):
    if n % 2:
        raise ConfigError(f"{section}: {what} ({n}) must be even")


@register("none")
class NoPosEnc(PosEnc):
    SINKS_OK = True
    pass


# ---- §1 absolute ----------------------------------------------------------------------
@register("learned")
class Learned(PosEnc):
    SINKS_OK = True
    KEYS = {"hierarchical": False}
    ALPHA = 0.4

    @classmethod
    def validate(cls, pe, cfg):
        if not isinstance(pe["hierarchical"], bool):
            raise ConfigError("posenc learned: hierarchical must be true or false")
        return pe

    def shared_specs(self):
        return [ParamSpec("wpe.weight", (self.L, self.D), N02, "embedding")]

    def check_length(self, T):
        limit = self.L * self.L if self.pe["hierarchical"] else self.L
        if T > limit:
            raise LengthError(
                f"learned: sequence length {T} exceeds {'context^2' if self.pe['hierarchical'] else 'context'} {limit}")

    def embed(self, x, P):
        T, W = x.shape[1], P["wpe.weight"]
        if T <= self.L:
            return x + W[:T]
        a = self.ALPHA
        u = (W - a * W[0]) / (1 - a)
        t = torch.arange(T)
        return x + a * u[t // self.L] + (1 - a) * u[t % self.L]


@register("sinusoidal")
class Sinusoidal(PosEnc):
    SINKS_OK = True
    @classmethod
    def validate(cls, pe, cfg):
        _require_even("posenc sinusoidal", "d_model", cfg["d_model"])
        return pe

    def embed(self, x, P):
        T = x.shape[1]
        ang = angles(range(T), inv_freqs(10000.0, self.D, range(self.D // 2))).astype(np.float64)
        pe = np.empty((T, self.D))
        pe[:, 0::2], pe[:, 1::2] = np.sin(ang), np.cos(ang)
        return x + self.table(pe, x.dtype)


# ---- §2 rotary ------------------------------------------------------------------------
def split_pairs(x, pairing):
    """(a, b) halves of each rotated pair: (k, k+d/2) for half, (2k, 2k+1) for interleaved."""
    d = x.shape[-1]
    if pairing == "half":
        return x[..., : d // 2], x[..., d // 2:]
    return x[..., 0::2], x[..., 1::2]


def merge_pairs(a, b, pairing):
    if pairing == "half":
        return torch.cat([a, b], dim=-1)
    return torch.stack([a, b], dim=-1).flatten(-2)


def rotate(x, cos, sin, pairing):
    """Rotate each pair (a, b) of x [.., T, d] by the angle whose cos/sin are [T, d/2]."""
    a, b = split_pairs(x, pairing)
    return merge_pairs(a * cos - b * sin, b * cos + a * sin, pairing)


SCALING_KEYS = {"type": None, "factor": None, "original_context": None, "window": None,
                "beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": None, "log_n": False,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0, "short_factor": None,
                "long_factor": None, "group": None}
SCALING_TYPES = ("pi", "ntk", "dynamic-ntk", "yarn", "rerope", "leaky-rerope", "llama3", "longrope",
                 "self-extend")
# The 2024 types take exactly the keys of their POSENC_SPEC §2 bullet.
SCALING_OWN_KEYS = {
    "llama3": {"type", "factor", "low_freq_factor", "high_freq_factor", "original_context"},
    "longrope": {"type", "short_factor", "long_factor", "factor", "attention_factor", "original_context"},
    "self-extend": {"type", "window", "group", "original_context"},
}
SINK_SCALINGS = (None, "pi", "ntk", "yarn", "llama3")


@register("rope")
class Rope(PosEnc):
    KEYS = {"base": 10000.0, "pairing": "half", "scaling": None}

    @classmethod
    def validate(cls, pe, cfg):
        sec = "posenc rope"
        _require_even(sec, "head_dim", head_dim(cfg))
        if not _is_num(pe["base"]) or pe["base"] <= 1:
            raise ConfigError(f"{sec}: base must be a number > 1")
        if pe["pairing"] not in ("half", "interleaved"):
            raise ConfigError(f"{sec}: pairing must be half or interleaved, got {pe['pairing']!r}")
        if pe["scaling"] is not None:
            pe = {**pe, "scaling": cls.validate_scaling(pe["scaling"], cfg)}
        return pe

    @staticmethod
    def validate_scaling(sc, cfg):
        sec = "posenc rope scaling"
        s = _fill(sec, sc, SCALING_KEYS)
        if s["type"] not in SCALING_TYPES:
            raise ConfigError(f"{sec}: type must be one of {', '.join(SCALING_TYPES)}, got {s['type']!r}")
        own = SCALING_OWN_KEYS.get(s["type"])
        if own is not None and set(sc) - own:
            raise ConfigError(f"{sec}: key(s) {sorted(set(sc) - own)} not allowed for {s['type']}")
        Rope.validate_2024(sec, s, sc, cfg)
        if s["factor"] is None:
            s["factor"] = 16.0 if s["type"] == "leaky-rerope" else 1.0
        if not _is_num(s["factor"]) or s["factor"] <= 0:
            raise ConfigError(f"{sec}: factor must be a positive number")
        if s["original_context"] is None:
            s["original_context"] = cfg["context"]
        _positive_int(sec, "original_context", s["original_context"])
        if s["window"] is None:
            s["window"] = s["original_context"] // 2
        _positive_int(sec, "window", s["window"])
        for key in ("beta_fast", "beta_slow"):
            if not _is_num(s[key]) or s[key] <= 0:
                raise ConfigError(f"{sec}: {key} must be a positive number")
        if s["attention_factor"] is not None and not _is_num(s["attention_factor"]):
            raise ConfigError(f"{sec}: attention_factor must be a number")
        if not isinstance(s["log_n"], bool):
            raise ConfigError(f"{sec}: log_n must be true or false")
        return s if own is None else {k: s[k] for k in own}  # parsed again, it must pass again

    @staticmethod
    def validate_2024(sec, s, given, cfg):
        """llama3 / longrope / self-extend requirements (POSENC_SPEC §2)."""
        kind = s["type"]
        if kind == "llama3":
            if "factor" not in given:
                raise ConfigError(f"{sec}: llama3 needs factor")
            lo, hi = s["low_freq_factor"], s["high_freq_factor"]
            if not (_is_num(lo) and _is_num(hi) and lo > 0 and hi > lo):
                raise ConfigError(f"{sec}: llama3 needs 0 < low_freq_factor < high_freq_factor")
        elif kind == "longrope":
            for key in ("short_factor", "long_factor"):
                v = s[key]
                if not (isinstance(v, list) and len(v) == head_dim(cfg) // 2
                        and all(_is_num(x) and math.isfinite(x) and x > 0 for x in v)):
                    raise ConfigError(f"{sec}: {key} must be a list of head_dim/2 numbers > 0")
            if s["factor"] is None:
                L = s["original_context"] if s["original_context"] is not None else cfg["context"]
                s["factor"] = cfg["context"] / L
        elif kind == "self-extend":
            _positive_int(sec, "group", s["group"])

    def __init__(self, cfg):
        super().__init__(cfg)
        self.base = self.pe["base"]
        self.pairing = self.pe["pairing"]
        self.sc = self.pe["scaling"]
        self.SINKS_OK = (self.sc["type"] if self.sc else None) in SINK_SCALINGS

    # -- frequency tables (float32) --
    def theta(self, T):
        """theta_k' [d/2] float32 for a forward over T positions, and the cos/sin factor m."""
        d, half = self.d, range(self.d // 2)
        sc = self.sc
        if sc is None or sc["type"] in ("rerope", "leaky-rerope", "self-extend"):
            return inv_freqs(self.base, d, half), 1.0
        s, L = f32(sc["factor"]), sc["original_context"]
        kind = sc["type"]
        if kind == "llama3":
            return self.llama3_theta(inv_freqs(self.base, d, half)), 1.0
        if kind == "longrope":
            return self.longrope_theta(T)
        if kind == "pi":
            return inv_freqs(self.base, d, half) / s, 1.0
        if kind == "ntk":
            base = f32(self.base) * powf(s, f32(d) / f32(d - 2))
            return inv_freqs(base, d, half), 1.0
        if kind == "dynamic-ntk":
            base = f32(self.base)
            if T > L:
                base = base * powf(s * f32(T) / f32(L) - (s - f32(1)), f32(d) / f32(d - 2))
            return inv_freqs(base, d, half), 1.0
        assert kind == "yarn"
        theta = inv_freqs(self.base, d, half)

        def fcd(r):
            return d * math.log(L / (2 * math.pi * r)) / (2 * math.log(self.base))
        low = max(math.floor(fcd(sc["beta_fast"])), 0)
        high = min(math.ceil(fcd(sc["beta_slow"])), d - 1)
        high = high + 0.001 if high == low else high
        ramp = np.clip((np.arange(d // 2, dtype=f32) - f32(low)) / f32(high - low), 0, 1).astype(f32)
        theta = (theta / s) * ramp + theta * (f32(1) - ramp)
        sf = float(sc["factor"])
        m = sc["attention_factor"]
        if m is None:
            m = 0.1 * math.log(sf) + 1.0 if sf > 1 else 1.0
        return theta, float(m)

    def llama3_theta(self, theta):
        """HF _compute_llama3_parameters in float32 (torch tensors, as HF)."""
        sc = self.sc
        inv = torch.from_numpy(np.asarray(theta, dtype=f32))
        L = torch.tensor(float(sc["original_context"]), dtype=torch.float32)
        lf = torch.tensor(float(sc["low_freq_factor"]), dtype=torch.float32)
        hf = torch.tensor(float(sc["high_freq_factor"]), dtype=torch.float32)
        wavelen = torch.tensor(2 * math.pi, dtype=torch.float32) / inv
        out = torch.where(wavelen > L / lf, inv / float(sc["factor"]), inv)
        smooth = (L / wavelen - lf) / (hf - lf)
        smoothed = (1 - smooth) * out / float(sc["factor"]) + smooth * out
        medium = ~(wavelen < L / hf) & ~(wavelen > L / lf)
        return torch.where(medium, smoothed, out).numpy().astype(f32)

    def longrope_theta(self, T):
        """HF _compute_longrope_parameters + longrope_frequency_update (float32)."""
        sc, d = self.sc, self.d
        L = sc["original_context"]
        ext = sc["long_factor"] if T > L else sc["short_factor"]
        theta = np.array([f32(1) / (f32(ext[k]) * powf(f32(self.base), f32(2 * k) / f32(d)))
                          for k in range(d // 2)], dtype=f32)
        s = float(sc["factor"])
        m = sc["attention_factor"]
        if m is None:
            m = math.sqrt(1 + math.log(s) / math.log(L)) if s > 1 else 1.0
        return theta, float(m)

    def log_n_factor(self, T, dtype):
        """ReRoPE-style query scale max(1, ln(i+1)/ln(L)) [T, 1] (float32 table)."""
        lnL = logf(f32(self.sc["original_context"]))
        f = [max(f32(1), logf(f32(i + 1)) / lnL) for i in range(T)]
        return self.table(f, dtype)[:, None]

    def scores(self, q, k, P, l):
        T = q.shape[2]
        if self.sc is not None and self.sc.get("log_n"):
            q = q * self.log_n_factor(T, q.dtype)
        if self.sc is not None and self.sc["type"] in ("rerope", "leaky-rerope"):
            return self.rerope_scores(q, k)
        theta, m = self.theta(T)
        if self.sc is not None and self.sc["type"] == "self-extend":
            W, G = self.sc["window"], self.sc["group"]
            near = self.rotated_scores(q, k, range(T), range(T), theta, m)
            far = self.rotated_scores(q, k, [i // G + W - W // G for i in range(T)],
                                      [j // G for j in range(T)], theta, m)
            return torch.where(causal_delta(T, clamp=False) < W, near, far)
        s = self.rotated_scores(q, k, range(T), range(T), theta, m)
        if self.sinks:  # a sink key beyond the window: the query at its cache rank
            rank = [min(i, self.sinks + self.window - 1) for i in range(T)]
            s = torch.where(self.sink_far(T), self.rotated_scores(q, k, rank, range(T), theta, m), s)
        return s

    def rotated_scores(self, q, k, qpos, kpos, theta, m):
        """scale (R_qpos q . R_kpos k) [B, H, T, T] (float32 angles float(p) * theta)."""
        def turn(x, pos):
            ang = angles(pos, theta).astype(np.float64)
            return rotate(x, self.table(m * np.cos(ang), x.dtype), self.table(m * np.sin(ang), x.dtype),
                          self.pairing)
        return (turn(q, qpos) @ turn(k, kpos).transpose(-1, -2)) * self.scale

    def rerope_scores(self, q, k):
        """Logits from the relative angle r_ij * theta_k of each pair (ReRoPE, leaky ReRoPE).

        For pairs (a, b) rotated by alpha (query) and beta (key):
        R_a q . R_b k = (qa ka + qb kb) cos(phi) - (qb ka - qa kb) sin(phi), phi = alpha - beta.
        """
        T = q.shape[2]
        w = self.sc["window"]
        delta = causal_delta(T, clamp=False)
        if self.sc["type"] == "rerope":
            r = torch.where(delta < w, delta, torch.full_like(delta, float(w)))
        else:
            r = torch.where(delta < w, delta, w + (delta - w) / float(self.sc["factor"]))
        theta = torch.as_tensor(self.theta(T)[0].astype(np.float64))
        phi = r[:, :, None] * theta                               # [T, T, d/2]
        cos, sin = torch.cos(phi).to(q.dtype), torch.sin(phi).to(q.dtype)
        qa, qb = split_pairs(q, self.pairing)
        ka, kb = split_pairs(k, self.pairing)
        e = torch.einsum
        s = (e("bhik,bhjk,ijk->bhij", qa, ka, cos) + e("bhik,bhjk,ijk->bhij", qb, kb, cos)
             - e("bhik,bhjk,ijk->bhij", qb, ka, sin) + e("bhik,bhjk,ijk->bhij", qa, kb, sin))
        return s * self.scale


@register("xpos")
class XPos(PosEnc):
    KEYS = {"base": 10000.0, "scale_base": 512.0}

    @classmethod
    def validate(cls, pe, cfg):
        _require_even("posenc xpos", "head_dim", head_dim(cfg))
        for key in ("base", "scale_base"):
            if not _is_num(pe[key]) or pe[key] <= 0:
                raise ConfigError(f"posenc xpos: {key} must be a positive number")
        return pe

    def xpos_scale(self, T):
        """s[t, k] = zeta_k ^ ((t + c) / gamma), c = -T // 2 (float32) [T, d/2]."""
        d, gamma = self.d, f32(self.pe["scale_base"])
        zeta = [(f32(2 * k) + f32(0.4 * d)) / f32(1.4 * d) for k in range(d // 2)]
        c = (-T) // 2
        return np.array([[powf(z, f32(t + c) / gamma) for z in zeta] for t in range(T)], dtype=f32)

    def scores(self, q, k, P, l):
        T = q.shape[2]
        ang = angles(range(T), inv_freqs(self.pe["base"], self.d, range(self.d // 2)))
        ang = ang.astype(np.float64)
        cos, sin = self.table(np.cos(ang), q.dtype), self.table(np.sin(ang), q.dtype)
        s = self.table(self.xpos_scale(T), q.dtype).repeat_interleave(2, dim=-1)  # [T, d]
        q = rotate(q, cos, sin, "interleaved") * s
        k = rotate(k, cos, sin, "interleaved") / s
        return (q @ k.transpose(-1, -2)) * self.scale


# ---- §3 additive biases -----------------------------------------------------------------
@register("alibi")
class Alibi(PosEnc):
    SINKS_OK = True

    def bias(self, T, P, dtype):
        m = torch.as_tensor(alibi_slopes(self.H).astype(np.float64))
        return (-m[:, None, None] * self.rel(T)).to(dtype)


@register("kerple")
class Kerple(PosEnc):
    SINKS_OK = True
    KEYS = {"variant": "log"}

    @classmethod
    def validate(cls, pe, cfg):
        if pe["variant"] not in ("log", "power"):
            raise ConfigError(f"posenc kerple: variant must be log or power, got {pe['variant']!r}")
        return pe

    def shared_specs(self):
        if self.pe["variant"] == "log":
            r1, r2 = ("uniform", 0.0, 2.0), ("uniform", 0.0, 1.0)
        else:
            r1, r2 = ("uniform", 0.0, 1.0), ("uniform", 0.0, 2.0)
        return [ParamSpec("pe.r1", (self.H,), r1, "kerple_r1"),
                ParamSpec("pe.r2", (self.H,), r2, "kerple_r2")]

    def project_(self, P):
        """In place, like the reference code's param.data.clamp_."""
        with torch.no_grad():
            P["pe.r1"].clamp_(min=0.01)
            if self.pe["variant"] == "log":
                P["pe.r2"].clamp_(min=0.01)
            else:
                P["pe.r2"].clamp_(min=0.01, max=2.0)

    def bias(self, T, P, dtype):
        r1, r2 = P["pe.r1"][:, None, None], P["pe.r2"][:, None, None]
        delta = self.rel(T).to(dtype)
        if self.pe["variant"] == "log":
            return -r1 * torch.log(1 + r2 * delta)
        # delta^r2 with d/dr2 = 0 at delta = 0: evaluate the power only where delta > 0
        safe = delta.clamp(min=1)
        return -r1 * torch.where(delta > 0, safe ** r2, torch.zeros_like(safe))


@register("sandwich")
class Sandwich(PosEnc):
    SINKS_OK = True
    @classmethod
    def validate(cls, pe, cfg):
        _require_even("posenc sandwich", "head_dim", head_dim(cfg))
        return pe

    def bias(self, T, P, dtype):
        d, H = self.d, self.H
        w = inv_freqs(10000.0, d, range(1, d // 2 + 1))            # k = 1 .. d/2
        ang = angles(range(T), w).astype(np.float64)                # [delta, k]
        per_delta = np.cos(ang).sum(axis=1) - d / 2                 # [T] over delta
        tab = torch.as_tensor(per_delta)[self.rel(T).long()]       # [T, T]
        hs = torch.tensor([H / (8.0 * h1) for h1 in range(1, H + 1)], dtype=torch.float64)
        return (tab[None] * hs[:, None, None]).to(dtype)


class _T5Table:
    """Shared helper: the causal T5 bucket bias B[h, i, j] = W[b(i - j), h]."""

    @staticmethod
    def t5_bias(W, T, num_buckets, max_distance, rel=None):
        """rel: the [T, T] distances (default i - j; sinks: PosEnc.rel)."""
        b = torch.tensor([t5_bucket(n, num_buckets, max_distance) for n in range(T)])
        idx = causal_delta_index(T) if rel is None else rel.long()
        return W[b[idx]].permute(2, 0, 1)                          # [H, T, T]


@register("t5")
class T5(PosEnc):
    SINKS_OK = True
    KEYS = {"num_buckets": 32, "max_distance": 128}

    @classmethod
    def validate(cls, pe, cfg):
        sec = "posenc t5"
        _positive_int(sec, "num_buckets", pe["num_buckets"])
        _require_even(sec, "num_buckets", pe["num_buckets"])
        _positive_int(sec, "max_distance", pe["max_distance"])
        if pe["max_distance"] <= pe["num_buckets"] // 2:
            raise ConfigError(f"{sec}: max_distance must exceed num_buckets / 2")
        return pe

    def shared_specs(self):
        return [ParamSpec("pe.rel_bias.weight", (self.pe["num_buckets"], self.H), N02, "logit_table")]

    def bias(self, T, P, dtype):
        return _T5Table.t5_bias(P["pe.rel_bias.weight"], T, self.pe["num_buckets"],
                                self.pe["max_distance"], self.rel(T))


# ---- §4 content-position ------------------------------------------------------------------
@register("shaw")
class Shaw(PosEnc):
    KEYS = {"max_relative_position": 16}

    @classmethod
    def validate(cls, pe, cfg):
        _positive_int("posenc shaw", "max_relative_position", pe["max_relative_position"])
        return pe

    def layer_specs(self, l):
        n, p = 2 * self.pe["max_relative_position"] + 1, f"blocks.{l}.attn.pe."
        return [ParamSpec(p + "rel_k", (n, self.d), N02, "embedding"),
                ParamSpec(p + "rel_v", (n, self.d), N02, "embedding")]

    def rel_index(self, T):
        K, pos = self.pe["max_relative_position"], torch.arange(T)
        return (pos[None, :] - pos[:, None]).clamp(-K, K) + K          # key minus query

    def scores(self, q, k, P, l):
        rk = P[f"blocks.{l}.attn.pe.rel_k"][self.rel_index(q.shape[2])]  # [T, T, d]
        s = q @ k.transpose(-1, -2) + torch.einsum("bhid,ijd->bhij", q, rk)
        return s * self.scale

    def values(self, p, v, P, l):
        rv = P[f"blocks.{l}.attn.pe.rel_v"][self.rel_index(p.shape[2])]
        return p @ v + torch.einsum("bhij,ijd->bhid", p, rv)


@register("xl")
class TransformerXL(PosEnc):
    KEYS = {"mem_len": 0}

    @classmethod
    def validate(cls, pe, cfg):
        if not _is_int(pe["mem_len"]) or pe["mem_len"] < 0:
            raise ConfigError("posenc xl: mem_len must be a non-negative integer")
        _require_even("posenc xl", "d_model", cfg["d_model"])
        return pe

    def shared_specs(self):
        return [ParamSpec("pe.r_w_bias", (self.H, self.d), N02, "embedding"),
                ParamSpec("pe.r_r_bias", (self.H, self.d), N02, "embedding")]

    def layer_specs(self, l):
        return _linear_specs(f"blocks.{l}.attn.pe.r_net", self.D, self.D, bias=False)

    def scores(self, q, k, P, l):
        # One segment, no memory (the grads contract): query i sits at position i.
        T, H, d = q.shape[2], self.H, self.d
        ang = angles(range(T), inv_freqs(10000.0, self.D, range(self.D // 2))).astype(np.float64)
        R = self.table(np.concatenate([np.sin(ang), np.cos(ang)], axis=1), q.dtype)  # [T, D]
        WR = (R @ P[f"blocks.{l}.attn.pe.r_net.weight"].t()).view(T, H, d)           # by r
        WRd = WR[causal_delta_index(T)]                                                # [T, T, H, d]
        u = P["pe.r_w_bias"][None, :, None, :]
        v = P["pe.r_r_bias"][None, :, None, :]
        ac = (q + u) @ k.transpose(-1, -2)
        bd = torch.einsum("bhid,ijhd->bhij", q + v, WRd)
        return (ac + bd) * self.scale


@register("deberta")
class DeBERTa(PosEnc):
    KEYS = {"position_buckets": 32, "max_relative_positions": 128}

    @classmethod
    def validate(cls, pe, cfg):
        sec = "posenc deberta"
        _positive_int(sec, "position_buckets", pe["position_buckets"])
        _require_even(sec, "position_buckets", pe["position_buckets"])
        _positive_int(sec, "max_relative_positions", pe["max_relative_positions"])
        if pe["position_buckets"] < 4 or pe["max_relative_positions"] - 1 <= pe["position_buckets"] // 2:
            raise ConfigError(f"{sec}: need position_buckets >= 4 and max_relative_positions - 1 > position_buckets / 2")
        return pe

    def __init__(self, cfg):
        super().__init__(cfg)
        self.A = self.pe["position_buckets"]
        self.scale = 1.0 / math.sqrt(3 * self.d)

    def shared_specs(self):
        return ([ParamSpec("pe.rel_embeddings.weight", (2 * self.A, self.D), N02, "embedding")]
                + _norm_specs("pe.rel_norm", self.D))

    def rel_index(self, T):
        A, M = self.A, self.pe["max_relative_positions"]
        idx = [[min(max(deberta_bucket(i - j, A, M) + A, 0), 2 * A - 1) for j in range(T)]
               for i in range(T)]
        return torch.tensor(idx)

    def scores(self, q, k, P, l):
        T, D, H, d = q.shape[2], self.D, self.H, self.d
        rel = layer_norm(P["pe.rel_embeddings.weight"], P["pe.rel_norm.weight"],
                         P["pe.rel_norm.bias"], self.cfg["norm_eps"])        # [2A, D]
        W, b = P[f"blocks.{l}.attn.qkv.weight"], P[f"blocks.{l}.attn.qkv.bias"]
        Qr = (rel @ W[:D].t() + b[:D]).view(-1, H, d)
        Kr = (rel @ W[D:2 * D].t() + b[D:2 * D]).view(-1, H, d)
        idx = self.rel_index(T)
        c2p = torch.einsum("bhid,ijhd->bhij", q, Kr[idx])
        p2c = torch.einsum("bhjd,ijhd->bhij", k, Qr[idx])
        return (q @ k.transpose(-1, -2) + c2p + p2c) * self.scale


@register("tupe")
class TUPE(PosEnc):
    NUM_BUCKETS, MAX_DISTANCE = 32, 128

    def __init__(self, cfg):
        super().__init__(cfg)
        self.scale = 1.0 / math.sqrt(2 * self.d)

    def shared_specs(self):
        D = self.D
        return ([ParamSpec("pe.pos_emb.weight", (self.L, D), N02, "embedding")]
                + _norm_specs("pe.pos_norm", D)
                + _linear_specs("pe.pos_proj", 2 * D, D)
                + [ParamSpec("pe.rel_bias.weight", (self.NUM_BUCKETS, self.H), N02, "logit_table")])

    def check_length(self, T):
        if T > self.L:
            raise LengthError(f"tupe: sequence length {T} exceeds context {self.L}")

    def scores(self, q, k, P, l):
        T, D, H, d = q.shape[2], self.D, self.H, self.d
        p = layer_norm(P["pe.pos_emb.weight"][:T], P["pe.pos_norm.weight"],
                       P["pe.pos_norm.bias"], self.cfg["norm_eps"])
        u = linear(p, P, "pe.pos_proj")                                  # [T, 2D]
        uq = u[:, :D].view(T, H, d).transpose(0, 1)                      # [H, T, d]
        uk = u[:, D:].view(T, H, d).transpose(0, 1)
        pos = uq @ uk.transpose(-1, -2)                                  # [H, T, T]
        rel = _T5Table.t5_bias(P["pe.rel_bias.weight"], T, self.NUM_BUCKETS, self.MAX_DISTANCE)
        return (q @ k.transpose(-1, -2) + pos) * self.scale + rel



# ---- §5 recurrent, continuous and complex-order ------------------------------------------
@register("rnn")
class Recurrent(PosEnc):
    SINKS_OK = True
    """One GRU layer (torch.nn.GRU's equations, gates r, z, n) replaces the token embeddings."""

    def shared_specs(self):
        D, a = self.D, 1.0 / math.sqrt(self.D)
        u = ("uniform", -a, a)
        return [ParamSpec("pe.weight_ih", (3 * D, D), u, "linear"),
                ParamSpec("pe.weight_hh", (3 * D, D), u, "linear"),
                ParamSpec("pe.bias_ih", (3 * D,), u, "bias"),
                ParamSpec("pe.bias_hh", (3 * D,), u, "bias")]

    def embed(self, x, P):
        D = self.D
        wi, wh, bi, bh = P["pe.weight_ih"], P["pe.weight_hh"], P["pe.bias_ih"], P["pe.bias_hh"]
        xg = x @ wi.t() + bi                                         # [B, T, 3D]
        h = x.new_zeros(x.shape[0], D)
        out = []
        for t in range(x.shape[1]):
            hg = h @ wh.t() + bh
            r = torch.sigmoid(xg[:, t, :D] + hg[:, :D])
            z = torch.sigmoid(xg[:, t, D:2 * D] + hg[:, D:2 * D])
            n = torch.tanh(xg[:, t, 2 * D:] + r * hg[:, 2 * D:])
            h = (1 - z) * n + z * h
            out.append(h)
        return torch.stack(out, dim=1)


@register("floater")
class Floater(PosEnc):
    SINKS_OK = True
    """Positions p(i dt) of dp/dt = W2 tanh(W1 p + b1 + t w_t) + b2 by classic RK4."""
    KEYS = {"hidden": 64, "dt": 0.01, "substeps": 1}

    @classmethod
    def validate(cls, pe, cfg):
        _positive_int("posenc floater", "hidden", pe["hidden"])
        _positive_int("posenc floater", "substeps", pe["substeps"])
        if not _is_num(pe["dt"]) or not pe["dt"] > 0 or not math.isfinite(pe["dt"]):
            raise ConfigError(f"posenc floater: dt must be a positive number, got {pe['dt']!r}")
        return pe

    def shared_specs(self):
        D, Fh, a = self.D, self.pe["hidden"], 1.0 / math.sqrt(self.D)
        return [ParamSpec("pe.p0", (D,), N02, "embedding"),
                ParamSpec("pe.fc.weight", (Fh, D), ("uniform", -a, a), "linear"),
                ParamSpec("pe.fc.bias", (Fh,), ("uniform", -a, a), "bias"),
                ParamSpec("pe.time", (Fh,), ("uniform", -1.0, 1.0), "time"),
                ParamSpec("pe.proj.weight", (D, Fh), N02, "linear"),
                ParamSpec("pe.proj.bias", (D,), ("zeros",), "bias")]

    def positions(self, n, P):
        eta = self.pe["dt"] / self.pe["substeps"]

        def h(p, t):
            return torch.tanh(p @ P["pe.fc.weight"].t() + P["pe.fc.bias"] + t * P["pe.time"]) \
                @ P["pe.proj.weight"].t() + P["pe.proj.bias"]

        p, out = P["pe.p0"], [P["pe.p0"]]
        for s in range((n - 1) * self.pe["substeps"]):
            t = s * eta
            k1 = h(p, t)
            k2 = h(p + (eta / 2) * k1, t + eta / 2)
            k3 = h(p + (eta / 2) * k2, t + eta / 2)
            k4 = h(p + eta * k3, t + eta)
            p = p + (eta / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
            if (s + 1) % self.pe["substeps"] == 0:
                out.append(p)
        return torch.stack(out)                                       # [n, D]

    def embed(self, x, P):
        return x + self.positions(x.shape[1], P)


@register("complex-order")
class ComplexOrder(PosEnc):
    SINKS_OK = True
    """Word w at position t: (wte[w, 2k] + i wte[w, 2k+1]) e^{i freq[w, k] t}."""

    @classmethod
    def validate(cls, pe, cfg):
        _require_even("posenc complex-order", "d_model", cfg["d_model"])
        return pe

    def shared_specs(self):
        return [ParamSpec("pe.freq.weight", (self.cfg["vocab_size"], self.D // 2),
                          ("sinusoidal_freq",), "frequency")]

    def embed_tokens(self, ids, P):
        e = P["wte.weight"][ids]                                      # [B, T, D]
        a, b = e[..., 0::2], e[..., 1::2]
        t = torch.arange(ids.shape[1], dtype=torch.float32).to(e.dtype)[:, None]
        phi = P["pe.freq.weight"][ids] * t                            # [B, T, D/2]
        c, s = torch.cos(phi), torch.sin(phi)
        return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)


def make_encoding(cfg):
    return ENCODINGS[cfg["posenc"]["type"]](cfg)


# ---- §7 the encodings of 2023-24 -------------------------------------------------------------
def _fire_cope_shared(section, pe):
    if not isinstance(pe["shared"], bool):
        raise ConfigError(f"{section}: shared must be true or false, got {pe['shared']!r}")


@register("fire")
class Fire(PosEnc):
    """FIRE (§7.1), after the paper's PyTorch module: f(psi(i - j) / (psi(max(thr, i)) + eps))."""
    KEYS = {"mlp_width": 32, "init_c": 0.1, "init_L": 512.0, "eps": 1e-6, "shared": False}

    @classmethod
    def validate(cls, pe, cfg):
        _positive_int("posenc fire", "mlp_width", pe["mlp_width"])
        for k in ("init_c", "init_L", "eps"):
            if not _is_num(pe[k]) or pe[k] <= 0:
                raise ConfigError(f"posenc fire: {k} must be a number > 0, got {pe[k]!r}")
        _fire_cope_shared("posenc fire", pe)
        return pe

    def _specs(self, p):
        W, H = self.pe["mlp_width"], self.H
        a = 1.0 / math.sqrt(W)
        return [ParamSpec(p + "c", (1,), ("const", self.pe["init_c"]), "fire_scalar"),
                ParamSpec(p + "L_multiplier", (1,), ("const", 1.0), "fire_scalar"),
                ParamSpec(p + "mlp.fc1.weight", (W, 1), ("uniform", -1.0, 1.0), "linear"),
                ParamSpec(p + "mlp.fc1.bias", (W,), ("uniform", -1.0, 1.0), "fire_fc1_bias"),
                ParamSpec(p + "mlp.fc2.weight", (H, W), ("uniform", -a, a), "linear"),
                ParamSpec(p + "mlp.fc2.bias", (H,), ("uniform", -a, a), "bias")]

    def _prefix(self, l):
        return "pe." if self.pe["shared"] else f"blocks.{l}.attn.pe."

    def shared_specs(self):
        return self._specs("pe.") if self.pe["shared"] else []

    def layer_specs(self, l):
        return [] if self.pe["shared"] else self._specs(self._prefix(l))

    def scores(self, q, k, P, l):
        p, T = self._prefix(l), q.shape[2]
        pos = torch.arange(T, dtype=q.dtype)
        c = P[p + "c"]
        thr = torch.abs(P[p + "L_multiplier"] * torch.tensor(self.pe["init_L"], dtype=q.dtype))
        num = torch.log(torch.abs(c * (pos[:, None] - pos[None, :])) + 1)         # [T, T]
        den = torch.log(torch.abs(c * torch.maximum(thr, pos)) + 1) + self.pe["eps"]  # [T]
        x = (num / den[:, None])[..., None]                                         # [T, T, 1]
        h = torch.relu(x @ P[p + "mlp.fc1.weight"].t() + P[p + "mlp.fc1.bias"])
        f = h @ P[p + "mlp.fc2.weight"].t() + P[p + "mlp.fc2.bias"]                 # [T, T, H]
        return (q @ k.transpose(-1, -2)) * self.scale + f.permute(2, 0, 1)


@register("cope")
class Cope(PosEnc):
    """CoPE (§7.2), after facebookresearch/RAM's ContextPosSelfAttn with the repository's defaults.
    With a window and sinks (§6) the invisible keys have gate 0: positions count visible keys only."""
    KEYS = {"npos_max": None, "shared": False}
    SINKS_OK = True

    @classmethod
    def validate(cls, pe, cfg):
        if pe["npos_max"] is None:
            pe["npos_max"] = cfg["context"] + 1
        _positive_int("posenc cope", "npos_max", pe["npos_max"])
        _fire_cope_shared("posenc cope", pe)
        return pe

    def _name(self, l):
        return "pe.pos_emb" if self.pe["shared"] else f"blocks.{l}.attn.pe.pos_emb"

    def shared_specs(self):
        if not self.pe["shared"]:
            return []
        return [ParamSpec("pe.pos_emb", (self.d, self.pe["npos_max"]), ("zeros",), "logit_table")]

    def layer_specs(self, l):
        if self.pe["shared"]:
            return []
        return [ParamSpec(self._name(l), (self.d, self.pe["npos_max"]), ("zeros",), "logit_table")]

    def scores(self, q, k, P, l):
        T, npos = q.shape[2], self.pe["npos_max"]
        logits = q @ k.transpose(-1, -2)                                     # unscaled
        gates = torch.sigmoid(logits * self.scale).masked_fill(~self.visible(T), 0.0)
        pos = gates.flip(-1).cumsum(dim=-1).flip(-1).clamp(max=npos - 1)
        pos_ceil, pos_floor = pos.ceil().long(), pos.floor().long()
        z = q @ P[self._name(l)]                                             # [B, H, T, npos]
        w = pos - pos_floor
        e = z.gather(-1, pos_ceil) * w + z.gather(-1, pos_floor) * (1 - w)
        return (logits + e) * self.scale


# ---------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------
def param_specs(cfg):
    """Every parameter of the model, in a fixed order, with shape, default init and role."""
    cfg = parse_config(cfg)  # idempotent on a parsed config
    enc = make_encoding(cfg)
    V, D, Fd, nl = cfg["vocab_size"], cfg["d_model"], cfg["d_ff"], cfg["n_layers"]
    ln = cfg["norm"] == "layernorm"
    resid = 0.02 / math.sqrt(2 * nl)
    specs = [ParamSpec("wte.weight", (V, D), N02, "embedding")] + enc.shared_specs()
    for l in range(nl):
        b = f"blocks.{l}."
        specs += _norm_specs(b + "norm1", D, ln)
        specs += _linear_specs(b + "attn.qkv", 3 * D, D)
        specs += _linear_specs(b + "attn.proj", D, D, resid, "residual")
        specs += _norm_specs(b + "norm2", D, ln)
        specs += _linear_specs(b + "mlp.fc", Fd, D)
        specs += _linear_specs(b + "mlp.proj", D, Fd, resid, "residual")
        specs += enc.layer_specs(l)
    specs += _norm_specs("norm_f", D, ln)
    if not cfg["tie_embeddings"]:
        specs.append(ParamSpec("lm_head.weight", (V, D), N02, "embedding"))
    return specs


def sample_init(init, shape, gen, dtype=torch.float32):
    """Draw a tensor from an init descriptor with a torch.Generator."""
    kind = init[0]
    if kind == "normal":
        return torch.randn(shape, generator=gen, dtype=torch.float64).mul_(init[1]).to(dtype)
    if kind == "uniform":
        lo, hi = init[1], init[2]
        return (torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    if kind == "const":
        return torch.full(shape, float(init[1]), dtype=dtype)
    if kind == "zeros":
        return torch.zeros(shape, dtype=dtype)
    if kind == "ones":
        return torch.ones(shape, dtype=dtype)
    if kind == "sinusoidal_freq":  # [rows, D/2]: 1 / powf(10000, 2k / D) in every row
        D = 2 * shape[-1]
        row = [float(f32(1.0) / powf(10000.0, f32(2 * k) / f32(D))) for k in range(shape[-1])]
        return torch.tensor(row, dtype=torch.float64).expand(shape).clone().to(dtype)
    raise ValueError(f"unknown init {init!r}")


def init_params(cfg, seed=0, dtype=torch.float32):
    """Fresh parameters with the spec's default init (MODEL_SPEC §4, POSENC_SPEC §0)."""
    gen = torch.Generator().manual_seed(seed)
    return {s.name: sample_init(s.init, s.shape, gen, dtype) for s in param_specs(cfg)}


def check_params(cfg, params):
    """Raise ValueError unless params has exactly the spec's names and shapes."""
    specs = {s.name: tuple(s.shape) for s in param_specs(cfg)}
    missing = sorted(set(specs) - set(params))
    extra = sorted(set(params) - set(specs))
    if missing or extra:
        raise ValueError(f"parameters: missing {missing}, unexpected {extra}")
    for name, shape in specs.items():
        if tuple(params[name].shape) != shape:
            raise ValueError(f"parameter {name}: shape {tuple(params[name].shape)}, expected {shape}")


def _norm(cfg, x, P, name):
    if cfg["norm"] == "layernorm":
        return layer_norm(x, P[name + ".weight"], P[name + ".bias"], cfg["norm_eps"])
    return rms_norm(x, P[name + ".weight"], cfg["norm_eps"])


def attention(cfg, enc, a, P, l):
    """Causal multi-head self-attention of layer l on a = norm1(x) [B, T, D]."""
    B, T, D = a.shape
    H, d = cfg["n_heads"], head_dim(cfg)
    qkv = linear(a, P, f"blocks.{l}.attn.qkv")                            # [B, T, 3D]
    q, k, v = (t.reshape(B, T, H, d).transpose(1, 2) for t in qkv.split(D, dim=-1))
    s = enc.scores(q, k, P, l)                                            # [B, H, T, T]
    s = s.masked_fill(~enc.visible(T), float("-inf"))
    p = torch.softmax(s, dim=-1)
    o = enc.values(p, v, P, l)                                            # [B, H, T, d]
    return linear(o.transpose(1, 2).reshape(B, T, D), P, f"blocks.{l}.attn.proj")


def forward_loss(cfg, P, tokens, window=0, sinks=0):
    """Mean next-token cross-entropy of tokens [B, T+1] (inputs [:, :-1], targets [:, 1:]),
    with a sliding window and attention sinks (POSENC_SPEC §6) when given."""
    cfg = parse_config(cfg)
    enc = make_encoding(cfg)
    if sinks < 0 or window < 0 or (sinks and not window):
        raise ConfigError(f"sinks ({sinks}) and window ({window}) must be >= 0; sinks need a window")
    if sinks and not enc.SINKS_OK:
        raise ConfigError(f"sinks are not defined for posenc {cfg['posenc']}")
    enc.window, enc.sinks = window, sinks
    tokens = torch.as_tensor(np.asarray(tokens)).long()
    if tokens.dim() != 2 or tokens.shape[1] < 2:
        raise ValueError(f"tokens must be [B, T+1] with T >= 1, got {tuple(tokens.shape)}")
    if tokens.min() < 0 or tokens.max() >= cfg["vocab_size"]:
        raise ValueError(f"token ids must lie in [0, {cfg['vocab_size']})")
    inp, tgt = tokens[:, :-1], tokens[:, 1:]
    enc.check_length(inp.shape[1])
    x = enc.embed_tokens(inp, P)
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}."
        x = x + attention(cfg, enc, _norm(cfg, x, P, b + "norm1"), P, l)
        m = _norm(cfg, x, P, b + "norm2")
        x = x + linear(gelu_tanh(linear(m, P, b + "mlp.fc")), P, b + "mlp.proj")
    w_out = P["wte.weight"] if cfg["tie_embeddings"] else P["lm_head.weight"]
    logits = _norm(cfg, x, P, "norm_f") @ w_out.t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def loss_and_grads(cfg, params, tokens, dtype=torch.float64, window=0, sinks=0):
    """One forward/backward: returns (loss as float, {name: d loss / d param} in dtype).

    As ctxlab does before each forward, constraint projections (KERPLE's clamps) are
    applied *in place* to ``params``; gradients are taken at the projected values.
    """
    cfg = parse_config(cfg)
    check_params(cfg, params)
    make_encoding(cfg).project_(params)
    P = {n: t.detach().to(dtype).clone().requires_grad_(True) for n, t in params.items()}
    loss = forward_loss(cfg, P, tokens, window, sinks)
    names = list(P)
    grads = torch.autograd.grad(loss, [P[n] for n in names], allow_unused=True)
    return loss.item(), {n: (g if g is not None else torch.zeros_like(P[n]))
                         for n, g in zip(names, grads)}


# ---------------------------------------------------------------------------------------
# Checkpoints (MODEL_SPEC §5)
# ---------------------------------------------------------------------------------------
def load_checkpoint(path, dtype=torch.float64):
    """Read a ctxlab/1 checkpoint: returns (parsed config, {name: tensor in dtype})."""
    tensors, meta = read_safetensors(path)
    if meta.get("format") != "ctxlab/1":
        raise ValueError(f"{path}: __metadata__ format is {meta.get('format')!r}, expected 'ctxlab/1'")
    if "config" not in meta:
        raise ValueError(f"{path}: __metadata__ has no config")
    cfg = parse_config(meta["config"])
    params = {n: torch.from_numpy(a).to(dtype) for n, a in tensors.items()}
    check_params(cfg, params)
    return cfg, params


def save_checkpoint(path, cfg, params, step=0):
    """Write params as F32 with ``{"format": "ctxlab/1", "config": json, "step": str}``.

    ``cfg`` is written as given (a raw dict keeps omitted keys omitted)."""
    meta = {"format": "ctxlab/1", "config": json.dumps(cfg), "step": str(step)}
    arrays = {n: t.detach().to(torch.float32).cpu().numpy() for n, t in params.items()}
    write_safetensors(path, arrays, meta)
