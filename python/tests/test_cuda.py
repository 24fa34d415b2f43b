"""python/tests/test_cuda.py — ctxlab's 'cuda' device from Python (docs/python.md "Devices").

In a CUDA build (real, or the CUDA emulator's: CI's build-emu, ctest python_cuda) the module loads
libctxlab_cuda.so itself: devices() lists 'cuda'; tensors go there and back; a model on 'cuda' gives
the 'cpu' model's loss and every named parameter's gradient, optimizer step, training losses and
evaluation; NumPy refuses CUDA tensors, DLPack exports them (refused on the emulated device, whose
memory is host memory); torch imports after 'cuda' was used. In a CPU-only build (the README's ctest run: python_api) only the refusal
is tested: asking for 'cuda' raises ctxlab.Error with the library's message; a real CUDA build on a
machine without a GPU (the README's run) checks the no-GPU refusal the same way and skips the rest,
its only skip.
"""

import subprocess
import sys

import numpy as np
import pytest

import ctxlab

CUDA_BUILD = ctxlab._ctxlab.with_cuda

TINY = dict(vocab_size=256, d_model=32, n_layers=2, n_heads=4, d_ff=64, context=16)


def batch(seed=0, B=2, T=16):
    rng = np.random.default_rng(seed)
    tok = rng.integers(0, 256, size=(B, T + 1))
    return tok[:, :-1], tok[:, 1:]


def host(t):
    """A host copy of a Tensor or Variable's value, as NumPy."""
    data = t.data if isinstance(t, ctxlab.Variable) else t
    return np.array(data.to("cpu").numpy())


def assert_close(got, want, rel, what):
    """max |got - want| <= rel * max(|want|, tiny) (the gradients' scale, as parity.py measures)."""
    scale = max(float(np.abs(want).max()), 1e-30)
    err = float(np.abs(got - want).max())
    assert err <= rel * scale, f"{what}: max error {err:.3g} > {rel:g} x max |cpu| {scale:.3g}"


if not CUDA_BUILD:
    def test_cpu_only_build_refuses_cuda():
        assert ctxlab.devices() == ["cpu"]
        assert not ctxlab._ctxlab.cuda_emulator
        want = "this build has no CUDA backend"
        with pytest.raises(ctxlab.Error, match=want):
            ctxlab.Tensor.zeros([2], device="cuda")
        with pytest.raises(ctxlab.Error, match=want):
            ctxlab.tensor(np.ones(3, np.float32)).to("cuda")
        m = ctxlab.Model(dict(TINY, posenc={"type": "rope"}))
        with pytest.raises(ctxlab.Error, match=want):
            m.to("cuda")
        with pytest.raises(ctxlab.Error, match="unknown device 'gpu'"):
            m.to("gpu")

