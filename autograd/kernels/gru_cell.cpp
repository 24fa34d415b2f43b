// autograd/kernels/gru_cell.cpp — the slots of the GRU cell and sequence kernels (gru_cell.h) and the argument
// checks every device runs before its kernel: one message per mistake, whatever the device.
#include "autograd/kernels/gru_cell.h"

#include <array>
#include <vector>

namespace ctx::kernels {
namespace {

// hp [B, H] (f32 / f64); each `bh` tensor [B, H], each `b3h` one [B, 3H], bhn (when given) [H],
// all of hp's dtype and device (errors name the kernel and the argument).
using NamedTensors = std::initializer_list<std::pair<const char*, const Tensor*>>;
void check_gru_cell(const char* op, const Tensor& hp, NamedTensors bh, NamedTensors b3h, const Tensor* bhn) {
  CTX_CHECK(hp.defined() && hp.dim() == 2 && (hp.dtype() == DType::F32 || hp.dtype() == DType::F64), op,
            ": hp must be f32 or f64 [B, H], got ", hp.defined() ? hp.str() : std::string("undefined"));
  const int64_t B = hp.size(0), H = hp.size(1);
  auto check = [&](const char* name, const Tensor* t, const Shape& want) {
    CTX_CHECK(t->defined() && t->dtype() == hp.dtype() && t->shape() == want && t->device() == hp.device(), op, ": ",
              name, " must be ", dtype_name(hp.dtype()), shape_str(want), " on ", device_name(hp.device()),
              " for hp ", hp.str(), ", got ", t->defined() ? t->str() : std::string("undefined"));
  };
  for (auto& [n, t] : bh) check(n, t, {B, H});
  for (auto& [n, t] : b3h) check(n, t, {B, 3 * H});
  if (bhn) check("bhn", bhn, {H});
}

void check_forward(Device d, const Tensor& xg, const Tensor& hg, const Tensor& bhn, const Tensor& hp, const Tensor& h,
                   const Tensor& rzn, const Tensor& hn) {
  check_on_device(d, "gru_cell_forward", {&xg, &hg, &bhn, &hp, &h, &rzn, &hn});
  check_gru_cell("gru_cell_forward", hp, {{"h", &h}, {"hn", &hn}}, {{"xg", &xg}, {"hg", &hg}, {"rzn", &rzn}}, &bhn);
}

void check_backward(Device d, const Tensor& gy, const Tensor& dhc, const Tensor& hp, const Tensor& rzn,
                    const Tensor& hn, const Tensor& d1, const Tensor& d2, const Tensor& dh) {
  check_on_device(d, "gru_cell_backward", {&gy, &dhc, &hp, &rzn, &hn, &d1, &d2, &dh});
  check_gru_cell("gru_cell_backward", hp, {{"gy", &gy}, {"dhc", &dhc}, {"hn", &hn}, {"dh", &dh}},
                 {{"rzn", &rzn}, {"d1", &d1}, {"d2", &d2}}, nullptr);
}

// The sequence kernels: hn [T, B, H] (f32 / f64) sets T, B, H; every tensor of `ts` has the shape
// given with it, hn's dtype and device.
struct Shaped {
  const char* name;
  const Tensor* t;
  Shape want;
};
void check_gru_sequence(const char* op, const Tensor& hn, const std::vector<Shaped>& ts) {
  for (const Shaped& s : ts)
    CTX_CHECK(s.t->defined() && s.t->dtype() == hn.dtype() && s.t->shape() == s.want && s.t->device() == hn.device(),
              op, ": ", s.name, " must be ", dtype_name(hn.dtype()), shape_str(s.want), " on ", device_name(hn.device()),
              " for hn ", hn.str(), ", got ", s.t->defined() ? s.t->str() : std::string("undefined"));
}
// hn's own check; returns {T, B, H}.
std::array<int64_t, 3> sequence_dims(const char* op, const Tensor& hn) {
  CTX_CHECK(hn.defined() && hn.dim() == 3 && (hn.dtype() == DType::F32 || hn.dtype() == DType::F64), op,
            ": hn must be f32 or f64 [T, B, H], got ", hn.defined() ? hn.str() : std::string("undefined"));
  return {hn.size(0), hn.size(1), hn.size(2)};
}

void check_seq_forward(Device d, const Tensor& xg, const Tensor& wh, const Tensor& bhn, const Tensor& Hs,
                       const Tensor& rzn, const Tensor& hn) {
  const char* op = "gru_sequence_forward";
  check_on_device(d, op, {&xg, &wh, &bhn, &Hs, &rzn, &hn});
  const auto dims = sequence_dims(op, hn);
  const int64_t T = dims[0], B = dims[1], H = dims[2];
  check_gru_sequence(op, hn,
                     {{"xg", &xg, {T, B, 3 * H}}, {"wh", &wh, {3 * H, H}}, {"bhn", &bhn, {H}},
                      {"Hs", &Hs, {T + 1, B, H}}, {"rzn", &rzn, {T, B, 3 * H}}});
}

void check_seq_backward(Device d, const Tensor& gy, const Tensor& wh, const Tensor& Hs, const Tensor& rzn,
                        const Tensor& hn, const Tensor& d1, const Tensor& d2) {
  const char* op = "gru_sequence_backward";
  check_on_device(d, op, {&gy, &wh, &Hs, &rzn, &hn, &d1, &d2});
  const auto dims = sequence_dims(op, hn);
  const int64_t T = dims[0], B = dims[1], H = dims[2];
  check_gru_sequence(op, hn,
                     {{"gy", &gy, {T, B, H}}, {"wh", &wh, {3 * H, H}}, {"Hs", &Hs, {T + 1, B, H}},
                      {"rzn", &rzn, {T, B, 3 * H}}, {"d1", &d1, {T, B, 3 * H}}, {"d2", &d2, {T, B, 3 * H}}});
}

}  // namespace

ExtensionKernel<GruSequenceForward> gru_sequence_forward{"gru_sequence_forward", &check_seq_forward};
ExtensionKernel<GruSequenceBackward> gru_sequence_backward{"gru_sequence_backward", &check_seq_backward};
ExtensionKernel<GruCellForward> gru_cell_forward{"gru_cell_forward", &check_forward};
ExtensionKernel<GruCellBackward> gru_cell_backward{"gru_cell_backward", &check_backward};

}  // namespace ctx::kernels
