// tests/test_device_core.cpp — the device-agnostic core: paths are chosen by Backend::has(Fused)
// (a backend that reports no fused method gets the composed paths, with the same results; one
// that reports them gets every fused method called), the base class refuses fused calls it
// does not have, host-only reads fail loudly on device memory, Tensor::to / Module::to /
// to_device_like move what they should and nothing more, and the CTXLAB_* settings table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_set>

#include "autograd/kernels/cope.h"
#include "autograd/kernels/fire.h"
#include "autograd/kernels/gru_cell.h"
#include "autograd/kernels/ode_rk4.h"
#include "autograd/ops.h"
#include "autograd/ops_attention.h"
#include "autograd/ops_heads.h"
#include "core/backend.h"
#ifdef CTXLAB_WITH_CUDA
#include "core/cuda/cuda_runtime.h"
#endif
#include "core/device_table.h"
#include "core/extension.h"
#include "core/fast_paths.h"
#include "core/settings.h"
#include "core/switch.h"
#include "nn/gpt.h"
#include "test_util.h"
#include "train/optim.h"

namespace ctx {
namespace {

using testing_util::expect_error;
using testing_util::rel_err;
using testing_util::tiny_cfg;
using json = nlohmann::json;

// The CPU backend behind a wrapper that either reports no fused method (fused = false: callers
// must compose) or forwards the fused methods and counts the calls.
class RecordingBackend final : public Backend {
 public:
  RecordingBackend(Backend& inner, bool fused) : in_(inner), fused_(fused) {}
  Device device() const override { return Device::CPU; }
  // the backend's measured choice (Backend::prefers_fused_attention), and the dims it was asked for
  bool prefer_fused_attention = true;
  mutable std::vector<std::array<int64_t, 4>> attention_dims_asked;
  bool prefers_fused_attention(const AttnQuery& a) const override {
    attention_dims_asked.push_back({a.B, a.H, a.T, a.S});
    return prefer_fused_attention;
  }
  std::string name() const override { return fused_ ? "recording" : "composed-only"; }
  std::map<std::string, int> calls;  // fused method -> times called
  std::map<std::string, int> row_calls;  // causal_fill, softmax, causal_softmax and backwards -> times called

  void fill_impl(Tensor& x, double v) override { in_.fill(x, v); }
  void set_values_impl(Tensor& x, const std::vector<int64_t>& v) override { in_.set_values(x, v); }
  void copy_strided_impl(const Tensor& s, const Strided& ss, Tensor& d, const Strided& ds, const Shape& sh,
                         bool acc) override {
    in_.copy_strided(s, ss, d, ds, sh, acc);
  }
  void convert_impl(const Tensor& s, Tensor& d) override { in_.convert(s, d); }
  void unary_impl(UnaryOp op, const Tensor& x, Tensor& y, double a, double b) override { in_.unary(op, x, y, a, b); }
  void unary_backward_impl(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, double a,
                           double b) override {
    in_.unary_backward(op, x, y, dy, dx, a, b);
  }
  void binary_impl(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& o, const Shape&, const Shape&) override {
    in_.binary(op, a, b, o);
  }
  void reduce_sum_impl(const Tensor& x, Tensor& o, const Shape&) override { in_.reduce_sum(x, o); }
  void where_scalar_impl(const Tensor& m, const Tensor& a, double b, Tensor& y, const Shape&) override {
    in_.where_scalar(m, a, b, y);
  }
  void where_impl(const Tensor& m, const Tensor& a, const Tensor& b, Tensor& y, const Shape&) override {
    in_.where(m, a, b, y);
  }
  void causal_fill_impl(Tensor& x, double v, int64_t diag, int64_t w) override {
    ++row_calls["causal_fill"];
    in_.causal_fill(x, v, diag, w);
  }
  void dropout_impl(const Tensor& x, const DropoutMask& m, Tensor& y) override { in_.dropout(x, m, y); }
  void gemm_impl(const GemmDesc& g, const Tensor& A, const Tensor& B, Tensor& C) override { in_.gemm(g, A, B, C); }
  void softmax_impl(const Tensor& x, Tensor& y, bool log) override {
    ++row_calls["softmax"];
    in_.softmax(x, y, log);
  }
  void causal_softmax_impl(const Tensor& x, Tensor& y, const CausalRows& r) override {
    ++row_calls["causal_softmax"];
    in_.causal_softmax(x, y, r.diag, r.window);
  }
  void causal_softmax_backward_impl(const Tensor& y, const Tensor& dy, Tensor& dx, const CausalRows& r) override {
    ++row_calls["causal_softmax_backward"];
    in_.causal_softmax_backward(y, dy, dx, r.diag, r.window);
  }
  void softmax_backward_impl(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) override {
    ++row_calls["softmax_backward"];
    in_.softmax_backward(y, dy, dx, log);
  }
  void layernorm_impl(const Tensor& x, const Tensor& a, const Tensor& w, const Tensor& b, double eps, Tensor& h,
                      Tensor& y, Tensor& mean, Tensor& rstd) override {
    if (a.defined()) return in_.add_layernorm(x, a, w, b, eps, h, y, mean, rstd);
    in_.layernorm(x, w, b, eps, y, mean, rstd);
  }
  void layernorm_backward_impl(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dres, Tensor& dx, Tensor& dw, Tensor& db) override {
    in_.layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, dres);
  }
  void rmsnorm_impl(const Tensor& x, const Tensor& a, const Tensor& w, double eps, Tensor& h, Tensor& y,
                    Tensor& rstd) override {
    if (a.defined()) return in_.add_rmsnorm(x, a, w, eps, h, y, rstd);
    in_.rmsnorm(x, w, eps, y, rstd);
  }
  void rmsnorm_backward_impl(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                             const Tensor& dres, Tensor& dx, Tensor& dw) override {
    in_.rmsnorm_backward(dy, x, w, rstd, dx, dw, dres);
  }
  void cross_entropy_impl(const Tensor& z, const Tensor& t, Tensor& loss, Tensor& lse) override {
    in_.cross_entropy(z, t, loss, lse);
  }
  void cross_entropy_backward_impl(const Tensor& z, const Tensor& t, const Tensor& lse, const Tensor& dl,
                                   Tensor& dz) override {
    in_.cross_entropy_backward(z, t, lse, dl, dz);
  }
  void index_select_impl(const Tensor& x, int64_t dim, const Tensor& idx, Tensor& o, const DimSplit&) override {
    in_.index_select(x, dim, idx, o);
  }
  void index_add_impl(Tensor& o, int64_t dim, const Tensor& idx, const Tensor& s, const DimSplit&) override {
    in_.index_add(o, dim, idx, s);
  }
  void adamw_impl(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, double lr, double b1, double b2, double eps,
                  double wd, int64_t step) override {
    in_.adamw(p, g, m, v, lr, b1, b2, eps, wd, step);
  }

