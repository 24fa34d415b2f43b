"""python/tests/test_api.py — the ctxlab Python API end to end (no torch): tensors and NumPy /
DLPack views, the registry, configs, models, forward / loss / backward / .grad, optimizers,
checkpoints, train / evaluate / sample, gradcheck, and C++ errors as ctxlab.Error."""

import json
import os

import numpy as np
import pytest

import ctxlab

TINY = dict(vocab_size=256, d_model=32, n_layers=2, n_heads=4, d_ff=64, context=16)


def batch(seed=0, B=2, T=16):
    rng = np.random.default_rng(seed)
    tok = rng.integers(0, 256, size=(B, T + 1))
    return tok[:, :-1], tok[:, 1:]


def test_tensor_numpy_views_share_memory():
    t = ctxlab.Tensor.zeros([2, 3], "float32")
    a = t.numpy()
    a[1, 2] = 5.0
    assert t.numpy()[1, 2] == 5.0          # the same memory, not a copy
    assert np.asarray(t)[1, 2] == 5.0      # __array__
    assert t.shape == [2, 3] and t.dtype == "float32" and t.device == "cpu"
    b = np.from_dlpack(t)                  # DLPack, no copy either (NumPy < 2 makes it read-only)
    a[0, 0] = -1.0
    assert b[0, 0] == -1.0


def test_tensor_from_numpy_copies_and_keeps_dtype():
    for dt in (np.float32, np.float64, np.int32, np.int64):
        a = np.arange(6, dtype=dt).reshape(2, 3)
        t = ctxlab.tensor(a)
        assert t.dtype == np.dtype(dt).name
        np.testing.assert_array_equal(t.numpy(), a)
        a[0, 0] = 9
        assert t.numpy()[0, 0] == 0        # import copies (ctxlab owns its memory)
    with pytest.raises(ctxlab.Error, match="cannot become a ctxlab tensor"):
        ctxlab.tensor(np.zeros(3, dtype=np.float16))


def test_registry_presets_devices():
    names = ctxlab.encodings()
    for n in ("none", "learned", "rope", "alibi", "t5", "xl"):
        assert n in names
    assert ctxlab.presets() == ["tiny", "small", "medium"]
    assert ctxlab.devices()[0] == "cpu"


def test_config_validation_errors_carry_the_cpp_message():
    c = ctxlab.config("tiny", posenc={"type": "rope"})
    assert c["posenc"]["type"] == "rope" and c["d_ff"] == 256
    with pytest.raises(ctxlab.Error) as e:
        ctxlab.config("tiny", n_heads=5)
    assert "n_heads" in str(e.value)
    with pytest.raises(ctxlab.Error, match="unknown"):
        ctxlab.Model(dict(TINY, posenc={"type": "no_such_encoding"}))
    assert issubclass(ctxlab.Error, RuntimeError)


def test_forward_loss_backward_grads_per_named_parameter():
    m = ctxlab.Model(dict(TINY, posenc={"type": "alibi"}), seed=3)
    x, y = batch()
    logits = m(x)
    assert logits.shape == [2, 16, 256]
    loss = m.loss(x, y)
    assert loss.shape == [] and abs(loss.item() - np.log(256)) < 0.5   # near uniform at init
    # the loss equals the cross-entropy of the logits, computed here in NumPy
    z = logits.numpy().astype(np.float64)
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    ce = (lse - np.take_along_axis(z, y[..., None], -1)[..., 0]).mean()
    assert abs(ce - loss.item()) < 1e-5
    names = [n for n, _ in m.named_parameters()]
    assert names[0] == "wte.weight" and "blocks.1.mlp.proj.weight" in names
    assert all(p.grad is None for p in m.parameters())
    loss.backward()
    for n, p in m.named_parameters():
        g = p.grad
        assert g is not None, n
        assert g.shape == p.shape and np.isfinite(g.numpy()).all()
    assert np.abs(dict(m.named_parameters())["wte.weight"].grad.numpy()).max() > 0
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    with pytest.raises(ctxlab.Error):      # the graph was freed by the first backward
        loss.backward()


