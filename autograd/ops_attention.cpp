// autograd/ops_attention.cpp — fused_causal_attention (see ops_attention.h): argument checks,
// the graph around Backend::attention_forward / _backward (Fused::Attention), and the composed
// version of the same attention, relative (content-position) terms included, which runs where
// the backend has no fused attention.
#include "autograd/ops_attention.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "autograd/ops_util.h"
#include "core/attention_dist_bias.h"
#include "core/device_table.h"

namespace ctx {
using namespace detail;

namespace {

// Checks the arguments (errors name the op and the shapes); returns the sizes.
AttnDims check_args(const char* op, const Variable& q, const Variable& k, const Variable& v,
                              const Variable& bias, double scale, int64_t window, int64_t keys = 0) {
  CTX_CHECK(q.defined() && k.defined() && v.defined(), op, ": q, k and v must be defined");
  const Tensor &qd = q.data(), &kd = k.data(), &vd = v.data();
  CTX_CHECK(is_float(qd.dtype()), op, ": q must be f32 or f64, got ", qd.str());
  CTX_CHECK(qd.dim() == 4, op, ": q must be [B, H, T, Dh], got ", qd.str());
  CTX_CHECK(kd.dim() == 4 && vd.dim() == 4, op, ": k and v must be [B, H, S, Dh], got k ", kd.str(),
            " and v ", vd.str());
  check_compatible(qd, kd, op);
  check_compatible(qd, vd, op);
  CTX_CHECK(kd.shape() == vd.shape(), op, ": k ", kd.str(), " and v ", vd.str(), " must have the same shape");
  CTX_CHECK(kd.size(0) == qd.size(0) && kd.size(1) == qd.size(1) && kd.size(3) == qd.size(3), op,
            ": k ", kd.str(), " does not match q ", qd.str(), " (q [B, H, T, Dh], k [B, H, S, Dh])");
  AttnDims d;
  d.B = qd.size(0), d.H = qd.size(1), d.T = qd.size(2), d.S = kd.size(2), d.Dh = qd.size(3);
  CTX_CHECK(keys >= 0 && keys <= kd.size(2), op, ": keys must be in [0, ", kd.size(2), "] (the rows of k ",
            kd.str(), "; 0: all), got ", keys);
  if (keys > 0 && keys < kd.size(2)) d.S = keys, d.kv_rows = kd.size(2);
  d.window = window;
  d.scale = scale;
  CTX_CHECK(d.S >= d.T, op, ": k ", kd.str(), " has fewer keys than q ", qd.str(),
            " has queries (S must be >= T: queries are the last T positions)");
  CTX_CHECK(window >= 0, op, ": window must be >= 0 (0 = full causal attention), got ", window);
  CTX_CHECK(std::isfinite(scale), op, ": scale must be finite, got ", scale);
  if (bias.defined()) {
    const Tensor& bd = bias.data();
    check_compatible(qd, bd, op);
    const bool ok3 = bd.dim() == 3 && bd.shape() == Shape{d.H, d.T, d.S};
    const bool ok4 = bd.dim() == 4 && bd.shape() == Shape{1, d.H, d.T, d.S};
    CTX_CHECK(ok3 || ok4, op, ": bias must be [H, T, S] = [", d.H, ", ", d.T, ", ", d.S, "] or [1, H, T, S]",
              " for q ", qd.str(), " and k ", kd.str(), ", got ", bd.str());
  }
  return d;
}

// Checks rel against the call's sizes; returns {Rq, Rk} (0 for an absent side). Errors name the
// op, the RelTerms field and the expected shape; index values are checked against their range.
std::pair<int64_t, int64_t> check_rel(const char* op, const RelTerms& rel, const Tensor& qd,
                                      int64_t B, int64_t H, int64_t T, int64_t S, int64_t Dh) {
  if (rel.dist_bias.defined()) {
    const Variable& t = rel.dist_bias;
    CTX_CHECK(t.dim() == 2 && t.size(0) == H && t.size(1) >= std::max<int64_t>(S, 1) && t.dtype() == qd.dtype() &&
                  t.device() == qd.device(),
              op, ": RelTerms.dist_bias must be ", device_name(qd.device()), " ", dtype_name(qd.dtype()), "[", H,
              ", n] with n >= S = ", S, ", got ", device_name(t.device()), " ", t.data().str());
  }
  if (rel.empty()) return {0, 0};
  auto check_idx = [&](const Tensor& idx, const char* name, int64_t R) {
    CTX_CHECK(idx.defined(), op, ": RelTerms.", name, " (i32 [T, S]) is required by its terms");
    CTX_CHECK(idx.dtype() == DType::I32 && (idx.shape() == Shape{T, S}), op, ": RelTerms.", name,
              " must be an i32 [T, S] = [", T, ", ", S, "] tensor, got ", idx.str());
    CTX_CHECK(idx.device() == Device::CPU || idx.device() == qd.device(), op, ": RelTerms.", name, " is on ",
              device_name(idx.device()), ", q on ", device_name(qd.device()));
    if (idx.device() != Device::CPU) return;  // device tables: checked on the host where built
    const int32_t* ip = idx.host<int32_t>();
    for (int64_t x = 0; x < T * S; ++x)
      CTX_CHECK(ip[x] >= 0 && ip[x] < R, op, ": RelTerms.", name, "[", x / S, ", ", x % S, "] = ", ip[x],
                " is outside [0, ", R, ")");
  };
  auto check_var = [&](const Variable& x, const char* name, const Shape& want) {
    CTX_CHECK(x.dtype() == qd.dtype() && x.device() == qd.device() && x.shape() == want, op, ": RelTerms.", name,
              " must be ", device_name(qd.device()), " ", dtype_name(qd.dtype()), shape_str(want), ", got ",
              device_name(x.device()), " ", x.data().str());
  };
  auto check_rank = [&](const Variable& x, const char* name, int64_t rank, const char* layout) {
    CTX_CHECK(x.dim() == rank, op, ": RelTerms.", name, " must be ", layout, ", got ", x.data().str());
  };
  if (rel.qrel.defined()) check_rank(rel.qrel, "qrel", 4, "[B, H, T, Rq]");
  if (rel.vrel.defined()) check_rank(rel.vrel, "vrel", 2, "[Rq, Dh]");
  if (rel.krel.defined()) check_rank(rel.krel, "krel", 4, "[B, H, S, Rk]");
  int64_t Rq = 0, Rk = 0;
  if (rel.qrel.defined() || rel.vrel.defined()) {
    Rq = rel.qrel.defined() ? rel.qrel.size(-1) : rel.vrel.size(0);
    if (rel.qrel.defined()) check_var(rel.qrel, "qrel", {B, H, T, Rq});
    if (rel.vrel.defined()) check_var(rel.vrel, "vrel", {Rq, Dh});
    check_idx(rel.qidx, "qidx", Rq);
  }
  if (rel.krel.defined()) {
    Rk = rel.krel.size(-1);
    check_var(rel.krel, "krel", {B, H, S, Rk});
    check_idx(rel.kidx, "kidx", Rk);
  }
  return {Rq, Rk};
}

// i64 [T * S] flat index into a [.., N, R] table seen as [.., N * R]: row(i, j) * R + idx[i, j],
// with row = i (by query) or j (by key).
// Built on the host (from idx's host mirror, or a copy, when idx is on a device), kept on like's device.
Tensor flat_index(const Tensor& idx_any, int64_t R, bool by_key, const Tensor& like) {
  const Tensor idx = host_values(idx_any);
  const int64_t T = idx.size(0), S = idx.size(1);
  Tensor f = Tensor::empty({T * S}, DType::I64);
  const int32_t* ip = idx.host<int32_t>();
  int64_t* fp = f.host<int64_t>();
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < S; ++j) fp[i * S + j] = (by_key ? j : i) * R + ip[i * S + j];
  return device_table(f, like);
}

// x [B, H, N, R] -> [B, H, T, S]: out[b, h, i, j] = x[b, h, row(i, j), idx[i, j]].
Variable gather_rel(const Variable& x, const Tensor& idx, bool by_key) {
  const int64_t B = x.size(0), H = x.size(1), R = x.size(3), T = idx.size(0), S = idx.size(1);
  Variable flat = reshape(x, {B, H, x.size(2) * R});
  Tensor fi = flat_index(idx, R, by_key, x.data());
  return reshape(index_select(flat, 2, fi), {B, H, T, S});
}

// The gathered bias of a constant table (RelTerms::dist_bias_constant: ALiBi's, Sandwich's, one
// Variable for every layer and step, posenc/bias.cpp keeps it), kept per (table storage, T, S):
// every layer of a step gathers the same [H, T, S] bias otherwise (~1 ms a layer at `small` on the
// CPU). An entry holds its table weakly and is dropped once the table is gone, so a new table at
// the same address never finds an old bias; at most kKeptGathers are kept (the oldest out).
constexpr size_t kKeptGathers = 4;
struct KeptGather {
  std::weak_ptr<Storage> table;
  int64_t offset, T, S;
  Variable bias;
};
thread_local std::vector<KeptGather> t_kept_gathers;
thread_local uint64_t t_kept_gather_hits = 0;

// table [H, n] -> [1, H, T, S]: entry (h, i, j) = table[h, max(i + S - T - j, 0)] (AttnRel::dist_bias;
// index_select's backward sums the gradient by distance). bias must be undefined (exclusive).
Variable gathered_dist_bias(const Variable& table, int64_t T, int64_t S, const Variable& bias, bool constant) {
  CTX_CHECK(!bias.defined(), "attention: RelTerms.dist_bias and a bias are exclusive (give one), got bias ",
            bias.data().str());
  AttnDims d;
  d.H = table.size(0), d.T = T, d.S = S;
  auto gather = [&] { return reshape(index_select(table, 1, dist_bias_index(d, table.data())), {1, d.H, T, S}); };
  if (!constant || table.requires_grad()) return gather();
  auto& kept = t_kept_gathers;
  kept.erase(std::remove_if(kept.begin(), kept.end(), [](const KeptGather& k) { return k.table.expired(); }),
             kept.end());
  const Tensor& td = table.data();
  for (const KeptGather& k : kept)
    if (k.table.lock() == td.storage() && k.offset == td.offset() && k.T == T && k.S == S) {
      ++t_kept_gather_hits;
      return k.bias;
    }
  if (kept.size() >= kKeptGathers) kept.erase(kept.begin());
  kept.push_back({td.storage(), td.offset(), T, S, gather()});
  return kept.back().bias;
}

}  // namespace

