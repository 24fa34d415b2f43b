// posenc/absolute.cpp — absolute encodings added to the token embeddings (POSENC_SPEC §1):
// `none`, `learned` (wpe [L, D], optional hierarchical extension beyond L) and `sinusoidal`
// (fixed, interleaved sin/cos).
#include <cmath>

#include "core/device_table.h"  // device_table
#include "core/rng.h"
#include "posenc/posenc.h"

namespace ctx {
namespace {

class NoPos final : public PositionalEncoding {
 public:
  std::string type() const override { return "none"; }
  bool sinks_ok() const override { return true; }  // the mask only (POSENC_SPEC §6)
  bool explicit_positions_ok() const override { return true; }  // no effect (§7.3)
  bool fused_attention_ok(const AttnState&) const override { return true; }
  std::optional<DecodeTables> decode_tables(int64_t, const Tensor&) override { return DecodeTables{}; }
};

// x [B, T, D] + table [1 or B, T, D] (broadcast over the batch)
Variable add_table(const Variable& x, const Variable& table) { return add(x, table); }

// The positions of an embed call as a [rows, T] list: pos0.. (one row), or explicit ones.
std::vector<int64_t> position_list(int64_t pos0, int64_t T, const Positions* p) {
  if (p) return p->p;
  std::vector<int64_t> v((size_t)T);
  for (int64_t t = 0; t < T; ++t) v[(size_t)t] = pos0 + t;
  return v;
}

class Learned final : public PositionalEncoding {
 public:
  // rows: L, or M with "randomized": M (POSENC_SPEC §7.3: sequences up to M are accepted)
  Learned(const ModelConfig& c, bool hier, int64_t rows) : L_(rows), D_(c.d_model), hier_(hier) {
    mod_ = std::make_shared<nn::Module>();
    wpe_ = mod_->register_parameter("weight", Tensor::zeros({L_, D_}));
  }
  std::string type() const override { return "learned"; }
  bool sinks_ok() const override { return true; }  // the mask only (POSENC_SPEC §6)
  bool explicit_positions_ok() const override { return !hier_; }
  bool fused_attention_ok(const AttnState&) const override { return true; }
  std::string shared_prefix() const override { return "wpe"; }
  std::shared_ptr<nn::Module> shared_module() override { return mod_; }
  void init_parameters(Rng& rng) override { rng.fill_normal(wpe_.data(), 0.0, 0.02); }
  void set_hierarchical(bool h) { hier_ = h; }

  int64_t max_length() const override { return hier_ ? L_ * L_ : L_; }
  void check_length(int64_t n) const override {
    if (!hier_)
      CTX_CHECK(n <= L_, "posenc learned: sequence of ", n, " positions is longer than the learned "
                "table (", L_, " rows: the context L, or M with \"randomized\": M); use a shorter sequence or "
                "\"hierarchical\": true");
    else
      CTX_CHECK(n <= L_ * L_, "posenc learned (hierarchical): sequence of ", n,
                " positions exceeds L^2 = ", L_ * L_);
  }

  Variable embed(const Variable& x, int64_t pos0) override {
    const int64_t T = x.size(1);
    check_length(pos0 + T);
    if (pos0 + T <= L_) return add_table(x, rows_at(position_list(pos0, T, nullptr), 1, T));
    // Hierarchical: u = (wpe - a wpe[0]) / (1 - a); p[q L + r] = a u[q] + (1 - a) u[r]
    const double a = 0.4;
    Variable u = scale(sub(wpe_, scale(slice(wpe_, 0, 0, 1), a)), 1.0 / (1.0 - a));
    Tensor qi = Tensor::empty({T}, DType::I64), ri = Tensor::empty({T}, DType::I64);
    for (int64_t t = 0; t < T; ++t) {
      qi.host<int64_t>()[t] = (pos0 + t) / L_;
      ri.host<int64_t>()[t] = (pos0 + t) % L_;
    }
    qi = device_table(qi, wpe_.data());
    ri = device_table(ri, wpe_.data());
    Variable p = add(scale(index_select(u, 0, qi), a), scale(index_select(u, 0, ri), 1.0 - a));
    return add_table(x, p);
  }
  // the table's first rows, within L (the sampler's cache stops at max_length())
  std::optional<DecodeTables> decode_tables(int64_t capacity, const Tensor&) override {
    if (capacity > L_) return std::nullopt;
    DecodeTables t;
    t.add = wpe_.data().slice0(0, capacity);
    return t;
  }
  // x_t += wpe[p[b, t]] (POSENC_SPEC §7.3); a position >= the table's rows is an error
  Variable embed_positions(const Variable& x, const Positions& p) override {
    CTX_CHECK(p.max() < L_, "posenc learned: explicit position ", p.max(), " is beyond the learned table of ", L_,
              " rows (positions must be < ", L_, ")");
    return add_table(x, rows_at(p.p, p.rows, p.T));
  }

