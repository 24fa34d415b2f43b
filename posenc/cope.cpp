// posenc/cope.cpp — `cope` (POSENC_SPEC §7.2): CoPE, Golovneva et al. 2024, contextual positions
// counted by sigmoid gates over the keys and interpolated in a learned table E [d, npos_max]:
// S_ij = (q_i . k_j + e_ij) / sqrt(d). One table per attention layer (`blocks.{l}.attn.pe.pos_emb`),
// shared by its heads, or one for the model (`pe.pos_emb`) with "shared": true. The logits are one
// node (cope_logits, autograd/ops_posenc2024.h; q k^T computed once for the gates and the scores);
// the softmax and p v are the composed attention's, or, where the device has the kernels (CPU),
// one node for the whole attention (cope_attention).
#include "autograd/ops_posenc2024.h"
#include "posenc/posenc.h"

namespace ctx {
namespace {

class Cope final : public PositionalEncoding {
 public:
  Cope(const ModelConfig& cfg, int64_t npos, bool shared) : shared_(shared) {
    for (int l = 0; l < (shared ? 1 : cfg.n_layers); ++l) {
      mods_.push_back(std::make_shared<nn::Module>());
      tables_.push_back(mods_.back()->register_parameter("pos_emb", Tensor::zeros({cfg.head_dim(), npos})));
    }
  }
  std::string type() const override { return "cope"; }
  std::shared_ptr<nn::Module> shared_module() override { return shared_ ? mods_[0] : nullptr; }
  std::shared_ptr<nn::Module> layer_module(int l) override { return shared_ ? nullptr : mods_.at(l); }
  void init_parameters(Rng& rng) override {  // the reference's torch.zeros
    (void)rng;
    for (auto& t : tables_) backend_of(t.data()).fill(t.data(), 0.0);
  }
  bool terms_read_keys() const override { return true; }  // (fused_attention_ok: false, logits are ours)
  // The mask only (POSENC_SPEC §6, §7.2): the gates count the visible keys, the sinks among them,
  // which are the keys a rolling cache holds (its decoding steps see window 0, sinks 0: all rows).
  bool sinks_ok() const override { return true; }
  bool fused_attention_takes_sinks() const override { return true; }

  // [B, H, T, S]: the gates count the keys the window and the sinks leave visible (st.window,
  // st.sinks); the attention masks the others (nn/attention.cpp, hidden_keys_mask)
  Variable logits(AttnState& st) override {
    return cope_logits(st.q, keys(st, st.k), tables_.at(shared_ ? 0 : st.layer), st.scale, st.q_pos0, st.window,
                       st.sinks);
  }

  // [B, H, T, Dh]: CoPE's attention as one node (cope_attention: each row's softmax right after its
  // scan, the logits never in memory) on the CPU when nothing needs the composed path's
  // probabilities (no dropout on them, no attention statistics); else undefined (the composed path:
  // logits, causal_softmax, p v). CUDA has the kernels (one thread per row, held to the CPU in the
  // backend table) but keeps the composed path, whose softmax is a row-parallel kernel, until the
  // two are timed on a GPU (docs/posenc.md). With attention sinks too (st.sinks: the kernels' rows
  // are the sinks and the window, fused_attention_takes_sinks).
  Variable fused_attention(AttnState& st, int64_t window, const DropoutMask& dropout) override {
    const Device d = st.q.data().device();
    if (dropout.active() || st.stats || st.q_pos0 != st.S - st.T || d != Device::CPU || !cope_attention_on(d))
      return Variable();
    return cope_attention(st.q, keys(st, st.k), keys(st, st.v), tables_.at(shared_ ? 0 : st.layer), st.scale,
                          st.q_pos0, window, st.sinks);
  }

 private:
  // the first st.S rows (a decoding step passes the cache's buffers)
  static Variable keys(const AttnState& st, const Variable& x) {
    return x.size(2) == st.S ? x : slice(x, 2, 0, st.S);
  }

  bool shared_;
  std::vector<std::shared_ptr<nn::Module>> mods_;
  std::vector<Variable> tables_;  // E [d, npos_max]
};

// posenc {"type": "cope", "npos_max": context + 1, "shared": false}
std::unique_ptr<PositionalEncoding> make_cope(const ModelConfig& cfg, const nlohmann::json& p,
                                              const std::string& source) {
  posenc_check_keys(p, {"npos_max", "shared"}, source);
  const int64_t npos = posenc_int(p, "npos_max", cfg.context + 1, 1, source, "cope");
  return std::make_unique<Cope>(cfg, npos, posenc_bool(p, "shared", false, source));
}

const PosencRegistrar kCope("cope", make_cope);

}  // namespace
}  // namespace ctx
