// posenc/content.cpp — content-position encodings (POSENC_SPEC §4), each owning the terms hook:
//   shaw     per-layer relative key / value tables rel_k, rel_v [2K+1, d]
//   xl       Transformer-XL: shared u, v [H, d], per-layer r_net [D, D] over concatenated sinusoids
//   deberta  DeBERTa-v2 disentangled c2p + p2c over a shared, LayerNormed log-bucket table
//   tupe     TUPE-R: untied LayerNormed position projections plus a T5 relative bias
// Relative terms are computed once per relative index r (x @ table^T: [B, H, N, R]) and handed
// to attention as RelTerms with an i32 [T, S] index table (autograd/ops_attention.h): the fused
// kernel gathers from them inside its tiles, the general path through index_select. Their
// backward scatters into the R columns, so indices no (i, j) reaches get exactly zero gradient.
// Positions: query row i sits at qi = q_pos0 + i, key j at j (S = q_pos0 + T with memory).
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "core/device_table.h"  // device_table
#include "core/rng.h"
#include "posenc/posenc.h"

namespace ctx {

namespace posenc_detail {
// DeBERTa-v2 log bucket of a signed relative position x (float32, POSENC_SPEC §4); exposed for
// tests/test_posenc_content.cpp.
int64_t deberta_bucket(int64_t x, int64_t position_buckets, int64_t max_relative_positions) {
  const int64_t mid = position_buckets / 2;
  const int64_t ax = x < 0 ? -x : x;
  if (ax <= mid) return x;
  const float r = (float)ax / (float)mid;
  const float v =
      logf(r) / logf((float)(max_relative_positions - 1) / (float)mid) * (float)(mid - 1);
  const int64_t b = mid + (int64_t)std::ceil(v);
  return x < 0 ? -b : b;
}
}  // namespace posenc_detail

namespace {

// ---- parameters --------------------------------------------------------------------------

// Registers a child module `name` under m holding one parameter per (name, shape) pair.
std::shared_ptr<nn::Module> add_child(nn::Module& m, const std::string& name) {
  return m.register_module(name, std::make_shared<nn::Module>());
}
Variable param(nn::Module& m, const std::string& name, const Shape& shape) {
  return m.register_parameter(name, Tensor::zeros(shape, DType::F32));
}
void fill_const(Variable& v, double x) { backend_of(v.data()).fill(v.data(), x); }

// ---- index tables ----------------------------------------------------------------------------

// i32 [T, S] with idx[i, j] = fn(i, j) for query row i and key j, on q's device, cached per
// (T, S, q_pos0, device): every layer of one forward reuses the table. Built on the host and
// kept on the device (device_table).
class IndexCache {
 public:
  const Tensor& get(const AttnState& st, const std::function<int64_t(int64_t, int64_t)>& fn) {
    const Device dev = st.q.device();
    if (!t_.defined() || T_ != st.T || S_ != st.S || p0_ != st.q_pos0 || t_.device() != dev) {
      Tensor h = Tensor::empty({st.T, st.S}, DType::I32);
      int32_t* ip = h.host<int32_t>();
      for (int64_t i = 0; i < st.T; ++i)
        for (int64_t j = 0; j < st.S; ++j) ip[i * st.S + j] = (int32_t)fn(i, j);
      t_ = device_table(h, st.q.data());
      T_ = st.T, S_ = st.S, p0_ = st.q_pos0;
    }
    return t_;
  }

