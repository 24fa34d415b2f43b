#!/usr/bin/env python3
"""tests/data/hf/make_fixtures.py — made the committed Hugging Face fixtures once (not run by CI).

Each fixture is a directory that transformers itself wrote with save_pretrained (config.json +
model.safetensors), plus expected.safetensors: "input_ids" [2, 16] (I64) and "logits" [2, 16, V]
(F32), transformers' float32 eager forward on those ids. tests/test_hf.cpp imports each directory
and checks that ctxlab's logits equal these.

  gpt2_tiny   GPT2LMHeadModel: vocab 256, n_embd 32, 2 layers, 4 heads, n_positions 32, gelu_new,
              tied lm_head; every tensor redrawn (biases and LayerNorm weights too).
  llama_tiny  LlamaForCausalLM in the form ctxlab maps: gelu_pytorch_tanh, attention_bias and
              mlp_bias true, up_proj weight 0 and bias 1; grouped-query attention (4 heads, 2 k/v
              heads), rope_theta 5e4 with yarn x2, untied lm_head.

    /root/.cache/ctxlab/hf-venv/bin/python tests/data/hf/make_fixtures.py
"""
import os

import torch
import transformers
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def redraw(model, keep_const=()):
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(k in name for k in keep_const):
                continue
            noise = torch.randn(p.shape, generator=g) * (0.1 if "ln" in name or "norm" in name else 0.08)
            p.copy_(1.0 + noise if ("ln" in name or "norm" in name) and name.endswith("weight") else noise)


def save(model, name, vocab):
    d = os.path.join(HERE, name)
    model.save_pretrained(d, safe_serialization=True)
    ids = torch.randint(0, vocab, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(ids).logits.contiguous()
    save_file({"input_ids": ids, "logits": logits}, os.path.join(d, "expected.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})
    for f in os.listdir(d):
        if f not in ("config.json", "model.safetensors", "expected.safetensors"):
            os.remove(os.path.join(d, f))  # generation_config.json: not part of the fixture


def main():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=256, n_embd=32, n_layer=2, n_head=4, n_positions=32,
                                  activation_function="gelu_new", bos_token_id=None, eos_token_id=None)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    redraw(m)
    save(m, "gpt2_tiny", 256)

    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, hidden_act="gelu_pytorch_tanh",
                                   max_position_embeddings=32, rms_norm_eps=1e-5, attention_bias=True,
                                   mlp_bias=True, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                                   rope_theta=50000.0,
                                   rope_scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16})
    m = transformers.LlamaForCausalLM(cfg).eval()
    redraw(m, keep_const=("up_proj",))
    with torch.no_grad():
        for layer in m.model.layers:
            layer.mlp.up_proj.weight.zero_()
            layer.mlp.up_proj.bias.fill_(1.0)
    m.config._attn_implementation = "eager"
    save(m, "llama_tiny", 256)


if __name__ == "__main__":
    main()