  bool has(Fused f) const override { return fused_ && in_.has(f); }
  void attention_forward_impl(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& bias, Tensor& out, Tensor& lse, const AttnRel& rel) override {
    ++calls[rel.empty() ? "attention_forward" : "attention_forward+rel"];
    in_.attention_forward(d, q, k, v, bias, out, lse, rel);
  }
  void attention_backward_impl(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& bias, const Tensor& out, const Tensor& lse, const Tensor& dout,
                               Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dbias, const AttnRel& rel,
                               AttnRelGrad& drel) override {
    ++calls["attention_backward"];
    in_.attention_backward(d, q, k, v, bias, out, lse, dout, dq, dk, dv, dbias, rel, drel);
  }
  void rope_rotate_impl(const Tensor& x, const Tensor& C, const Tensor& S, Tensor& out, bool inter, bool tr) override {
    ++calls[tr ? "rope_rotate(transpose)" : "rope_rotate"];
    in_.rope_rotate(x, C, S, out, inter, tr);
  }
  void split_heads_impl(const Tensor& qkv, int64_t H, int64_t q0, Tensor& q, Tensor& k, Tensor& v) override {
    ++calls["split_heads"];
    in_.split_heads(qkv, H, q0, q, k, v);
  }
  void split_heads_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t H, int64_t q0,
                                 Tensor& dqkv) override {
    ++calls["split_heads_backward"];
    in_.split_heads_backward(dq, dk, dv, H, q0, dqkv);
  }
  void merge_heads_impl(const Tensor& o, Tensor& out) override {
    ++calls["merge_heads"];
    in_.merge_heads(o, out);
  }
  void merge_heads_backward_impl(const Tensor& dout, Tensor& d_o) override {
    ++calls["merge_heads_backward"];
    in_.merge_heads_backward(dout, d_o);
  }
  void linear_impl(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    ++calls["linear"];
    in_.linear(x, w, b, y);
  }
  void sum_squares_impl(const Tensor& x, const std::vector<FlatChunk>& c, Tensor& out) override {
    ++calls["sum_squares"];
    in_.sum_squares(x, c, out);
  }
  void adamw_flat_impl(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const std::vector<FlatChunk>& c,
                       const AdamWHyper& h, const Tensor& norm_sq) override {
    ++calls["adamw_flat"];
    in_.adamw_flat(p, g, m, v, c, h, norm_sq);
  }

 private:
  Backend& in_;
  bool fused_;
};

// Installs a RecordingBackend as the CPU backend for the scope.
struct InstallBackend {
  explicit InstallBackend(bool fused) : rb(backend(Device::CPU), fused) { register_backend(Device::CPU, &rb); }
  ~InstallBackend() { register_backend(Device::CPU, nullptr); }
  RecordingBackend rb;
};

struct StepResult {
  double loss = 0;
  std::vector<std::pair<std::string, Tensor>> params;  // after two optimizer steps
  bool fused_optimizer = false;
};

// f64 tiny GPT: loss, backward, two clipped AdamW steps (a second backward in between).
StepResult train_two_steps(const json& posenc) {
  nn::GPT m(tiny_cfg(posenc), DType::F64);
  m.init_weights(7);
  Rng r(8);
  const int64_t B = 2, T = 13;
  Tensor in = Tensor::empty({B, T}, DType::I64), tg = Tensor::empty({B, T}, DType::I64);
  for (int64_t i = 0; i < B * T; ++i) in.set(i, (double)r.below(17)), tg.set(i, (double)r.below(17));
  AdamW opt(m.named_parameters(), AdamWOptions{});
  StepResult out;
  out.fused_optimizer = opt.fused();
  for (int s = 0; s < 2; ++s) {
    opt.zero_grad();
    Variable loss = m.loss(in, tg);
    if (s == 0) out.loss = loss.data().item();
    loss.backward();
    opt.clip_and_step(1e-2, 0.05);  // a small max_norm: the clip factor is used
  }
  for (auto& [name, p] : m.named_parameters()) out.params.emplace_back(name, p.data().clone());
  return out;
}

