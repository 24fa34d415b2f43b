// bench/hf_logits.cpp — ctxlab's logits of a checkpoint on a token batch, for bench/hf_parity.py
// (which compares them with transformers' logits of the `ctxlab export`ed directory).
//   build/bench_hf_logits CHECKPOINT TOKENS.npy OUT.safetensors
// TOKENS.npy: [B, T] int32/int64 ids; OUT holds "logits" [B, T, V] F32 (eval mode, positions 0..T-1).
#include <cstdio>

#include "autograd/variable.h"
#include "train/io/checkpoint.h"
#include "train/io/npy.h"
#include "train/io/safetensors.h"

using namespace ctx;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: bench_hf_logits CHECKPOINT TOKENS.npy OUT.safetensors\n");
    return 2;
  }
  try {
    LoadedModel lm = load_checkpoint(argv[1]);
    lm.model->eval();
    Tensor tokens = load_npy(argv[2]);
    lm.model->check_tokens(tokens, argv[2]);
    NoGradGuard ng;
    Tensor logits = lm.model->forward(tokens).data();
    save_safetensors(argv[3], {{"logits", logits}});
    std::printf("wrote %s: logits %s\n", argv[3], shape_str(logits.shape()).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_hf_logits: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
