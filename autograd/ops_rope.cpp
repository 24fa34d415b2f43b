// autograd/ops_rope.cpp — rope_rotate (see ops_rope.h): a fused CPU kernel for f32 / f64, and
// a composition of existing ops (slice / mul / concat) for other devices.
#include "autograd/ops_rope.h"

#include "autograd/ops_util.h"

namespace ctx {
using namespace detail;

namespace {

// out[r, t, :] = rotation of x[r, t, :] by row t of (C, S); `transpose` rotates by -angle.
// x, out: [R, T, d]; C, S: [T, d/2].
template <class F>
void rotate_kernel(const F* x, const F* C, const F* S, F* out, int64_t R, int64_t T, int64_t d,
                   bool interleaved, bool transpose) {
  const int64_t h = d / 2;
  const F sgn = transpose ? F(-1) : F(1);
#pragma omp parallel for schedule(static) if (R * T * d > 32768)
  for (int64_t rt = 0; rt < R * T; ++rt) {
    const int64_t t = rt % T;
    const F* xr = x + rt * d;
    F* o = out + rt * d;
    const F* c = C + t * h;
    const F* s = S + t * h;
    for (int64_t k = 0; k < h; ++k) {
      const int64_t ia = interleaved ? 2 * k : k, ib = interleaved ? 2 * k + 1 : k + h;
      const F a = xr[ia], b = xr[ib], sk = sgn * s[k];
      o[ia] = a * c[k] - b * sk;
      o[ib] = b * c[k] + a * sk;
    }
  }
}

Tensor rotate_cpu(const Tensor& x, const Tensor& C, const Tensor& S, bool interleaved, bool transpose) {
  const int64_t d = x.size(-1), T = x.size(-2), R = x.numel() / (T * d);
  Tensor out = empty_like(x);
  if (x.dtype() == DType::F32)
    rotate_kernel(x.data<float>(), C.data<float>(), S.data<float>(), out.data<float>(), R, T, d,
                  interleaved, transpose);
  else
    rotate_kernel(x.data<double>(), C.data<double>(), S.data<double>(), out.data<double>(), R, T, d,
                  interleaved, transpose);
  return out;
}

// The same rotation from differentiable primitives (devices without the fused kernel).
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
  if (xd.device() != Device::CPU || (xd.dtype() != DType::F32 && xd.dtype() != DType::F64))
    return rotate_composed(x, cos, sin, inter);
  Tensor out = rotate_cpu(xd, cos, sin, inter, false);
  return make_result(out, "rope_rotate", {x}, [x, cos, sin, inter](const Tensor& g) {
    acc(x, rotate_cpu(g, cos, sin, inter, true));  // transpose rotation
  });
}

}  // namespace ctx