TEST(DeviceCore, TheBackendsReportChoosesFusedOrComposedWithTheSameResults) {
  // rope: rotation + heads + linear + plain fused attention; shaw: attention with RelTerms
  for (const json& pe : {json{{"type", "rope"}}, json{{"type", "shaw"}, {"max_relative_position", 4}}}) {
    SCOPED_TRACE(pe.dump());
    StepResult composed, fused;
    std::map<std::string, int> composed_calls, fused_calls;
    {
      InstallBackend b(false);
      composed = train_two_steps(pe);
      composed_calls = b.rb.calls;
    }
    {
      InstallBackend b(true);
      fused = train_two_steps(pe);
      fused_calls = b.rb.calls;
    }
    EXPECT_TRUE(composed_calls.empty()) << "a fused method ran on a backend that reports none";
    EXPECT_FALSE(composed.fused_optimizer);
    EXPECT_TRUE(fused.fused_optimizer);
    const bool rope = pe["type"] == "rope";
    std::vector<std::string> want = {"attention_backward", "split_heads", "split_heads_backward", "merge_heads",
                                     "merge_heads_backward", "linear", "sum_squares", "adamw_flat",
                                     rope ? "attention_forward" : "attention_forward+rel"};
    if (rope) want.insert(want.end(), {"rope_rotate", "rope_rotate(transpose)"});
    for (const std::string& w : want) EXPECT_GT(fused_calls[w], 0) << w << " was not called";
    EXPECT_NEAR(fused.loss, composed.loss, 1e-12 * std::fabs(composed.loss));
    ASSERT_EQ(fused.params.size(), composed.params.size());
    for (size_t i = 0; i < fused.params.size(); ++i) {
      SCOPED_TRACE(fused.params[i].first);
      EXPECT_EQ(fused.params[i].first, composed.params[i].first);
      EXPECT_LE(rel_err(fused.params[i].second, composed.params[i].second), 1e-9);
    }
  }
}

// The op causal_softmax calls the backend's one-pass method each way, or with
// CTXLAB_FUSED_CAUSAL_SOFTMAX=0 (set_fast_path(FastPath::CausalSoftmax, false)) the two-pass
// composition, with the same values (f64: bit for bit forward) and gradients.
TEST(DeviceCore, CausalSoftmaxIsOnePassUnlessSwitchedOff) {
  Rng r(31);
  const Tensor x = testing_util::uniform_tensor(r, {2, 3, 7, 9}, DType::F64, -3, 3);
  const Tensor seed = testing_util::uniform_tensor(r, {2, 3, 7, 9}, DType::F64);
  Tensor y[2], g[2];
  std::map<std::string, int> seen[2];
  for (int fused = 0; fused < 2; ++fused) {
    set_fast_path(FastPath::CausalSoftmax, fused == 1);
    InstallBackend b(false);
    Variable v(x, true);
    Variable p = causal_softmax(v, 2, 4);
    p.backward(seed);
    y[fused] = p.data();
    g[fused] = v.grad();
    seen[fused] = b.rb.row_calls;
  }
  reset_fast_path(FastPath::CausalSoftmax);
  EXPECT_EQ(seen[1], (std::map<std::string, int>{{"causal_softmax", 1}, {"causal_softmax_backward", 1}}));
  EXPECT_EQ(seen[0], (std::map<std::string, int>{{"causal_fill", 1}, {"softmax", 1}, {"softmax_backward", 1}}));
  for (int64_t k = 0; k < x.numel(); ++k) {
    EXPECT_EQ(y[1].at(k), y[0].at(k)) << "value " << k;
    EXPECT_NEAR(g[1].at(k), g[0].at(k), 1e-15) << "gradient " << k;
  }
}

TEST(DeviceCore, AttentionFollowsTheBackendsPreferenceUnlessForcedOn) {
  // A backend that has the fused attention but prefers the composed path for these dims (as the
  // CUDA backend does for training shapes) gets the composed path, with the same results, unless
  // the fused one is asked for explicitly (set_fast_path(Attention, true) = CTXLAB_FUSED_ATTENTION=1).
  const json pe = {{"type", "rope"}};
  StepResult preferred, declined, forced;
  {
    InstallBackend b(true);
    preferred = train_two_steps(pe);
    EXPECT_GT(b.rb.calls["attention_forward"], 0);
  }
  {
    InstallBackend b(true);
    b.rb.prefer_fused_attention = false;
    declined = train_two_steps(pe);
    EXPECT_EQ(b.rb.calls["attention_forward"], 0) << "the fused attention ran where the backend declined it";
    EXPECT_EQ(b.rb.calls["attention_backward"], 0);
    EXPECT_GT(b.rb.calls["linear"], 0) << "the other fused methods still run";
    ASSERT_FALSE(b.rb.attention_dims_asked.empty());
    const std::array<int64_t, 4> want = {2, tiny_cfg(pe).n_heads, 13, 13};  // B, H, T, S of train_two_steps
    EXPECT_EQ(b.rb.attention_dims_asked.front(), want);
  }
  {
    InstallBackend b(true);
    b.rb.prefer_fused_attention = false;
    set_fast_path(FastPath::Attention, true);
    forced = train_two_steps(pe);
    reset_fast_path(FastPath::Attention);
    EXPECT_GT(b.rb.calls["attention_forward"], 0) << "CTXLAB_FUSED_ATTENTION=1 did not take the fused path";
  }
  EXPECT_NEAR(declined.loss, preferred.loss, 1e-12 * std::fabs(preferred.loss));
  EXPECT_EQ(forced.loss, preferred.loss);
  for (size_t i = 0; i < declined.params.size(); ++i)
    EXPECT_LE(rel_err(declined.params[i].second, preferred.params[i].second), 1e-9) << declined.params[i].first;
}

TEST(DeviceCore, TheSwitchTurnsAnExistingFusedPathOffButCannotTurnOneOn) {
  // FastPathSwitch only turns a path off; has() decides whether it exists.
  Rng r(3);
  Variable x(testing_util::uniform_tensor(r, {2, 5, 3 * 8}, DType::F64), true);
  {
    InstallBackend b(true);
    auto h = split_heads(x, 2);
    EXPECT_EQ(b.rb.calls["split_heads"], 1);
    set_fast_path(FastPath::Heads, false);
    h = split_heads(x, 2);
    reset_fast_path(FastPath::Heads);
    EXPECT_EQ(b.rb.calls["split_heads"], 1) << "the switch did not turn the fused path off";
  }
  InstallBackend b(false);
  set_fast_path(FastPath::Heads, true);
  auto h = split_heads(x, 2);
  reset_fast_path(FastPath::Heads);
  EXPECT_TRUE(b.rb.calls.empty());
}

