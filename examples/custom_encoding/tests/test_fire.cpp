// tests/test_fire.cpp — FIRE (fire.cpp) through ctxlab's public API only (<ctxlab/ctxlab.h>):
//   the op: its bias against a per-element double loop, and its gradients against central
//           differences in f64 (gradcheck_params over the encoding's own parameters);
//   the model: every parameter of a tiny f64 GPT with FIRE by finite differences;
//   training: a tiny f32 model, a few AdamW steps, the loss goes down; checkpoint round trip;
//   extrapolation: perplexity at lengths beyond the training context (ctx::evaluate);
//   install: in a CUDA build, libctxlab_cuda.so is found from the install prefix.
#include <gtest/gtest.h>

#include <ctxlab/ctxlab.h>
#include "core/threads.h"  // ctx::set_num_threads: tiny f64 shapes run fastest on one thread
#include "core/cuda_module.h"    // cuda_module_loaded

#include <cmath>
#include <map>

namespace {

using namespace ctx;

ModelConfig fire_config(int64_t d_model, int64_t heads, int64_t layers, int64_t context,
                        const nlohmann::json& fire) {
  nlohmann::json j = {{"vocab_size", 11}, {"d_model", d_model}, {"n_layers", layers},
                      {"n_heads", heads}, {"context", context}, {"posenc", fire}};
  return config_from_json(j, "test_fire");
}

std::map<std::string, Variable> params_by_name(const nn::Module& m) {
  std::map<std::string, Variable> r;
  for (auto& [n, p] : m.named_parameters()) r[n] = p;
  return r;
}

// The attention state FIRE's hook sees: T queries from position q_pos0, S = q_pos0 + T keys.
AttnState state(int64_t H, int64_t T, int64_t q_pos0, DType dt) {
  AttnState st;
  st.B = 1, st.H = H, st.T = T, st.S = q_pos0 + T, st.Dh = 2, st.q_pos0 = q_pos0;
  st.q = Variable(Tensor::zeros({1, H, T, 2}, dt));
  return st;
}

const nlohmann::json kFire = {{"type", "fire-example"}, {"init_L", 3.5}, {"init_c", 0.7}, {"mlp_width", 5}};

TEST(FireOp, RegisteredByNameFromUserCode) {
  const auto types = posenc_types();
  EXPECT_NE(std::find(types.begin(), types.end(), "fire-example"), types.end());
  nn::GPT m(fire_config(8, 2, 1, 8, kFire));
  EXPECT_EQ(m.pe->type(), "fire-example");
  auto p = params_by_name(m);
  for (const char* n : {"pe.c", "pe.L_multiplier", "pe.mlp.fc1.weight", "pe.mlp.fc1.bias",
                        "pe.mlp.fc2.weight", "pe.mlp.fc2.bias"})
    EXPECT_TRUE(p.count(n)) << n;
  EXPECT_EQ(p["pe.mlp.fc2.weight"].shape(), (Shape{2, 5}));
  // bad parameters: one-line errors naming the field
  try {
    nn::GPT bad(fire_config(8, 2, 1, 8, {{"type", "fire-example"}, {"init_L", -1}}));
    FAIL() << "init_L = -1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("posenc.init_L"), std::string::npos) << e.what();
  }
}

// bias[h, i, j] = fc2(relu(fc1(x)))[h], x = log(|c| d + 1) / (log(|c| max(L, i) + 1) + eps),
// d = i - j (0 where j > i), L = |L_multiplier * init_L|, computed here element by element.
TEST(FireOp, ForwardMatchesPerElementLoop) {
  nn::GPT m(fire_config(8, 2, 1, 8, kFire), DType::F64);
  m.init_weights(3);
  auto p = params_by_name(m);
  p["pe.c"].data().set(0, -0.6);  // |c| is what counts
  p["pe.L_multiplier"].data().set(0, 1.3);
  const int64_t H = 2, T = 4, q0 = 3, S = q0 + T, W = 5;
  AttnState st = state(H, T, q0, DType::F64);
  Tensor b = m.pe->bias(st).data();
  ASSERT_EQ(b.shape(), (Shape{1, H, T, S}));
  const double c = 0.6, L = 1.3 * 3.5, eps = 1e-6;
  const Tensor &w1 = p["pe.mlp.fc1.weight"].data(), &b1 = p["pe.mlp.fc1.bias"].data();
  const Tensor &w2 = p["pe.mlp.fc2.weight"].data(), &b2 = p["pe.mlp.fc2.bias"].data();
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < S; ++j) {
      const double pos = (double)(q0 + i), d = std::max(0.0, pos - (double)j);
      const double x = std::log(c * d + 1) / (std::log(c * std::max(L, pos) + 1) + eps);
      for (int64_t h = 0; h < H; ++h) {
        double f = b2.at(h);
        for (int64_t k = 0; k < W; ++k) f += w2.at(h * W + k) * std::max(0.0, w1.at(k) * x + b1.at(k));
        EXPECT_NEAR(b.at(((h * T) + i) * S + j), f, 1e-12) << "h " << h << " i " << i << " j " << j;
      }
    }
}