uint64_t kept_dist_bias_gathers() { return t_kept_gather_hits; }

Tensor hidden_keys_mask(int64_t T, int64_t S, int64_t window, int64_t sinks, const Tensor& like) {
  CTX_CHECK(window >= 0 && sinks >= 0 && S >= T, "hidden_keys_mask: window (", window, ") and sinks (", sinks,
            ") must be >= 0 and S (", S, ") >= T (", T, ")");
  Tensor m = Tensor::zeros({T, S}, like.dtype());
  const int64_t off = S - T;
  if (window > 0)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = sinks; j < S && j <= i + off - window; ++j) m.set(i * S + j, 1.0);
  return device_table(m, like);
}

Variable relative_logits(const Variable& q, const Variable& k, const Variable& bias, double scale_,
                         const RelTerms& rel) {
  const char* op = "relative_logits";
  CTX_CHECK(q.defined() && k.defined() && q.dim() == 4 && k.dim() == 4, op,
            ": q and k must be defined [B, H, T, Dh] / [B, H, S, Dh] tensors");
  check_rel(op, rel, q.data(), q.size(0), q.size(1), q.size(2), k.size(2), q.size(3));
  // Without score terms the scale is the GEMM's alpha (no pass over [B, H, T, S] either way).
  const bool terms = rel.qrel.defined() || rel.krel.defined();
  Variable s = matmul(q, k, false, true, terms ? 1.0 : scale_);           // [B, H, T, S]
  if (rel.qrel.defined()) s = add(s, gather_rel(rel.qrel, rel.qidx, false));
  if (rel.krel.defined()) s = add(s, gather_rel(rel.krel, rel.kidx, true));
  if (terms) s = scale(s, scale_);
  if (rel.dist_bias.defined())
    return add(s, gathered_dist_bias(rel.dist_bias, q.size(2), k.size(2), bias, rel.dist_bias_constant));
  return bias.defined() ? add(s, bias) : s;  // [H, T, S] / [1, H, T, S] broadcast over B
}

