// core/determinism.h — "deterministic algorithms": one process-wide switch (as PyTorch's
// torch.use_deterministic_algorithms) under which a kernel whose bits could depend on the thread
// count cuts its work by the shape alone, so 1, 2 or N threads compute the same bits. Set by
// `train/finetune/bench --deterministic` (train/trainer.cpp, train/cli_bench.cpp) together with the
// canonical shards and gradient tree (docs/distributed.md). Off by default: the fastest split.
// Read by: core/cpu/gemm_openblas.cpp (its blocks of single-threaded calls; an OpenBLAS call's bits
// depend on the block's extent, measured: tests/test_gemm.cpp GemmThreading.BitsDoNotDependOnTheThreadCount).
// Everything else on the CPU is thread-count invariant in either mode (the column sums of
// core/cpu/ref_kernels.h colsum_tree; oneDNN's matmul splits rows and columns at the model's shapes,
// held by the same test).
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
