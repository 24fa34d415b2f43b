// core/device_table.h — moving tensors between the host and a tensor's device in the two
// directions library code needs: constant tables built on the host (index tables, masks,
// sinusoid / rotary cos-sin tables, slopes) to the device of the tensors they are used with
// (to_device_like, the one way they get there), and small results to the host (to_host).
#pragma once
#include "core/tensor.h"

namespace ctx {

// `host` (a CPU tensor) on like's device: `host` itself when like is on the CPU (no copy), else
// a copy on like's device. An integer table (token ids, targets, relative indices) keeps a host
// mirror of its values (Tensor::host_mirror), so that the device's index checks and plans read
// them without a device -> host copy: no device -> host round trip in a training step
// (docs/cuda.md). (Uploads are not cached across calls: a cached table would hold a pool block
// that the next step's temporaries took in the first one, and the warm step would reach
// cudaMalloc; the encodings rebuild their tables each step, one host -> device copy each.)
inline Tensor to_device_like(const Tensor& host, const Tensor& like) {
  CTX_CHECK(host.device() == Device::CPU, "to_device_like: the table ", host.str(), " must be built on the cpu, not ",
            device_name(host.device()));
  if (like.device() == Device::CPU) return host;
  Tensor d = host.to(like.device());
  if (!is_float(host.dtype()) && d.storage()->bytes == d.nbytes()) d.set_host_mirror(host);
  return d;
}

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
