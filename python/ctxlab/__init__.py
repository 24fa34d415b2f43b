"""ctxlab — train small transformer LMs and study positional encodings, from Python.

The PyTorch-like layer over the C++ library (the nanobind module ctxlab._ctxlab; docs/python.md):

    import ctxlab
    model = ctxlab.Model(ctxlab.config("tiny", posenc={"type": "rope"}), seed=1)
    opt = ctxlab.AdamW(model.named_parameters(), lr=1e-3)
    loss = model.loss(inputs, targets)        # int arrays [B, T] -> scalar Variable
    loss.backward()
    for name, p in model.named_parameters():
        g = p.grad.numpy()                    # a view of the C++ gradient, no copy
    opt.step(); opt.zero_grad()

Tensors and Variables export their memory without a copy (t.numpy(), np.asarray(t),
torch.from_dlpack(t)); arrays passed in (tokens, ctxlab.tensor, Variable.copy_) are copied,
since ctxlab tensors own their memory. C++ errors are raised as ctxlab.Error with the C++ message.
"""

import json
import os

from . import _ctxlab as _C
from ._ctxlab import Error, Tensor, Variable, no_grad, Tokenizer, clip_grad_norm, lr_warmup_cosine

__all__ = ["Error", "Tensor", "Variable", "no_grad", "Tokenizer", "Model", "AdamW", "SGD", "tensor",
           "config", "presets", "encodings", "devices", "train", "evaluate", "sample", "gradcheck",
           "gradcheck_params", "byte_tokenizer", "load_tokenizer", "clip_grad_norm", "lr_warmup_cosine"]

byte_tokenizer = _C.byte_tokenizer
load_tokenizer = _C.load_tokenizer


def _np():
    import numpy  # a dependency of the package; imported late so that stubgen needs no numpy
    return numpy


def tensor(data, dtype=None):
    """A ctxlab.Tensor holding a copy of `data` (array, list, torch tensor via DLPack)."""
    np = _np()
    a = np.ascontiguousarray(data if dtype is None else np.asarray(data, dtype=dtype))
    return Tensor.from_numpy(a)


def presets():
    """Names of the built-in model presets (tiny, small, medium)."""
    return list(_C.preset_names())


def encodings():
    """Names of every registered positional encoding (the C++ registry: built-ins and plugins)."""
    return list(_C.encodings())


def devices():
    """Devices this build can use now: ['cpu'] or ['cpu', 'cuda']."""
    return list(_C.devices())


def config(preset="tiny", **overrides):
    """A validated model config as a dict: a preset with keys replaced (MODEL_SPEC §2)."""
    c = json.loads(_C.preset_config(preset))
    c.update(overrides)
    return json.loads(_C.normalize_config(json.dumps(c), f"ctxlab.config({preset!r})"))


