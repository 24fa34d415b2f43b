// autograd/ops_gru.cpp — gru_sequence (ops_position_gen.h): a GRU layer through time as one node.
// Layout: time-major and gate-separated so that every per-step tensor is a contiguous view.
//   X  [T, B, In]            the input, time-major
//   XG [3, T, B, H]          W_i{r,z,n} x_t + biases (r, z: b_i + b_h; n: b_in): 3 GEMMs for all t
//   per step t (sequential):  Hg = h_{t-1} W_h{r,z,n}^T (3 GEMMs [B, H]), HN[t] = Hg_n + b_hn,
//     r = s(XG_r + Hg_r), z = s(XG_z + Hg_z), n = tanh(XG_n + r HN[t]), h_t = n + z (h_{t-1} - n)
// Saved: Hs [T+1, B, H] (Hs[0] = 0), R, Z, N, HN [T, B, H].
// Backward, t = T-1..0, with g = dL/dh_t (output gradient + what flows back from t+1):
//   dz = g (h_{t-1} - n), dn = g (1 - z), dNpre = dn (1 - n^2), dr = dNpre HN[t],
//   dAr = dr r (1 - r), dAz = dz z (1 - z), dHn = dNpre r,
//   dh_{t-1} = g z + dAr W_hr + dAz W_hz + dHn W_hn.
// The weight gradients are then one GEMM per gate over all T*B rows (dAr, dAz, dNpre against X;
// dAr, dAz, dHn against Hs[0..T-1]); the bias gradients are column sums.
//
// Two implementations: the composed loop below (the reference: ~20 backend primitives per step,
// each gate its own GEMM) and, on a device with the GRU cell kernels (CTXLAB_FUSED_GRU=0 turns it
// off), the fused one: gate-interleaved [T, B, 3H] layout, the input projection one GEMM with
// the bias inside (Backend::linear), per step one [B, H] x [H, 3H] GEMM plus one fused gate
// kernel forward (gru_cell_forward) and one kernel plus one GEMM backward (gru_cell_backward),
// and the weight gradients one GEMM each over all T*B rows. Where the device has the sequence
// kernels (the CPU: gru_sequence_forward / _backward), the per-step loop each way is one call
// instead: one parallel region per sequence, each thread a slice of the hidden units, a barrier a
// step (not 2 x T regions a step). The gate kernels are this op's own
// extension kernels (core/extension.h), not Backend methods: autograd/kernels/gru_cell.h declares
// them, gru_cell_cpu.cpp and gru_cell_cuda.cu register them per device.
#include "autograd/kernels/gru_cell.h"
#include "autograd/ops_seq_util.h"
#include "autograd/ops_position_gen.h"