 private:
  Tensor t_;
  int64_t T_ = -1, S_ = -1, p0_ = -1;
};

// A projected table t: [R, H*d] -> per head [B, H, R, d] (B = 1: no expansion).
Variable split_heads(const Variable& t, int64_t B, int64_t H) {
  const int64_t R = t.size(0), d = t.size(1) / H;
  Variable h = reshape(permute(reshape(t, {R, H, d}), {1, 0, 2}), {1, H, R, d});
  return B == 1 ? h : expand(h, {B, H, R, d});
}

// A fixed float32 table (built on the host) converted to like's dtype, on like's device.
Variable fixed_table(const Tensor& f32, const Variable& like) {
  return Variable(device_table(like.dtype() == DType::F32 ? f32 : f32.to(like.dtype()), like.data()), false);
}

// ---- shaw ------------------------------------------------------------------------------------
// logits_ij = scale (q_i . k_j + q_i . rel_k[r]);  o_i = sum_j p_ij (v_j + rel_v[r]),
// r = clip(j - qi, -K, K) + K
class Shaw final : public PositionalEncoding {
 public:
  Shaw(const ModelConfig& c, int64_t K) : K_(K) {
    for (int l = 0; l < c.n_layers; ++l) {
      Layer L;
      L.mod = std::make_shared<nn::Module>();
      L.rel_k = param(*L.mod, "rel_k", {2 * K + 1, c.head_dim()});
      L.rel_v = param(*L.mod, "rel_v", {2 * K + 1, c.head_dim()});
      layers_.push_back(L);
    }
  }
  std::string type() const override { return "shaw"; }
  std::shared_ptr<nn::Module> layer_module(int l) override { return layers_.at(l).mod; }
  void init_parameters(Rng& rng) override {
    for (auto& L : layers_) {
      rng.fill_normal(L.rel_k.data(), 0.0, 0.02);
      rng.fill_normal(L.rel_v.data(), 0.0, 0.02);
    }
  }
  bool fused_attention_ok(const AttnState&) const override { return true; }

  ScoreTerms terms(AttnState& st) override {
    const Layer& L = layers_.at(st.layer);
    ScoreTerms t = PositionalEncoding::terms(st);
    const int64_t K = K_, p0 = st.q_pos0;
    t.rel.qidx = idx_.get(st, [=](int64_t i, int64_t j) {  // key minus query, clipped
      return std::min(std::max(j - (p0 + i), -K), K) + K;
    });
    t.rel.qrel = matmul(st.q, L.rel_k, false, true);  // [B, H, T, 2K+1]
    t.rel.vrel = L.rel_v;                             // [2K+1, Dh]
    return t;
  }

 private:
  struct Layer {
    std::shared_ptr<nn::Module> mod;
    Variable rel_k, rel_v;  // [2K+1, Dh]
  };
  int64_t K_;
  std::vector<Layer> layers_;
  IndexCache idx_;
};

// ---- xl ---------------------------------------------------------------------------------------
// logits_ij = scale ((q_i + u) . k_j + (q_i + v) . W_R R[qi - j]) (per head); masked entries
// (j > qi) read distance 0
class XL final : public PositionalEncoding {
 public:
  XL(const ModelConfig& c, int64_t mem_len) : H_(c.n_heads), D_(c.d_model), mem_len_(mem_len) {
    shared_ = std::make_shared<nn::Module>();
    u_ = param(*shared_, "r_w_bias", {H_, c.head_dim()});
    v_ = param(*shared_, "r_r_bias", {H_, c.head_dim()});
    for (int l = 0; l < c.n_layers; ++l) {
      auto m = std::make_shared<nn::Module>();
      r_net_.push_back(param(*add_child(*m, "r_net"), "weight", {D_, D_}));
      layers_.push_back(m);
    }
  }
  std::string type() const override { return "xl"; }
  int64_t memory_length() const override { return mem_len_; }
  std::shared_ptr<nn::Module> shared_module() override { return shared_; }
  std::shared_ptr<nn::Module> layer_module(int l) override { return layers_.at(l); }
  void init_parameters(Rng& rng) override {
    rng.fill_normal(u_.data(), 0.0, 0.02);
    rng.fill_normal(v_.data(), 0.0, 0.02);
    for (auto& w : r_net_) rng.fill_normal(w.data(), 0.0, 0.02);
  }
  bool fused_attention_ok(const AttnState&) const override { return true; }
  std::unique_ptr<PosencDecodeState> begin_decode(int64_t capacity) override {
    auto s = std::make_unique<Decode>();
    s->capacity = capacity;
    s->wr.resize(r_net_.size());
    return s;
  }

  ScoreTerms terms(AttnState& st) override {
    const int64_t B = st.B, H = st.H, Dh = st.Dh, nR = st.q_pos0 + st.T;  // distances 0..nR-1
    ScoreTerms t = PositionalEncoding::terms(st);
    t.q = add(st.q, reshape(u_, {1, H, 1, Dh}));  // content query q + u
    Variable wr = projected_sinusoids(st, nR);  // [nR, D] = R W^T
    t.rel.qrel = matmul(add(st.q, reshape(v_, {1, H, 1, Dh})), split_heads(wr, B, H), false,
                        true);  // [B, H, T, nR]
    const int64_t p0 = st.q_pos0;
    t.rel.qidx = idx_.get(st, [=](int64_t i, int64_t j) { return std::max<int64_t>(p0 + i - j, 0); });
    return t;
  }

