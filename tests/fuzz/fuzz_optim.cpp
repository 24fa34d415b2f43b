// tests/fuzz/fuzz_optim.cpp — libFuzzer target for the optimizer-state reader (what `train
// --resume` reads from model.optim.safetensors: Checkpointer::restore). The first byte picks the
// optimizer (even: AdamW, odd: SGD with momentum) of a small fixed model (its config below: the
// seeds in tests/fuzz/seeds/optim/ were written by `ctxlab train` with the same --set fields); the
// rest is the file. Any byte string must either restore or throw ctx::Error; a restored state is
// finite (second moments non-negative) and its RNG states are not all zero.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "core/error.h"
#include "nn/config.h"
#include "train/checkpointer.h"
#include "train/io/safetensors.h"

namespace {

struct Run {
  ctx::TrainOptions opt;
  std::unique_ptr<ctx::nn::GPT> model;
  std::unique_ptr<ctx::Optimizer> optim;
  ctx::Rng data_rng{1};
  std::unique_ptr<ctx::Checkpointer> ckpt;
};

// --preset tiny --set d_model=8 --set n_heads=2 --set n_layers=1 --set d_ff=16 --set context=8
std::unique_ptr<Run> make_run(bool sgd) {
  ctx::ModelConfig cfg = ctx::preset_config("tiny");
  cfg.d_model = 8;
  cfg.n_heads = 2;
  cfg.n_layers = 1;
  cfg.d_ff = 16;
  cfg.context = 8;
  auto r = std::make_unique<Run>();
  r->opt.optimizer = sgd ? "sgd" : "adamw";
  r->model = std::make_unique<ctx::nn::GPT>(cfg);
  r->model->init_weights(1);
  const ctx::nn::NamedParams params = r->model->named_parameters();
  if (sgd)
    r->optim = std::make_unique<ctx::SGD>(params, 0.9, 0.0);
  else
    r->optim = std::make_unique<ctx::AdamW>(params, ctx::AdamWOptions{});
  r->ckpt = std::make_unique<ctx::Checkpointer>(r->opt, *r->model, *r->optim, r->data_rng, *ctx::byte_tokenizer());
  return r;
}

void fail(const char* what) {
  std::fprintf(stderr, "fuzz_optim: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<Run> runs[2] = {make_run(false), make_run(true)};
  if (size < 1) return 0;
  Run& r = *runs[data[0] & 1];
  try {
    const ctx::SafetensorsFile f = ctx::load_safetensors_bytes(data + 1, size - 1, "fuzz.optim.safetensors");
    r.ckpt->restore(f, "fuzz.optim.safetensors");
  } catch (const ctx::Error&) {
    return 0;  // refused with a message: the expected outcome for most inputs
  }
  for (const auto& [name, t] : r.optim->state()) {
    const ctx::Tensor h = t.dtype() == ctx::DType::F32 ? t : t.to(ctx::DType::F32);
    for (int64_t i = 0; i < h.numel(); ++i) {
      const float v = h.data<float>()[i];
      if (!std::isfinite(v) || (name.rfind("exp_avg_sq.", 0) == 0 && v < 0)) fail("accepted a bad optimizer value");
    }
  }
  const ctx::Rng::State s = r.data_rng.state();
  if (!(s.s[0] | s.s[1] | s.s[2] | s.s[3])) fail("accepted an all-zero RNG state");
  return 0;
}
