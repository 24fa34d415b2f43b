// core/backend.cpp — the base-class side of core/backend.h: the names of the fused methods and
// their default versions, which throw (callers check Backend::has first and otherwise compose
// the same computation from primitives).
#include "core/backend.h"

namespace ctx {

const char* fused_name(Fused f) {
  switch (f) {
    case Fused::Attention: return "attention";
    case Fused::Rope: return "rope";
    case Fused::Heads: return "heads";
    case Fused::Linear: return "linear";
    case Fused::FlatAdamW: return "flat_adamw";
    case Fused::OdeRk4: return "ode_rk4";
  }
  return "?";
}

bool Backend::has(Fused) const { return false; }
bool Backend::prefers_fused_attention(int64_t, int64_t, int64_t, int64_t) const { return has(Fused::Attention); }

namespace {
[[noreturn]] void unsupported(const Backend& b, const char* method, Fused f) {
  throw Error(str(method, ": not supported by backend ", b.name(), " (it does not report Fused::",
                  fused_name(f), "; check Backend::has first)"));
}
}  // namespace

void Backend::attention_forward(const AttnDims&, const Tensor&, const Tensor&, const Tensor&,
                                const Tensor&, Tensor&, Tensor&, const AttnRel&) {
  unsupported(*this, "attention_forward", Fused::Attention);
}
void Backend::attention_backward(const AttnDims&, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 Tensor&, Tensor&, Tensor&, Tensor&, const AttnRel&,
                                 AttnRelGrad&) {
  unsupported(*this, "attention_backward", Fused::Attention);
}
OdeDims check_ode_rk4(const char* op, const Tensor& v, const Tensor& w1, const Tensor& w2, double dt,
                      int64_t substeps, const Tensor& P, const Tensor& Pt, const Tensor& U,
                      std::initializer_list<const Tensor*> fvec, const Tensor* dvec) {
  CTX_CHECK(v.defined() && v.dim() == 1 && (v.dtype() == DType::F32 || v.dtype() == DType::F64), op,
            ": p0 / gp0 must be f32 or f64 [D], got ", v.defined() ? v.str() : std::string("undefined"));
  CTX_CHECK(dt > 0 && substeps >= 1, op, ": need dt > 0 and substeps >= 1, got ", dt, " and ", substeps);
  const int64_t D = v.size(0);
  CTX_CHECK(w1.defined() && w1.dim() == 2 && w1.size(1) == D, op, ": w1 must be [F, ", D, "], got ", w1.str());
  const int64_t F = w1.size(0);
  CTX_CHECK(P.defined() && P.dim() == 2 && P.size(0) >= 2 && P.size(1) == D, op, ": P / gP must be [n >= 2, ", D,
            "], got ", P.defined() ? P.str() : std::string("undefined"));
  const int64_t n = P.size(0), S = (n - 1) * substeps;
  auto check = [&](const char* name, const Tensor* t, const Shape& want) {
    CTX_CHECK(t->defined() && t->dtype() == v.dtype() && t->shape() == want && t->device() == v.device(), op, ": ",
              name, " must be ", dtype_name(v.dtype()), shape_str(want), " on ", device_name(v.device()), ", got ",
              t->defined() ? t->str() : std::string("undefined"));
  };
  check("w1", &w1, {F, D});
  check("w2", &w2, {D, F});
  check("P", &P, {n, D});
  check("Pt / GK", &Pt, {4 * S, D});
  check("U / GA", &U, {4 * S, F});
  for (const Tensor* t : fvec) check("b1 / wt", t, {F});
  if (dvec) check("b2", dvec, {D});
  return {n, D, F};
}

void Backend::ode_rk4_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, double, int64_t, Tensor&, Tensor&, Tensor&) {
  unsupported(*this, "ode_rk4_forward", Fused::OdeRk4);
}
void Backend::ode_rk4_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, int64_t, Tensor&,
                               Tensor&, Tensor&) {
  unsupported(*this, "ode_rk4_backward", Fused::OdeRk4);
}

void Backend::rope_rotate(const Tensor&, const Tensor&, const Tensor&, Tensor&, bool, bool) {
  unsupported(*this, "rope_rotate", Fused::Rope);
}
void Backend::split_heads(const Tensor&, int64_t, int64_t, Tensor&, Tensor&, Tensor&) {
  unsupported(*this, "split_heads", Fused::Heads);
}
void Backend::split_heads_backward(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t,
                                   Tensor&) {
  unsupported(*this, "split_heads_backward", Fused::Heads);
}
void Backend::merge_heads(const Tensor&, Tensor&) { unsupported(*this, "merge_heads", Fused::Heads); }
void Backend::merge_heads_backward(const Tensor&, Tensor&) {
  unsupported(*this, "merge_heads_backward", Fused::Heads);
}
void Backend::linear(const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  unsupported(*this, "linear", Fused::Linear);
}
void Backend::sum_squares(const Tensor&, const std::vector<FlatChunk>&, Tensor&) {
  unsupported(*this, "sum_squares", Fused::FlatAdamW);
}
void Backend::adamw_flat(Tensor&, const Tensor&, Tensor&, Tensor&, const std::vector<FlatChunk>&,
                         const AdamWHyper&, const Tensor&) {
  unsupported(*this, "adamw_flat", Fused::FlatAdamW);
}

}  // namespace ctx
