// core/determinism.h — "deterministic algorithms": one process-wide switch (as PyTorch's
// torch.use_deterministic_algorithms) under which a kernel whose bits could depend on the thread
// count cuts its work by the shape alone, so 1, 2 or N threads compute the same bits. Set by
// `train/finetune/bench --deterministic` (train/trainer.cpp, train/cli/cli_bench.cpp) together with the
// canonical shards and gradient tree (docs/distributed.md). Off by default: the fastest split.
// Read by: core/cpu/gemm_select.cpp (every fp32 GEMM to OpenBLAS unless the user chose one) and
// core/cpu/gemm_openblas.cpp (its blocks of single-threaded calls cut by the shape, not the thread
// count). Neither library is thread-count invariant by itself: an OpenBLAS call's bits depend on
// its block's extent, and oneDNN's matmul changed its bits between 1 and 3 threads at the model's
// shapes (tests/test_gemm.cpp GemmThreading.BitsDoNotDependOnTheThreadCount). The rest of the CPU
// backend is invariant in either mode (column sums: core/cpu/ref_kernels.h colsum_tree; the
// fused kernels split rows, heads or columns). bf16 GEMMs (core/precision.h) are covered too:
// under the switch they take their bf16 operands widened to fp32 (exact) through the same OpenBLAS
// blocks instead of oneDNN's bf16 kernels (core/cpu/gemm_onednn.cpp): the same numerics, the fp32 rate.
// Also read by core/cpu/gemm_onednn.cpp.
#pragma once

namespace ctx {

bool deterministic_algorithms();
void set_deterministic_algorithms(bool on);

// Sets the switch for its lifetime; restores the previous value after.
class DeterministicScope {
 public:
  explicit DeterministicScope(bool on);
  ~DeterministicScope();
  DeterministicScope(const DeterministicScope&) = delete;
  DeterministicScope& operator=(const DeterministicScope&) = delete;

 private:
  bool saved_;
};

}  // namespace ctx