// The fallback rule holds for complex-order too (it used to throw "has no rope_rotate" on a
// backend without Fused::Rope): composed there, fused where the backend has it, the same training.
TEST(DeviceCore, ComplexOrderFallsBackToItsComposedTwin) {
  const json pe = {{"type", "complex-order"}};
  StepResult composed, fused;
  {
    InstallBackend b(false);
    composed = train_two_steps(pe);
    EXPECT_TRUE(b.rb.calls.empty()) << "a fused method ran on a backend that reports none";
  }
  {
    InstallBackend b(true);
    fused = train_two_steps(pe);
    EXPECT_GT(b.rb.calls["rope_rotate"], 0);
    EXPECT_GT(b.rb.calls["rope_rotate(transpose)"], 0);
  }
  EXPECT_NEAR(fused.loss, composed.loss, 1e-12 * std::fabs(composed.loss));
  ASSERT_EQ(fused.params.size(), composed.params.size());
  for (size_t i = 0; i < fused.params.size(); ++i)
    EXPECT_LE(rel_err(fused.params[i].second, composed.params[i].second), 1e-9) << fused.params[i].first;
}

// core/fast_paths.h: one row per fused op, each switch a 0 | 1 variable of the settings table with
// the same default, and use_fused = the switch and (where the path needs one) the backend's has().
TEST(FastPaths, OneTableTheSettingsAndTheRule) {
  const auto& t = fast_paths();
  ASSERT_EQ(t.size(), 14u);
  RecordingBackend none(backend(Device::CPU), false), all(backend(Device::CPU), true);
  for (size_t i = 0; i < t.size(); ++i) {
    const FastPathInfo& r = t[i];
    SCOPED_TRACE(r.name);
    EXPECT_EQ((size_t)r.path, i);
    EXPECT_EQ(&fast_path_info(r.path), &r);
    EXPECT_GT(std::strlen(r.fused_op), 0u);
    EXPECT_GT(std::strlen(r.composed), 0u);
    EXPECT_GT(std::strlen(r.chooser), 0u);
    if (r.env) {
      const auto& st = settings();
      auto s = std::find_if(st.begin(), st.end(), [&](const Setting& x) { return std::string(x.name) == r.env; });
      ASSERT_NE(s, st.end()) << r.env << " is not in the settings table";
      EXPECT_STREQ(s->values, "0 | 1");
      EXPECT_STREQ(s->read_by, "core/fast_paths.cpp");
      // (attention's default is the backend's measured choice, bf16 attention's the device's: in words)
      if (r.path != FastPath::Attention && r.path != FastPath::Bf16Attention) {
        EXPECT_STREQ(s->default_value, r.default_on ? "1" : "0");
      }
      reset_fast_path(r.path);  // (an earlier test may have left an override)
      const bool env_unset = setting_env(r.env) == nullptr;
      if (env_unset) {
        EXPECT_EQ(fast_path_enabled(r.path), r.default_on);
      }
      for (bool on : {false, true}) {
        set_fast_path(r.path, on);
        EXPECT_EQ(fast_path_enabled(r.path), on);
        EXPECT_EQ(use_fused(r.path, all), on);
        EXPECT_EQ(use_fused(r.path, none), on && !r.needs_fused);
      }
      reset_fast_path(r.path);
      if (env_unset) {
        EXPECT_EQ(fast_path_enabled(r.path), r.default_on);
      }
    } else {  // flat_adamw: the switch is AdamWOptions::fused, per optimizer
      expect_error([&] { set_fast_path(r.path, false); }, {"set_fast_path", r.name, "no process-wide switch"});
      EXPECT_TRUE(use_fused(r.path, all));
      EXPECT_FALSE(use_fused(r.path, none));
    }
  }
}

TEST(DeviceCore, BaseClassFusedMethodsThrowNamingTheMethodAndTheBackend) {
  RecordingBackend rb(backend(Device::CPU), false);
  for (Fused f : {Fused::Attention, Fused::Rope, Fused::Heads, Fused::Linear, Fused::FlatAdamW})
    EXPECT_FALSE(rb.Backend::has(f)) << fused_name(f);
  for (Fused f : {Fused::Attention, Fused::Rope, Fused::Heads, Fused::Linear, Fused::FlatAdamW})
    EXPECT_TRUE(backend(Device::CPU).has(f)) << "the CPU backend lacks " << fused_name(f);
  Tensor t = Tensor::zeros({2, 4}, DType::F32), u = Tensor::zeros({2, 4}, DType::F32);
  Backend& base = rb;
  expect_error([&] { base.Backend::rope_rotate(t, t, t, u, false, false); },
               {"rope_rotate", "not supported by backend composed-only", "rope"});
  expect_error([&] { base.Backend::linear(t, t, t, u); }, {"linear", "composed-only", "Fused::linear"});
  expect_error([&] { base.Backend::merge_heads(t, u); }, {"merge_heads", "composed-only"});
  expect_error([&] { base.Backend::sum_squares(t, {}, u); }, {"sum_squares", "flat_adamw"});
  AttnRel rel;
  expect_error([&] { base.Backend::attention_forward(AttnDims{}, t, t, t, Tensor(), u, u, rel); },
               {"attention_forward", "composed-only", "attention"});
}

// Extension kernels (core/extension.h): a typed slot, one kernel per device; the slot's argument
// checks run before every call; a second kernel for a device and a call to a device without one
// are refused, naming the slot, the device and the files.
namespace probe {
int calls = 0;
void check(Device d, const Tensor& x, const Tensor& y, const double& a) {
  check_on_device(d, "probe_kernel", {&x, &y});
  CTX_CHECK(a >= 0, "probe_kernel: a must be >= 0, got ", a);
}
void scale_cpu(const Tensor& x, Tensor& y, double a) {
  ++calls;
  for (int64_t i = 0; i < x.numel(); ++i) y.set(i, a * x.at(i));
}
}  // namespace probe

