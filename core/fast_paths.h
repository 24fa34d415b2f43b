// core/fast_paths.h — the one table of fast paths: every fused op, the switch that turns it off
// (its CTXLAB_* variable, a row of core/settings.cpp), the switch's default, the composed twin
// that runs instead, and the rule, which every caller applies through use_fused:
//
//   the fused path runs where its switch is on AND the backend has it (Backend::has; a path
//   built on a primitive every backend has needs only the switch; a path on an op's own extension
//   kernels, core/extension.h, also needs them for the device, which the op asks of its slots);
//   everywhere else the caller runs the composed twin, with the same results. No caller throws
//   for want of a fused method.
//
// Attention adds the backend's measured preference for the dims (use_fused_attention). Tests and
// A/B benchmarks override a switch with set_fast_path until reset_fast_path; docs/settings.md and
// docs/ops.md point here. Adding a fused op: a row in fast_paths.cpp (and its variable in
// core/settings.cpp), use_fused at the one place that chooses, its composed twin next to it.
#pragma once
#include <cstdint>
#include <vector>

#include "core/backend.h"

namespace ctx {

enum class FastPath {
  Attention,      // fused causal attention (Fused::Attention)
  Bf16Attention,  // bf16 tile products inside the fused attention under --precision bf16 (opt-in; CPU, CUDA tensor cores)
  CausalSoftmax,  // the composed attention's mask + softmax in one pass (Backend::causal_softmax)
  Rope,           // rotary rotation (Fused::Rope): rope_rotate, complex_order_embed
  Heads,          // head split / merge (Fused::Heads)
  Linear,         // Linear with its bias in one GEMM (Fused::Linear)
  MlpGelu,        // the MLP (linear, gelu_tanh, linear) as one node (Fused::Linear; opt-in, measured)
  FlatAdamW,      // AdamW over flat buffers (Fused::FlatAdamW)
  GruCell,        // the rnn encoding's fused GRU gates (its gru_cell extension kernels, and Fused::Linear)
  OdeRk4,         // FLOATER's RK4 in one call (its ode_rk4 extension kernels)
  Decode,         // graph-free incremental decoding (nn/decode_engine.h) where the model allows it
  FireTable,      // FIRE's bias as a per-head distance table where every query is below thr (posenc/fire.cpp)
  AddNorm,        // the residual add fused into the norm after it, both ways (Backend::add_layernorm / add_rmsnorm)
  DecodeStep,     // the graph-free decoder's step as one backend call (Backend::make_decode_step) where it has one
};

struct FastPathInfo {
  FastPath path;
  const char* name;      // "attention"
  const char* env;       // the switch's variable (core/settings.cpp); nullptr: no process-wide switch
  bool default_on;       // the switch when the variable is unset
  bool needs_fused;      // false: no Backend fused method (primitives, or the op's own extension kernels)
  Fused fused;           // what Backend::has must report when needs_fused (else unused)
  const char* fused_op;  // what runs on the fast path
  const char* composed;  // its composed twin: what runs otherwise (the same results)
  const char* chooser;   // where use_fused is asked
};

// Every fast path, in FastPath order.
const std::vector<FastPathInfo>& fast_paths();
const FastPathInfo& fast_path_info(FastPath p);

// The rule: the switch is on and (where needs_fused) the backend has the fused method.
bool use_fused(FastPath p, const Backend& be);
// Attention's rule: use_fused(Attention), and the backend prefers the fused kernels for the call
// (Backend::prefers_fused_attention, measured) unless the switch was forced on
// (CTXLAB_FUSED_ATTENTION=1 or set_fast_path(Attention, true)).
bool use_fused_attention(const Backend& be, const AttnQuery& a);

// The switch alone: its override, else its variable (read once; 0 | 1, anything else throws
// naming it), else its default. forced_on: an explicit on (the variable = 1, or set(true)).
bool fast_path_enabled(FastPath p);
bool fast_path_forced_on(FastPath p);
// The switch where a backend has a default of its own: its override or variable when set, else
// backend_default (FastPath::Bf16Attention: opt-in on the CPU, the table's default; on by default
// on CUDA, where the composed attention's GEMMs take bf16 inputs under --precision bf16 anyway).
bool fast_path_enabled_or(FastPath p, bool backend_default);
// Override a switch until reset (tests, A/B benchmarks). Throws for a path without a
// process-wide switch (flat_adamw: AdamWOptions::fused, per optimizer).
void set_fast_path(FastPath p, bool on);
void reset_fast_path(FastPath p);

}  // namespace ctx
