// tests/test_train_window.cpp — sliding-window training (train --window W, docs/training.md):
// in training mode the window runs the fused kernels of eval --window and changes the loss
// (a window at least the sequence's length does not); in a one-layer model a token more than W
// positions back cannot influence the last position's loss (its gradient is exactly 0 and
// perturbing it leaves the loss unchanged, while without the window both move); the window is
// saved in the checkpoint's metadata and loading sets it (a bad value is a one-line error).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "tests/test_util.h"
#include "train/io/checkpoint.h"
#include "train/io/safetensors.h"

using namespace ctx;
using ctx::testing_util::expect_error;
using ctx::testing_util::graph_has_op;

namespace {

constexpr int64_t kT = 16, kW = 4;

std::unique_ptr<nn::GPT> make_model(int64_t layers, uint64_t seed) {
  ModelConfig cfg = testing_util::two_head_cfg(64, 16, layers, 32, kT, {{"type", "learned"}});
  cfg.tie_embeddings = false;  // wte's gradient is then the inputs' alone
  auto m = std::make_unique<nn::GPT>(cfg);
  m->init_weights(seed);
  testing_util::randomize_weights(*m, seed + 7, 0.3);
  m->train();
  return m;
}

Tensor tokens(uint64_t seed, int64_t B = 2) {
  Tensor t = Tensor::empty({B, kT}, DType::I64);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, (double)rng.below(64));
  return t;
}

// The loss of the last position of every row only (cross_entropy weights), as a Variable.
Variable last_position_loss(nn::GPT& m, const Tensor& x, const Tensor& y) {
  const int64_t B = x.size(0), N = B * kT;
  Tensor w = Tensor::zeros({N}, DType::F32);
  for (int64_t b = 0; b < B; ++b) w.set(b * kT + kT - 1, 1.0 / (double)B);
  Variable logits = m.forward(x);
  return cross_entropy(reshape(logits, {N, m.cfg.vocab_size}), y.view({N}), w);
}

TEST(TrainWindow, ChangesTheLossWithTheFusedKernels) {
  auto mp = make_model(2, 1);
  nn::GPT& m = *mp;
  const Tensor x = tokens(2), y = tokens(3);
  const double full = m.loss(x, y).data().item();
  m.set_attention_window(kW);
  Variable lw = m.loss(x, y);
  EXPECT_TRUE(graph_has_op(lw, "fused_causal_attention")) << "training with a window runs the fused kernels";
  EXPECT_GT(std::fabs(lw.data().item() - full), 1e-4) << "a window of " << kW << " over " << kT << " tokens";
  m.set_attention_window(kT);
  EXPECT_NEAR(m.loss(x, y).data().item(), full, 1e-6) << "a window >= T is full attention";
}

TEST(TrainWindow, TokensBeyondTheWindowCannotInfluenceTheLoss) {
  const Tensor x = tokens(4), y = tokens(5);
  for (int64_t window : {kW, int64_t(0)}) {
    SCOPED_TRACE("window " + std::to_string(window));
    auto mp = make_model(1, 6);
    nn::GPT& m = *mp;
    m.set_attention_window(window);
    Variable loss = last_position_loss(m, x, y);
    loss.backward();
    // learned positions: wpe row p is added to the input at position p only
    Tensor g;
    for (auto& [name, v] : m.named_parameters())
      if (name == "wpe.weight") g = v.grad();
    ASSERT_TRUE(g.defined());
    const int64_t D = m.cfg.d_model;
    for (int64_t p = 0; p < kT; ++p) {
      double mx = 0;
      for (int64_t c = 0; c < D; ++c) mx = std::max(mx, std::fabs(g.at(p * D + c)));
      const bool seen = window == 0 || p > kT - 1 - window;  // the last query sees (T-1-W, T-1]
      if (seen) EXPECT_GT(mx, 1e-7) << "position " << p << " is inside the window";
      else EXPECT_EQ(mx, 0.0) << "position " << p << " lies more than " << window << " back";
    }
    // perturbing the token just outside the window leaves the loss where it was
    Tensor x2 = x.clone();
    const int64_t p = kT - 1 - kW;
    for (int64_t b = 0; b < x.size(0); ++b) x2.set(b * kT + p, (double)(((int64_t)x.at(b * kT + p) + 17) % 64));
    NoGradGuard ng;
    const double d = std::fabs(last_position_loss(m, x2, y).data().item() - loss.data().item());
    if (window > 0) EXPECT_LT(d, 1e-7) << "a token " << kW + 0 << " back changed the loss";
    else EXPECT_GT(d, 1e-5) << "without a window the token must matter (else the test shows nothing)";
  }
}

TEST(TrainWindow, CheckpointRecordsTheWindow) {
  const std::string dir = (std::filesystem::temp_directory_path() / "ctxlab_train_window").string();
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/w.safetensors";
  auto mp = make_model(1, 8);
  nn::GPT& m = *mp;
  save_checkpoint(path, m, 3);
  EXPECT_EQ(load_checkpoint(path).model->attention_window(), 0);
  EXPECT_EQ(load_safetensors(path).metadata.count("attention_window"), 0u) << "no window, no field";
  m.set_attention_window(kW);
  save_checkpoint(path, m, 3);
  EXPECT_EQ(load_safetensors(path).metadata.at("attention_window"), std::to_string(kW));
  LoadedModel lm = load_checkpoint(path);
  EXPECT_EQ(lm.model->attention_window(), kW);
  const Tensor x = tokens(9), y = tokens(10);
  m.eval();
  lm.model->eval();
  EXPECT_NEAR(lm.model->loss(x, y).data().item(), m.loss(x, y).data().item(), 1e-6);
  // a bad recorded window: the file, the field and what it must be
  for (const char* bad : {"-3", "0", "8x", ""}) {
    SafetensorsFile f = load_safetensors(path);
    f.metadata["attention_window"] = bad;
    std::vector<std::pair<std::string, Tensor>> ts;
    for (const std::string& n : f.names) ts.emplace_back(n, f.tensors.at(n));
    save_safetensors(path, ts, f.metadata);
    expect_error([&] { load_checkpoint(path); }, {path, "__metadata__.attention_window", "positive integer"});
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