 private:
  // Decoding: R W^T of each layer for all `capacity` distances, projected once per generation
  // instead of once per token (row r is the same whatever nR; rows 0..nR-1 are sliced).
  struct Decode : PosencDecodeState {
    int64_t capacity = 0;
    std::vector<Variable> wr;  // per layer [capacity, D]
  };
  Variable projected_sinusoids(const AttnState& st, int64_t nR) const {
    auto* d = dynamic_cast<Decode*>(st.decode);
    if (!d) return matmul(fixed_table(sinusoids(nR), st.q), r_net_.at(st.layer), false, true);
    CTX_CHECK(nR <= d->capacity, "posenc xl: decoding reached distance ", nR, " beyond the cache capacity ",
              d->capacity);
    Variable& w = d->wr.at((size_t)st.layer);
    if (!w.defined()) w = matmul(fixed_table(sinusoids(d->capacity), st.q), r_net_.at(st.layer), false, true);
    return nR == d->capacity ? w : slice(w, 0, 0, nR);
  }
  // R [n, D] (float32): [sin(r w_0..w_{D/2-1}), cos(r w_0..)], w_k = 1 / 10000^(2k/D)
  Tensor sinusoids(int64_t n) const {
    Tensor t = Tensor::empty({n, D_}, DType::F32);
    float* p = t.host<float>();
    const int64_t half = D_ / 2;
    for (int64_t k = 0; k < half; ++k) {
      const float w = 1.0f / powf(10000.0f, (float)(2 * k) / (float)D_);
      for (int64_t r = 0; r < n; ++r) {
        const float ang = (float)r * w;
        p[r * D_ + k] = (float)std::sin((double)ang);
        p[r * D_ + half + k] = (float)std::cos((double)ang);
      }
    }
    return t;
  }
  int64_t H_, D_;
  std::shared_ptr<nn::Module> shared_;
  Variable u_, v_;  // [H, Dh]
  std::vector<std::shared_ptr<nn::Module>> layers_;
  std::vector<Variable> r_net_;  // [D, D] per layer
  IndexCache idx_;
  int64_t mem_len_ = 0;
};

// ---- deberta ----------------------------------------------------------------------------------
// logits_ij = (q_i . k_j + q_i . Kr[delta] + k_j . Qr[delta]) / sqrt(3 Dh), delta the bucketed
// qi - j; Qr, Kr: the LayerNormed table projected by the layer's own q / k weights
class DeBERTa final : public PositionalEncoding {
 public:
  DeBERTa(const ModelConfig& c, int64_t A, int64_t M)
      : A_(A), M_(M), D_(c.d_model), n_layers_(c.n_layers), eps_(c.norm_eps) {
    shared_ = std::make_shared<nn::Module>();
    emb_ = param(*add_child(*shared_, "rel_embeddings"), "weight", {2 * A, D_});
    auto norm = add_child(*shared_, "rel_norm");
    norm_w_ = param(*norm, "weight", {D_});
    norm_b_ = param(*norm, "bias", {D_});
  }
  std::string type() const override { return "deberta"; }
  std::shared_ptr<nn::Module> shared_module() override { return shared_; }
  void init_parameters(Rng& rng) override {
    rng.fill_normal(emb_.data(), 0.0, 0.02);
    fill_const(norm_w_, 1.0);
    fill_const(norm_b_, 0.0);
  }
  bool fused_attention_ok(const AttnState&) const override { return true; }
  bool terms_read_keys() const override { return true; }  // the p2c term: k . Qr
  std::unique_ptr<PosencDecodeState> begin_decode(int64_t) override {
    auto d = std::make_unique<Decode>();
    d->qr.resize((size_t)n_layers_);
    d->kr.resize((size_t)n_layers_);
    return d;
  }