TEST(DeviceCore, ExtensionKernelsAreTypedOnePerDeviceAndRefuseClearly) {
  ExtensionKernel<void(const Tensor&, Tensor&, double)> k{"probe_kernel", &probe::check};
  EXPECT_STREQ(k.name(), "probe_kernel");
  Tensor x = Tensor::from_vector<double>({1, 2, 3}, {3}), y = Tensor::zeros({3}, DType::F64);
  EXPECT_FALSE(k.has(Device::CPU));
  expect_error([&] { k(Device::CPU, x, y, 2.0); },
               {"probe_kernel: no cpu kernel registered", "registered: none", "check has() first"});
  k.add(Device::CPU, &probe::scale_cpu, "first.cpp");
  EXPECT_TRUE(k.has(Device::CPU));
  probe::calls = 0;
  k(Device::CPU, x, y, 2.0);
  EXPECT_EQ(probe::calls, 1);
  EXPECT_EQ(y.at(2), 6.0);
  expect_error([&] { k(Device::CPU, x, y, -1.0); }, {"probe_kernel: a must be >= 0, got -1"});
  EXPECT_EQ(probe::calls, 1) << "the kernel ran although its arguments were refused";
  expect_error([&] { k.add(Device::CPU, &probe::scale_cpu, "second.cpp"); },
               {"probe_kernel: a second cpu kernel registered by second.cpp", "the first: first.cpp"});
  k(Device::CPU, x, y, 1.0);  // still the first one
  EXPECT_EQ(probe::calls, 2);
#ifdef CTXLAB_WITH_CUDA
  EXPECT_FALSE(k.has(Device::CUDA));  // the CUDA module is loaded to answer: nothing of this slot's in it
  expect_error([&] { k(Device::CUDA, x, y, 1.0); }, {"probe_kernel: no cuda kernel registered", "registered: cpu"});
#endif
}

// The encodings' kernels are registered by their owners, per device, and their argument checks
// (written once, autograd/kernels/*.cpp) give every device the same messages.
TEST(DeviceCore, TheEncodingsKernelsAreRegisteredPerDevice) {
  EXPECT_TRUE(kernels::gru_cell_forward.has(Device::CPU));
  EXPECT_TRUE(kernels::gru_cell_backward.has(Device::CPU));
  EXPECT_TRUE(kernels::gru_sequence_forward.has(Device::CPU));
  EXPECT_TRUE(kernels::gru_sequence_backward.has(Device::CPU));
  EXPECT_TRUE(kernels::ode_rk4_forward.has(Device::CPU));
  EXPECT_TRUE(kernels::ode_rk4_backward.has(Device::CPU));
  for (Device d : {Device::CPU
#ifdef CTXLAB_WITH_CUDA
                   , Device::CUDA
#endif
       }) {
    EXPECT_TRUE(kernels::fire_distances.has(d)) << device_name(d);
    EXPECT_TRUE(kernels::cope_forward.has(d)) << device_name(d);
    EXPECT_TRUE(kernels::cope_backward.has(d)) << device_name(d);
  }
#ifdef CTXLAB_WITH_CUDA
  EXPECT_TRUE(kernels::gru_cell_forward.has(Device::CUDA));  // registered as libctxlab_cuda.so loads
  EXPECT_TRUE(kernels::gru_cell_backward.has(Device::CUDA));
  EXPECT_FALSE(kernels::gru_sequence_forward.has(Device::CUDA));  // the per-step loop there (ops_gru.cpp)
  EXPECT_FALSE(kernels::gru_sequence_backward.has(Device::CUDA));
  EXPECT_FALSE(kernels::ode_rk4_forward.has(Device::CUDA));  // not written: ops_ode.cpp composes there
  EXPECT_FALSE(kernels::ode_rk4_backward.has(Device::CUDA));
#endif
  const Tensor hp = Tensor::zeros({2, 3}, DType::F32), xg = Tensor::zeros({2, 9}, DType::F32),
               bhn = Tensor::zeros({3}, DType::F32), bad = Tensor::zeros({2, 8}, DType::F32);
  Tensor h = Tensor::zeros({2, 3}, DType::F32), rzn = Tensor::zeros({2, 9}, DType::F32),
         hn = Tensor::zeros({2, 3}, DType::F32);
  expect_error([&] { kernels::gru_cell_forward(Device::CPU, bad, xg, bhn, hp, h, rzn, hn); },
               {"gru_cell_forward: xg must be f32[2, 9] on cpu", "f32[2, 8]"});
  {  // the sequence kernels: T 4, B 2, H 3 (hn sets them)
    const Tensor wh = Tensor::zeros({9, 3}, DType::F32), seq_xg = Tensor::zeros({4, 2, 9}, DType::F32),
                 gy = Tensor::zeros({4, 2, 3}, DType::F32);
    Tensor Hs = Tensor::zeros({5, 2, 3}, DType::F32), short_hs = Tensor::zeros({4, 2, 3}, DType::F32),
           seq_rzn = Tensor::zeros({4, 2, 9}, DType::F32), seq_hn = Tensor::zeros({4, 2, 3}, DType::F32),
           f64_hn = Tensor::zeros({4, 2, 3}, DType::F64), d = Tensor::zeros({4, 2, 9}, DType::F32);
    expect_error([&] { kernels::gru_sequence_forward(Device::CPU, seq_xg, wh, bhn, short_hs, seq_rzn, seq_hn); },
                 {"gru_sequence_forward: Hs must be f32[5, 2, 3] on cpu", "got f32[4, 2, 3]"});
    expect_error([&] { kernels::gru_sequence_backward(Device::CPU, gy, wh, Hs, seq_rzn, f64_hn, d, d); },
                 {"gru_sequence_backward: gy must be f64[4, 2, 3]", "got f32[4, 2, 3]"});
    expect_error([&] { kernels::gru_sequence_backward(Device::CPU, gy, wh, Hs, seq_rzn, hp, d, d); },
                 {"gru_sequence_backward: hn must be f32 or f64 [T, B, H]", "got f32[2, 3]"});
  }
  const Tensor p0 = Tensor::zeros({4}, DType::F32), w1 = Tensor::zeros({3, 4}, DType::F32),
               f = Tensor::zeros({3}, DType::F32), w2 = Tensor::zeros({4, 3}, DType::F32);
  Tensor P = Tensor::zeros({3, 4}, DType::F32), Pt = Tensor::zeros({16, 4}, DType::F32),
         U = Tensor::zeros({16, 3}, DType::F32);
  expect_error([&] { kernels::ode_rk4_forward(Device::CPU, p0, w1, f, f, w2, p0, 0.1, 3, P, Pt, U); },
               {"ode_rk4_forward: Pt / GK must be f32[24, 4] on cpu", "f32[16, 4]"});
  expect_error([&] { kernels::ode_rk4_forward(Device::CPU, p0, w1, f, f, w2, p0, 0.0, 2, P, Pt, U); },
               {"ode_rk4_forward: need dt > 0"});
#ifdef CTXLAB_WITH_CUDA
  expect_error([&] { kernels::gru_cell_forward(Device::CUDA, xg, xg, bhn, hp, h, rzn, hn); },
               {"gru_cell_forward: tensor f32[2, 9] is on cpu, expected cuda"});
#endif
}

