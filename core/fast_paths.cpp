// core/fast_paths.cpp — the fast-path table of core/fast_paths.h and its switches (one
// FastPathSwitch per row with a variable, core/switch.h).
#include "core/fast_paths.h"

#include <memory>

#include "core/error.h"
#include "core/switch.h"

namespace ctx {

const std::vector<FastPathInfo>& fast_paths() {
  static const std::vector<FastPathInfo> table = {
      {FastPath::Attention, "attention", "CTXLAB_FUSED_ATTENTION", true, true, Fused::Attention,
       "Backend::attention_forward / attention_backward (fused_causal_attention, autograd/ops_attention.h)",
       "causal_attention_composed (autograd/ops_attention.h): matmul, mask, causal_softmax, matmul",
       "nn/attention.cpp (use_fused_attention: also the backend's measured preference unless forced on)"},
      {FastPath::Bf16Attention, "bf16_attention", "CTXLAB_BF16_ATTENTION", false, true, Fused::Attention,
       "bf16 tile products in the fused attention under --precision bf16: the CPU's kernels on an avx512_bf16 "
       "CPU (opt-in: the table's default); on CUDA (sm_80+) the tensor-core FlashAttention-2 kernels "
       "(core/cuda/attention_tc.h) where tc_attention_fits, on unless the switch is set to 0 "
       "(fast_path_enabled_or)",
       "the fp32 tile products of the same kernels (CPU); the SIMT fp32 kernels (CUDA, core/cuda/attention.h)",
       "core/cpu/flash_attention.cpp, core/cuda/cuda_backend.cu"},
      {FastPath::CausalSoftmax, "causal_softmax", "CTXLAB_FUSED_CAUSAL_SOFTMAX", true, false, Fused::Attention,
       "Backend::causal_softmax / causal_softmax_backward (one pass each way; a primitive)",
       "causal_fill(-inf) + softmax, softmax_backward (autograd/ops_nn.cpp)", "autograd/ops_nn.cpp"},
      {FastPath::Rope, "rope", "CTXLAB_FUSED_ROPE", true, true, Fused::Rope,
       "Backend::rope_rotate (rope_rotate, complex_order_embed)",
       "rope_rotate_composed (autograd/ops_rope.h: slice, mul, concat); complex_order_embed_composed "
       "(autograd/ops_position_gen.h: embedding, cos, sin, mul)",
       "autograd/ops_rope.cpp, autograd/ops_complex.cpp"},
      {FastPath::Heads, "heads", "CTXLAB_FUSED_HEADS", true, true, Fused::Heads,
       "Backend::split_heads / merge_heads and their backwards",
       "reshape + permute + slice (autograd/ops_heads.cpp)", "autograd/ops_heads.cpp"},
      {FastPath::Linear, "linear", "CTXLAB_FUSED_LINEAR", true, true, Fused::Linear,
       "Backend::linear (the bias inside the GEMM; backward gemm + reduce_sum)",
       "matmul + add (autograd/ops_linear.cpp)", "autograd/ops_linear.cpp"},
      {FastPath::MlpGelu, "mlp_gelu", "CTXLAB_FUSED_MLP", false, true, Fused::Linear,
       "mlp_gelu: Backend::linear_gelu forward, Backend::gemm_dgelu backward (CUDA speed modes: cuBLASLt's "
       "GELU_AUX_BIAS and DGELU epilogues)",
       "linear, gelu_tanh, linear (autograd/ops_linear.cpp)", "autograd/ops_linear.cpp"},
      {FastPath::FlatAdamW, "flat_adamw", nullptr, true, true, Fused::FlatAdamW,
       "Backend::sum_squares + adamw_flat over FlatParams' flat buffers",
       "the per-tensor AdamW: clip_grad_norm, Backend::adamw per parameter (train/optim.cpp)",
       "train/optim.cpp (FlatParams::supported; the switch is AdamWOptions::fused, per optimizer)"},
      {FastPath::GruCell, "gru_cell", "CTXLAB_FUSED_GRU", true, true, Fused::Linear,
       "the input projection by Backend::linear, then the gru_sequence_forward / _backward extension "
       "kernels (the CPU: the recurrence in one parallel region) or per step gru_cell_forward / "
       "gru_cell_backward and a GEMM (autograd/kernels/gru_cell.h; gru_sequence)",
       "the per-gate loop (autograd/ops_gru.cpp)",
       "autograd/ops_gru.cpp (and the device's gru_cell kernels: kernels::gru_cell_*.has)"},
      {FastPath::OdeRk4, "ode_rk4", "CTXLAB_FUSED_ODE", true, false, Fused::Linear,
       "the ode_rk4_forward / ode_rk4_backward extension kernels (autograd/kernels/ode_rk4.h; ode_positions)",
       "the per-stage loop (autograd/ops_ode.cpp)",
       "autograd/ops_ode.cpp (and the device's ode_rk4 kernels: kernels::ode_rk4_*.has)"},
      {FastPath::Decode, "decode", "CTXLAB_FUSED_DECODE", true, true, Fused::Attention,
       "nn::DecodeEngine: a sampling step as backend kernels on buffers allocated once per generation (no "
       "autograd graph); needs the linear, heads, attention (and rope) fast paths and an encoding with "
       "DecodeTables",
       "GPT::forward_cached (nn/gpt.h): the same kernels through autograd ops",
       "nn/decode_engine.cpp (DecodeEngine::make; train/sample.cpp takes it where make says yes)"},
      {FastPath::FireTable, "fire_table", "CTXLAB_FIRE_TABLE", true, false, Fused::Attention,
       "FIRE's bias as a per-head distance table [H, S] (fire_bias on the S distances, RelTerms::dist_bias) "
       "where every query position of the call is below thr: the MLP on S points, and on CUDA the "
       "tensor-core attention reading the table in its tiles. On by default; on a device the decision "
       "takes L_multiplier's host-side bound (train/value_bounds.h: no copy) and keeps the per-pair bias "
       "where the bound cannot tell; set to 1, it then reads the value (one device -> host copy a call)",
       "fire_bias over every (query, key) pair: the [1, H, T, S] bias (posenc/fire.cpp)",
       "posenc/fire.cpp (Fire::terms)"},
      {FastPath::AddNorm, "add_norm", "CTXLAB_FUSED_ADD_NORM", true, false, Fused::Attention,
       "Backend::add_layernorm / add_rmsnorm: h = x + a and norm(h) from one kernel (CUDA: one pass over the "
       "rows; the CPU: the reference loop, each row added in front of its norm); the norm's "
       "backward sums x's gradient into the residual stream's as it writes it (layernorm_backward's dres)",
       "add, then layer_norm / rms_norm; the norm's input gradient added to the stream's by accumulate_grad "
       "(autograd/ops_nn.cpp)",
       "autograd/ops_nn.cpp (norm_op); nn/gpt.cpp (Block::forward: every residual add before a norm)"},
      {FastPath::DecodeStep, "decode_step", "CTXLAB_FUSED_DECODE_STEP", true, false, Fused::Attention,
       "Backend::make_decode_step: a decoding step of the whole stack in one backend call (the CPU: one OpenMP "
       "region on raw pointers, core/cpu/decode_step.cpp; null where a backend has none for the model: CUDA, "
       "f64, a chosen GEMM, bf16 GEMM inputs without avx512_bf16)",
       "DecodeEngine's step op by op: ~150 backend calls a token (nn/decode_engine.cpp)",
       "nn/decode_engine.cpp (DecodeEngine's constructor)"},
  };
  return table;
}

const FastPathInfo& fast_path_info(FastPath p) {
  const auto& t = fast_paths();
  const size_t i = (size_t)p;
  CTX_CHECK(i < t.size() && t[i].path == p, "fast_path_info: no row for fast path ", (int)p);
  return t[i];
}

namespace {

// The switch of each row (nullptr: no process-wide switch), built once from the table.
FastPathSwitch* switch_of(FastPath p) {
  struct Switches {
    std::vector<std::unique_ptr<FastPathSwitch>> s;
    Switches() {
      for (const FastPathInfo& r : fast_paths())
        s.push_back(r.env ? std::make_unique<FastPathSwitch>(r.env, r.default_on) : nullptr);
    }
  };
  static Switches sw;
  return sw.s[(size_t)fast_path_info(p).path].get();
}

}  // namespace

bool fast_path_enabled(FastPath p) {
  const FastPathSwitch* s = switch_of(p);
  return s ? s->enabled() : fast_path_info(p).default_on;
}

bool fast_path_forced_on(FastPath p) {
  const FastPathSwitch* s = switch_of(p);
  return s && s->forced_on();
}

bool fast_path_enabled_or(FastPath p, bool backend_default) {
  const FastPathSwitch* s = switch_of(p);
  return s && s->is_set() ? s->enabled() : backend_default;
}

void set_fast_path(FastPath p, bool on) {
  FastPathSwitch* s = switch_of(p);
  CTX_CHECK(s, "set_fast_path: ", fast_path_info(p).name, " has no process-wide switch (core/fast_paths.cpp)");
  s->set(on);
}

void reset_fast_path(FastPath p) {
  FastPathSwitch* s = switch_of(p);
  CTX_CHECK(s, "reset_fast_path: ", fast_path_info(p).name, " has no process-wide switch (core/fast_paths.cpp)");
  s->reset();
}

bool use_fused(FastPath p, const Backend& be) {
  const FastPathInfo& r = fast_path_info(p);
  return fast_path_enabled(p) && (!r.needs_fused || be.has(r.fused));
}

bool use_fused_attention(const Backend& be, const AttnQuery& a) {
  return use_fused(FastPath::Attention, be) &&
         (fast_path_forced_on(FastPath::Attention) || be.prefers_fused_attention(a));
}

}  // namespace ctx
