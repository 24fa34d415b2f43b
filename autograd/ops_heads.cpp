// autograd/ops_heads.cpp — split_heads / merge_heads (autograd/ops_heads.h): the graph around
// Backend::split_heads / merge_heads and their backwards (Fused::Heads; CPU kernels in
// core/cpu/heads.cpp), or the reshape / permute / slice composition they replace.
//
// split_heads has three outputs, and a Node belongs to one Variable, so it is recorded as
//   heads = "split_heads"(qkv)        flat buffer [B*H*Tq*Dh + 2*B*H*S*Dh] = q | k | v
//   q, k, v = "split_heads.out"(heads) zero-copy views of its three ranges
// The outputs' backward closures only hand their gradient to a state shared with the
// split_heads node (and mark heads as reached); reverse topological order runs all of them
// before that node, whose backward then writes dqkv [B, S, 3D] in one pass from whichever
// gradients arrived (zeros for the others). No [3, B, H, S, Dh] gradient is materialised.
#include "autograd/ops_heads.h"

#include "autograd/ops_util.h"
#include "core/fast_paths.h"

namespace ctx {
using namespace detail;

namespace {

struct HeadDims {
  int64_t B, S, H, Dh, q0;  // q0: first query row
  int64_t Tq() const { return S - q0; }
  int64_t nq() const { return B * H * Tq() * Dh; }
  int64_t nkv() const { return B * H * S * Dh; }
};

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

  Backend& be = backend_of(x);
  if (!use_fused(FastPath::Heads, be)) {  // the composition it replaces
    Variable heads = permute(reshape(qkv, {B, S, 3, H, Dh}), {2, 0, 3, 1, 4});  // [3, B, H, S, Dh]
    Variable q = reshape(slice(heads, 0, 0, 1), {B, H, S, Dh});
    if (q_begin > 0) q = slice(q, 2, q_begin, S);
    return {q, reshape(slice(heads, 0, 1, 2), {B, H, S, Dh}), reshape(slice(heads, 0, 2, 3), {B, H, S, Dh})};
  }

  const HeadDims d{B, S, H, Dh, q_begin};
  const int64_t nq = d.nq(), nkv = d.nkv();
  Tensor flat = Tensor::empty({nq + 2 * nkv}, x.dtype(), x.device());  // q | k | v
  const std::array<int64_t, 3> begin = {0, nq, nq + nkv}, count = {nq, nkv, nkv};
  const std::array<Shape, 3> shapes = {Shape{B, H, S - q_begin, Dh}, Shape{B, H, S, Dh}, Shape{B, H, S, Dh}};
  std::array<Tensor, 3> views;
  for (int i = 0; i < 3; ++i) views[i] = flat.slice0(begin[i], begin[i] + count[i]).view(shapes[i]);
  be.split_heads(x, H, q_begin, views[0], views[1], views[2]);

  auto state = std::make_shared<SplitState>();
  const Shape qkv_shape = x.shape();
  const DType dt = x.dtype();
  const Device dev = x.device();
  Variable heads = make_result(flat, "split_heads", {qkv}, [qkv, state, d, qkv_shape, dt, dev, shapes](const Tensor&) {
    std::array<Tensor, 3> g = std::move(state->g);  // and release them from the state
    state->g = {};
    for (int i = 0; i < 3; ++i)
      CTX_CHECK(!g[i].defined() || (g[i].dtype() == dt && g[i].numel() == (i ? d.nkv() : d.nq())),
                "split_heads: backward got gradient ", g[i].str(), " for output ", i);
    Tensor dx = Tensor::empty(qkv_shape, dt, dev);
    for (int i = 0; i < 3; ++i)  // a gradient arrives with its output's shape, or flat
      if (g[i].defined() && g[i].shape() != shapes[i]) g[i] = g[i].view(shapes[i]);
    backend_of(dx).split_heads_backward(g[0], g[1], g[2], d.H, d.q0, dx);
    acc(qkv, dx);
  });

  std::array<Variable, 3> out;
  for (int i = 0; i < 3; ++i) {
    const Tensor& view = views[i];
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
  Backend& be = backend_of(x);
  if (!use_fused(FastPath::Heads, be))  // the composition it replaces
    return reshape(permute(o, {0, 2, 1, 3}), {B, Tn, H * Dh});

  Tensor out = Tensor::empty({B, Tn, H * Dh}, x.dtype(), x.device());
  be.merge_heads(x, out);
  const Shape in_shape = x.shape();
  return make_result(out, "merge_heads", {o}, [o, in_shape](const Tensor& g) {
    Tensor dx = Tensor::empty(in_shape, g.dtype(), g.device());  // [B, H, T, Dh]
    backend_of(g).merge_heads_backward(g, dx);
    acc(o, dx);
  });
}

}  // namespace ctx