Variable relative_output(const Variable& p, const Variable& v, const RelTerms& rel) {
  const char* op = "relative_output";
  CTX_CHECK(p.defined() && v.defined() && p.dim() == 4 && v.dim() == 4, op,
            ": p and v must be defined [B, H, T, S] / [B, H, S, Dh] tensors");
  Variable o = matmul(p, v);  // [B, H, T, Dh]
  if (!rel.vrel.defined()) return o;
  const int64_t B = p.size(0), H = p.size(1), T = p.size(2), S = p.size(3), Dh = v.size(3);
  RelTerms values;  // only the value term: checked against p's sizes
  values.qidx = rel.qidx;
  values.vrel = rel.vrel;
  const int64_t Rq = check_rel(op, values, p.data(), B, H, T, S, Dh).first;
  // prel[b, h, i, r] = sum of p[b, h, i, j] over qidx[i, j] = r: the transpose of the gather
  Tensor fi = flat_index(rel.qidx, Rq, false, p.data());
  Variable zeros(Tensor::zeros({B, H, T * Rq}, p.dtype(), p.device()), false);
  Variable prel = reshape(scatter_add(zeros, 2, fi, reshape(p, {B, H, T * S})), {B, H, T, Rq});
  return add(o, matmul(prel, rel.vrel));
}

