// core/cpu/decode_step.cpp — Backend::make_decode_step on the CPU (core/decode_step.h): a whole
// decoding step of the GPT stack as one OpenMP region on raw pointers, for one sequence or a few
// (B <= kGemvMaxRows). The per-op step of nn/decode_engine.cpp makes ~150 backend calls a token,
// each with its argument checks, tensor views and a strided copy or two: on a 2-core machine that
// was as much time as streaming the weights (docs/sampling.md, "One call a step"). Here each thread
// of the team runs, per layer, between barriers:
//   norm1 of its own copy of the stream (the residual add of the last sublayer folded into it)
//   q, k, v of its heads (its rows of Wqkv), rotated, k and v into the cache, attention   | barrier
//   its rows of Wp over the merged heads o [B, D]                                          | barrier
//   x += a; norm2; its rows of Wfc and their GELU                                          | barrier
//   its rows of Wm over h [B, F]                                                           | barrier
// The weights are streamed from the step's own pack, made when it is made (or the one the model
// keeps from the last step made over the same weights unchanged: PackKeep below): every matrix in the
// order a step reads them, in one buffer of the pool (huge pages: 19 MB of fp32 `small` in 4 KiB
// pages missed the TLB; docs/performance.md, "Huge pages"), each in panels of four rows (a
// four-row pass of the GEMV one stream, not four: core/cpu/gemv.h), fp32 or rounded to bf16 as the
// per-op step's kept copies are. It runs the kernels the per-op step calls (gemv_rows_*,
// ref::layernorm / rmsnorm, rope_rotate_rows_f32, flash_attention_forward, gelu_tanh_f32), so the
// logits are its logits: bit for bit with one sequence (tests/test_decode_engine.cpp). With several, the per-op step's norms take oneDNN's
// kernel on the rows and the two differ by rounding.
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "core/cpu/bf16_convert.h"
#include "core/cpu/flash_attention.h"
#include "core/cpu/fused.h"
#include "core/cpu/gelu_fast.h"
#include "core/cpu/gemm.h"
#include "core/cpu/gemv.h"
#include "core/cpu/ref_kernels.h"
#include "core/precision.h"
#include "core/team.h"

namespace ctx::cpu {
namespace {

// A Linear as the GEMV kernels read it: y = x w^T + b (b null: none), w in the step's pack.
struct Lin {
  Tensor src;                // the model's weight [N, K] f32 (copied into the pack when made)
  const float* b = nullptr;  // [N]
  int64_t N = 0, K = 0;
  size_t at = 0;             // bytes into the pack
};

// The pack and what it was made from (DecodeKeep, core/decode_step.h): for each Linear in order, its
// weight's storage (weak: a freed storage never matches again, whatever block takes its place),
// how many mutable accesses that storage had had (Storage::writes: any later one retires the pack),
// and where in it the matrix lay. Kept by the model; a step made over the same weights unchanged
// shares the pack instead of making it again.
struct PackKeep final : DecodeKeep {
  struct Source {
    std::weak_ptr<Storage> storage;
    uint64_t writes = 0;
    int64_t offset = 0, N = 0, K = 0;
  };
  bool bf16 = false;
  std::vector<Source> sources;
  Tensor pack;
  bool matches(const PackKeep& o) const {
    if (bf16 != o.bf16 || sources.size() != o.sources.size()) return false;
    for (size_t i = 0; i < sources.size(); ++i) {
      const Source &a = sources[i], &b = o.sources[i];
      const std::shared_ptr<Storage> sa = a.storage.lock(), sb = b.storage.lock();
      if (!sa || sa != sb || a.writes != b.writes || a.offset != b.offset || a.N != b.N || a.K != b.K) return false;
    }
    return true;
  }
};
std::mutex g_keep_mutex;             // (two engines may be made over one model at once)
std::atomic<int64_t> g_packs_made{0};

struct Norm {
  const float* w = nullptr;
  const float* b = nullptr;  // null: rmsnorm
  float eps = 1e-5f;
};

struct Layer {
  Norm norm1, norm2;
  Lin qkv, proj, fc, mproj;
  float* k_cache = nullptr;  // [B, H, capacity, Dh]
  float* v_cache = nullptr;
};

// One thread's copy of the residual stream, its norm, and its input rounded to bf16.
struct Rank {
  Tensor x, y, mean, rstd;   // [B, D], [B, D], [B], [B]
  std::vector<uint16_t> xb;  // [B, Kp] for the widest input (F or D)
  float *px, *py, *pmean, *prstd;  // their data (taken once: a mutable data() is four atomic operations)
};

class CpuDecodeStep final : public DecodeStep {
 public:
  CpuDecodeStep(const DecodeStack& s, int threads, bool bf16);
  void run(const int64_t* tokens, int64_t pos, Tensor& logits) override;

