// <ctxlab/ctxlab.h> — the public API of ctxlab in one include (installed by `cmake --install`;
// find_package(ctxlab) gives target ctxlab::ctxlab; docs/extending.md). Everything lives in
// namespace ctx (ctx::nn for modules). For a libtorch user:
//
//   libtorch                               ctxlab
//   torch::Tensor / autograd Variable      ctx::Tensor (data) / ctx::Variable (graph node)
//   model->named_parameters()              model.named_parameters()   (vector of name, Variable)
//   model->forward(x)                      model.forward(tokens)       tokens [B, T] i64 -> [B, T, V]
//   torch::nn::functional::cross_entropy   model.loss(inputs, targets) or ctx::cross_entropy
//   loss.backward(); p.grad()              loss.backward(); p.grad()
//   torch::optim::AdamW opt(params, o)     ctx::AdamW opt(model.named_parameters(), o); opt.step(lr)
//   opt.zero_grad()                        opt.zero_grad() (or model.zero_grad())
//   torch::save / torch::load              ctx::save_checkpoint / ctx::load_checkpoint (safetensors)
//   torch::autograd::gradcheck             ctx::gradcheck (functions) / ctx::gradcheck_params (a model)
//   torch::NoGradGuard                     ctx::NoGradGuard
//
// A minimal training step (see examples/custom_encoding/ for a complete program and test):
//
//   ctx::ModelConfig cfg = ctx::preset_config("tiny");
//   cfg.posenc = {{"type", "alibi"}};
//   ctx::nn::GPT model(cfg);                 // f32, validated config (errors name the field)
//   model.init_weights(/*seed=*/1);
//   ctx::AdamW opt(model.named_parameters(), ctx::AdamWOptions{});
//   ctx::Variable loss = model.loss(inputs, targets);   // inputs, targets: [B, T] i64 tensors
//   loss.backward();
//   opt.step(1e-3);
//   opt.zero_grad();
//   ctx::save_checkpoint("model.safetensors", model, /*step=*/1);
//
// A new positional encoding is a subclass of ctx::PositionalEncoding registered by name with a
// static ctx::PosencRegistrar (posenc/posenc.h); the same file works linked into a program or
// built as a plugin for `ctxlab --plugin lib.so` (ctx::load_plugin).
#pragma once

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/variable.h"
#include "nn/config.h"
#include "nn/gpt.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "posenc/posenc.h"
#include "train/io/checkpoint.h"
#include "train/io/config.h"
#include "train/data.h"
#include "train/eval.h"
#include "train/optim.h"
#include "train/cli/plugin.h"
#include "train/io/tokenizer.h"
#include "train/trainer.h"