namespace ctx {
using namespace detail;

namespace {
Tensor gate(const Tensor& w, int g, int64_t H) { return w.slice0(g * H, (g + 1) * H); }  // row block r, z, n

// ---- fast: the fused gate kernels (see the top of the file) ----
Variable gru_sequence_fused(const Variable& x, const Variable& w_ih, const Variable& w_hh, const Variable& b_ih,
                            const Variable& b_hh, int64_t B, int64_t T, int64_t In, int64_t H) {
  const Tensor xd = x.data(), wi = w_ih.data(), wh = w_hh.data(), bi = b_ih.data(), bh = b_hh.data();
  Backend& be = backend_of(xd);
  const Device dev = xd.device();
  const Tensor X = seq::swap01(xd).view({T * B, In});  // time-major rows
  Tensor bias = seq::add(bi, bh);                      // r, z: both biases sit inside the sigmoid
  seq::copy_into(gate(bi, 2, H), gate(bias, 2, H));    // n: b_in only (b_hn sits inside r (...))
  Tensor XG = seq::like(xd, {T * B, 3 * H});           // [T, B, 3H] gate-interleaved
  be.linear(X, wi, bias, XG);
  Tensor Hs = seq::like(xd, {T + 1, B, H}), RZN = seq::like(xd, {T, B, 3 * H}), HN = seq::like(xd, {T, B, H});
  Tensor h0 = Hs.select0(0);
  be.fill(h0, 0.0);
  const Tensor bhn = gate(bh, 2, H);
  if (kernels::gru_sequence_forward.has(dev)) {  // the CPU: every step in one parallel region
    const Tensor xg = XG.view({T, B, 3 * H});
    kernels::gru_sequence_forward(dev, xg, wh, bhn, Hs, RZN, HN);
  } else {
    Tensor hg = seq::like(xd, {B, 3 * H});
    for (int64_t t = 0; t < T; ++t) {
      seq::mm(Hs.select0(t), false, wh, true, hg);  // [B, H] x [H, 3H]
      Tensor h = Hs.select0(t + 1), rzn = RZN.select0(t), hn = HN.select0(t);
      kernels::gru_cell_forward(dev, XG.slice0(t * B, (t + 1) * B), hg, bhn, Hs.select0(t), h, rzn, hn);
    }
  }
  Tensor out = seq::swap01(Hs.slice0(1, T + 1));  // [B, T, H]

  return make_result(out, "gru_sequence", {x, w_ih, w_hh, b_ih, b_hh}, [=](const Tensor& dy) {
    Backend& bb = backend_of(dy);
    const Tensor G = seq::swap01(dy);  // [T, B, H]
    Tensor D1 = seq::like(dy, {T, B, 3 * H}), D2 = seq::like(dy, {T, B, 3 * H});
    if (kernels::gru_sequence_backward.has(dy.device())) {  // the CPU: every step in one parallel region
      kernels::gru_sequence_backward(dy.device(), G, wh, Hs, RZN, HN, D1, D2);
    } else {
      Tensor dh = seq::like(dy, {B, H}), dh_next = seq::like(dy, {B, H});
      bb.fill(dh, 0.0);
      for (int64_t t = T - 1; t >= 0; --t) {
        Tensor d1 = D1.select0(t), d2 = D2.select0(t);
        kernels::gru_cell_backward(dy.device(), G.select0(t), dh, Hs.select0(t), RZN.select0(t), HN.select0(t), d1,
                                   d2, dh_next);
        seq::mm(d2, false, wh, false, dh_next, 1.f);  // + (dAr | dAz | dHn) W_hh
        std::swap(dh, dh_next);
      }
    }
    const Tensor R1 = D1.view({T * B, 3 * H}), R2 = D2.view({T * B, 3 * H});
    if (x.requires_grad()) {  // dX [T B, In] = D1 W_ih
      Tensor dX = seq::like(dy, {T * B, In});
      seq::mm(R1, false, wi, false, dX);
      acc(x, seq::swap01(dX.view({T, B, In})));
    }
    if (w_ih.requires_grad()) {  // dW_ih [3H, In] = D1^T X
      Tensor dw = seq::like(dy, {3 * H, In});
      seq::mm(R1, true, X, false, dw);
      acc(w_ih, dw);
    }
    if (w_hh.requires_grad()) {  // dW_hh [3H, H] = D2^T Hs[0..T-1]
      Tensor dw = seq::like(dy, {3 * H, H});
      seq::mm(R2, true, Hs.slice0(0, T).view({T * B, H}), false, dw);
      acc(w_hh, dw);
    }
    if (b_ih.requires_grad()) acc(b_ih, seq::colsum(R1));  // r, z: dA; n: dNp
    if (b_hh.requires_grad()) acc(b_hh, seq::colsum(R2));  // r, z: dA; n: dNp r
  });
}
}  // namespace

Variable gru_sequence(const Variable& x, const Variable& w_ih, const Variable& w_hh,
                      const Variable& b_ih, const Variable& b_hh) {
  const Tensor xd = x.data(), wi = w_ih.data(), wh = w_hh.data(), bi = b_ih.data(), bh = b_hh.data();
  CTX_CHECK(xd.dim() == 3, "gru_sequence: x must be [B, T, In], got ", xd.str());
  const int64_t B = xd.size(0), T = xd.size(1), In = xd.size(2);
  CTX_CHECK(wh.dim() == 2 && wh.size(0) == 3 * wh.size(1), "gru_sequence: weight_hh must be [3H, H], got ",
            wh.str());
  const int64_t H = wh.size(1);
  CTX_CHECK(wi.dim() == 2 && wi.size(0) == 3 * H && wi.size(1) == In, "gru_sequence: weight_ih must be [",
            3 * H, ", ", In, "] for x ", xd.str(), ", got ", wi.str());
  CTX_CHECK(bi.dim() == 1 && bi.size(0) == 3 * H && bh.dim() == 1 && bh.size(0) == 3 * H,
            "gru_sequence: biases must be [", 3 * H, "], got ", bi.str(), " and ", bh.str());
  for (const Tensor* t : {&wi, &wh, &bi, &bh}) check_compatible(xd, *t, "gru_sequence");
  CTX_CHECK(is_float(xd.dtype()), "gru_sequence: expected float tensors, got ", xd.str());
  // The fused path: where the device has both cell kernels, and its backend the fused Linear (the
  // input projection; both backends have it, but a test's backend may report no fused method).
  const Device dev = xd.device();
  if (use_fused(FastPath::GruCell, backend_of(xd)) && kernels::gru_cell_forward.has(dev) &&
      kernels::gru_cell_backward.has(dev))
    return gru_sequence_fused(x, w_ih, w_hh, b_ih, b_hh, B, T, In, H);

  // ---- reference: the composed loop ----

  const Tensor X = seq::swap01(xd).view({T * B, In});
  Tensor XG = seq::like(xd, {3, T * B, H});
  Tensor bsum = seq::add(bi, bh);  // r, z: both biases sit inside the sigmoid
  for (int g = 0; g < 3; ++g) {
    Tensor pre = seq::like(xd, {T * B, H});
    seq::mm(X, false, gate(wi, g, H), true, pre);
    seq::bin_into(BinaryOp::Add, pre, g < 2 ? gate(bsum, g, H) : gate(bi, 2, H), XG.select0(g));
  }
  Tensor Hs = seq::like(xd, {T + 1, B, H}), R = seq::like(xd, {T, B, H}), Z = seq::like(xd, {T, B, H}),
         N = seq::like(xd, {T, B, H}), HN = seq::like(xd, {T, B, H});
  backend_of(xd).fill(Hs, 0.0);
  const Tensor bhn = gate(bh, 2, H);
  for (int64_t t = 0; t < T; ++t) {
    const Tensor hp = Hs.select0(t);
    auto xg = [&](int g) { return XG.select0(g).slice0(t * B, (t + 1) * B); };  // [B, H]
    Tensor hg = seq::like(xd, {B, H});
    seq::mm(hp, false, gate(wh, 0, H), true, hg);
    seq::sigmoid_into(seq::add(xg(0), hg), R.select0(t));
    seq::mm(hp, false, gate(wh, 1, H), true, hg);
    seq::sigmoid_into(seq::add(xg(1), hg), Z.select0(t));
    seq::mm(hp, false, gate(wh, 2, H), true, hg);
    seq::bin_into(BinaryOp::Add, hg, bhn, HN.select0(t));
    seq::un_into(UnaryOp::Tanh, seq::add(xg(2), seq::mul(R.select0(t), HN.select0(t))), N.select0(t));
    seq::bin_into(BinaryOp::Add, N.select0(t), seq::mul(Z.select0(t), seq::sub(hp, N.select0(t))),
                  Hs.select0(t + 1));
  }
  Tensor out = seq::swap01(Hs.slice0(1, T + 1));  // [B, T, H]

  return make_result(out, "gru_sequence", {x, w_ih, w_hh, b_ih, b_hh},
                     [=](const Tensor& dy) {
    const Tensor G = seq::swap01(dy);                           // [T, B, H]
    Tensor dXG = seq::like(dy, {3, T, B, H}), dHn = seq::like(dy, {T, B, H});
    Tensor dh = seq::like(dy, {B, H});
    backend_of(dy).fill(dh, 0.0);
    for (int64_t t = T - 1; t >= 0; --t) {
      const Tensor hp = Hs.select0(t), r = R.select0(t), z = Z.select0(t), n = N.select0(t);
      const Tensor g = seq::add(G.select0(t), dh);
      Tensor dAr = dXG.select0(0).select0(t), dAz = dXG.select0(1).select0(t),
             dNp = dXG.select0(2).select0(t), dHnt = dHn.select0(t);
      seq::tanh_grad_into(n, seq::sub(g, seq::mul(g, z)), dNp);           // dn (1 - n^2)
      seq::sigmoid_grad_into(r, seq::mul(dNp, HN.select0(t)), dAr);
      seq::sigmoid_grad_into(z, seq::mul(g, seq::sub(hp, n)), dAz);
      seq::bin_into(BinaryOp::Mul, dNp, r, dHnt);
      Tensor dh_new = seq::mul(g, z);
      seq::mm(dAr, false, gate(wh, 0, H), false, dh_new, 1.f);
      seq::mm(dAz, false, gate(wh, 1, H), false, dh_new, 1.f);
      seq::mm(dHnt, false, gate(wh, 2, H), false, dh_new, 1.f);
      dh = dh_new;
    }
    const Tensor Hprev = Hs.slice0(0, T).view({T * B, H});
    auto rows = [&](const Tensor& t) { return t.view({T * B, H}); };
    if (x.requires_grad()) {  // dX [T B, In] = sum_g dXG_g W_i{g}
      Tensor dX = seq::like(dy, {T * B, In});
      for (int g = 0; g < 3; ++g) seq::mm(rows(dXG.select0(g)), false, gate(wi, g, H), false, dX, g ? 1.f : 0.f);
      acc(x, seq::swap01(dX.view({T, B, In})));
    }
    if (w_ih.requires_grad()) {  // dW_i{g} [H, In] = dXG_g^T X
      Tensor dw = seq::like(dy, {3 * H, In});
      for (int g = 0; g < 3; ++g) seq::mm(rows(dXG.select0(g)), true, X, false, gate(dw, g, H));
      acc(w_ih, dw);
    }
    if (w_hh.requires_grad()) {  // dW_h{g} [H, H] = (dAr | dAz | dHn)^T Hs[0..T-1]
      Tensor dw = seq::like(dy, {3 * H, H});
      for (int g = 0; g < 3; ++g)
        seq::mm(rows(g < 2 ? dXG.select0(g) : dHn), true, Hprev, false, gate(dw, g, H));
      acc(w_hh, dw);
    }
    if (b_ih.requires_grad() || b_hh.requires_grad()) {
      Tensor dbi = seq::like(dy, {3 * H}), dbh = seq::like(dy, {3 * H});
      for (int g = 0; g < 3; ++g) {
        Tensor s = seq::colsum(rows(dXG.select0(g)));
        seq::copy_into(s, gate(dbi, g, H));
        if (g < 2) seq::copy_into(s, gate(dbh, g, H));
      }
      seq::copy_into(seq::colsum(rows(dHn)), gate(dbh, 2, H));
      acc(b_ih, dbi);
      acc(b_hh, dbh);
    }
  });
}

}  // namespace ctx