TEST(DeviceCore, CpuFusedMethodsCheckTheirArguments) {
  Backend& be = backend(Device::CPU);
  Tensor x = Tensor::zeros({2, 3, 4}, DType::F32), c = Tensor::zeros({3, 3}, DType::F32), y = Tensor::zeros({2, 3, 4});
  expect_error([&] { be.rope_rotate(x, c, c, y, false, false); }, {"rope_rotate", "[3, 2]", "f32[3, 3]"});
  Tensor qkv = Tensor::zeros({2, 5, 12}, DType::F32), q = Tensor::zeros({2, 2, 5, 3});
  expect_error([&] { be.split_heads(qkv, 2, 0, q, q, q); }, {"split_heads", "q must be f32[2, 2, 5, 2]", "f32[2, 2, 5, 3]"});
  Tensor p = Tensor::zeros({8}, DType::F32), n = Tensor::zeros({1}, DType::F32);
  expect_error([&] { be.sum_squares(p, {{0, 8, false}}, n); }, {"sum_squares", "one f64 element", "f32[1]"});
  expect_error([&] { be.adamw_flat(p, p, p, p, {{4, 9, true}}, AdamWHyper{}, Tensor()); },
               {"adamw_flat", "chunk [4, 9)", "f32[8]"});
}

TEST(DeviceCore, SumSquaresAndAdamWFlatOverChunksOnly) {
  Backend& be = backend(Device::CPU);
  Tensor g = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {6});
  Tensor out = Tensor::zeros({1}, DType::F64);
  be.sum_squares(g, {{0, 2, false}, {4, 6, true}}, out);  // 1 + 4 + 25 + 36
  EXPECT_EQ(out.item(), 66.0);
  // elements outside the chunks are not touched; clipping by norm_sq equals an explicit scale
  Tensor p1 = Tensor::full({6}, 1.0, DType::F64), m1 = Tensor::zeros({6}, DType::F64), v1 = Tensor::zeros({6}, DType::F64);
  Tensor p2 = p1.clone(), m2 = m1.clone(), v2 = v1.clone();
  AdamWHyper h;
  h.max_norm = 2.0;
  be.adamw_flat(p1, g, m1, v1, {{0, 2, false}, {4, 6, true}}, h, out);
  AdamWHyper h2;
  h2.grad_scale = 2.0 / (std::sqrt(66.0) + 1e-6);
  be.adamw_flat(p2, g, m2, v2, {{0, 2, false}, {4, 6, true}}, h2, Tensor());
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(p1.at(i), p2.at(i)) << i;
    EXPECT_EQ(m1.at(i), m2.at(i)) << i;
  }
  EXPECT_EQ(p1.at(2), 1.0);
  EXPECT_EQ(p1.at(3), 1.0);
  EXPECT_NE(p1.at(0), 1.0);
  EXPECT_EQ(m1.at(0), (1.0 - 0.9) * (2.0 / (std::sqrt(66.0) + 1e-6) * 1.0));  // m = (1 - b1) gs g
}

// ---- devices: a device to move to ----
// Without CUDA compiled in, a stand-in allocator makes Device::CUDA memory out of host memory
// (counted), enough for transfers and the host checks (no CUDA backend: no kernels run). With
// CUDA compiled in, the real device is used when one can be allocated (a GPU, or the emulator).
int g_fake_allocs = 0;
struct FakeDevice {
  bool counting = false;
  FakeDevice() {
#ifndef CTXLAB_WITH_CUDA
    DeviceAllocator a;
    a.alloc = [](size_t n, Arena) -> void* { ++g_fake_allocs; return std::malloc(n); };
    a.free = [](void* p, size_t, Arena) { std::free(p); };
    a.copy = [](void* d, Device, const void* s, Device, size_t n) { std::memcpy(d, s, n); };
    register_device_allocator(Device::CUDA, a);
    counting = true;
#endif
  }
  ~FakeDevice() {
#ifndef CTXLAB_WITH_CUDA
    register_device_allocator(Device::CUDA, DeviceAllocator{});
#endif
  }
  // Whether there is a device: always without CUDA (the stand-in), else the probe's answer (a GPU,
  // or the emulator); where it says yes, device memory must work (a failure is a failure).
  static bool available() {
#ifdef CTXLAB_WITH_CUDA
    return cuda::emulated() || cuda::device_count() > 0;
#else
    return true;
#endif
  }
};