// The op's gradients: every FIRE parameter, with queries on both sides of the threshold
// (positions 2..6 against L = 3.5), so both branches of max(L, i) are differentiated.
TEST(FireOp, GradcheckF64) {
  nn::GPT m(fire_config(8, 2, 1, 8, kFire), DType::F64);
  m.init_weights(5);
  const NamedVariables pe = m.pe->shared_module()->named_parameters("pe.");
  AttnState st = state(2, 5, 2, DType::F64);
  GradcheckResult r = gradcheck_params(pe, [&] {
    AttnState s = st;
    return m.pe->bias(s);
  });
  EXPECT_TRUE(r.pass) << r.summary();
  EXPECT_EQ(r.tensors.size(), 6u) << r.summary();
  // c and the threshold reach the bias (a gradcheck of a constant would pass trivially)
  AttnState s = st;
  sum(m.pe->bias(s)).backward();
  auto p = params_by_name(m);
  EXPECT_GT(std::fabs(p["pe.c"].grad().at(0)), 1e-6);
  EXPECT_GT(std::fabs(p["pe.L_multiplier"].grad().at(0)), 1e-6);
}

// FIRE inside the model: every parameter of a 2-layer f64 GPT against central differences,
// with weights large enough that the position terms move the loss.
TEST(FireModel, GradcheckThroughModelF64) {
  nn::GPT m(fire_config(8, 2, 2, 6, kFire), DType::F64);
  m.init_weights(7);
  m.eval();
  Rng rng(11);
  for (auto& [name, p] : m.named_parameters()) {
    if (name == "pe.c" || name == "pe.L_multiplier") continue;
    if (name.find("norm") != std::string::npos && name.find("weight") != std::string::npos)
      rng.fill_normal(p.data(), 1.0, 0.1);
    else
      rng.fill_normal(p.data(), 0.0, 0.5);
  }
  std::vector<int64_t> ids;
  for (int i = 0; i < 2 * 7; ++i) ids.push_back((i * 7 + 3) % 11);
  Tensor all = Tensor::from_vector(ids, {2, 7});
  std::vector<int64_t> xi, yi;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 6; ++t) {
      xi.push_back(ids[(size_t)(b * 7 + t)]);
      yi.push_back(ids[(size_t)(b * 7 + t + 1)]);
    }
  Tensor x = Tensor::from_vector(xi, {2, 6}), y = Tensor::from_vector(yi, {2, 6});
  const int threads = ctx::num_threads();
  ctx::set_num_threads(1);
  GradcheckResult r = gradcheck_params(m.named_parameters(), [&] { return m.loss(x, y); });
  ctx::set_num_threads(threads);
  EXPECT_TRUE(r.pass) << r.summary();
  int pe_checked = 0;
  for (auto& t : r.tensors) pe_checked += t.name.rfind("pe.", 0) == 0;
  EXPECT_EQ(pe_checked, 6) << r.summary();
  // the parameters are left as they were: leaves again, no gradient
  for (auto& [name, p] : m.named_parameters()) {
    EXPECT_EQ(p.op_name(), "leaf") << name;
    EXPECT_FALSE(p.grad().defined()) << name;
  }
}

