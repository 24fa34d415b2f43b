// autograd/ops_heads.cpp — split_heads / merge_heads (autograd/ops_heads.h): forward and
// backward side by side, each one OpenMP pass over rows of [B, S, 3D] / [B, T, D].
//
// split_heads has three outputs, and a Node belongs to one Variable, so it is recorded as
//   heads = "split_heads"(qkv)        flat buffer [B*H*Tq*Dh + 2*B*H*S*Dh] = q | k | v
//   q, k, v = "split_heads.out"(heads) zero-copy views of its three ranges
// The outputs' backward closures only hand their gradient to a state shared with the
// split_heads node (and mark heads as reached); reverse topological order runs all of them
// before that node, whose backward then writes dqkv [B, S, 3D] in one pass from whichever
// gradients arrived (zeros for the others). No [3, B, H, S, Dh] gradient is materialised.
#include "autograd/ops_heads.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "autograd/ops_util.h"
#include "core/switch.h"

namespace ctx {
using namespace detail;

static FastPathSwitch g_fused_heads("CTXLAB_FUSED_HEADS");
bool fused_heads_enabled() { return g_fused_heads.enabled(); }
void set_fused_heads(bool on) { g_fused_heads.set(on); }
void reset_fused_heads() { g_fused_heads.reset(); }

namespace {

constexpr int64_t kParallelMin = 1 << 15;  // elements; below this one thread is faster

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
  int64_t nq() const { return B * H * Tq() * Dh; }
  int64_t nkv() const { return B * H * S * Dh; }
};

// x [B, S, 3D] -> q [B, H, Tq, Dh], k [B, H, S, Dh], v [B, H, S, Dh]
template <class T>
void split_forward(const T* x, T* q, T* k, T* v, const HeadDims& d) {
  const int64_t S = d.S, H = d.H, Dh = d.Dh, D = d.D(), Tq = d.Tq(), q0 = d.q0;
#pragma omp parallel for schedule(static) if (d.B * S * 3 * D >= kParallelMin)
  for (int64_t r = 0; r < d.B * S; ++r) {
    const int64_t b = r / S, s = r % S;
    const T* row = x + r * 3 * D;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = ((b * H + h) * S + s) * Dh;
      if (s >= q0) copy_n(row + h * Dh, q + ((b * H + h) * Tq + (s - q0)) * Dh, Dh);
      copy_n(row + D + h * Dh, k + kv, Dh);
      copy_n(row + 2 * D + h * Dh, v + kv, Dh);
    }
  }
}

// dq [B, H, Tq, Dh], dk, dv [B, H, S, Dh] (each may be null: zero) -> dx [B, S, 3D]
template <class T>
void split_backward(const T* dq, const T* dk, const T* dv, T* dx, const HeadDims& d) {
  const int64_t S = d.S, H = d.H, Dh = d.Dh, D = d.D(), Tq = d.Tq(), q0 = d.q0;
#pragma omp parallel for schedule(static) if (d.B * S * 3 * D >= kParallelMin)
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
  }
}

// to_merged: src o [B, H, T, Dh] -> dst [B, T, H*Dh]; else src [B, T, H*Dh] -> dst o
template <class T>
void merge_copy(const T* src, T* dst, int64_t B, int64_t H, int64_t Tn, int64_t Dh, bool to_merged) {
  const int64_t D = H * Dh;
#pragma omp parallel for schedule(static) if (B * Tn * D >= kParallelMin)
  for (int64_t r = 0; r < B * Tn; ++r) {
    const int64_t b = r / Tn, t = r % Tn;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t a = ((b * H + h) * Tn + t) * Dh, m = r * D + h * Dh;  // o / merged offsets
      if (to_merged) copy_n(src + a, dst + m, Dh);
      else copy_n(src + m, dst + a, Dh);
    }
  }
}

// What the three outputs' backward closures pass to the split_heads node.
struct SplitState {
  std::array<Tensor, 3> g;  // dq, dk, dv of this backward pass (undefined: none arrived)
};

}  // namespace