  ScoreTerms terms(AttnState& st) override {
    CTX_CHECK(st.qkv_weight.defined(), "posenc deberta: attention did not pass its qkv projection");
    const int64_t B = st.B, H = st.H, D = D_, R = 2 * A_;
    auto project = [&](int64_t part) {  // rows part*D.. of attn.qkv (weight and bias)
      Variable rel = layer_norm(emb_, norm_w_, norm_b_, eps_);  // [2A, D]
      Variable w = slice(st.qkv_weight, 0, part * D, (part + 1) * D);
      Variable b =
          st.qkv_bias.defined() ? slice(st.qkv_bias, 0, part * D, (part + 1) * D) : Variable();
      return split_heads(linear(rel, w, b), B, H);  // [B, H, 2A, Dh]
    };
    // decoding: each layer's projections once per generation (they depend on no position)
    auto* dec = dynamic_cast<Decode*>(st.decode);
    Variable qr, kr;
    if (dec && dec->qr.at((size_t)st.layer).defined() && dec->qr[(size_t)st.layer].size(0) == B) {
      qr = dec->qr[(size_t)st.layer];
      kr = dec->kr[(size_t)st.layer];
    } else {
      qr = project(0), kr = project(1);
      if (dec) dec->qr.at((size_t)st.layer) = qr, dec->kr.at((size_t)st.layer) = kr;
    }
    const int64_t A = A_, M = M_, p0 = st.q_pos0;
    ScoreTerms t = PositionalEncoding::terms(st);
    t.scale = 1.0 / std::sqrt(3.0 * (double)st.Dh);
    t.rel.qidx = idx_.get(st, [=](int64_t i, int64_t j) {
      return std::min(std::max(posenc_detail::deberta_bucket(p0 + i - j, A, M) + A, int64_t(0)),
                      R - 1);
    });
    t.rel.kidx = t.rel.qidx;
    t.rel.qrel = matmul(st.q, kr, false, true);  // c2p: q_i . Kr[delta]  [B, H, T, 2A]
    t.rel.krel = matmul(st.k, qr, false, true);  // p2c: k_j . Qr[delta]  [B, H, S, 2A]  (terms_read_keys)
    return t;
  }

 private:
  struct Decode : PosencDecodeState {
    std::vector<Variable> qr, kr;  // per layer [B, H, 2A, Dh]
  };
  int64_t A_, M_, D_, n_layers_;
  double eps_;
  std::shared_ptr<nn::Module> shared_;
  Variable emb_, norm_w_, norm_b_;  // [2A, D], [D], [D]
  IndexCache idx_;
};

// ---- tupe -------------------------------------------------------------------------------------
// logits_ij = (q_i . k_j + uq_i . uk_j) / sqrt(2 Dh) + rel_bias[bucket(qi - j), h]: the position
// part is shared by the batch, so it is one [1, H, T, S] bias
class TUPE final : public PositionalEncoding {
 public:
  static constexpr int64_t kBuckets = 32, kMaxDistance = 128;
  explicit TUPE(const ModelConfig& c) : L_(c.context), D_(c.d_model), eps_(c.norm_eps) {
    shared_ = std::make_shared<nn::Module>();
    pos_emb_ = param(*add_child(*shared_, "pos_emb"), "weight", {L_, D_});
    auto norm = add_child(*shared_, "pos_norm");
    norm_w_ = param(*norm, "weight", {D_});
    norm_b_ = param(*norm, "bias", {D_});
    auto proj = add_child(*shared_, "pos_proj");
    proj_w_ = param(*proj, "weight", {2 * D_, D_});
    proj_b_ = param(*proj, "bias", {2 * D_});
    rel_bias_ = param(*add_child(*shared_, "rel_bias"), "weight", {kBuckets, c.n_heads});
  }
  std::string type() const override { return "tupe"; }
  std::shared_ptr<nn::Module> shared_module() override { return shared_; }
  void init_parameters(Rng& rng) override {
    rng.fill_normal(pos_emb_.data(), 0.0, 0.02);
    fill_const(norm_w_, 1.0);
    fill_const(norm_b_, 0.0);
    rng.fill_normal(proj_w_.data(), 0.0, 0.02);
    fill_const(proj_b_, 0.0);
    rng.fill_normal(rel_bias_.data(), 0.0, 0.02);
  }
  int64_t max_length() const override { return L_; }
  std::unique_ptr<PosencDecodeState> begin_decode(int64_t) override { return std::make_unique<Decode>(); }
  void check_length(int64_t n) const override {
    CTX_CHECK(n <= L_, "posenc tupe: sequence of ", n,
              " positions is longer than the position "
              "table (context L = ",
              L_, "); tupe cannot encode positions beyond L");
  }
  bool fused_attention_ok(const AttnState&) const override { return true; }

