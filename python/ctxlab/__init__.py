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

Typed (py.typed; docs/python.md "Types"): the signatures below and the generated stub _ctxlab.pyi
pass `mypy --strict` (ctest python_types). The annotations stay valid on Python 3.8: postponed
(`from __future__ import annotations`), and the aliases evaluated at run time use typing's forms.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, List, Literal, Protocol, Tuple, TypedDict, Union, cast, overload

from . import _ctxlab as _C
from ._ctxlab import Error, Tensor, Variable, no_grad, Tokenizer, clip_grad_norm, lr_warmup_cosine

if TYPE_CHECKING:
    import numpy
    from numpy.typing import ArrayLike, DTypeLike, NDArray
    from typing_extensions import Self, Unpack

__all__ = ["Error", "Tensor", "Variable", "no_grad", "Tokenizer", "Model", "AdamW", "SGD", "tensor",
           "config", "presets", "encodings", "devices", "train", "evaluate", "sample", "sample_many", "gradcheck",
           "gradcheck_params", "byte_tokenizer", "load_tokenizer", "clip_grad_norm", "lr_warmup_cosine",
           "DType", "Device", "Preset", "StrPath", "NamedParameters", "TrainResult", "HistoryRow", "EvalResult",
           "PositionBucket", "GradcheckResult", "TensorCheck", "GradcheckOptions"]

# ---- the types of the API (run-time objects, so `ctxlab.TrainResult` works in user annotations) ----
DType = Literal["float32", "float64"]
"""Model precisions (tensors also take "int32" and "int64")."""
Device = Literal["cpu", "cuda", "cuda:0"]
Preset = Literal["tiny", "small", "medium"]
"""The built-in presets (nn/config.cpp; ctxlab.presets() lists them)."""
StrPath = Union[str, "os.PathLike[str]"]
NamedParameters = List[Tuple[str, Variable]]
"""model.named_parameters(): (MODEL_SPEC §4 name, parameter) in registration order."""


class TrainResult(TypedDict):
    """ctxlab.train()'s result: ctx::TrainResult plus the run's metrics.jsonl rows."""
    steps: int
    final_train_loss: float
    final_val_loss: float
    seconds: float
    signal: int              # SIGINT / SIGTERM that stopped the run, 0 when it ended normally
    history: list[HistoryRow]


class _HistoryStep(TypedDict):
    step: int


class HistoryRow(_HistoryStep, total=False):
    """A row of metrics.jsonl: a training row (loss, lr, grad_norm, ms, tok_s; rank_loss under MPI) or a
    validation row (val_loss, val_bpb); `step` is in both."""
    loss: float
    lr: float
    grad_norm: float
    ms: float
    tok_s: float
    rank_loss: list[float]
    val_loss: float
    val_bpb: float


class PositionBucket(TypedDict):
    """The mean loss of positions [begin, end) (evaluate(..., position_bucket=N))."""
    begin: int
    end: int
    count: int
    loss: float


class EvalResult(TypedDict):
    """ctxlab.evaluate()'s result (ctx::EvalResult)."""
    length: int
    windows: int
    tokens: int
    loss: float              # nats per token
    ppl: float
    bytes: int
    bpb: float               # bits per byte
    positions: list[PositionBucket]


class TensorCheck(TypedDict):
    """One parameter's finite-difference check (ctx::GradcheckResult's per-tensor row)."""
    name: str
    max_abs_err: float
    max_rel_err: float
    worst_index: int
    worst_analytic: float
    worst_numeric: float
    passed: bool


class GradcheckResult(TypedDict):
    passed: bool
    summary: str
    tensors: list[TensorCheck]


class GradcheckOptions(TypedDict, total=False):
    """The keyword options gradcheck() passes on to gradcheck_params()."""
    eps: float
    atol: float
    rtol: float
    seed: int
    max_elements: int

byte_tokenizer = _C.byte_tokenizer
load_tokenizer = _C.load_tokenizer


def _np() -> Any:
    import numpy  # a dependency of the package; imported late so that stubgen needs no numpy
    return numpy


def tensor(data: ArrayLike, dtype: DTypeLike = None) -> Tensor:
    """A ctxlab.Tensor holding a copy of `data` (array, list, torch tensor via DLPack)."""
    np = _np()
    a = np.ascontiguousarray(data if dtype is None else np.asarray(data, dtype=dtype))
    return Tensor.from_numpy(a)


