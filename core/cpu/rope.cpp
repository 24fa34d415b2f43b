// core/cpu/rope.cpp — the rotary rotation on the CPU (Backend::rope_rotate, core/cpu/fused.h):
// one OpenMP pass over the rows; the backward is the same kernel with the angle negated.
#include "core/cpu/fused.h"
#include "core/cpu/parallel.h"

namespace ctx::cpu {
namespace {

// out[r, t, :] = rotation of x[r, t, :] by row t of (C, S); `transpose` rotates by -angle.
// x, out: [R, T, d]; C, S: [T, d/2].
template <class F>
void rotate_kernel(const F* x, const F* C, const F* S, F* out, int64_t R, int64_t T, int64_t d,
                   bool interleaved, bool transpose) {
  const int64_t h = d / 2;
  const F sgn = transpose ? F(-1) : F(1);
  CTX_OMP_IF(parallel_pays(R * T * d * 2), "omp parallel for schedule(static)",
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
  });
}

}  // namespace

void rope_rotate_rows_f32(const float* x, const float* C, const float* S, float* out, int64_t R, int64_t T, int64_t d,
                          bool interleaved) {
  rotate_kernel(x, C, S, out, R, T, d, interleaved, false);
}

void rope_rotate(const Tensor& x, const Tensor& C, const Tensor& S, Tensor& out, bool interleaved,
                 bool transpose) {
  const int64_t d = x.size(-1), T = x.size(-2);  // checked: checks::rope_rotate
  if (x.numel() == 0) return;
  const int64_t R = x.numel() / (T * d);
  if (x.dtype() == DType::F32)
    rotate_kernel(x.data<float>(), C.data<float>(), S.data<float>(), out.data<float>(), R, T, d, interleaved,
                  transpose);
  else
    rotate_kernel(x.data<double>(), C.data<double>(), S.data<double>(), out.data<double>(), R, T, d,
                  interleaved, transpose);
}

}  // namespace ctx::cpu
