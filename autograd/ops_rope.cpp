// autograd/ops_rope.cpp — rope_rotate (see ops_rope.h): one node around Backend::rope_rotate
// (Fused::Rope; the CPU kernel is core/cpu/rope.cpp) whose backward is the transpose rotation,
// and the same rotation composed from slice / mul / concat where use_fused(FastPath::Rope) says no
// (core/fast_paths.h: a backend without it, or CTXLAB_FUSED_ROPE=0).
#include "autograd/ops_rope.h"

#include "autograd/ops_util.h"
#include "core/fast_paths.h"

namespace ctx {
using namespace detail;

namespace {

// The same rotation from differentiable primitives (backends without Fused::Rope).
Variable rotate_composed(const Variable& x, const Tensor& C, const Tensor& S, bool interleaved) {
  const int64_t d = x.size(-1), h = d / 2;
  Variable c(C, false), s(S, false);
  if (!interleaved) {
    Variable a = slice(x, -1, 0, h), b = slice(x, -1, h, d);
    return concat({sub(mul(a, c), mul(b, s)), add(mul(b, c), mul(a, s))}, -1);
  }
  Shape ps = x.shape();
  ps.back() = h;
  ps.push_back(2);
  Variable xp = reshape(x, ps);                       // [..., T, d/2, 2]
  Shape hs = x.shape();
  hs.back() = h;
  Variable a = reshape(slice(xp, -1, 0, 1), hs), b = reshape(slice(xp, -1, 1, 2), hs);
  ps.back() = 1;
  Variable ra = reshape(sub(mul(a, c), mul(b, s)), ps), rb = reshape(add(mul(b, c), mul(a, s)), ps);
  return reshape(concat({ra, rb}, -1), x.shape());
}

}  // namespace

Variable rope_rotate_composed(const Variable& x, const Tensor& cos, const Tensor& sin, RopePairing pairing) {
  return rotate_composed(x, cos, sin, pairing == RopePairing::Interleaved);
}

Variable rope_rotate(const Variable& x, const Tensor& cos, const Tensor& sin, RopePairing pairing) {
  const Tensor& xd = x.data();
  CTX_CHECK(xd.dim() >= 2, "rope_rotate: x must be [..., T, d], got ", xd.str());
  const int64_t d = xd.size(-1), T = xd.size(-2);
  CTX_CHECK(d % 2 == 0, "rope_rotate: head dim must be even, got x ", xd.str());
  CTX_CHECK(is_float(xd.dtype()), "rope_rotate: x must be f32 or f64, got ", xd.str());
  for (const Tensor* t : {&cos, &sin}) {
    CTX_CHECK(t->dim() == 2 && t->size(0) == T && t->size(1) == d / 2, "rope_rotate: cos/sin must be [",
              T, ", ", d / 2, "] for x ", xd.str(), ", got ", t->str());
    check_compatible(xd, *t, "rope_rotate");
  }
  const bool inter = pairing == RopePairing::Interleaved;
  Backend& be = backend_of(xd);
  if (!use_fused(FastPath::Rope, be)) return rotate_composed(x, cos, sin, inter);
  Tensor out = empty_like(xd);
  be.rope_rotate(xd, cos, sin, out, inter, false);
  return make_result(out, "rope_rotate", {x}, [x, cos, sin, inter](const Tensor& g) {
    Tensor dx = empty_like(g);
    backend_of(g).rope_rotate(g, cos, sin, dx, inter, true);  // transpose rotation
    acc(x, dx);
  });
}

}  // namespace ctx
