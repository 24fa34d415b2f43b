// train/batch_ring.h — the batches of the steps up to the next report, on the device, uploaded in
// one copy (issue 33: a warm GPU step makes no host <-> device copy between reports;
// docs/cuda.md "0 uploads"). The trainer draws them ahead from a copy of its sampler, so the
// sampler itself (what checkpoints save) still advances one step at a time; their token ids are
// range-checked here, on the host, and the ring's storage records that check
// (Tensor::set_checked_bound), so that the device's index ops need neither a host mirror nor a
// copy back. A step takes its micro-batches as views of the ring.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ctx {

class BatchRing {
 public:
  // Draws micro-batch a of step s: (x, y), host i64 [rows, T] each.
  using Draw = std::function<std::pair<Tensor, Tensor>(int64_t s, int64_t a)>;

  // capacity: steps held at most; accum micro-batches a step; token ids below vocab.
  BatchRing(int64_t capacity, int64_t accum, int64_t rows, int64_t T, int64_t vocab, Device dev);

  // Steps [first, first + n) (n <= capacity), drawn with `draw` and uploaded in one copy; what was
  // staged before is dropped. A token id outside [0, vocab) throws, naming the step and position.
  void stage(int64_t first, int64_t n, const Draw& draw);
  bool holds(int64_t s) const { return s >= first_ && s < first_ + n_; }
  int64_t capacity() const { return capacity_; }
  // Micro-batch a of a held step: views of the device ring (x, y: [rows, T]).
  std::pair<Tensor, Tensor> get(int64_t s, int64_t a) const;
  // The host copy of what was staged for (s, a): the trainer holds it equal to its own draw.
  std::pair<Tensor, Tensor> staged_host(int64_t s, int64_t a) const;
  int64_t uploads() const { return uploads_; }  // stage() calls that copied

 private:
  int64_t slot(int64_t s, int64_t a) const;  // (step, micro-batch) -> index of its [2, rows, T] block
  const int64_t capacity_, accum_, rows_, T_, vocab_;
  Tensor host_;  // i64 [capacity * accum, 2, rows, T]: x then y of each micro-batch
  Tensor dev_;   // the same on the device
  int64_t first_ = 0, n_ = 0, uploads_ = 0;
};

}  // namespace ctx