// A repetitive byte text (a tiny model learns it within a few dozen steps).
std::vector<int32_t> toy_text() {
  std::string s;
  const char* words[] = {"the cat sat on the mat. ", "a dog ran in the park. ", "we like tea. "};
  for (int i = 0; i < 400; ++i) s += words[(i * 7 + i / 3) % 3];
  return encode_bytes(s);
}

// The libtorch loop: forward, loss, backward, inspect .grad(), optimizer step; save and load.
TEST(FireModel, TrainsSaveLoadAndExtrapolates) {
  ModelConfig cfg = preset_config("tiny");  // d 64, 2 layers, 4 heads, context 64
  cfg.context = 32;
  cfg.posenc = {{"type", "fire-example"}, {"init_L", 32}};
  nn::GPT model(cfg);
  model.init_weights(1);
  const TokenStream text = toy_text();
  BatchSampler batches(&text, 42);
  AdamWOptions o;
  o.lr = 3e-3;
  AdamW opt(model.named_parameters(), o);
  std::vector<double> losses;
  for (int step = 0; step < 40; ++step) {
    auto [x, y] = batches.next(8, cfg.context);
    Variable loss = model.loss(x, y);
    loss.backward();
    if (step == 0)  // FIRE's parameters get gradients from the loss
      for (auto& [name, p] : model.named_parameters())
        if (name.rfind("pe.", 0) == 0) {
          ASSERT_TRUE(p.grad().defined()) << name;
          double n2 = 0;
          for (int64_t k = 0; k < p.grad().numel(); ++k) n2 += p.grad().at(k) * p.grad().at(k);
          EXPECT_GT(n2, 0) << name;
        }
    opt.clip_and_step(o.lr, 1.0);
    opt.zero_grad();
    losses.push_back(loss.data().item());
  }
  const double first = losses.front(), last = (losses[35] + losses[36] + losses[37] + losses[38] + losses[39]) / 5;
  EXPECT_LT(last, first - 1.0) << "loss " << first << " -> " << last;

  // checkpoint round trip: same parameters, same loss (FIRE's included)
  const std::string path = ::testing::TempDir() + "fire_model.safetensors";
  save_checkpoint(path, model, 40);
  LoadedModel back = load_checkpoint(path);
  EXPECT_EQ(back.step, 40);
  EXPECT_EQ(back.model->pe->type(), "fire-example");
  auto [x, y] = sequential_batch(text, 0, 4, cfg.context);
  double l0, l1;
  {
    NoGradGuard ng;
    model.eval();
    back.model->eval();
    l0 = model.loss(x, y).data().item();
    l1 = back.model->loss(x, y).data().item();
  }
  EXPECT_DOUBLE_EQ(l0, l1);

  // extrapolation: perplexity at the training length and at 2x and 4x it
  std::map<int64_t, EvalResult> res;
  for (int64_t len : {32, 64, 128}) {
    res[len] = evaluate(model, text, len, 2, 4, "toy text");
    EXPECT_EQ(res[len].length, len);
    EXPECT_GT(res[len].windows, 0);
    EXPECT_TRUE(std::isfinite(res[len].ppl)) << len;
  }
  // trained: far better than a uniform guess over 256 bytes at its own length ...
  EXPECT_LT(res[32].ppl, 20.0);
  // ... and the positions past training (FIRE normalises them into the trained range) stay
  // far from uniform too: no blow-up on this periodic text
  EXPECT_LT(res[128].ppl, 64.0);
  std::printf("FIRE tiny model ppl: L=32 %.3f, L=64 %.3f, L=128 %.3f\n", res[32].ppl, res[64].ppl, res[128].ppl);
}

// The CUDA module is loaded on first use of Device::CUDA: from a program outside the build tree
// it is found through the RUNPATH that ctxlab::ctxlab adds (the prefix's lib/). Without a GPU the
// backend may refuse to start, but not because the library is missing.
TEST(Install, CudaModuleFoundFromPrefix) {
#ifdef CTXLAB_WITH_CUDA
  try {
    backend(Device::CUDA);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("cannot load"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(cuda_module_loaded());
#else
  GTEST_SKIP() << "built without CUDA: no libctxlab_cuda.so installed";
#endif
}

}  // namespace
