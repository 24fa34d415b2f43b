// autograd/kernels/cope.cpp — the slots of CoPE's kernels (cope.h) and the argument checks every
// device runs before its kernel: one message per mistake, whatever the device.
#include "autograd/kernels/cope.h"

namespace ctx::kernels {
namespace {

using Named = std::initializer_list<std::pair<const char*, const Tensor*>>;

// a [B, H, T, S] f32 / f64; `bhts` tensors like a, `bhtn` tensors [B, H, T, npos] of z's npos.
void check_cope(const char* op, const Tensor& a, const Tensor& z, Named bhts, Named bhtn, int64_t q_pos0,
                int64_t window, int64_t sinks) {
  CTX_CHECK(a.defined() && a.dim() == 4 && (a.dtype() == DType::F32 || a.dtype() == DType::F64), op,
            ": a must be f32 or f64 [B, H, T, S], got ", a.defined() ? a.str() : std::string("undefined"));
  const Shape& s = a.shape();
  CTX_CHECK(z.defined() && z.dim() == 4 && z.size(3) >= 1, op, ": z must be [B, H, T, npos], got ",
            z.defined() ? z.str() : std::string("undefined"));
  auto check = [&](const char* name, const Tensor* t, const Shape& want) {
    CTX_CHECK(t->defined() && t->dtype() == a.dtype() && t->shape() == want, op, ": ", name, " must be ",
              dtype_name(a.dtype()), shape_str(want), " for a ", a.str(), ", got ",
              t->defined() ? t->str() : std::string("undefined"));
  };
  check("z", &z, {s[0], s[1], s[2], z.size(3)});
  for (auto& [n, t] : bhts) check(n, t, s);
  for (auto& [n, t] : bhtn) check(n, t, z.shape());
  CTX_CHECK(q_pos0 >= 0 && window >= 0 && sinks >= 0, op, ": need q_pos0 >= 0, window >= 0 and sinks >= 0, got ",
            q_pos0, ", ", window, " and ", sinks);
  CTX_CHECK(sinks == 0 || window > 0, op, ": sinks (", sinks, ") need a window > 0 (POSENC_SPEC §6), got window 0");
}

void check_forward(Device d, const Tensor& a, const Tensor& z, const int64_t& q_pos0, const int64_t& window,
                   const int64_t& sinks, const double& scale, const Tensor& out, const Tensor& psum) {
  (void)scale;
  check_on_device(d, "cope_forward", {&a, &z, &out, &psum});
  check_cope("cope_forward", a, z, {{"out", &out}, {"psum", &psum}}, {}, q_pos0, window, sinks);
}

void check_backward(Device d, const Tensor& dout, const Tensor& a, const Tensor& z, const Tensor& psum,
                    const int64_t& q_pos0, const int64_t& window, const int64_t& sinks, const double& scale,
                    const Tensor& da, const Tensor& dz) {
  (void)scale;
  check_on_device(d, "cope_backward", {&dout, &a, &z, &psum, &da, &dz});
  check_cope("cope_backward", a, z, {{"dout", &dout}, {"psum", &psum}, {"da", &da}}, {{"dz", &dz}}, q_pos0, window,
             sinks);
}

void check_softmax_forward(Device d, const Tensor& a, const Tensor& z, const int64_t& q_pos0, const int64_t& window,
                           const int64_t& sinks, const double& scale, const Tensor& p, const Tensor& psum) {
  (void)scale;
  check_on_device(d, "cope_softmax_forward", {&a, &z, &p, &psum});
  check_cope("cope_softmax_forward", a, z, {{"p", &p}, {"psum", &psum}}, {}, q_pos0, window, sinks);
}

void check_softmax_backward(Device d, const Tensor& dp, const Tensor& p, const Tensor& a, const Tensor& z,
                            const Tensor& psum, const int64_t& q_pos0, const int64_t& window, const int64_t& sinks,
                            const double& scale, const Tensor& da, const Tensor& dz) {
  (void)scale;
  check_on_device(d, "cope_softmax_backward", {&dp, &p, &a, &z, &psum, &da, &dz});
  check_cope("cope_softmax_backward", a, z, {{"dp", &dp}, {"p", &p}, {"psum", &psum}, {"da", &da}}, {{"dz", &dz}},
             q_pos0, window, sinks);
}

}  // namespace

ExtensionKernel<CopeForward> cope_forward{"cope_forward", &check_forward};
ExtensionKernel<CopeBackward> cope_backward{"cope_backward", &check_backward};
ExtensionKernel<CopeSoftmaxForward> cope_softmax_forward{"cope_softmax_forward", &check_softmax_forward};
ExtensionKernel<CopeSoftmaxBackward> cope_softmax_backward{"cope_softmax_backward", &check_softmax_backward};

}  // namespace ctx::kernels