Variable causal_attention_composed(const Variable& q, const Variable& k, const Variable& v,
                                   const Variable& bias, double scale_, int64_t window,
                                   const RelTerms& rel, const DropoutMask& dropout_, AttnRowStats* stats) {
  const char* op = "causal_attention_composed";
  const AttnDims d = check_args(op, q, k, v, bias, scale_, window);
  check_rel(op, rel, q.data(), d.B, d.H, d.T, d.S, d.Dh);
  Variable s = relative_logits(q, k, bias, scale_, rel);  // [B, H, T, S]
  if (window > 0 && window < d.S) s = masked_fill(s, hidden_keys_mask(d.T, d.S, window, 0, q.data()), -INFINITY);
  Variable p = causal_softmax(s, d.S - d.T);  // [B, H, T, S]
  if (stats) stats->rows = attention_row_stats(p.data(), stats->sink_keys);
  return relative_output(dropout(p, dropout_), v, rel);  // [B, H, T, Dh]
}

Tensor attention_row_stats(const Tensor& p_any, int64_t sink_keys) {
  CTX_CHECK(p_any.defined() && p_any.dim() == 4 && is_float(p_any.dtype()),
            "attention_row_stats: p must be float [B, H, T, S], got ", p_any.defined() ? p_any.str() : "undefined");
  CTX_CHECK(sink_keys >= 0, "attention_row_stats: sink_keys must be >= 0 (e.g. 4), got ", sink_keys);
  const Tensor p = to_host(p_any).to(DType::F64);
  const int64_t BH = p.size(0) * p.size(1), T = p.size(2), S = p.size(3);
  Tensor out = Tensor::zeros({p.size(0), p.size(1), T, 3}, DType::F64);
  const double* pp = p.host<double>();
  double* op = out.host<double>();
  for (int64_t row = 0; row < BH * T; ++row) {
    const int64_t i = row % T;
    const double* pr = pp + row * S;
    double ent = 0, sink = 0, dist = 0;
    for (int64_t j = 0; j < S; ++j) {
      if (!(pr[j] > 0)) continue;
      ent -= pr[j] * std::log(pr[j]);
      if (j < sink_keys) sink += pr[j];
      dist += pr[j] * (double)(i + S - T - j);
    }
    op[row * 3] = ent, op[row * 3 + 1] = sink, op[row * 3 + 2] = dist;
  }
  return out;
}

namespace {

// rel as the backend takes it: plain tensors on q's device (index tables moved there when
// they were built on the host).
AttnRel backend_rel(const RelTerms& rel, int64_t Rq, int64_t Rk, const Tensor& qd) {
  AttnRel r;
  r.Rq = Rq, r.Rk = Rk;
  if (rel.qidx.defined() && Rq > 0) r.qidx = rel.qidx.device() == qd.device() ? rel.qidx : device_table(rel.qidx, qd);
  if (rel.kidx.defined() && Rk > 0) r.kidx = rel.kidx.device() == qd.device() ? rel.kidx : device_table(rel.kidx, qd);
  if (rel.qrel.defined()) r.qrel = rel.qrel.data();
  if (rel.krel.defined()) r.krel = rel.krel.data();
  if (rel.vrel.defined()) r.vrel = rel.vrel.data();
  if (rel.dist_bias.defined()) r.dist_bias = rel.dist_bias.data();
  return r;
}

}  // namespace