 private:
  void step(const Team& tm);
  // The pack of lins_' weights: the one `keep` holds when made from these weights unchanged, else
  // made now (and kept there)
  Tensor kept_pack(std::shared_ptr<DecodeKeep>* keep);
  Tensor make_pack();
  // each Linear's place in the pack (Lin::at, in streaming order); returns the pack's bytes
  size_t place_lins();
  void layer(const Team& tm, Rank& r, size_t l);
  // r.y = norm(r.x + a) with r.x += a first (a null: r.x as it is)
  void norm(const Norm& n, Rank& r, const float* a) const;
  // x [B, K] rounded to bf16 into r.xb (under bf16; the fp32 kernels read x itself)
  const uint16_t* convert(Rank& r, const float* x, int64_t K) const;
  // rows [n0, n1) of y [B, ldy] = x lin^T (+ b): lin number i of lins_
  void gemv(size_t i, const float* x, const uint16_t* xb, float* y, int64_t ldy, std::pair<int64_t, int64_t> rows) const;

  const int64_t B_, H_, Dh_, D_, F_, V_, cap_, window_;
  const int threads_;
  const bool bf16_, rope_, interleaved_;
  std::vector<Layer> layers_;
  Norm norm_f_;
  Lin head_;
  std::vector<Lin*> lins_;  // every Linear, in the order they are streamed
  Tensor pack_;             // their weights, fp32 or rounded to bf16, one after the other
  const char* pack_p_ = nullptr;
  const float *wte_, *add_, *cos_, *sin_;
  std::vector<Rank> ranks_;
  Tensor qkv_, qr_, o_, lse_, a_, pre_, h_;  // [B, 3D], [B, H, Dh], [B, D], [B, H], [B, D], [B, F], [B, F]
  // their data, taken once: a mutable Tensor::data() counts a write with atomic operations on the
  // storage, which the team's threads would pass between their caches a dozen times a layer
  float *qkv_p_, *qr_p_, *o_p_, *lse_p_, *a_p_, *pre_p_, *h_p_;
  // this step's arguments, for the team (one pointer captured: run_team's std::function holds it in place)
  const int64_t* tok_ = nullptr;
  int64_t pos_ = 0;
  float* logits_ = nullptr;
};

// a Linear's bytes in the pack (its panels, rounded up to 64 bytes)
size_t pack_bytes(const Lin& l, bool bf16) {
  return ((size_t)gemv_panel_elems(l.N, l.K, bf16) * (bf16 ? 2 : 4) + 63) / 64 * 64;
}

Lin lin(const Tensor& w, const Tensor& b) {
  return {w, b.defined() ? b.data<float>() : nullptr, w.size(0), w.size(1), 0};
}
Norm norm_of(const Tensor& w, const Tensor& b, double eps, bool layernorm) {
  return {w.data<float>(), layernorm ? b.data<float>() : nullptr, (float)eps};
}

CpuDecodeStep::CpuDecodeStep(const DecodeStack& s, int threads, bool bf16)
    : B_(s.B), H_(s.H), Dh_(s.Dh), D_(s.H * s.Dh), F_(s.layers[0].fc_w.size(0)), V_(s.wte.size(0)),
      cap_(s.capacity), window_(s.window), threads_(threads), bf16_(bf16), rope_(s.cos.defined()),
      interleaved_(s.interleaved) {
  for (const DecodeLayer& L : s.layers) {
    Layer l;
    l.norm1 = norm_of(L.norm1_w, L.norm1_b, L.norm1_eps, s.layernorm);
    l.norm2 = norm_of(L.norm2_w, L.norm2_b, L.norm2_eps, s.layernorm);
    l.qkv = lin(L.qkv_w, L.qkv_b), l.proj = lin(L.proj_w, L.proj_b);
    l.fc = lin(L.fc_w, L.fc_b), l.mproj = lin(L.mproj_w, L.mproj_b);
    Tensor kc = L.k_cache, vc = L.v_cache;  // (written: the cache the caller keeps)
    l.k_cache = kc.data<float>(), l.v_cache = vc.data<float>();
    layers_.push_back(l);
  }
  norm_f_ = norm_of(s.norm_f_w, s.norm_f_b, s.norm_f_eps, s.layernorm);
  head_ = lin(s.head_w, Tensor());
  for (Layer& l : layers_)
    for (Lin* p : {&l.qkv, &l.proj, &l.fc, &l.mproj}) lins_.push_back(p);
  lins_.push_back(&head_);
  pack_ = kept_pack(s.keep);
  pack_p_ = reinterpret_cast<const char*>(std::as_const(pack_).data<float>());
  wte_ = s.wte.data<float>();
  add_ = s.add.defined() ? s.add.data<float>() : nullptr;
  cos_ = rope_ ? s.cos.data<float>() : nullptr;
  sin_ = rope_ ? s.sin.data<float>() : nullptr;
  auto make = [](const Shape& sh) { return Tensor::empty(sh, DType::F32); };
  const int64_t widest = gemv_bf16_padded(std::max(D_, F_));
  for (int r = 0; r < threads_; ++r) {
    Rank k{make({B_, D_}), make({B_, D_}), make({B_}), make({B_}), {}, nullptr, nullptr, nullptr, nullptr};
    k.px = k.x.data<float>(), k.py = k.y.data<float>(), k.pmean = k.mean.data<float>(), k.prstd = k.rstd.data<float>();
    if (bf16_) k.xb.assign((size_t)(B_ * widest), 0);
    ranks_.push_back(std::move(k));
  }
  qkv_ = make({B_, 3 * D_});
  qr_ = make({B_, H_, Dh_});
  o_ = make({B_, D_});
  lse_ = make({B_, H_});
  a_ = make({B_, D_});
  pre_ = make({B_, F_});
  h_ = make({B_, F_});
  qkv_p_ = qkv_.data<float>(), qr_p_ = qr_.data<float>(), o_p_ = o_.data<float>(), lse_p_ = lse_.data<float>();
  a_p_ = a_.data<float>(), pre_p_ = pre_.data<float>(), h_p_ = h_.data<float>();
}

size_t CpuDecodeStep::place_lins() {
  size_t at = 0;
  for (Lin* l : lins_) l->at = at, at += pack_bytes(*l, bf16_);
  return at;
}

Tensor CpuDecodeStep::kept_pack(std::shared_ptr<DecodeKeep>* keep) {
  auto want = std::make_shared<PackKeep>();
  want->bf16 = bf16_;
  for (const Lin* l : lins_)
    want->sources.push_back({l->src.storage(), l->src.storage()->writes.load(std::memory_order_relaxed),
                             l->src.offset(), l->N, l->K});
  if (!keep) return make_pack();
  std::lock_guard<std::mutex> lock(g_keep_mutex);
  if (const auto* kept = dynamic_cast<const PackKeep*>(keep->get()); kept && kept->matches(*want)) {
    place_lins();  // (the offsets follow from the sizes, which matched)
    return kept->pack;
  }
  want->pack = make_pack();
  *keep = want;
  return want->pack;
}

// The pack: every weight in the order a step streams them, each on a 64-byte boundary, in one
// buffer (one huge-page block of the pool: docs/performance.md, "Huge pages"); bf16: each value
// rounded as bf16_copy rounds it. A snapshot: the model must not change while the step is used.
// Each matrix in panels of four rows (gemv_pack_panels: a four-row pass reads one stream).
Tensor CpuDecodeStep::make_pack() {
  g_packs_made.fetch_add(1, std::memory_order_relaxed);
  const size_t total = place_lins();
  Tensor pack = Tensor::empty({(int64_t)(total / 4)}, DType::F32);
  char* base = reinterpret_cast<char*>(pack.data<float>());
  for (const Lin* l : lins_) {
    float* p16 = bf16_ ? nullptr : reinterpret_cast<float*>(base + l->at);
    uint16_t* p32 = bf16_ ? reinterpret_cast<uint16_t*>(base + l->at) : nullptr;
    gemv_pack_panels(l->src.data<float>(), p16, p32, l->N, l->K);
  }
  return pack;
}

void CpuDecodeStep::run(const int64_t* tokens, int64_t pos, Tensor& logits) {
  CTX_CHECK((gemm_precision() == Precision::BF16) == bf16_, "decode step: made for ", bf16_ ? "bf16" : "fp32",
            " GEMM inputs, run under ", bf16_ ? "fp32" : "bf16", " (make a new one for the precision in force)");
  CTX_CHECK(pos >= 0 && pos < cap_, "decode step: position ", pos, " is outside the cache's ", cap_, " rows");
  CTX_CHECK(logits.dtype() == DType::F32 && logits.numel() == B_ * V_, "decode step: logits must be f32 [", B_, ", ",
            V_, "], got ", logits.str());
  tok_ = tokens, pos_ = pos, logits_ = logits.data<float>();
  run_team(threads_, [this](const Team& tm) { step(tm); });
}

const uint16_t* CpuDecodeStep::convert(Rank& r, const float* x, int64_t K) const {
  if (!bf16_) return nullptr;
  gemv_x_bf16(x, r.xb.data(), K, B_);
  return r.xb.data();
}

void CpuDecodeStep::gemv(size_t i, const float* x, const uint16_t* xb, float* y, int64_t ldy,
                         std::pair<int64_t, int64_t> rows) const {
  const Lin& l = *lins_[i];
  if (rows.first >= rows.second) return;
  const char* w = pack_p_ + l.at;
  if (bf16_) gemv_rows_bf16(reinterpret_cast<const uint16_t*>(w), xb, l.b, y, ldy, rows.first, rows.second, l.K, B_);
  else gemv_rows_f32(reinterpret_cast<const float*>(w), x, l.b, y, ldy, rows.first, rows.second, l.K, B_);
}

void CpuDecodeStep::norm(const Norm& n, Rank& r, const float* a) const {
  float* x = r.px;
  float* h = a ? x : nullptr;  // x + a written over x, then normalised
  if (n.b)
    ref::layernorm<float>(x, n.w, n.b, n.eps, r.py, r.pmean, r.prstd, B_, D_,
                          a, h);
  else
    ref::rmsnorm<float>(x, n.w, n.eps, r.py, r.prstd, B_, D_, a, h);
}

void CpuDecodeStep::layer(const Team& tm, Rank& r, size_t l) {
  const Layer& L = layers_[l];
  const size_t lin0 = 4 * l;  // qkv, proj, fc, mproj in lins_
  float* qkv = qkv_p_;
  float* o = o_p_;
  float* a = a_p_;
  const float* y = r.py;
  // q, k, v of this thread's heads h0..h1 (columns h Dh.. of each block), for every sequence
  const auto [h0, h1] = tm.share(H_);
  if (h1 > h0) {
    const int64_t n = h1 - h0, half = Dh_ / 2;
    const uint16_t* yb = convert(r, y, D_);
    for (int64_t blk = 0; blk < 3; ++blk) gemv(lin0, y, yb, qkv, 3 * D_, {blk * D_ + h0 * Dh_, blk * D_ + h1 * Dh_});
    for (int64_t b = 0; b < B_; ++b) {
      const float* q = qkv + b * 3 * D_ + h0 * Dh_;
      const float *k = q + D_, *v = q + 2 * D_;
      const int64_t head0 = (b * H_ + h0) * cap_ * Dh_;  // (b, h0)'s cache rows
      for (int64_t i = 0; i < n; ++i) {  // row pos of each head's cache: k rotated, v as it is
        float* kc = L.k_cache + head0 + (i * cap_ + pos_) * Dh_;
        if (rope_) rope_rotate_rows_f32(k + i * Dh_, cos_ + pos_ * half, sin_ + pos_ * half, kc, 1, 1, Dh_, interleaved_);
        else std::memcpy(kc, k + i * Dh_, (size_t)Dh_ * sizeof(float));
        std::memcpy(L.v_cache + head0 + (i * cap_ + pos_) * Dh_, v + i * Dh_, (size_t)Dh_ * sizeof(float));
      }
      if (rope_) {
        float* qr = qr_p_ + (b * H_ + h0) * Dh_;
        rope_rotate_rows_f32(q, cos_ + pos_ * half, sin_ + pos_ * half, qr, n, 1, Dh_, interleaved_);
        q = qr;
      }
      AttnDims d;
      d.B = 1, d.H = n, d.T = 1, d.S = pos_ + 1, d.Dh = Dh_;
      d.window = window_;
      d.scale = 1.0 / std::sqrt((double)Dh_);
      d.kv_rows = cap_;
      flash_attention_forward<float>(d, q, L.k_cache + head0, L.v_cache + head0, nullptr, o + b * D_ + h0 * Dh_,
                                     lse_p_ + b * H_ + h0);
    }
  }
  tm.barrier();
  gemv(lin0 + 1, o, convert(r, o, D_), a, D_, tm.share(D_, 16));  // a = o Wp^T + bp
  tm.barrier();
  norm(L.norm2, r, a);  // x += a; y = norm2(x)
  const auto f = tm.share(F_, 16);
  float* pre = pre_p_;
  float* h = h_p_;
  gemv(lin0 + 2, y, convert(r, y, D_), pre, F_, f);
  if (f.second > f.first)
    for (int64_t b = 0; b < B_; ++b) gelu_tanh_f32(pre + b * F_ + f.first, h + b * F_ + f.first, f.second - f.first);
  tm.barrier();
  gemv(lin0 + 3, h, convert(r, h, F_), a, D_, tm.share(D_, 16));  // a = gelu(...) Wm^T + bm
  tm.barrier();
}

void CpuDecodeStep::step(const Team& tm) {
  Rank& r = ranks_[(size_t)tm.rank()];
  float* x = r.px;
  for (int64_t b = 0; b < B_; ++b) {  // x = wte[token] (+ the table's row pos)
    std::memcpy(x + b * D_, wte_ + tok_[b] * D_, (size_t)D_ * sizeof(float));
    if (add_)
      for (int64_t c = 0; c < D_; ++c) x[b * D_ + c] += add_[pos_ * D_ + c];
  }
  const float* pending = nullptr;  // the last sublayer's output, added in front of the next norm
  for (size_t l = 0; l < layers_.size(); ++l) {
    norm(layers_[l].norm1, r, pending);
    layer(tm, r, l);
    pending = a_p_;
  }
  norm(norm_f_, r, pending);
  const float* y = r.py;
  gemv(lins_.size() - 1, y, convert(r, y, D_), logits_, V_, tm.share(V_, 16));
}

}  // namespace

int64_t decode_packs_made() { return g_packs_made.load(std::memory_order_relaxed); }

std::unique_ptr<DecodeStep> make_decode_step(const DecodeStack& s, int threads) {
  const bool bf16 = gemm_precision() == Precision::BF16;
  // the per-op step's Linear takes these kernels for B <= kGemvMaxRows unless a GEMM was chosen
  if (!gemv_available(bf16) || gemm_impl_chosen() || s.B > kGemvMaxRows) return nullptr;
  return std::make_unique<CpuDecodeStep>(s, threads, bf16);
}

}  // namespace ctx::cpu