 private:
  // wpe rows at idx [rows * T] -> [rows, T, D] (rows 1: [T, D], broadcast over the batch)
  Variable rows_at(const std::vector<int64_t>& idx, int64_t rows, int64_t T) const {
    Tensor t = Tensor::empty({(int64_t)idx.size()}, DType::I64);
    std::copy(idx.begin(), idx.end(), t.host<int64_t>());
    Variable g = index_select(wpe_, 0, device_table(t, wpe_.data()));  // [rows * T, D]
    return rows == 1 ? g : reshape(g, {rows, T, D_});
  }
  int64_t L_, D_;
  bool hier_;
  std::shared_ptr<nn::Module> mod_;
  Variable wpe_;
};

class Sinusoidal final : public PositionalEncoding {
 public:
  explicit Sinusoidal(const ModelConfig& c) : D_(c.d_model) {}
  std::string type() const override { return "sinusoidal"; }
  bool sinks_ok() const override { return true; }  // the mask only (POSENC_SPEC §6)
  bool explicit_positions_ok() const override { return true; }  // the table at float(p) (§7.3)
  bool fused_attention_ok(const AttnState&) const override { return true; }
  Variable embed(const Variable& x, int64_t pos0) override {
    return add_table(x, table(x, position_list(pos0, x.size(1), nullptr), 1, x.size(1)));
  }
  Variable embed_positions(const Variable& x, const Positions& p) override {
    return add_table(x, table(x, p.p, p.rows, p.T));
  }
  std::optional<DecodeTables> decode_tables(int64_t capacity, const Tensor& like) override {
    DecodeTables t;
    t.add = table(Variable(like, false), position_list(0, capacity, nullptr), 1, capacity).data();
    return t;
  }

 private:
  // [rows, T, D] (rows 1: [T, D]): PE[t, 2k] = sin(p w_k), PE[t, 2k+1] = cos(p w_k),
  // w_k = 10000^(-2k/D), in float32, at the positions pos [rows * T]
  Variable table(const Variable& x, const std::vector<int64_t>& pos, int64_t rows, int64_t T) const {
    const int64_t n = (int64_t)pos.size();
    Tensor pe = Tensor::empty(rows == 1 ? Shape{T, D_} : Shape{rows, T, D_}, DType::F32);
    float* p = pe.host<float>();
    for (int64_t t = 0; t < n; ++t)
      for (int64_t k = 0; 2 * k < D_; ++k) {
        float w = std::pow(10000.0f, -(float)(2 * k) / (float)D_);
        float ang = (float)pos[(size_t)t] * w;
        p[t * D_ + 2 * k] = std::sin(ang);
        if (2 * k + 1 < D_) p[t * D_ + 2 * k + 1] = std::cos(ang);
      }
    return Variable(device_table(x.dtype() == DType::F32 ? pe : pe.to(x.dtype()), x.data()), false);
  }
  int64_t D_;
};

std::unique_ptr<PositionalEncoding> make_none(const ModelConfig&, const nlohmann::json& p,
                                              const std::string& src) {
  posenc_check_keys(p, {}, src);
  return std::make_unique<NoPos>();
}
std::unique_ptr<PositionalEncoding> make_learned(const ModelConfig& c, const nlohmann::json& p,
                                                 const std::string& src) {
  posenc_check_keys(p, {"hierarchical"}, src);
  const bool hier = posenc_bool(p, "hierarchical", false, src);
  const int64_t M = posenc_randomized(c.posenc, c.context, src);
  CTX_CHECK(M == 0 || !hier, src, ": posenc learned: \"randomized\" and \"hierarchical\" exclude each other "
            "(POSENC_SPEC §7.3: a randomized model's table has M rows already; drop one of the two)");
  return std::make_unique<Learned>(c, hier, M > 0 ? M : c.context);
}
std::unique_ptr<PositionalEncoding> make_sinusoidal(const ModelConfig& c, const nlohmann::json& p,
                                                    const std::string& src) {
  posenc_check_keys(p, {}, src);
  return std::make_unique<Sinusoidal>(c);
}

}  // namespace

// Registered by name as the library loads (posenc/registry.cpp; executables link the whole library).
static PosencRegistrar r1("none", make_none);
static PosencRegistrar r2("learned", make_learned);
static PosencRegistrar r3("sinusoidal", make_sinusoidal);

}  // namespace ctx
