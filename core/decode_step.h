// core/decode_step.h — a backend's whole decoding step in one call (Backend::make_decode_step,
// FastPath::DecodeStep): what the graph-free decoder (nn/decode_engine.h) hands a backend that can
// run a step of the GPT stack itself, and the object it gets back. The tensors are the model's
// weights and the engine's KV cache, read and written in place; nothing is copied. Per layer of a
// step, for B sequences at position pos (x: the residual stream [B, D]):
//   y = norm1(x); qkv = y Wqkv^T + bqkv                    // [B, 3D]: q | k | v blocks, head h at h Dh
//   q, k rotated by row pos of (cos, sin) when defined; k, v into row pos of the cache
//   o = attention(q, cache rows 0..pos, window)           // [B, D] (heads merged)
//   x += o Wp^T + bp;  x += Wm gelu_tanh(norm2(x) Wfc^T + bfc) + bm
// logits [B, V] = norm_f(x) Whead^T, where x starts as wte[token] (+ row pos of `add`). The
// results are those of the engine's per-op step (the same kernels in the same order: bit for bit
// with one sequence; tests/test_decode_engine.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace ctx {

// One block's weights (nn/gpt.h) and its KV cache; a norm's bias is undefined for rmsnorm.
struct DecodeLayer {
  Tensor norm1_w, norm1_b;  // [D]
  double norm1_eps = 1e-5;
  Tensor qkv_w, qkv_b;      // [3D, D], [3D]
  Tensor proj_w, proj_b;    // [D, D], [D]
  Tensor norm2_w, norm2_b;  // [D]
  double norm2_eps = 1e-5;
  Tensor fc_w, fc_b;        // [F, D], [F]
  Tensor mproj_w, mproj_b;  // [D, F], [D]
  Tensor k_cache, v_cache;  // [B, H, capacity, Dh] (keys rotated)
};

// What a backend keeps from one step it made to the next over the same weights (the CPU: its pack
// of them, ~4 ms to make for `small` in fp32 against ~0.2 ms a step: docs/sampling.md, "The pack
// kept"). Owned by the model (nn::GPT::decode_keep), so it lives and dies with the weights; the
// backend checks it against the weights it is handed and makes it anew when any has changed.
struct DecodeKeep {
  virtual ~DecodeKeep() = default;
};

// The stack: sizes, the layers, the embeddings and the output head.
struct DecodeStack {
  int64_t B = 1, H = 1, Dh = 1, capacity = 1;
  int64_t window = 0;       // keys a query sees (0: all)
  bool layernorm = true;    // false: rmsnorm (every norm of the stack)
  std::vector<DecodeLayer> layers;
  Tensor wte;               // [V, D]
  Tensor add;               // [capacity, D] or undefined: the absolute encoding's row pos
  Tensor cos, sin;          // [capacity, Dh / 2] or undefined: the rotary tables
  bool interleaved = false; // rotation pairs (2k, 2k + 1) instead of (k, k + Dh / 2)
  Tensor norm_f_w, norm_f_b;
  double norm_f_eps = 1e-5;
  Tensor head_w;            // [V, D] (the tied wte, or lm_head's weight)
  std::shared_ptr<DecodeKeep>* keep = nullptr;  // the model's slot for what the backend keeps (null: none)
};

// A step of one stack, with its buffers made once (no allocation in run).
class DecodeStep {
 public:
  virtual ~DecodeStep() = default;
  // tokens [B] (< V, checked by the caller) at position pos (< capacity, checked by the caller)
  // through every layer: writes their keys and values into the cache's row pos and logits [B, V].
  virtual void run(const int64_t* tokens, int64_t pos, Tensor& logits) = 0;
};

}  // namespace ctx