def test_sgd_step_moves_each_parameter_by_lr_times_its_grad():
    m = ctxlab.Model(dict(TINY, posenc={"type": "t5"}), dtype="float64", seed=5)
    x, y = batch(2)
    m.loss(x, y).backward()
    before = {n: p.numpy().copy() for n, p in m.named_parameters()}
    grads = {n: p.grad.numpy().copy() for n, p in m.named_parameters()}
    ctxlab.SGD(m, lr=0.1).step()
    for n, p in m.named_parameters():
        np.testing.assert_allclose(p.numpy(), before[n] - 0.1 * grads[n], rtol=0, atol=1e-15, err_msg=n)
    assert any(np.abs(g).max() > 1e-3 for g in grads.values())


def test_token_errors_are_cpp_messages():
    m = ctxlab.Model(dict(TINY, posenc={"type": "learned"}))
    x, y = batch(T=20)                     # learned: no positions past the context (16)
    with pytest.raises(ctxlab.Error, match="16"):
        m.loss(x, y)
    x, y = batch()
    x[0, 0] = 300
    with pytest.raises(ctxlab.Error, match="300"):
        m.forward(x)


def test_optimizers_lower_the_loss():
    for make in (lambda m: ctxlab.AdamW(m.named_parameters(), lr=3e-3),
                 lambda m: ctxlab.SGD(m, lr=0.5, momentum=0.9)):
        m = ctxlab.Model(dict(TINY, posenc={"type": "rope"}), seed=1)
        opt = make(m)
        x, y = batch(1)
        first = None
        for _ in range(15):
            loss = m.loss(x, y)
            first = first if first is not None else loss.item()
            loss.backward()
            opt.step()
            opt.zero_grad()
        assert opt.steps == 15
        assert m.loss(x, y).item() < first - 0.5


def test_state_dict_copy_and_checkpoint_roundtrip(tmp_path):
    m = ctxlab.Model(dict(TINY, posenc={"type": "t5"}), seed=2)
    sd = {n: a.copy() for n, a in m.state_dict().items()}
    m2 = ctxlab.Model(dict(TINY, posenc={"type": "t5"}), seed=9)
    m2.load_state_dict(sd)
    x, y = batch()
    assert m2.loss(x, y).item() == m.loss(x, y).item()
    with pytest.raises(ctxlab.Error, match="shape"):
        dict(m2.named_parameters())["wte.weight"].copy_(np.zeros((3, 3), np.float32))
    path = tmp_path / "m.safetensors"
    m.save(path, step=7)
    back = ctxlab.Model.from_checkpoint(path)
    assert back.step == 7 and back.config == m.config and back.encoding == "t5"
    assert back.loss(x, y).item() == m.loss(x, y).item()
    with pytest.raises(ctxlab.Error, match="nope.safetensors"):
        ctxlab.Model.from_checkpoint(tmp_path / "nope.safetensors")
    cfg_file = tmp_path / "cfg.json"                  # a config file, as a path or a str
    cfg_file.write_text(json.dumps(dict(TINY, posenc={"type": "alibi", "bogus": 1})))
    for c in (cfg_file, str(cfg_file)):
        with pytest.raises(ctxlab.Error, match="cfg.json.*bogus"):
            ctxlab.Model(c)