else:
    def test_devices_say_what_cuda_can_do():
        """Runs in every CUDA build: with a device 'cuda' is listed; without one (a real build on a
        machine without a GPU: the README's run in CI) it is not, and asking for it raises the
        library's one-line reason."""
        try:
            ctxlab.Tensor.zeros([1], device="cuda")
        except ctxlab.Error as e:
            reason = str(e)
            assert not ctxlab._ctxlab.cuda_emulator, f"the emulated device must be there: {reason}"
            assert reason.startswith("no CUDA GPU available (cudaGetDeviceCount found none)"), reason
            assert ctxlab.devices() == ["cpu"]
            m = ctxlab.Model(dict(TINY, posenc={"type": "rope"}))
            for ask in (lambda: m.to("cuda"), lambda: ctxlab.tensor(np.ones(2)).to("cuda")):
                with pytest.raises(ctxlab.Error, match=r"no CUDA GPU available \(cudaGetDeviceCount found none\)"):
                    ask()
            assert m.device == "cpu"
            return
        assert ctxlab.devices() == ["cpu", "cuda"]

    # the rest take conftest.py's device check, cuda_device (a skip only without a GPU)
    @pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
    def test_tensor_to_cuda_and_back(cuda_device, dtype):
        a = (np.arange(24, dtype=np.float64).reshape(2, 3, 4) * 1.5 - 7).astype(dtype)
        for name in ("cuda", "cuda:0"):
            t = ctxlab.tensor(a).to(name)
            assert t.device == "cuda" and t.shape == [2, 3, 4] and t.dtype == np.dtype(dtype).name
            back = t.to("cpu")
            assert back.device == "cpu"
            np.testing.assert_array_equal(back.numpy(), a)
        z = ctxlab.Tensor.zeros([3], "float64", device="cuda")
        assert z.device == "cuda" and host(z).tolist() == [0.0, 0.0, 0.0]
        assert ctxlab.tensor(np.array([2.5])).to("cuda").item() == 2.5   # item() reads back

    def test_numpy_refuses_cuda_tensors_and_dlpack_follows_the_memory(cuda_device):
        t = ctxlab.tensor(np.arange(4, dtype=np.float32)).to("cuda")
        for view in (lambda: t.numpy(), lambda: np.asarray(t)):
            with pytest.raises(ctxlab.Error, match=r"is on cuda; NumPy arrays live in host memory: "
                                                   r"copy it with \.to\('cpu'\) first"):
                view()
        assert t.__dlpack_device__() == (2, 0)   # kDLCUDA, device 0
        if ctxlab._ctxlab.cuda_emulator:
            with pytest.raises(ctxlab.Error, match="emulated CUDA device"):
                t.__dlpack__()
            with pytest.raises(ctxlab.Error, match="emulated CUDA device"):
                np.from_dlpack(t)
        else:
            import torch  # required (scripts/setup.sh); a GPU ctxlab sees and torch does not is a failure
            assert torch.cuda.is_available(), "ctxlab uses a GPU that torch does not see"
            tt = torch.from_dlpack(t)
            assert tt.is_cuda and tt.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]

    @pytest.mark.parametrize("encoding", ["rope", "learned", "alibi", "t5"])
    @pytest.mark.parametrize("dtype,rel", [("float64", 1e-10), ("float32", 2e-4)])
    def test_model_loss_and_every_gradient_match_cpu(cuda_device, encoding, dtype, rel):
        x, y = batch(1)
        models = {}
        for dev in ("cpu", "cuda"):
            m = ctxlab.Model(dict(TINY, posenc={"type": encoding}), dtype=dtype, seed=5).to(dev)
            assert m.device == dev
            loss = m.loss(x, y)
            assert loss.device == dev
            loss.backward()
            models[dev] = (m, loss.item(), dict(m.named_parameters()))
        (mc, lc, pc), (mg, lg, pg) = models["cpu"], models["cuda"]
        assert abs(lg - lc) <= rel * abs(lc), (lg, lc)
        assert list(pg) == list(pc)
        assert_close(host(mg(x)), host(mc(x)), rel, "logits")
        for name in pc:
            assert pg[name].device == "cuda" and pg[name].grad.device == "cuda", name
            assert_close(host(pg[name].grad), host(pc[name].grad), rel, f"{encoding} {dtype} grad {name}")

    @pytest.mark.parametrize("make", [lambda m: ctxlab.AdamW(m, lr=1e-2, weight_decay=0.1),
                                      lambda m: ctxlab.SGD(m, lr=0.5, momentum=0.9)], ids=["adamw", "sgd"])
    def test_optimizer_steps_match_cpu(cuda_device, make):
        x, y = batch(2)
        after = {}
        for dev in ("cpu", "cuda"):
            m = ctxlab.Model(dict(TINY, posenc={"type": "rope"}), dtype="float64", seed=7).to(dev)
            opt = make(m)
            for _ in range(2):
                opt.zero_grad()
                m.loss(x, y).backward()
                opt.step()
            after[dev] = {n: host(p) for n, p in m.named_parameters()}
        start = {n: host(p) for n, p in ctxlab.Model(dict(TINY, posenc={"type": "rope"}), dtype="float64",
                                                     seed=7).named_parameters()}
        for n, want in after["cpu"].items():
            assert np.abs(want - start[n]).max() > 0, f"{n} did not move"   # the step did something
            assert_close(after["cuda"][n], want, 1e-9, f"parameter {n} after two steps")

    def test_state_dict_of_a_cuda_model_is_a_host_copy(cuda_device):
        m = ctxlab.Model(dict(TINY, posenc={"type": "rope"}), seed=1).to("cuda")
        sd = m.state_dict()
        w = dict(m.named_parameters())["wte.weight"]
        np.testing.assert_array_equal(sd["wte.weight"], host(w))
        sd["wte.weight"][:] = 0.25                 # a copy: the model is unchanged ...
        assert host(w)[0, 0] != 0.25
        m.load_state_dict(sd)                      # ... until loaded back, onto the device
        assert w.device == "cuda" and np.all(host(w) == np.float32(0.25))

    def test_train_and_evaluate_on_cuda_match_cpu(cuda_device, tmp_path):
        text = "the quick brown fox jumps over the lazy dog; " * 40
        corpus = tmp_path / "corpus.txt"
        corpus.write_text(text)
        res = {}
        for dev in ("cpu", "cuda"):
            m = ctxlab.Model(dict(TINY, posenc={"type": "rope"}), seed=2).to(dev)
            r = ctxlab.train(m, data=corpus, out=tmp_path / dev, steps=4, batch=2, lr=3e-3, warmup=1,
                             eval_interval=0, plot=False, quiet=True, progress=False)
            assert m.device == dev
            losses = [h["loss"] for h in r["history"] if "loss" in h]
            res[dev] = (np.array(losses), ctxlab.evaluate(m, text[:400], length=16, batch=2)["loss"])
        assert len(res["cpu"][0]) == 4
        assert_close(res["cuda"][0], res["cpu"][0], 1e-4, "training losses")
        assert abs(res["cuda"][1] - res["cpu"][1]) <= 1e-4 * res["cpu"][1]

    def test_torch_imports_after_cuda_was_used(cuda_device, torch_ref):
        """Loading libctxlab_cuda.so changes no other library's symbols: torch, imported after, works
        (a module made RTLD_GLOBAL would take SentencePiece's protobuf with it: torch then crashed)."""
        code = ("import ctxlab; ctxlab.Tensor.zeros([1], device='cuda'); import torch; "
                "print(float(torch.ones(3).sum()))")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "3.0", (r.returncode, r.stdout, r.stderr[-2000:])