#define NEED_DEVICE()        \
  FakeDevice fake_device;    \
  CTX_SKIP_WITHOUT_GPU(FakeDevice::available())

TEST(DeviceCore, HostReadsOfDeviceMemoryFailNamingTheTensor) {
  NEED_DEVICE();
  Tensor h = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor d = h.to(Device::CUDA);
  EXPECT_EQ(d.device(), Device::CUDA);
  const char* hint = "copy it with .to(Device::CPU) first";
  expect_error([&] { d.host<float>(); }, {"Tensor::host", "f32[2, 3] is on cuda", hint});
  expect_error([&] { d.at(0); }, {"Tensor::at", "f32[2, 3] is on cuda", hint});
  expect_error([&] { d.view({6}).select0(0).item(); }, {"Tensor::item", "is on cuda"});
  expect_error([&] { d.to_vector<float>(); }, {"Tensor::to_vector", "is on cuda"});
  expect_error([&] { d.set(0, 1.0); }, {"Tensor::set", "is on cuda"});
  // round trip, and to_host / to_device_like
  Tensor back = d.to(Device::CPU);
  EXPECT_EQ(back.to_vector<float>(), h.to_vector<float>());
  EXPECT_EQ(to_host(d).to_vector<float>(), h.to_vector<float>());
  EXPECT_EQ(to_device_like(h, d).device(), Device::CUDA);
  EXPECT_EQ(to_host(to_device_like(h, d)).to_vector<float>(), h.to_vector<float>());
  expect_error([&] { to_device_like(d, h); }, {"to_device_like", "f32[2, 3]", "built on the cpu"});
}

TEST(DeviceCore, ToDeviceLikeAndToHostDoNotCopyOnTheCpu) {
  Tensor h = Tensor::from_vector<double>({1, 2}, {2});
  Tensor like = Tensor::zeros({3}, DType::F32);
  EXPECT_EQ(to_device_like(h, like).storage(), h.storage());
  EXPECT_EQ(to_host(h).storage(), h.storage());
}

// device_table: a constant table is uploaded once per distinct content and served again, from
// the Table arena, with its values; other content, dtype or shape is another table; a written
// copy is never served again; on the CPU the table itself.
TEST(DeviceCore, DeviceTableUploadsEachDistinctTableOnce) {
  NEED_DEVICE();
  clear_table_cache();
  const Tensor like = Tensor::empty({1}, DType::F32, Device::CUDA);  // no kernel: the stand-in device has none
  auto table = [](std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(v, {(int64_t)v.size()}); };
  const TableCacheStats s0 = table_cache_stats();
  Tensor a = device_table(table({0, 1, 2, 3}), like);
  EXPECT_EQ(a.device(), Device::CUDA);
  EXPECT_EQ(a.storage()->arena, Arena::Table);
  EXPECT_EQ(host_values(a).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(to_host(a).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3})) << "the device bytes";
  Tensor a2 = device_table(table({0, 1, 2, 3}), like);  // built afresh, same bytes
  EXPECT_EQ(a2.storage(), a.storage()) << "the same table was uploaded twice";
  Tensor b = device_table(table({0, 1, 2, 4}), like);
  EXPECT_NE(b.storage(), a.storage()) << "a different table was served the kept one";
  EXPECT_EQ(to_host(b).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 4}));
  Tensor c = device_table(Tensor::from_vector<int64_t>({0, 1, 2, 3}, {2, 2}), like);  // other shape
  EXPECT_NE(c.storage(), a.storage());
  Tensor f = device_table(Tensor::from_vector<double>({0, 1}, {2}), like);  // other dtype, same length
  EXPECT_EQ(f.dtype(), DType::F64);
  TableCacheStats s1 = table_cache_stats();
  EXPECT_EQ(s1.uploads - s0.uploads, 4u);
  EXPECT_EQ(s1.hits - s0.hits, 1u);
  // a mutable access to a served copy (it may have been written): the next call uploads afresh
  a2.raw();
  Tensor a3 = device_table(table({0, 1, 2, 3}), like);
  EXPECT_NE(a3.storage(), a.storage()) << "a copy that may have been written was served";
  EXPECT_EQ(table_cache_stats().uploads - s1.uploads, 1u);
  // on the cpu: the host table itself, nothing kept
  Tensor h = table({5, 6});
  EXPECT_EQ(device_table(h, Tensor::zeros({1})).storage(), h.storage());
  expect_error([&] { device_table(a, like); }, {"device_table", "built on the cpu"});
  // bounded: past 256 tables the least recently used go, and the kept bytes follow
  clear_table_cache();
  const TableCacheStats s2 = table_cache_stats();
  for (int64_t i = 0; i < 300; ++i) device_table(table({i}), like);
  EXPECT_EQ(table_cache_stats().entries, 256);
  EXPECT_EQ(table_cache_stats().evictions - s2.evictions, 44u);
  EXPECT_EQ(table_cache_stats().bytes, 256u * sizeof(int64_t));
  EXPECT_EQ(device_table(table({299}), like).storage(), device_table(table({299}), like).storage());
  const uint64_t up = table_cache_stats().uploads;
  device_table(table({0}), like);  // evicted: uploaded again
  EXPECT_EQ(table_cache_stats().uploads, up + 1);
  clear_table_cache();
  EXPECT_EQ(table_cache_stats().entries, 0);
  EXPECT_EQ(table_cache_stats().bytes, 0u);
}

