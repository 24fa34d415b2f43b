"""python/tests/typecheck_usage.py — the public API used the way docs/python.md shows it, for mypy.

Not a pytest module and never run: ctest python_types (tests/python/typecheck.py) type-checks it
with `mypy --strict` against the package as built (BUILD/python/ctxlab: __init__.py and the
generated stub _ctxlab.pyi). Every `assert_type` states what a call returns, so a wrong or missing
annotation in ctxlab (say train() -> None, or an untyped sample()) fails the check; the
`type: ignore[...]` lines are calls mypy must reject (strict mode's warn_unused_ignores turns an
accepted one into an error).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, assert_type

import numpy as np
from numpy.typing import NDArray

import ctxlab


def build_and_step(tokens: NDArray[np.int64]) -> float:
    """A model from a preset with overrides, a step by hand (the module docstring's loop)."""
    cfg = ctxlab.config("tiny", posenc={"type": "rope"})
    assert_type(cfg, dict[str, Any])
    assert_type(ctxlab.presets(), list[str])
    assert_type(ctxlab.encodings(), list[str])
    assert_type(ctxlab.devices(), list[str])
    model = ctxlab.Model(cfg, dtype="float32", seed=1)
    assert_type(model.dtype, ctxlab.DType)
    assert_type(model.train(), ctxlab.Model)
    assert_type(model.eval().to("cpu"), ctxlab.Model)
    assert_type(model.training, bool)
    assert_type(model.encoding, str)
    assert_type(model.config, dict[str, Any])
    assert_type(model.step, int)
    assert_type(model.metadata, dict[str, str])
    assert_type(model.tokenizer, ctxlab.Tokenizer)
    opt = ctxlab.AdamW(model.named_parameters(), lr=1e-3, betas=(0.9, 0.95))
    assert_type(opt.lr, float)
    x, y = tokens[:, :-1], tokens[:, 1:]
    assert_type(model(x), ctxlab.Variable)
    assert_type(model.forward(x, pos0=0), ctxlab.Variable)
    loss = model.loss(x, y)
    assert_type(loss, ctxlab.Variable)
    assert_type(model.token_losses(x, y), ctxlab.Tensor)
    loss.backward()
    for name, p in model.named_parameters():
        assert_type(name, str)
        assert_type(p.grad, ctxlab.Tensor | None)
    assert_type(model.parameters(), list[ctxlab.Variable])
    assert_type(opt.clip_and_step(1.0), float)
    opt.step()
    opt.zero_grad()
    assert_type(opt.steps, int)
    assert_type(opt.state(), dict[str, ctxlab.Tensor])
    sgd = ctxlab.SGD(model, lr=0.1, momentum=0.9)          # a Model stands for its named_parameters()
    assert_type(sgd.step(), None)
    with ctxlab.no_grad():
        assert_type(model.loss([[1, 2, 3]], [[2, 3, 4]]).item(), float)
    ctxlab.Model("tiny", dtype="float16")                  # type: ignore[arg-type]
    model.to("tpu")                                        # type: ignore[arg-type]
    ctxlab.config("huge")                                  # type: ignore[arg-type]
    ctxlab.AdamW([model])                                  # type: ignore[list-item]
    return loss.item()


def state_and_checkpoints(model: ctxlab.Model, path: os.PathLike[str]) -> ctxlab.Model:
    state = model.state_dict()
    assert_type(state, dict[str, NDArray[np.floating[Any]]])
    model.load_state_dict({n: a.copy() for n, a in state.items()})
    model.save(path, step=10)
    model.save(str(path))
    back = ctxlab.Model.from_checkpoint(path, posenc={"scaling": {"type": "linear", "factor": 2.0}}, context=64)
    assert_type(back, ctxlab.Model)
    assert_type(ctxlab.Model(Path("cfg.json")), ctxlab.Model)
    assert_type(ctxlab.tensor([[1.0, 2.0]], dtype=np.float64), ctxlab.Tensor)
    return back


def train_evaluate_sample(model: ctxlab.Model, corpus: Path) -> str:
    res = ctxlab.train(model, data=corpus, out=corpus.parent / "run", steps=40, batch=8, lr=3e-3, progress=False)
    assert_type(res, ctxlab.TrainResult)
    assert_type(res["steps"], int)
    assert_type(res["final_val_loss"], float)
    assert_type(res["history"], list[ctxlab.HistoryRow])
    for row in res["history"]:
        assert_type(row["step"], int)
        if "val_loss" in row:
            assert_type(row["val_loss"], float)
    ev = ctxlab.evaluate(model, "some text", length=16, batch=4, position_bucket=4)
    assert_type(ev, ctxlab.EvalResult)
    assert_type(ev["ppl"], float)
    assert_type(ev["positions"][0]["count"], int)
    assert_type(ctxlab.evaluate(model, np.arange(100), 16), ctxlab.EvalResult)
    text = ctxlab.sample(model, "the quick", max_tokens=12, temperature=0.0)
    assert_type(text, str)
    streamed: list[int] = []
    ids = ctxlab.sample(model, list(b"the quick"), max_tokens=12, on_token=streamed.append)
    assert_type(ids, list[int])
    assert_type(ctxlab.sample(model, b"the quick"), list[int])
    ctxlab.sample(model, "x", on_token=print)
    ctxlab.sample(model, "x", on_token="no")                # type: ignore[call-overload]
    assert_type(ctxlab.sample_many(model, "the quick", 2), list[str])
    assert_type(ctxlab.sample_many(model, b"the quick", 2, max_tokens=4), list[list[int]])
    res["stepz"]                                           # type: ignore[typeddict-item]
    return text


def gradients(model64: ctxlab.Model, x: NDArray[np.int64], y: NDArray[np.int64]) -> bool:
    r = ctxlab.gradcheck(model64, x, y, names=["norm_f.weight"], eps=1e-6, seed=3)
    assert_type(r, ctxlab.GradcheckResult)
    assert_type(r["passed"], bool)
    assert_type(r["tensors"][0]["max_abs_err"], float)
    r2 = ctxlab.gradcheck_params(model64.named_parameters(), lambda: model64.loss(x, y),
                                 check=lambda n: n.startswith("blocks."))
    assert_type(r2, ctxlab.GradcheckResult)
    ctxlab.gradcheck(model64, x, y, epz=1e-6)              # type: ignore[call-arg]
    assert_type(ctxlab.clip_grad_norm(model64.named_parameters(), 1.0), float)
    assert_type(ctxlab.lr_warmup_cosine(5, 10, 100, 1e-3, 1e-4), float)
    tok = ctxlab.byte_tokenizer()
    assert_type(tok.encode("abc"), list[int])
    assert_type(tok.decode([97, 98]), bytes)
    return r["passed"] and r2["passed"]
