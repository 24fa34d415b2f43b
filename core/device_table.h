// core/device_table.h — moving tensors between the host and a tensor's device in the two
// directions library code needs: constant tables built on the host (index tables, masks,
// sinusoid / rotary cos-sin tables, slopes) to the device of the tensors they are used with
// (to_device_like, the one way they get there), and small results to the host (to_host).
#pragma once
#include "core/tensor.h"

namespace ctx {

// `host` (a CPU tensor) on like's device: `host` itself when like is on the CPU (no copy), else
// a copy on like's device, which callers only read. The copy keeps a host mirror of its values
// (Tensor::host_mirror), so that the device's index checks and plans read them without a
// device -> host copy; and the last uploads are kept (core/device_table.cpp): a table with the
// same dtype, shape and bytes as one of them (the rotary cos/sin, the position indices the
// encodings rebuild every step) is that tensor again, with no host -> device copy, as long as
// nothing wrote to it (its mirror intact). No host round trip in a training step (docs/cuda.md).
Tensor to_device_like(const Tensor& host, const Tensor& like);

// t on the host: t itself when it is on the CPU (no copy), else a copy.
inline Tensor to_host(const Tensor& t) { return t.device() == Device::CPU ? t : t.to(Device::CPU); }

// t's values on the host for reading: t itself on the CPU, its host mirror when it was uploaded
// from a host table (no copy, no wait for the device), else a copy (to_host).
inline Tensor host_values(const Tensor& t) {
  if (t.device() == Device::CPU) return t;
  Tensor m = t.host_mirror();
  return m.defined() ? m : t.to(Device::CPU);
}

}  // namespace ctx