TEST(DeviceCore, ModuleToMovesEveryParameterOnceKeepingNamesAndTies) {
  NEED_DEVICE();
  // one child registered under two names: its parameter is shared by "a.w" and "b.w"
  nn::Module root;
  auto child = std::make_shared<nn::Module>();
  child->register_parameter("w", Tensor::from_vector<float>({1, 2, 3}, {3}));
  root.register_parameter("own", Tensor::from_vector<float>({4, 5}, {2}));
  root.register_module("a", child);
  root.register_module("b", child);
  const nn::NamedParams before = root.named_parameters();
  ASSERT_EQ(before.size(), 3u);
  g_fake_allocs = 0;
  root.to(Device::CUDA);
  const nn::NamedParams after = root.named_parameters();
  ASSERT_EQ(after.size(), 3u);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].first, before[i].first);
    EXPECT_EQ(after[i].second.impl(), before[i].second.impl()) << after[i].first;  // same Variables
    EXPECT_EQ(after[i].second.device(), Device::CUDA) << after[i].first;
  }
  EXPECT_EQ(after[1].second.data().storage(), after[2].second.data().storage()) << "the tie was broken";
  if (fake_device.counting) {
    EXPECT_EQ(g_fake_allocs, 2) << "each Variable moved once";
    g_fake_allocs = 0;
    root.to(Device::CUDA);
    EXPECT_EQ(g_fake_allocs, 0) << "parameters already on the device were copied";
  }
  root.to(Device::CPU);
  EXPECT_EQ(root.named_parameters()[1].second.data().to_vector<float>(), (std::vector<float>{1, 2, 3}));

  // a whole model: every parameter, and Transformer-XL's segment memory, follow
  nn::GPT m(tiny_cfg({{"type", "xl"}, {"mem_len", 4}}));
  m.init_weights(1);
  Tensor in = Tensor::zeros({1, 5}, DType::I64);
  {
    NoGradGuard ng;
    m.forward(in, 0, true);  // leaves memory in every layer
  }
  ASSERT_TRUE(m.memory_state()[0].defined());
  m.to(Device::CUDA);
  for (auto& [name, p] : m.named_parameters()) EXPECT_EQ(p.device(), Device::CUDA) << name;
  for (const Tensor& mem : m.memory_state()) EXPECT_EQ(mem.device(), Device::CUDA);
  m.to(Device::CPU);
  for (auto& [name, p] : m.named_parameters()) EXPECT_EQ(p.device(), Device::CPU) << name;
}

// ---- settings ----

TEST(Settings, EveryVariableIsInTheTableAndDocumented) {
  const auto& t = settings();
  EXPECT_EQ(t.size(), 35u);
  std::ifstream f(std::string(CTXLAB_SOURCE_DIR) + "/docs/settings.md");
  ASSERT_TRUE(f.good()) << "docs/settings.md is missing";
  std::stringstream doc;
  doc << f.rdbuf();
  const std::string help = settings_help();
  for (const Setting& s : t) {
    SCOPED_TRACE(s.name);
    EXPECT_EQ(std::string(s.name).rfind("CTXLAB_", 0), 0u);
    EXPECT_GT(std::strlen(s.default_value), 0u);
    EXPECT_GT(std::strlen(s.values), 0u);
    EXPECT_GT(std::strlen(s.meaning), 0u);
    EXPECT_NE(doc.str().find(std::string("| `") + s.name + "` |"), std::string::npos) << "not in docs/settings.md";
    EXPECT_NE(help.find(s.name), std::string::npos) << "not in --help";
    std::ifstream src(std::string(CTXLAB_SOURCE_DIR) + "/" + s.read_by);
    std::stringstream code;
    code << src.rdbuf();
    EXPECT_NE(code.str().find(std::string("\"") + s.name + "\""), std::string::npos)
        << s.read_by << " does not read it";
  }
}

TEST(Settings, UnknownNamesAreRefused) {
  expect_error([] { setting_env("CTXLAB_NO_SUCH_SETTING"); }, {"setting_env", "CTXLAB_NO_SUCH_SETTING", "table"});
  FastPathSwitch bad("CTXLAB_NOT_A_SWITCH");
  expect_error([&] { (void)bad.enabled(); }, {"CTXLAB_NOT_A_SWITCH"});
  ::setenv("CTXLAB_GELU", "", 1);  // empty reads as unset
  EXPECT_EQ(setting_env("CTXLAB_GELU"), nullptr);
  ::unsetenv("CTXLAB_GELU");
}

// A 0 | 1 switch takes 0 or 1: "off" or "false" is an error naming the variable, not "on" (the old
// reading was "anything but 0 is 1", so CTXLAB_BF16_ATTENTION=false turned the opt-in path on).
TEST(Settings, SwitchesTakeZeroOrOneOnly) {
  for (const char* bad : {"off", "false", "2", "yes"}) {
    ::setenv("CTXLAB_FUSED_ODE", bad, 1);
    FastPathSwitch sw("CTXLAB_FUSED_ODE");
    expect_error([&] { (void)sw.enabled(); }, {"CTXLAB_FUSED_ODE", bad, "expected 0 or 1"});
    expect_error([] { check_setting_flags(); }, {"CTXLAB_FUSED_ODE", "expected 0 or 1"});
  }
  ::setenv("CTXLAB_FUSED_ODE", "0", 1);
  EXPECT_FALSE(FastPathSwitch("CTXLAB_FUSED_ODE").enabled());
  ::setenv("CTXLAB_FUSED_ODE", "1", 1);
  EXPECT_TRUE(FastPathSwitch("CTXLAB_FUSED_ODE", /*default_on=*/false).enabled());
  ::unsetenv("CTXLAB_FUSED_ODE");
  EXPECT_TRUE(FastPathSwitch("CTXLAB_FUSED_ODE").enabled());
  EXPECT_FALSE(FastPathSwitch("CTXLAB_FUSED_ODE", /*default_on=*/false).enabled());
  check_setting_flags();  // nothing set: no error
}

}  // namespace
}  // namespace ctx
