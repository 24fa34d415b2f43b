# examples/notebook.py — ctxlab from a notebook: train a toy model, plot its loss, check one
# gradient against PyTorch. A plain .py with `# %%` cells (VS Code / Jupytext / Spyder open it
# as a notebook; `python examples/notebook.py` runs it top to bottom). Needs `import ctxlab`
# (pip install ./python, or PYTHONPATH=build/python); matplotlib, tqdm and torch are optional:
# each cell that uses one says so and moves on when it is missing. docs/python.md.

# %% Setup: the encodings this build knows, and a tiny RoPE model
import os
import sys
import tempfile

import numpy as np

import ctxlab

print("encodings:", ", ".join(ctxlab.encodings()))
print("devices:", ctxlab.devices())
cfg = ctxlab.config("tiny", d_model=32, n_layers=2, n_heads=4, d_ff=64, context=32,
                    posenc={"type": "rope"})
model = ctxlab.Model(cfg, seed=1)
print(model)

# %% Data: a toy corpus of byte tokens
text = "It is a truth universally acknowledged, that a single man in possession of a good fortune, " \
       "must be in want of a wife. " * 40
work = tempfile.mkdtemp(prefix="ctxlab-notebook-")
corpus = os.path.join(work, "corpus.txt")
with open(corpus, "w") as f:
    f.write(text)

# %% Train with the library's loop (warmup + cosine, clipping, validation; a tqdm bar if tqdm is there)
result = ctxlab.train(model, data=corpus, out=os.path.join(work, "run"), steps=150, batch=8, lr=3e-3,
                      warmup=10, log_interval=5, eval_interval=30, plot=False, quiet=True)
train_rows = [r for r in result["history"] if "loss" in r]
print(f"{result['steps']} steps in {result['seconds']:.1f} s: loss {train_rows[0]['loss']:.3f} -> "
      f"{result['final_train_loss']:.3f} (validation {result['final_val_loss']:.3f})")

# %% Plot the loss (matplotlib, when it is installed)
try:
    import matplotlib
    if "ipykernel" not in sys.modules:   # a script: draw into the file only
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
    print("matplotlib is not installed: no plot (pip install matplotlib)")
if plt is not None:
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([r["step"] for r in train_rows], [r["loss"] for r in train_rows], label="train")
    val_rows = [r for r in result["history"] if "val_loss" in r]
    ax.plot([r["step"] for r in val_rows], [r["val_loss"] for r in val_rows], "o-", label="validation")
    ax.set_xlabel("step"), ax.set_ylabel("loss (nats / byte)"), ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(work, "loss.png"), dpi=100)
    print("plot:", os.path.join(work, "loss.png"))

# %% Evaluate and sample
print(ctxlab.evaluate(model, text[:1500], length=32, batch=4))
print(repr(ctxlab.sample(model, "It is a truth", max_tokens=40, temperature=0.0)))

# %% A training step by hand: forward, loss, backward, .grad per named parameter, AdamW
tokens = np.frombuffer(text.encode(), dtype=np.uint8)[:2 * 33].astype(np.int64).reshape(2, 33)
x, y = tokens[:, :-1], tokens[:, 1:]
opt = ctxlab.AdamW(model.named_parameters(), lr=1e-3)
loss = model.loss(x, y)
loss.backward()
for name, p in model.named_parameters()[:4]:
    print(f"{name:28s} {str(p.shape):12s} |grad| max {np.abs(p.grad.numpy()).max():.3e}")
opt.step()
opt.zero_grad()

# %% One gradient against PyTorch (torch, when installed): the same weights through the
# repository's independent PyTorch model (tests/python/torch_ref.py, written from the specs)

try:
    import torch
except ImportError:
    torch = None
    print("torch is not installed: no PyTorch check (pip install torch)")
if torch is not None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
    import torch_ref

    model64 = ctxlab.Model(cfg, dtype="float64")
    model64.load_state_dict(model.state_dict())            # the trained weights, in float64
    model64.loss(x, y).backward()
    name = "blocks.0.attn.qkv.weight"
    ours = torch.from_dlpack(dict(model64.named_parameters())[name].grad)   # a view, no copy
    params = {n: torch.from_dlpack(p.data).clone() for n, p in model64.named_parameters()}
    ref_loss, ref_grads = torch_ref.loss_and_grads(cfg, params, tokens)
    err = float((ours - ref_grads[name]).abs().max() / ref_grads[name].abs().max())
    print(f"{name}: max |ctxlab - torch| / max |torch| = {err:.1e}")
    assert err < 1e-9, err
