#!/usr/bin/env python3
"""bench/hf_parity.py — `ctxlab export --format hf` against PyPI's transformers (not CI).

For each model below: `ctxlab init` a checkpoint (random N(0, 0.02) weights, then norm weights
and biases randomised too, so that no tensor is at its trivial init), ctxlab's logits on a random
token batch (build/bench_hf_logits), `ctxlab export --format hf DIR`, then
AutoModelForCausalLM.from_pretrained(DIR) in float32 with eager attention on the same tokens.
Prints max |ctxlab - transformers| / max |transformers| per model (float32 rounding: < 1e-5) and
checks that AutoTokenizer.from_pretrained(DIR) maps text to the byte ids and back.

    /root/.cache/ctxlab/hf-venv/bin/python bench/hf_parity.py [--build build] [--work /tmp/hf_parity]

The venv needs transformers and torch (docs/huggingface.md says how it was made). Exit 1 when any
model is over the tolerance.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import st_io  # noqa: E402  (the repository's NumPy safetensors reader / writer)

BASE = {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 160, "context": 64}
MODELS = {  # name -> (config overrides, sequence length)
    "gpt2 (learned, tied)": ({"norm": "layernorm", "posenc": {"type": "learned"}}, 64),
    "gpt2 (learned, untied)": ({"norm": "layernorm", "tie_embeddings": False, "posenc": {"type": "learned"}}, 48),
    "llama (rope half)": ({"norm": "rmsnorm", "posenc": {"type": "rope"}}, 64),
    "llama (rope interleaved, base 5e5, untied)": (
        {"norm": "rmsnorm", "tie_embeddings": False, "posenc": {"type": "rope", "base": 500000.0, "pairing": "interleaved"}}, 64),
    "llama (rope + pi x4)": ({"norm": "rmsnorm", "posenc": {"type": "rope", "scaling": {"type": "pi", "factor": 4}}}, 200),
    "llama (rope + dynamic-ntk x2)": (
        {"norm": "rmsnorm", "posenc": {"type": "rope", "scaling": {"type": "dynamic-ntk", "factor": 2}}}, 150),
    "llama (rope + yarn x4)": ({"norm": "rmsnorm", "posenc": {"type": "rope", "scaling": {"type": "yarn", "factor": 4}}}, 200),
    "llama (rope + llama3 x8)": (
        {"norm": "rmsnorm", "posenc": {"type": "rope", "base": 500000.0, "scaling": {"type": "llama3", "factor": 8}}}, 200),
    "llama (rope + longrope)": (
        {"norm": "rmsnorm", "context": 256, "posenc": {"type": "rope", "scaling": {
            "type": "longrope", "original_context": 64, "short_factor": [1.0 + 0.1 * k for k in range(8)],
            "long_factor": [1.0 + 0.5 * k for k in range(8)]}}}, 200),
}


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"hf_parity: {' '.join(map(str, args))} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def randomise(path, rng):
    """Every tensor of a ctxlab checkpoint drawn afresh (norm weights around 1), metadata kept."""
    tensors, meta = st_io.read_safetensors(path)
    out = {}
    for name, t in tensors.items():
        noise = rng.normal(0.0, 0.1 if "norm" in name else 0.05, t.shape).astype(np.float32)
        out[name] = (1.0 + noise if name.endswith("norm1.weight") or name.endswith("norm2.weight")
                     or name == "norm_f.weight" else noise).astype(np.float32)
    st_io.write_safetensors(path, out, meta)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--work", default="/tmp/hf_parity")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    ctxlab, logits_bin = os.path.join(a.build, "ctxlab"), os.path.join(a.build, "bench_hf_logits")
    os.makedirs(a.work, exist_ok=True)
    rng = np.random.default_rng(0)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    worst = 0.0
    for i, (name, (over, T)) in enumerate(MODELS.items()):
        cfg = dict(BASE, **over)
        d = os.path.join(a.work, f"m{i}")
        os.makedirs(d, exist_ok=True)
        cpath, ckpt, toks, lg, hf = (os.path.join(d, f) for f in ("config.json", "c.safetensors", "t.npy", "l.safetensors", "hf"))
        with open(cpath, "w") as f:
            json.dump(cfg, f)
        run(ctxlab, "init", "--config", cpath, "--seed", i, "--out", ckpt)
        randomise(ckpt, rng)
        tokens = rng.integers(0, 256, size=(2, T)).astype(np.int32)
        st_io.save_npy(toks, tokens)
        run(logits_bin, ckpt, toks, lg)
        ours = st_io.read_safetensors(lg)[0]["logits"]
        run(ctxlab, "export", "--checkpoint", ckpt, "--format", "hf", hf)
        model = transformers.AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        with torch.no_grad():
            theirs = model(torch.from_numpy(tokens.astype(np.int64))).logits.numpy()
        err = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
        worst = max(worst, err)
        print(f"{name:46s} {type(model).__name__:17s} T={T:3d}  max|diff|/max|ref| = {err:.2e}"
              f"  {'ok' if err < a.tol else 'FAIL'}")
    tok = transformers.AutoTokenizer.from_pretrained(os.path.join(a.work, "m0", "hf"))
    text = "It is a truth universally acknowledged,\n\tcafé ☕ \x00\x7f"
    ids = tok(text)["input_ids"]
    tok_ok = ids == list(text.encode("utf-8")) and tok.decode(ids) == text
    print(f"byte tokenizer via AutoTokenizer ({type(tok).__name__}): ids == UTF-8 bytes and decode round trip: "
          f"{'ok' if tok_ok else 'FAIL ' + str(ids[:20])}")
    sp_ok = sentencepiece_check(ctxlab, a.work, text)
    print(f"worst {worst:.2e} (tolerance {a.tol:g})")
    return 0 if worst < a.tol and tok_ok and sp_ok else 1


def sentencepiece_check(ctxlab, work, text):
    """A SentencePiece model from `ctxlab tokenizer train`, recorded by a one-step `ctxlab train` and
    exported: AutoTokenizer on the directory must give the ids of the sentencepiece package on the
    same model file (the library ctxlab's tokenizer runs) and decode them back to the text."""
    import sentencepiece as spm
    d = os.path.join(work, "sp")
    os.makedirs(d, exist_ok=True)
    corpus = os.path.join(HERE, "..", "data", "pride_and_prejudice.txt")
    model = os.path.join(d, "bpe.model")
    run(ctxlab, "tokenizer", "train", "--data", corpus, "--vocab", 600, "--max-lines", 3000, "--out", model)
    cfg = dict(BASE, vocab_size=600, norm="rmsnorm", posenc={"type": "rope"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    run(ctxlab, "train", "--config", os.path.join(d, "config.json"), "--tokenizer", model, "--steps", 1,
        "--batch", 1, "--data", corpus, "--out", os.path.join(d, "run"), "--force", "--quiet")
    ckpt = os.path.join(d, "run", "model.safetensors")
    run(ctxlab, "export", "--checkpoint", ckpt, "--format", "hf", os.path.join(d, "hf"))
    tok = transformers.AutoTokenizer.from_pretrained(os.path.join(d, "hf"))
    want = spm.SentencePieceProcessor(model_file=model).encode(text + " Mr. Darcy")
    ids = tok(text + " Mr. Darcy")["input_ids"]
    ok = ids == want and tok.decode(ids) == text + " Mr. Darcy"
    print(f"SentencePiece tokenizer via AutoTokenizer ({type(tok).__name__}): ids == sentencepiece's and decode "
          f"round trip: {'ok' if ok else 'FAIL ' + str(ids[:12]) + ' vs ' + str(want[:12])}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
