// train/batch_ring.cpp — see batch_ring.h.
#include "train/batch_ring.h"

#include <cstring>

#include "core/error.h"

namespace ctx {

BatchRing::BatchRing(int64_t capacity, int64_t accum, int64_t rows, int64_t T, int64_t vocab, Device dev)
    : capacity_(capacity), accum_(accum), rows_(rows), T_(T), vocab_(vocab) {
  CTX_CHECK(capacity >= 1 && accum >= 1 && rows >= 1 && T >= 1 && vocab >= 1, "BatchRing: capacity ", capacity,
            ", accum ", accum, ", rows ", rows, ", T ", T, ", vocab ", vocab, " must all be >= 1");
  host_ = Tensor::zeros({capacity * accum, 2, rows, T}, DType::I64);
  dev_ = Tensor::empty(host_.shape(), DType::I64, dev);
}

int64_t BatchRing::slot(int64_t s, int64_t a) const {
  CTX_CHECK(holds(s) && a >= 0 && a < accum_, "BatchRing: step ", s, " micro-batch ", a, " is not staged (steps ",
            first_, "..", first_ + n_ - 1, ", ", accum_, " micro-batches each)");
  return (s - first_) * accum_ + a;
}

void BatchRing::stage(int64_t first, int64_t n, const Draw& draw) {
  CTX_CHECK(n >= 1 && n <= capacity_, "BatchRing: ", n, " steps do not fit a ring of ", capacity_);
  n_ = 0;  // (nothing is held while drawing: a throw leaves the ring empty)
  const int64_t block = rows_ * T_;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t a = 0; a < accum_; ++a) {
      const auto [x, y] = draw(first + i, a);
      int64_t* dst = host_.data<int64_t>() + (i * accum_ + a) * 2 * block;
      const Tensor* parts[2] = {&x, &y};
      for (int p = 0; p < 2; ++p) {
        const Tensor& t = *parts[p];
        CTX_CHECK(t.device() == Device::CPU && t.dtype() == DType::I64 && t.numel() == block, "BatchRing: step ",
                  first + i, " drew ", t.str(), " on ", device_name(t.device()), "; expected i64[", rows_, ", ", T_,
                  "] on the cpu");
        const int64_t* v = t.data<int64_t>();
        for (int64_t j = 0; j < block; ++j)
          CTX_CHECK(v[j] >= 0 && v[j] < vocab_, "train: step ", first + i + 1, ": ", p == 0 ? "token id " : "target ",
                    v[j], " at row ", j / T_, ", position ", j % T_, " is outside the vocabulary [0, ", vocab_, ")");
        std::memcpy(dst + p * block, v, (size_t)block * sizeof(int64_t));
      }
    }
  const int64_t used = n * accum_;
  Tensor d = dev_.slice0(0, used);
  d.copy_from(host_.slice0(0, used));  // one host -> device copy
  // every id was checked above: the device's index ops need no host mirror and no copy back
  dev_.set_checked_bound(vocab_);
  first_ = first;
  n_ = n;
  ++uploads_;
}

std::pair<Tensor, Tensor> BatchRing::get(int64_t s, int64_t a) const {
  const Tensor b = dev_.select0(slot(s, a));  // [2, rows, T]
  return {b.select0(0), b.select0(1)};
}

std::pair<Tensor, Tensor> BatchRing::staged_host(int64_t s, int64_t a) const {
  const Tensor b = host_.select0(slot(s, a));
  return {b.select0(0), b.select0(1)};
}

}  // namespace ctx