def presets() -> list[str]:
    """Names of the built-in model presets (tiny, small, medium)."""
    return list(_C.preset_names())


def encodings() -> list[str]:
    """Names of every registered positional encoding (the C++ registry: built-ins and plugins)."""
    return list(_C.encodings())


def devices() -> list[str]:
    """Devices this build can use now: ['cpu'] or ['cpu', 'cuda'] ('cuda': a CUDA build, real or
    emulated, whose libctxlab_cuda.so loads and finds a device; docs/python.md "Devices")."""
    return list(_C.devices())


def config(preset: Preset = "tiny", **overrides: Any) -> dict[str, Any]:
    """A validated model config as a dict: a preset with keys replaced (MODEL_SPEC §2)."""
    c: dict[str, Any] = json.loads(_C.preset_config(preset))
    c.update(overrides)
    return cast("dict[str, Any]", json.loads(_C.normalize_config(json.dumps(c), f"ctxlab.config({preset!r})")))


def _tokens(x: ArrayLike) -> NDArray[numpy.int32 | numpy.int64]:
    np = _np()
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise Error(f"token ids must be integers, got an array of dtype {a.dtype}")
    return cast("NDArray[numpy.int32 | numpy.int64]",
                np.ascontiguousarray(a, dtype=np.int64 if a.dtype != np.int32 else np.int32))


def _named(params: Model | Iterable[tuple[str, Variable]]) -> NamedParameters:
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

    tokenizer: Tokenizer
    """The tokenizer of the checkpoint (the byte tokenizer for a new model)."""
    step: int
    """The training step of the checkpoint (0 for a new model); save() writes it."""
    metadata: dict[str, str]
    """The checkpoint's safetensors metadata ({} for a new model)."""

    def __init__(self, config: str | os.PathLike[str] | Mapping[str, Any] = "tiny", dtype: DType = "float32",
                 seed: int = 0, *, _gpt: _C.GPT | None = None) -> None:
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
    def from_checkpoint(cls, path: StrPath, dtype: DType = "float32", posenc: Mapping[str, Any] | None = None,
                        context: int = -1) -> Self:
        """Loads a ctxlab checkpoint; posenc: keys merged into the config's posenc (e.g. RoPE scaling)."""
        lc = _C.load_checkpoint(os.fspath(path), dtype, json.dumps(posenc) if posenc else "", context)
        m = cls(_gpt=lc.take_model())
        m.tokenizer, m.step, m.metadata = lc.tokenizer, lc.step, dict(lc.metadata)
        return m

    # --- what torch.nn.Module has ---
    def forward(self, tokens: ArrayLike, pos0: int = 0, use_memory: bool = False) -> Variable:
        """tokens [B, T] ints -> logits Variable [B, T, vocab]."""
        return self._m.forward(_tokens(tokens), pos0, use_memory)

    __call__ = forward

    def loss(self, inputs: ArrayLike, targets: ArrayLike, use_memory: bool = False) -> Variable:
        """Mean cross-entropy (nats) of the next-token predictions, a scalar Variable."""
        return self._m.loss(_tokens(inputs), _tokens(targets), use_memory)

    def token_losses(self, inputs: ArrayLike, targets: ArrayLike) -> Tensor:
        """Per-position cross-entropy [B, T] as a Tensor (no graph)."""
        return self._m.token_losses(_tokens(inputs), _tokens(targets))

    def named_parameters(self) -> NamedParameters:
        return list(self._m.named_parameters())

    def parameters(self) -> list[Variable]:
        return [p for _, p in self.named_parameters()]

    def state_dict(self) -> dict[str, NDArray[numpy.floating[Any]]]:
        """{name: NumPy view of the parameter} (no copy: copy it to keep a snapshot). On 'cuda' the
        arrays are host copies (NumPy arrays live in host memory)."""
        return {n: p.numpy() if p.device == "cpu" else p.data.to("cpu").numpy() for n, p in self.named_parameters()}

    def load_state_dict(self, state: Mapping[str, ArrayLike]) -> None:
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

    def zero_grad(self) -> None:
        self._m.zero_grad()

    def train(self, mode: bool = True) -> Self:
        self._m.train(mode)
        return self

    def eval(self) -> Self:
        self._m.eval()
        return self

    @property
    def training(self) -> bool:
        return self._m.training

    def to(self, device: Device) -> Self:
        """Moves every parameter (and its gradient) to 'cpu' or 'cuda' in place; build optimizers
        after the move. 'cuda' where ctxlab.devices() lists it, else a ctxlab.Error saying why."""
        self._m.to(device)
        return self

    @property
    def device(self) -> str:
        """Where the parameters are: 'cpu' or 'cuda'."""
        return self.named_parameters()[0][1].device

    def save(self, path: StrPath, step: int | None = None) -> None:
        """Writes a ctxlab checkpoint (safetensors, MODEL_SPEC §5)."""
        self._m.save(os.fspath(path), self.step if step is None else step, {})

    @property
    def config(self) -> dict[str, Any]:
        return cast("dict[str, Any]", json.loads(self._m.config_json))

    @property
    def encoding(self) -> str:
        return self._m.encoding

    @property
    def dtype(self) -> DType:
        return cast(DType, self._m.dtype)

    def __repr__(self) -> str:
        c = self.config
        n = sum(int(_np().prod(p.shape)) for p in self.parameters())
        return (f"ctxlab.Model(encoding={self.encoding!r}, d_model={c['d_model']}, n_layers={c['n_layers']}, "
                f"n_heads={c['n_heads']}, context={c['context']}, dtype={self.dtype!r}, parameters={n})")