Variable fused_causal_attention(const Variable& q, const Variable& k, const Variable& v,
                                const Variable& bias, double scale, int64_t window,
                                const RelTerms& rel, int64_t keys, const DropoutMask& dropout,
                                AttnRowStats* stats) {
  const char* op = "fused_causal_attention";
  AttnDims d = check_args(op, q, k, v, bias, scale, window, keys);
  d.dropout = dropout;
  const Tensor qd = q.data(), kd = k.data(), vd = v.data();
  Backend& be = backend_of(qd);
  if (!be.has(Fused::Attention) || (stats && !be.has_attention_stats())) {
    if (d.kv_rows == 0) return causal_attention_composed(q, k, v, bias, scale, window, rel, dropout, stats);
    return causal_attention_composed(q, slice(k, 2, 0, d.S), slice(v, 2, 0, d.S), bias, scale, window, rel,
                                     dropout, stats);
  }
  const std::pair<int64_t, int64_t> R = check_rel(op, rel, qd, d.B, d.H, d.T, d.S, d.Dh);
  CTX_CHECK(!(rel.dist_bias.defined() && bias.defined()), op,
            ": RelTerms.dist_bias and a bias are exclusive (give one), got bias ", bias.data().str());
  const AttnRel br = backend_rel(rel, R.first, R.second, qd);
  if (rel.dist_bias.defined() && !be.reads_dist_bias(d, qd, br)) {
    // the kernels take a bias [H, T, S]: the table gathered in the graph (index_select, its
    // backward the scatter-add by distance), kept for the backward, as the encodings did before
    RelTerms r = rel;
    r.dist_bias = Variable();
    return fused_causal_attention(q, k, v, gathered_dist_bias(rel.dist_bias, d.T, d.S, bias, rel.dist_bias_constant),
                                  scale, window, r, keys, dropout, stats);
  }
  const Tensor bd = bias.defined() ? bias.data() : Tensor();
  Tensor out = empty_like(qd);                                            // [B, H, T, Dh]
  Tensor lse = Tensor::empty({d.B, d.H, d.T}, qd.dtype(), qd.device());  // [B, H, T]
  be.attention_forward(d, qd, kd, vd, bd, out, lse, br, stats);
  std::vector<Variable> inputs = {q, k, v};
  for (const Variable* x : {&bias, &rel.qrel, &rel.krel, &rel.vrel, &rel.dist_bias})
    if (x->defined()) inputs.push_back(*x);
  return make_result(out, op, inputs, [q, k, v, bias, rel, br, qd, kd, vd, bd, out, lse, d](const Tensor& g) {
    // g = dL/do [B, H, T, Dh]; dbias [H, T, S] and the relative gradients only for inputs that
    // take part in the graph
    Tensor dq = empty_like(qd), dk = empty_like(kd), dv = empty_like(vd), db;
    AttnRelGrad dr;
    if (bias.defined() && bias.requires_grad()) db = Tensor::empty({d.H, d.T, d.S}, qd.dtype(), qd.device());
    if (rel.qrel.defined() && rel.qrel.requires_grad()) dr.dqrel = empty_like(rel.qrel.data());
    if (rel.krel.defined() && rel.krel.requires_grad()) dr.dkrel = empty_like(rel.krel.data());
    if (rel.vrel.defined() && rel.vrel.requires_grad()) dr.dvrel = empty_like(rel.vrel.data());
    if (rel.dist_bias.defined() && rel.dist_bias.requires_grad()) dr.ddist_bias = empty_like(rel.dist_bias.data());
    backend_of(qd).attention_backward(d, qd, kd, vd, bd, out, lse, g, dq, dk, dv, db, br, dr);
    acc(q, dq);
    acc(k, dk);
    acc(v, dv);
    if (db.defined()) acc(bias, db.view(bias.shape()));
    if (dr.dqrel.defined()) acc(rel.qrel, dr.dqrel);
    if (dr.dkrel.defined()) acc(rel.krel, dr.dkrel);
    if (dr.dvrel.defined()) acc(rel.vrel, dr.dvrel);
    if (dr.ddist_bias.defined()) acc(rel.dist_bias, dr.ddist_bias);
  });
}

}  // namespace ctx