def _tokens(x):
    np = _np()
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise Error(f"token ids must be integers, got an array of dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.int64 if a.dtype != np.int32 else np.int32)


def _named(params):
    if isinstance(params, Model):
        return params.named_parameters()
    named = list(params)
    if named and not (isinstance(named[0], tuple) and len(named[0]) == 2):
        raise Error("optimizers take model.named_parameters() (a list of (name, Variable)) or a Model: "
                    "the names decide which parameters take weight decay")
    return named


class Model:
    """A GPT (ctx::nn::GPT) from a config dict, a preset name or a .json file; float32 or float64.

    seed: initial weights (MODEL_SPEC §4 init, deterministic in the seed)."""

    def __init__(self, config="tiny", dtype="float32", seed=0, *, _gpt=None):
        if _gpt is not None:
            self._m = _gpt
        else:
            if isinstance(config, os.PathLike) or (isinstance(config, str) and config.endswith(".json")):
                with open(config) as f:
                    text, source = f.read(), str(config)
            elif isinstance(config, str):
                text, source = _C.preset_config(config), f"preset {config}"
            else:
                text, source = json.dumps(config), "config"
            self._m = _C.GPT(text, dtype, source)
            self._m.init_weights(seed)
        self.tokenizer = _C.byte_tokenizer()
        self.step = 0
        self.metadata = {}

    @classmethod
    def from_checkpoint(cls, path, dtype="float32", posenc=None, context=-1):
        """Loads a ctxlab checkpoint; posenc: keys merged into the config's posenc (e.g. RoPE scaling)."""
        lc = _C.load_checkpoint(os.fspath(path), dtype, json.dumps(posenc) if posenc else "", context)
        m = cls(_gpt=lc.take_model())
        m.tokenizer, m.step, m.metadata = lc.tokenizer, lc.step, dict(lc.metadata)
        return m

    # --- what torch.nn.Module has ---
    def forward(self, tokens, pos0=0, use_memory=False):
        """tokens [B, T] ints -> logits Variable [B, T, vocab]."""
        return self._m.forward(_tokens(tokens), pos0, use_memory)

    __call__ = forward

    def loss(self, inputs, targets, use_memory=False):
        """Mean cross-entropy (nats) of the next-token predictions, a scalar Variable."""
        return self._m.loss(_tokens(inputs), _tokens(targets), use_memory)

    def token_losses(self, inputs, targets):
        """Per-position cross-entropy [B, T] as a Tensor (no graph)."""
        return self._m.token_losses(_tokens(inputs), _tokens(targets))

    def named_parameters(self):
        return list(self._m.named_parameters())

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def state_dict(self):
        """{name: NumPy view of the parameter} (no copy: copy it to keep a snapshot)."""
        return {n: p.numpy() for n, p in self.named_parameters()}

    def load_state_dict(self, state):
        """Copies arrays (NumPy, torch via DLPack) into the parameters of the same names and shapes."""
        np = _np()
        params = dict(self.named_parameters())
        missing = sorted(set(params) - set(state))
        unknown = sorted(set(state) - set(params))
        if missing or unknown:
            raise Error(f"load_state_dict: missing {missing}, unknown {unknown}")
        for n, v in state.items():
            if hasattr(v, "detach"):  # a torch tensor
                v = v.detach().cpu().numpy()
            params[n].copy_(np.ascontiguousarray(v))

    def zero_grad(self):
        self._m.zero_grad()

    def train(self, mode=True):
        self._m.train(mode)
        return self

    def eval(self):
        self._m.eval()
        return self

    @property
    def training(self):
        return self._m.training

    def to(self, device):
        self._m.to(device)
        return self

    def save(self, path, step=None):
        """Writes a ctxlab checkpoint (safetensors, MODEL_SPEC §5)."""
        self._m.save(os.fspath(path), self.step if step is None else step, {})

    @property
    def config(self):
        return json.loads(self._m.config_json)

    @property
    def encoding(self):
        return self._m.encoding

    @property
    def dtype(self):
        return self._m.dtype

    def __repr__(self):
        c = self.config
        n = sum(int(_np().prod(p.shape)) for p in self.parameters())
        return (f"ctxlab.Model(encoding={self.encoding!r}, d_model={c['d_model']}, n_layers={c['n_layers']}, "
                f"n_heads={c['n_heads']}, context={c['context']}, dtype={self.dtype!r}, parameters={n})")


class _Optim:
    def step(self):
        self._o.step(self.lr)

    def clip_and_step(self, max_norm):
        """Clips the global gradient norm to max_norm, steps; returns the norm before clipping."""
        return self._o.clip_and_step(self.lr, max_norm)

    def zero_grad(self):
        self._o.zero_grad()

    @property
    def steps(self):
        return self._o.steps

    def state(self):
        return dict(self._o.state())


class AdamW(_Optim):
    """AdamW (ctx::AdamW; decoupled weight decay, none on biases, norms and embeddings)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, fused=True):
        self.lr = lr
        self._o = _C.AdamW(_named(params), lr, betas[0], betas[1], eps, weight_decay, fused)


class SGD(_Optim):
    """SGD with momentum (ctx::SGD)."""

    def __init__(self, params, lr=1e-2, momentum=0.0, weight_decay=0.0):
        self.lr = lr
        self._o = _C.SGD(_named(params), momentum, weight_decay)


def _progress_bar(total, enabled):
    """A tqdm bar (tqdm.auto: the notebook widget in Jupyter) when asked and tqdm is importable."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="train", unit="step")


def train(model, data=None, out="runs/run", steps=1000, progress=True, force=False, **options):
    """Trains with ctx::train (warmup + cosine, clipping, validation, checkpoints in `out`).

    options: the TrainOptions keys (batch, lr, min_lr, warmup, optimizer, grad_clip, context,
    eval_interval, log_interval, seed, quiet, plot, ...); an unknown key or a bad value is a
    ctxlab.Error naming it. progress: a tqdm bar when tqdm is importable. Returns the result dict
    with 'history': the rows of out/metrics.jsonl (step, loss, lr, ...; val_loss rows)."""
    opts = dict(options, out=os.fspath(out), steps=steps)
    if data is not None:
        opts["data"] = os.fspath(data)
    bar = _progress_bar(steps, progress)
    if bar is not None:
        opts.setdefault("quiet", True)
    try:
        res = _C.train(model._m, json.dumps(opts), force, (lambda step, reported: bar.update(1)) if bar else None)
    finally:
        if bar is not None:
            bar.close()
    res["history"] = []
    path = os.path.join(opts["out"], "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            res["history"] = [json.loads(line) for line in f if line.strip()]
    return res


def _token_list(model, data):
    if isinstance(data, str):
        return model.tokenizer.encode(data)
    if isinstance(data, bytes):
        return model.tokenizer.encode(data.decode("utf-8", "surrogateescape"))
    return [int(t) for t in _np().asarray(data).reshape(-1)]


def evaluate(model, data, length, batch=1, max_windows=0, window=0, sinks=0, segment=0, position_bucket=0):
    """Perplexity of `model` at context `length` on text (str) or token ids (ctx::evaluate)."""
    return _C.evaluate(model._m, _token_list(model, data), length, batch, max_windows, window, sinks, segment,
                       position_bucket, model.tokenizer)


def sample(model, prompt, max_tokens=200, temperature=0.8, top_k=40, seed=0, window=0, sinks=0, use_cache=True,
           on_token=None):
    """Generates after `prompt`: a str prompt gives the decoded str, token ids give ids."""
    ids = _C.sample(model._m, _token_list(model, prompt), max_tokens, temperature, top_k, seed, window, sinks,
                    use_cache, on_token)
    if isinstance(prompt, str):
        return model.tokenizer.decode(ids).decode("utf-8", "replace")
    return list(ids)


def gradcheck_params(named_parameters, loss, check=None, eps=1e-6, atol=1e-5, rtol=1e-3, seed=1234,
                     max_elements=-1):
    """Finite differences of loss() against backward for float64 parameters (ctx::gradcheck_params).

    check(name) selects the parameters checked (None: all). Returns {'passed', 'summary', 'tensors'}."""
    return _C.gradcheck_params(list(named_parameters), loss, check, eps, atol, rtol, seed, max_elements)


def gradcheck(model, inputs, targets, names=None, **options):
    """gradcheck_params of model.loss(inputs, targets) (a float64 model); names: the parameters to check."""
    x, y = _tokens(inputs), _tokens(targets)
    check = None if names is None else (lambda n, keep=frozenset(names): n in keep)
    return gradcheck_params(model.named_parameters(), lambda: model._m.loss(x, y, False), check, **options)
