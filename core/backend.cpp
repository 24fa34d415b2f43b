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