std::array<Variable, 3> split_heads(const Variable& qkv, int64_t H, int64_t q_begin) {
  const Tensor& x = qkv.data();
  CTX_CHECK(x.dim() == 3, "split_heads: qkv must be [B, S, 3D], got ", x.str());
  CTX_CHECK(is_float(x.dtype()), "split_heads: qkv must be f32 or f64, got ", x.str());
  CTX_CHECK(H > 0 && x.size(2) % (3 * H) == 0, "split_heads: last dim of ", x.str(),
            " is not 3 * H * Dh for H = ", H);
  const int64_t B = x.size(0), S = x.size(1), Dh = x.size(2) / (3 * H);
  CTX_CHECK(0 <= q_begin && q_begin < S, "split_heads: q_begin ", q_begin, " out of [0, ", S,
            ") for ", x.str());

  if (x.device() != Device::CPU || !fused_heads_enabled()) {  // the composition it replaces
    Variable heads = permute(reshape(qkv, {B, S, 3, H, Dh}), {2, 0, 3, 1, 4});  // [3, B, H, S, Dh]
    Variable q = reshape(slice(heads, 0, 0, 1), {B, H, S, Dh});
    if (q_begin > 0) q = slice(q, 2, q_begin, S);
    return {q, reshape(slice(heads, 0, 1, 2), {B, H, S, Dh}), reshape(slice(heads, 0, 2, 3), {B, H, S, Dh})};
  }

  const HeadDims d{B, S, H, Dh, q_begin};
  const int64_t nq = d.nq(), nkv = d.nkv();
  Tensor flat = Tensor::empty({nq + 2 * nkv}, x.dtype());  // q | k | v
  if (x.dtype() == DType::F32)
    split_forward(x.data<float>(), flat.data<float>(), flat.data<float>() + nq,
                  flat.data<float>() + nq + nkv, d);
  else
    split_forward(x.data<double>(), flat.data<double>(), flat.data<double>() + nq,
                  flat.data<double>() + nq + nkv, d);

  auto state = std::make_shared<SplitState>();
  const Shape qkv_shape = x.shape();
  const DType dt = x.dtype();
  Variable heads = make_result(flat, "split_heads", {qkv}, [qkv, state, d, qkv_shape, dt](const Tensor&) {
    std::array<Tensor, 3> g = std::move(state->g);  // and release them from the state
    state->g = {};
    for (int i = 0; i < 3; ++i)
      CTX_CHECK(!g[i].defined() || (g[i].dtype() == dt && g[i].numel() == (i ? d.nkv() : d.nq())),
                "split_heads: backward got gradient ", g[i].str(), " for output ", i);
    Tensor dx = Tensor::empty(qkv_shape, dt);
    if (dx.dtype() == DType::F32) {
      auto p = [&](int i) { return g[i].defined() ? g[i].data<float>() : nullptr; };
      split_backward(p(0), p(1), p(2), dx.data<float>(), d);
    } else {
      auto p = [&](int i) { return g[i].defined() ? g[i].data<double>() : nullptr; };
      split_backward(p(0), p(1), p(2), dx.data<double>(), d);
    }
    acc(qkv, dx);
  });

  const std::array<int64_t, 3> begin = {0, nq, nq + nkv}, count = {nq, nkv, nkv};
  const std::array<Shape, 3> shapes = {Shape{B, H, S - q_begin, Dh}, Shape{B, H, S, Dh}, Shape{B, H, S, Dh}};
  std::array<Variable, 3> out;
  for (int i = 0; i < 3; ++i) {
    Tensor view = flat.slice0(begin[i], begin[i] + count[i]).view(shapes[i]);
    out[i] = make_result(view, "split_heads.out", {heads}, [state, hv = heads.impl(), i](const Tensor& g) {
      // Each output's node runs once per backward pass, before the split_heads node.
      state->g[i] = g;
      if (!hv->grad.defined()) hv->grad = hv->data;  // a marker (never read): run split_heads
    });
  }
  return out;
}

Variable merge_heads(const Variable& o) {
  const Tensor& x = o.data();
  CTX_CHECK(x.dim() == 4, "merge_heads: o must be [B, H, T, Dh], got ", x.str());
  CTX_CHECK(is_float(x.dtype()), "merge_heads: o must be f32 or f64, got ", x.str());
  const int64_t B = x.size(0), H = x.size(1), Tn = x.size(2), Dh = x.size(3);
  if (x.device() != Device::CPU || !fused_heads_enabled())  // the composition it replaces
    return reshape(permute(o, {0, 2, 1, 3}), {B, Tn, H * Dh});

  Tensor out = Tensor::empty({B, Tn, H * Dh}, x.dtype());
  if (x.dtype() == DType::F32) merge_copy(x.data<float>(), out.data<float>(), B, H, Tn, Dh, true);
  else merge_copy(x.data<double>(), out.data<double>(), B, H, Tn, Dh, true);
  const Shape in_shape = x.shape();
  return make_result(out, "merge_heads", {o}, [o, in_shape, B, H, Tn, Dh](const Tensor& g) {
    Tensor dx = Tensor::empty(in_shape, g.dtype());
    if (g.dtype() == DType::F32) merge_copy(g.data<float>(), dx.data<float>(), B, H, Tn, Dh, false);
    else merge_copy(g.data<double>(), dx.data<double>(), B, H, Tn, Dh, false);
    acc(o, dx);
  });
}

}  // namespace ctx