  ScoreTerms terms(AttnState& st) override {
    check_length(st.S);
    const int64_t H = st.H, D = D_, T = st.T, S = st.S, p0 = st.q_pos0;
    Variable u = projected_positions(st, S);                                    // [S, 2D]
    Variable uq = split_heads(slice(slice(u, 0, p0, p0 + T), 1, 0, D), 1, H);   // [1, H, T, Dh]
    Variable uk = split_heads(slice(u, 1, D, 2 * D), 1, H);                     // [1, H, S, Dh]
    const Tensor& bucket = idx_.get(st, [=](int64_t i, int64_t j) {
      return posenc_t5_bucket(std::max<int64_t>(p0 + i - j, 0), kBuckets, kMaxDistance);
    });
    Variable rel = reshape(index_select(transpose(rel_bias_, 0, 1), 1, bucket.view({T * S})),
                           {1, H, T, S});  // rel_bias[bucket, h]
    ScoreTerms t = PositionalEncoding::terms(st);
    t.scale = 1.0 / std::sqrt(2.0 * (double)st.Dh);
    t.bias = add(scale(matmul(uq, uk, false, true), t.scale), rel);  // [1, H, T, S]
    return t;
  }

 private:
  // u = pos_proj(LayerNorm(pos_emb[0:S])) [S, 2D]; row-wise, so decoding projects all L rows
  // once per generation (shared by the layers) and slices the first S.
  struct Decode : PosencDecodeState {
    Variable u;  // [L, 2D]
  };
  Variable projected_positions(const AttnState& st, int64_t S) const {
    auto proj = [&](int64_t n) { return linear(layer_norm(slice(pos_emb_, 0, 0, n), norm_w_, norm_b_, eps_), proj_w_, proj_b_); };
    auto* d = dynamic_cast<Decode*>(st.decode);
    if (!d) return proj(S);
    if (!d->u.defined()) d->u = proj(L_);
    return S == L_ ? d->u : slice(d->u, 0, 0, S);
  }
  int64_t L_, D_;
  double eps_;
  std::shared_ptr<nn::Module> shared_;
  Variable pos_emb_, norm_w_, norm_b_, proj_w_, proj_b_, rel_bias_;
  IndexCache idx_;
};

// ---- factories --------------------------------------------------------------------------------
std::unique_ptr<PositionalEncoding> make_shaw(const ModelConfig& c, const nlohmann::json& p,
                                              const std::string& src) {
  posenc_check_keys(p, {"max_relative_position"}, src);
  return std::make_unique<Shaw>(c, posenc_int(p, "max_relative_position", 16, 1, src, "shaw"));
}

std::unique_ptr<PositionalEncoding> make_xl(const ModelConfig& c, const nlohmann::json& p,
                                            const std::string& src) {
  posenc_check_keys(p, {"mem_len"}, src);
  int64_t mem = posenc_int(p, "mem_len", 0, 0, src, "xl");
  CTX_CHECK(c.d_model % 2 == 0, src, ": posenc xl needs an even d_model, got ", c.d_model);
  return std::make_unique<XL>(c, mem);
}

std::unique_ptr<PositionalEncoding> make_deberta(const ModelConfig& c, const nlohmann::json& p,
                                                 const std::string& src) {
  posenc_check_keys(p, {"position_buckets", "max_relative_positions"}, src);
  int64_t A = posenc_int(p, "position_buckets", 32, 4, src, "deberta");
  int64_t M = posenc_int(p, "max_relative_positions", 128, 1, src, "deberta");
  CTX_CHECK(A % 2 == 0, src, ": field 'posenc.position_buckets' must be even, got ", A);
  CTX_CHECK(M - 1 > A / 2, src, ": field 'posenc.max_relative_positions' (", M,
            ") must exceed position_buckets / 2 + 1 (", A / 2 + 1, ")");
  return std::make_unique<DeBERTa>(c, A, M);
}

std::unique_ptr<PositionalEncoding> make_tupe(const ModelConfig& c, const nlohmann::json& p,
                                              const std::string& src) {
  posenc_check_keys(p, {}, src);
  return std::make_unique<TUPE>(c);
}

}  // namespace

// Registered by name as the library loads (posenc/registry.cpp; executables link the whole library).
static PosencRegistrar r1("shaw", make_shaw);
static PosencRegistrar r2("xl", make_xl);
static PosencRegistrar r3("deberta", make_deberta);
static PosencRegistrar r4("tupe", make_tupe);

}  // namespace ctx