class _Optim:
    lr: float
    """The learning rate the next step() uses (settable, as a scheduler would)."""
    _o: _C.Optimizer

    def step(self) -> None:
        self._o.step(self.lr)

    def clip_and_step(self, max_norm: float) -> float:
        """Clips the global gradient norm to max_norm, steps; returns the norm before clipping."""
        return self._o.clip_and_step(self.lr, max_norm)

    def zero_grad(self) -> None:
        self._o.zero_grad()

    @property
    def steps(self) -> int:
        return self._o.steps

    def state(self) -> dict[str, Tensor]:
        return dict(self._o.state())


class AdamW(_Optim):
    """AdamW (ctx::AdamW; decoupled weight decay, none on biases, norms and embeddings)."""

    def __init__(self, params: Model | Iterable[tuple[str, Variable]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 fused: bool = True) -> None:
        self.lr = lr
        self._o = _C.AdamW(_named(params), lr, betas[0], betas[1], eps, weight_decay, fused)


class SGD(_Optim):
    """SGD with momentum (ctx::SGD)."""

    def __init__(self, params: Model | Iterable[tuple[str, Variable]], lr: float = 1e-2, momentum: float = 0.0,
                 weight_decay: float = 0.0) -> None:
        self.lr = lr
        self._o = _C.SGD(_named(params), momentum, weight_decay)


class _ProgressBar(Protocol):
    """What train() uses of a tqdm bar."""
    def update(self, n: int = 1) -> object: ...
    def close(self) -> None: ...


def _progress_bar(total: int, enabled: bool) -> _ProgressBar | None:
    """A tqdm bar (tqdm.auto: the notebook widget in Jupyter) when asked and tqdm is importable."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm  # untyped: Any to mypy (pyproject.toml's [tool.mypy] override)
    except ImportError:
        return None
    bar: _ProgressBar = tqdm(total=total, desc="train", unit="step")
    return bar


def train(model: Model, data: StrPath | None = None, out: StrPath = "runs/run", steps: int = 1000,
          progress: bool = True, force: bool = False, **options: Any) -> TrainResult:
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

    def tick(step: int, reported: bool) -> None:  # ctx::train's after_step: the bar advances a step
        if bar is not None:
            bar.update(1)
    try:
        res = cast(TrainResult, _C.train(model._m, json.dumps(opts), force, tick if bar is not None else None))
    finally:
        if bar is not None:
            bar.close()
    res["history"] = []
    path = os.path.join(opts["out"], "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            res["history"] = [json.loads(line) for line in f if line.strip()]
    return res


def _token_list(model: Model, data: str | bytes | ArrayLike) -> list[int]:
    if isinstance(data, str):
        return model.tokenizer.encode(data)
    if isinstance(data, bytes):
        return model.tokenizer.encode(data.decode("utf-8", "surrogateescape"))
    return [int(t) for t in _np().asarray(data).reshape(-1)]


def evaluate(model: Model, data: str | bytes | ArrayLike, length: int, batch: int = 1, max_windows: int = 0,
             window: int = 0, sinks: int = 0, segment: int = 0, position_bucket: int = 0) -> EvalResult:
    """Perplexity of `model` at context `length` on text (str) or token ids (ctx::evaluate)."""
    return cast(EvalResult, _C.evaluate(model._m, _token_list(model, data), length, batch, max_windows, window,
                                        sinks, segment, position_bucket, model.tokenizer))


@overload
def sample(model: Model, prompt: str, max_tokens: int = ..., temperature: float = ..., top_k: int = ...,
           seed: int = ..., window: int = ..., sinks: int = ..., use_cache: bool = ...,
           on_token: Callable[[int], None] | None = ...) -> str: ...
@overload
def sample(model: Model, prompt: bytes | Sequence[int] | NDArray[numpy.integer[Any]], max_tokens: int = ...,
           temperature: float = ..., top_k: int = ..., seed: int = ..., window: int = ..., sinks: int = ...,
           use_cache: bool = ..., on_token: Callable[[int], None] | None = ...) -> list[int]: ...
def sample(model: Model, prompt: str | bytes | Sequence[int] | NDArray[numpy.integer[Any]], max_tokens: int = 200,
           temperature: float = 0.8, top_k: int = 40, seed: int = 0, window: int = 0, sinks: int = 0,
           use_cache: bool = True, on_token: Callable[[int], None] | None = None) -> str | list[int]:
    """Generates after `prompt`: a str prompt gives the decoded str, token ids (or bytes) give ids.

    on_token(id) is called with each token as it is generated."""
    ids = _C.sample(model._m, _token_list(model, prompt), max_tokens, temperature, top_k, seed, window, sinks,
                    use_cache, on_token)
    if isinstance(prompt, str):
        return model.tokenizer.decode(ids).decode("utf-8", "replace")
    return list(ids)


@overload
def sample_many(model: Model, prompt: str, num_samples: int, max_tokens: int = ..., temperature: float = ...,
                top_k: int = ..., seed: int = ..., window: int = ...) -> list[str]: ...
@overload
def sample_many(model: Model, prompt: bytes | Sequence[int] | NDArray[numpy.integer[Any]], num_samples: int,
                max_tokens: int = ..., temperature: float = ..., top_k: int = ..., seed: int = ...,
                window: int = ...) -> list[list[int]]: ...
def sample_many(model: Model, prompt: str | bytes | Sequence[int] | NDArray[numpy.integer[Any]], num_samples: int,
                max_tokens: int = 200, temperature: float = 0.8, top_k: int = 40, seed: int = 0,
                window: int = 0) -> list[str] | list[list[int]]:
    """num_samples continuations of `prompt` decoded together (one batch: each token's weights are read
    once for all of them; the graph-free decoder, docs/sampling.md), sample b drawn with seed + b, so
    sample 0 is sample()'s. A str prompt gives str continuations, token ids (or bytes) give ids."""
    rows = _C.sample_many(model._m, _token_list(model, prompt), num_samples, max_tokens, temperature, top_k, seed,
                          window)
    if isinstance(prompt, str):
        return [model.tokenizer.decode(r).decode("utf-8", "replace") for r in rows]
    return [list(r) for r in rows]


def gradcheck_params(named_parameters: Iterable[tuple[str, Variable]], loss: Callable[[], Variable],
                     check: Callable[[str], bool] | None = None, eps: float = 1e-6, atol: float = 1e-5,
                     rtol: float = 1e-3, seed: int = 1234, max_elements: int = -1) -> GradcheckResult:
    """Finite differences of loss() against backward for float64 parameters (ctx::gradcheck_params).

    check(name) selects the parameters checked (None: all). Returns {'passed', 'summary', 'tensors'}."""
    return cast(GradcheckResult, _C.gradcheck_params(list(named_parameters), loss, check, eps, atol, rtol, seed,
                                                     max_elements))


def gradcheck(model: Model, inputs: ArrayLike, targets: ArrayLike, names: Iterable[str] | None = None,
              **options: Unpack[GradcheckOptions]) -> GradcheckResult:
    """gradcheck_params of model.loss(inputs, targets) (a float64 model); names: the parameters to check."""
    x, y = _tokens(inputs), _tokens(targets)
    check = None if names is None else (lambda n, keep=frozenset(names): n in keep)
    return gradcheck_params(model.named_parameters(), lambda: model._m.loss(x, y, False), check, **options)
