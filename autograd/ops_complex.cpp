// autograd/ops_complex.cpp — complex_order_embed (ops_position_gen.h): each token's embedding as D/2
// complex numbers z_k = wte[w, 2k] + i wte[w, 2k+1], turned by phi = t * freq[w, k], as one node.
// Forward (rows n = b*T + t, N = B*T):  E = wte[ids] [N, D], Om = freq[ids] [N, D/2],
//   Phi = Om * t_n, out = the interleaved-pair rotation of E by Phi (Backend::rope_rotate).
// Backward, G = dL/dout [N, D]:
//   dE = the transpose rotation of G, scattered into dwte by id (index_add);
//   dPhi_k = G[2k+1] out[2k] - G[2k] out[2k+1] = pair sums of G * rot90(out);
//   dOm = dPhi * t_n, scattered into dfreq by id.
// Where use_fused(FastPath::Rope) says no (core/fast_paths.h: a backend without Fused::Rope, or
// CTXLAB_FUSED_ROPE=0) the same forward from differentiable primitives, whose backward autograd
// derives: complex_order_embed_composed.
#include "autograd/ops_seq_util.h"
#include "autograd/ops_position_gen.h"

namespace ctx {
using namespace detail;

namespace {

// The arguments of both versions (errors name complex_order_embed).
void check_args(const Tensor& w, const Tensor& f, const Tensor& tokens) {
  CTX_CHECK(w.dim() == 2 && w.size(1) % 2 == 0, "complex_order_embed: wte must be [V, D] with D even, got ",
            w.str());
  const int64_t V = w.size(0), D = w.size(1), K = D / 2;
  CTX_CHECK(f.dim() == 2 && f.size(0) == V && f.size(1) == K, "complex_order_embed: freq must be [", V,
            ", ", K, "] for wte ", w.str(), ", got ", f.str());
  CTX_CHECK(tokens.dim() == 2 && (tokens.dtype() == DType::I32 || tokens.dtype() == DType::I64),
            "complex_order_embed: tokens must be i32/i64 [B, T], got ", tokens.str());
  check_compatible(w, f, "complex_order_embed");
  CTX_CHECK(tokens.device() == w.device(), "complex_order_embed: tokens ", tokens.str(),
            " are not on wte's device");
  CTX_CHECK(is_float(w.dtype()), "complex_order_embed: expected float tensors, got ", w.str());
}

// t_n = float(pos0 + n % T) for the rows n = b*T + t: [N, 1], in w's dtype (float32 positions for
// f32 runs), kept on w's device
Tensor row_positions(const Tensor& w, int64_t N, int64_t T, int64_t pos0) {
  Tensor tpos = Tensor::empty({N, 1}, DType::F64);
  for (int64_t n = 0; n < N; ++n) tpos.host<double>()[n] = (double)(pos0 + n % T);
  return device_table(tpos.to(w.dtype()), w);
}

}  // namespace

Variable complex_order_embed_composed(const Variable& wte, const Variable& freq, const Tensor& tokens,
                                      int64_t pos0) {
  const Tensor w = wte.data(), f = freq.data();
  check_args(w, f, tokens);
  const int64_t D = w.size(1), K = D / 2, B = tokens.size(0), T = tokens.size(1), N = B * T;
  const Tensor ids = tokens.view({N});
  const Variable tpos(row_positions(w, N, T, pos0), false);
  const Variable E = reshape(index_select(wte, 0, ids), {N, K, 2});  // pairs (a, b)
  const Variable Phi = mul(index_select(freq, 0, ids), tpos);         // [N, K]
  const Variable C = cos(Phi), S = sin(Phi);
  const Variable a = reshape(slice(E, 2, 0, 1), {N, K}), b = reshape(slice(E, 2, 1, 2), {N, K});
  const Variable ra = sub(mul(a, C), mul(b, S)), rb = add(mul(b, C), mul(a, S));  // a', b'
  return reshape(concat({reshape(ra, {N, K, 1}), reshape(rb, {N, K, 1})}, 2), {B, T, D});
}

Variable complex_order_embed(const Variable& wte, const Variable& freq, const Tensor& tokens, int64_t pos0) {
  const Tensor w = wte.data(), f = freq.data();
  check_args(w, f, tokens);
  Backend& be = backend_of(w);
  if (!use_fused(FastPath::Rope, be)) return complex_order_embed_composed(wte, freq, tokens, pos0);
  const int64_t D = w.size(1), K = D / 2, B = tokens.size(0), T = tokens.size(1), N = B * T;
  const Tensor ids = tokens.view({N});
  const Tensor tpos = row_positions(w, N, T, pos0);

  Tensor E = seq::like(w, {N, D}), Om = seq::like(w, {N, K});
  be.index_select(w, 0, ids, E);
  be.index_select(f, 0, ids, Om);
  const Tensor Phi = seq::mul(Om, tpos);                      // [N, K]
  const Tensor C = seq::un(UnaryOp::Cos, Phi), S = seq::un(UnaryOp::Sin, Phi);
  Tensor out = seq::like(w, {N, D});
  be.rope_rotate(E, C, S, out, /*interleaved=*/true, /*transpose=*/false);

  return make_result(out.view({B, T, D}), "complex_order_embed", {wte, freq},
                     [=](const Tensor& g) {
    Backend& be = backend_of(g);
    const Tensor G = g.view({N, D});
    if (wte.requires_grad()) {
      Tensor dE = seq::like(g, {N, D}), dw = zeros_like(w);
      be.rope_rotate(G, C, S, dE, true, /*transpose=*/true);
      be.index_add(dw, 0, ids, dE);
      acc(wte, dw);
    }
    if (freq.requires_grad()) {
      // rot90(out): (a, b) -> (-b, a), i.e. the rotation by cos 0, sin 1
      Tensor zero = seq::like(g, {N, K}), one = seq::like(g, {N, K}), r90 = seq::like(g, {N, D});
      be.fill(zero, 0.0);
      be.fill(one, 1.0);
      be.rope_rotate(out, zero, one, r90, true, false);
      Tensor dPhi = seq::like(g, {N, K, 1});
      be.reduce_sum(seq::mul(G, r90).view({N, K, 2}), dPhi);
      Tensor dOm = seq::mul(dPhi.view({N, K}), tpos), df = zeros_like(f);
      be.index_add(df, 0, ids, dOm);
      acc(freq, df);
    }
  });
}

}  // namespace ctx
