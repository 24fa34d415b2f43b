"""python/tests/test_torch_grads.py — ctxlab's gradients, read from Python through the API
(named_parameters() and .grad), against PyTorch autograd on the same weights, tensor by tensor.

The reference is tests/python/torch_ref.py, the independent PyTorch model of pytorch_parity, and
the weights parity.py's random_params (scaled so that a wrong sign or index cannot hide). Both
sides run in float64 here, so the bound is far tighter than parity's float32 one; a float32
model is checked once with parity's own tolerances. The weights go in through load_state_dict
(from torch tensors) and the gradients come out through torch.from_dlpack (no copy)."""

import numpy as np
import pytest

import ctxlab

ENCODINGS = ["learned", "rope", "alibi", "t5", "xl", "kerple"]
# float64 on both sides: summation order and the reference's float32 tables (frequencies,
# slopes: torch_ref computes them as a C++ float32 implementation would) differ: ~1e-9 seen
F64_RTOL = 1e-7
F64_LOSS_RTOL = 1e-9


def case(parity, name, tied=True, norm="layernorm"):
    return {**parity.BASE_CONFIG, "norm": norm, "tie_embeddings": tied,
            "posenc": parity.ENCODING_CASES[name].posenc}


def compare(torch_ref, name, dtype, rtol, loss_rtol, tied=True, norm="layernorm", T=16):
    torch, ref, parity = torch_ref
    cfg = case(parity, name, tied, norm)
    params = parity.random_params(ref, cfg, parity.seed_of(f"python/{name}"))
    tokens = np.random.default_rng(parity.seed_of(name)).integers(0, 256, size=(parity.BATCH, T + 1))
    # torch_ref projects constrained parameters (KERPLE) in place before its forward, as ctxlab
    # does: load them into ctxlab after the reference ran
    ref_loss, ref_grads = ref.loss_and_grads(cfg, params, tokens)

    model = ctxlab.Model(cfg, dtype=dtype)
    model.load_state_dict(params)
    loss = model.loss(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    assert abs(loss.item() - ref_loss) / abs(ref_loss) < loss_rtol, (loss.item(), ref_loss)

    got = dict(model.named_parameters())
    assert sorted(got) == sorted(ref_grads)
    for n, p in got.items():
        g = torch.from_dlpack(p.grad).to(torch.float64)
        r = ref_grads[n]
        assert tuple(g.shape) == tuple(r.shape), n
        scale = float(r.abs().max()) or 1.0
        err = float((g - r).abs().max()) / scale
        assert err < rtol, f"{name}: {n}: max |ctxlab - torch| / max |torch| = {err:.2e}"
    return model


@pytest.mark.parametrize("name", ENCODINGS)
def test_gradients_match_pytorch_float64(torch_ref, name):
    compare(torch_ref, name, "float64", F64_RTOL, F64_LOSS_RTOL)


@pytest.mark.parametrize("name,tied,norm", [("rope", False, "rmsnorm"), ("alibi", False, "layernorm")])
def test_gradients_match_pytorch_untied_and_rmsnorm(torch_ref, name, tied, norm):
    compare(torch_ref, name, "float64", F64_RTOL, F64_LOSS_RTOL, tied, norm)


def test_gradients_match_pytorch_float32_at_parity_tolerance(torch_ref):
    _, _, parity = torch_ref
    compare(torch_ref, "t5", "float32", parity.GRAD_RTOL, parity.LOSS_RTOL, T=24)


def test_dlpack_gradient_is_a_view(torch_ref):
    torch, _, _ = torch_ref
    m = ctxlab.Model(ctxlab.config("tiny", d_model=32, n_layers=1, posenc={"type": "alibi"}))
    tok = np.arange(34).reshape(2, 17) % 256
    m.loss(tok[:, :-1], tok[:, 1:]).backward()
    p = dict(m.named_parameters())["norm_f.weight"]
    g = torch.from_dlpack(p.grad)
    g[0] = 123.0
    assert p.grad.numpy()[0] == 123.0
    w = torch.from_dlpack(p.data)
    assert w.dtype == torch.float32 and tuple(w.shape) == (32,)
