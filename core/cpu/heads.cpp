// core/cpu/heads.cpp — the head split / merge of multi-head attention on the CPU
// (Backend::split_heads / merge_heads and their backwards, core/cpu/fused.h; arguments checked
// by Backend): forward and backward side by side, each one OpenMP pass over rows of [B, S, 3D] /
// [B, T, D].
#include "core/cpu/fused.h"
#include "core/cpu/parallel.h"

namespace ctx::cpu {
namespace {

template <class T>
inline void copy_n(const T* __restrict s, T* __restrict d, int64_t n) {
  for (int64_t j = 0; j < n; ++j) d[j] = s[j];
}
template <class T>
inline void zero_n(T* d, int64_t n) {
  for (int64_t j = 0; j < n; ++j) d[j] = T(0);
}

struct HeadDims {
  int64_t B, S, H, Dh, q0;  // q0: first query row
  int64_t D() const { return H * Dh; }
  int64_t Tq() const { return S - q0; }
};

// x [B, S, 3D] -> q [B, H, Tq, Dh], k [B, H, S, Dh], v [B, H, S, Dh]
template <class T>
void split_forward(const T* x, T* q, T* k, T* v, const HeadDims& d) {
  const int64_t S = d.S, H = d.H, Dh = d.Dh, D = d.D(), Tq = d.Tq(), q0 = d.q0;
  CTX_OMP_IF(parallel_pays(d.B * S * 3 * D * 2), "omp parallel for schedule(static)",
  for (int64_t r = 0; r < d.B * S; ++r) {
    const int64_t b = r / S, s = r % S;
    const T* row = x + r * 3 * D;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = ((b * H + h) * S + s) * Dh;
      if (s >= q0) copy_n(row + h * Dh, q + ((b * H + h) * Tq + (s - q0)) * Dh, Dh);
      copy_n(row + D + h * Dh, k + kv, Dh);
      copy_n(row + 2 * D + h * Dh, v + kv, Dh);
    }
  });
}

// dq [B, H, Tq, Dh], dk, dv [B, H, S, Dh] (each may be null: zero) -> dx [B, S, 3D]
template <class T>
void split_backward(const T* dq, const T* dk, const T* dv, T* dx, const HeadDims& d) {
  const int64_t S = d.S, H = d.H, Dh = d.Dh, D = d.D(), Tq = d.Tq(), q0 = d.q0;
  CTX_OMP_IF(parallel_pays(d.B * S * 3 * D * 2), "omp parallel for schedule(static)",
  for (int64_t r = 0; r < d.B * S; ++r) {
    const int64_t b = r / S, s = r % S;
    T* row = dx + r * 3 * D;
    for (int64_t h = 0; h < H; ++h) {
      if (dq && s >= q0) copy_n(dq + ((b * H + h) * Tq + (s - q0)) * Dh, row + h * Dh, Dh);
      else zero_n(row + h * Dh, Dh);
    }
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = ((b * H + h) * S + s) * Dh;
      if (dk) copy_n(dk + kv, row + D + h * Dh, Dh);
      else zero_n(row + D + h * Dh, Dh);
    }
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = ((b * H + h) * S + s) * Dh;
      if (dv) copy_n(dv + kv, row + 2 * D + h * Dh, Dh);
      else zero_n(row + 2 * D + h * Dh, Dh);
    }
  });
}

// to_merged: src o [B, H, T, Dh] -> dst [B, T, H*Dh]; else src [B, T, H*Dh] -> dst o
template <class T>
void merge_copy(const T* src, T* dst, int64_t B, int64_t H, int64_t Tn, int64_t Dh, bool to_merged) {
  const int64_t D = H * Dh;
  CTX_OMP_IF(parallel_pays(B * Tn * D * 2), "omp parallel for schedule(static)",
  for (int64_t r = 0; r < B * Tn; ++r) {
    const int64_t b = r / Tn, t = r % Tn;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t a = ((b * H + h) * Tn + t) * Dh, m = r * D + h * Dh;  // o / merged offsets
      if (to_merged) copy_n(src + a, dst + m, Dh);
      else copy_n(src + m, dst + a, Dh);
    }
  });
}

// The sizes of a split from qkv [B, S, 3 H Dh] (checked: checks::split_heads / _backward).
HeadDims split_dims(const Shape& qkv, int64_t H, int64_t q_begin) {
  return HeadDims{qkv[0], qkv[1], H, qkv[2] / (3 * H), q_begin};
}

}  // namespace

void split_heads(const Tensor& qkv, int64_t H, int64_t q_begin, Tensor& q, Tensor& k, Tensor& v) {
  const HeadDims d = split_dims(qkv.shape(), H, q_begin);
  if (qkv.dtype() == DType::F32)
    split_forward(qkv.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(), d);
  else
    split_forward(qkv.data<double>(), q.data<double>(), k.data<double>(), v.data<double>(), d);
}

void split_heads_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t H, int64_t q_begin,
                          Tensor& dqkv) {
  const HeadDims d = split_dims(dqkv.shape(), H, q_begin);
  const DType dt = dqkv.dtype();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    auto p = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    split_backward(p(dq), p(dk), p(dv), dqkv.data<T>(), d);
  };
  if (dt == DType::F32) run(float());
  else run(double());
}

void merge_heads(const Tensor& o, Tensor& out) {
  const int64_t B = o.size(0), H = o.size(1), Tn = o.size(2), Dh = o.size(3);
  if (o.dtype() == DType::F32) merge_copy(o.data<float>(), out.data<float>(), B, H, Tn, Dh, true);
  else merge_copy(o.data<double>(), out.data<double>(), B, H, Tn, Dh, true);
}

void merge_heads_backward(const Tensor& dout, Tensor& d_o) {
  const int64_t B = d_o.size(0), H = d_o.size(1), Tn = d_o.size(2), Dh = d_o.size(3);
  if (dout.dtype() == DType::F32) merge_copy(dout.data<float>(), d_o.data<float>(), B, H, Tn, Dh, false);
  else merge_copy(dout.data<double>(), d_o.data<double>(), B, H, Tn, Dh, false);
}

}  // namespace ctx::cpu
