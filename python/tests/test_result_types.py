"""python/tests/test_result_types.py — ctxlab's declared types agree with the library at run time:
the result dicts of train / evaluate / gradcheck match their TypedDicts (TrainResult, HistoryRow,
EvalResult, GradcheckResult: the same keys, required ones present, values of the declared types),
and the Literal choices (Preset, DType, Device) are what the library accepts. mypy (ctest
python_types) trusts these declarations; this keeps them true to the C++ side
(python/src/bind_train.cpp, train/run_log.cpp, nn/config.cpp)."""

import typing

import numpy as np

import ctxlab

TINY = dict(vocab_size=256, d_model=16, n_layers=1, n_heads=2, d_ff=32, context=8)


def mismatches(value, hint, where="result"):
    """Where `value` differs from the type `hint` (a TypedDict, list[...], int, float, bool, str)."""
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not a dict"]
        fields = typing.get_type_hints(hint)
        out = [f"{where}: key '{k}' missing" for k in sorted(hint.__required_keys__ - set(value))]
        out += [f"{where}: key '{k}' undeclared in {hint.__name__}" for k in sorted(set(value) - set(fields))]
        for k in sorted(set(value) & set(fields)):
            out += mismatches(value[k], fields[k], f"{where}['{k}']")
        return out
    if typing.get_origin(hint) is list:
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__}, not a list"]
        (item,) = typing.get_args(hint)
        return [m for i, v in enumerate(value) for m in mismatches(v, item, f"{where}[{i}]")]
    return [] if type(value) is hint else [f"{where}: {type(value).__name__} {value!r}, declared {hint.__name__}"]


def test_mismatches_sees_a_wrong_declaration():
    class Declared(typing.TypedDict):
        steps: int
        rows: typing.List[float]
    assert mismatches({"steps": 1, "rows": [0.5]}, Declared) == []
    assert mismatches({"steps": 1.0, "rows": [1], "extra": 0}, Declared) == [
        "result: key 'extra' undeclared in Declared", "result['rows'][0]: int 1, declared float",
        "result['steps']: float 1.0, declared int"]


def test_results_match_their_typeddicts(tmp_path):
    text = "the quick brown fox jumps over the lazy dog. " * 40
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text)
    m = ctxlab.Model(dict(TINY, posenc={"type": "rope"}), seed=1)
    res = ctxlab.train(m, data=corpus, out=tmp_path / "run", steps=4, batch=2, warmup=1, eval_interval=2,
                       log_interval=1, plot=False, quiet=True, progress=False)
    assert {"loss", "val_loss"} <= {k for row in res["history"] for k in row}   # both kinds of rows
    assert mismatches(res, ctxlab.TrainResult) == []
    ev = ctxlab.evaluate(m, text[:400], length=8, batch=2, position_bucket=4)
    assert len(ev["positions"]) == 2
    assert mismatches(ev, ctxlab.EvalResult) == []
    m64 = ctxlab.Model(dict(TINY, posenc={"type": "alibi"}), dtype="float64", seed=2)
    tok = np.random.default_rng(0).integers(0, 256, size=(2, 9))
    gc = ctxlab.gradcheck(m64, tok[:, :-1], tok[:, 1:], names=["norm_f.weight"])
    assert gc["tensors"]
    assert mismatches(gc, ctxlab.GradcheckResult) == []


def test_literal_choices_are_what_the_library_takes():
    assert list(typing.get_args(ctxlab.Preset)) == ctxlab.presets()
    for dtype in typing.get_args(ctxlab.DType):
        assert ctxlab.Model(TINY, dtype=dtype).dtype == dtype
    assert set(ctxlab.devices()) <= set(typing.get_args(ctxlab.Device))
    assert ctxlab.Model(TINY).to("cpu").parameters()[0].device == "cpu"