def test_train_evaluate_sample(tmp_path):
    text = "the quick brown fox jumps over the lazy dog. " * 200
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text)
    m = ctxlab.Model(dict(TINY, posenc={"type": "rope"}), seed=1)
    before = ctxlab.evaluate(m, text[:2000], length=16, batch=4)
    res = ctxlab.train(m, data=corpus, out=tmp_path / "run", steps=40, batch=8, lr=3e-3, warmup=5,
                       eval_interval=20, log_interval=10, plot=False, quiet=True, progress=False)
    assert res["steps"] == 40
    losses = [r["loss"] for r in res["history"] if "loss" in r]    # a row per step
    assert len(losses) == 40 and np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5
    assert [r["step"] for r in res["history"] if "val_loss" in r] == [20, 40]
    assert os.path.exists(tmp_path / "run" / "model.safetensors")
    after = ctxlab.evaluate(m, text[:2000], length=16, batch=4)
    assert after["loss"] < before["loss"] - 1.0 and after["windows"] == before["windows"] > 0
    out = ctxlab.sample(m, "the quick", max_tokens=12, temperature=0.0)
    assert isinstance(out, str) and len(out.encode()) == 12
    ids = ctxlab.sample(m, list(b"the quick"), max_tokens=12, temperature=0.0)
    assert bytes(ids).decode() == out
    streamed = []
    ctxlab.sample(m, "the", max_tokens=5, temperature=1.0, seed=3, on_token=streamed.append)
    assert len(streamed) == 5
    many = ctxlab.sample_many(m, "the quick", 3, max_tokens=12, temperature=1.0, seed=5)
    assert len(many) == 3 and all(isinstance(t, str) and len(t.encode()) == 12 for t in many)
    assert many == ctxlab.sample_many(m, "the quick", 3, max_tokens=12, temperature=1.0, seed=5)  # seeded
    assert len(set(many)) > 1                                      # each row its own seed
    rows = ctxlab.sample_many(m, list(b"the quick"), 2, max_tokens=12, temperature=0.0)
    assert len(rows) == 2 and rows[0] == rows[1] and len(rows[0]) == 12  # greedy: the same rows
    with pytest.raises(ctxlab.Error, match="--num-samples"):
        ctxlab.sample_many(m, "the", 0)
    with pytest.raises(ctxlab.Error, match="unknown train option 'stepz'"):
        ctxlab.train(m, data=corpus, out=tmp_path / "run2", steps=1, stepz=3)
    with pytest.raises(ctxlab.Error, match="--batch"):
        ctxlab.train(m, data=corpus, out=tmp_path / "run3", steps=1, batch=0, progress=False)


def test_gradcheck_passes_and_catches_a_wrong_gradient():
    m = ctxlab.Model(dict(TINY, n_layers=1, d_model=16, n_heads=2, d_ff=32, context=8,
                          posenc={"type": "alibi"}), dtype="float64", seed=4)
    x, y = batch(T=8)
    r = ctxlab.gradcheck(m, x, y, names=["norm_f.weight", "blocks.0.attn.qkv.bias"])
    assert r["passed"], r["summary"]
    assert sorted(t["name"] for t in r["tensors"]) == ["blocks.0.attn.qkv.bias", "norm_f.weight"]
    p = dict(m.named_parameters())["norm_f.weight"]
    assert p.op_name == "leaf" and p.grad is None      # restored after the check
    # a loss that changes after its first call (other targets): analytic and numeric disagree
    y2 = (y + 1) % 256
    calls = []

    def shifting():
        calls.append(1)
        return m._m.loss(x, y if len(calls) == 1 else y2, False)
    r2 = ctxlab.gradcheck_params(m.named_parameters(), shifting, check=lambda n: n == "norm_f.weight")
    assert not r2["passed"] and len(calls) > 2, r2["summary"]
    assert "norm_f.weight" in r2["summary"]
    f32 = ctxlab.Model(dict(TINY, posenc={"type": "alibi"}))
    with pytest.raises(ctxlab.Error):
        ctxlab.gradcheck(f32, *batch())


def test_no_grad_records_no_graph():
    m = ctxlab.Model(dict(TINY, posenc={"type": "none"}))
    x, y = batch()
    with ctxlab.no_grad():
        loss = m.loss(x, y)
    assert loss.op_name == "leaf" or not loss.requires_grad
    with pytest.raises(ctxlab.Error):
        loss.backward()
