// core/device_table.h — moving tensors between the host and a tensor's device in the
// directions library code needs: per-step data built on the host (the batch) to the device of
// the tensors it is used with (to_device_like); constant tables built on the host (index tables,
// masks, sinusoid / rotary cos-sin tables, plans) the same way but uploaded once and kept there
// (device_table); and small results to the host (to_host).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ctx {

// `host` (a CPU tensor) on like's device: `host` itself when like is on the CPU (no copy), else
// a copy on like's device. An integer table (token ids, targets, relative indices) keeps a host
// mirror of its values (Tensor::host_mirror), so that the device's index checks and plans read
// them without a device -> host copy: no device -> host round trip in a training step
// (docs/cuda.md). Each call uploads (queued on the stream, core/cuda/cuda_runtime.h): for data
// that changes every call. Constant tables go through device_table.
inline Tensor to_device_like(const Tensor& host, const Tensor& like) {
  CTX_CHECK(host.device() == Device::CPU, "to_device_like: the table ", host.str(), " must be built on the cpu, not ",
            device_name(host.device()));
  if (like.device() == Device::CPU) return host;
  Tensor d = host.to(like.device());
  if (!is_float(host.dtype()) && d.storage()->bytes == d.nbytes()) d.set_host_mirror(host);
  return d;
}

// A constant table `host` (a CPU tensor the caller built, possibly afresh each step) on like's
// device, uploaded once: the device copy is kept in a process-wide cache keyed by the table's
// dtype, shape and bytes (compared in full on a hit) and served again to any caller with the same
// table: the encodings' cos/sin, positions, masks and relative indices, the CUDA backend's plans
// of those indices and AdamW's tile table. So a warm training step uploads none of them. The
// copies live in the device's Table arena (core/tensor.h) with a host mirror; least recently used
// ones go past 256 tables or 256 MiB. The result is read-only: a mutable access (Tensor::raw)
// drops the mirror, and the cache then uploads afresh instead of serving it. On the CPU: `host`.
Tensor device_table(const Tensor& host, const Tensor& like);

struct TableCacheStats {
  uint64_t hits = 0;     // served from the cache
  uint64_t uploads = 0;  // uploaded (first use, or after eviction / a mutable access)
  uint64_t evictions = 0;
  int64_t entries = 0;
  size_t bytes = 0;      // device bytes held
};
TableCacheStats table_cache_stats();
void clear_table_cache();  // drops every kept table (their blocks go back to the Table arena)

// t on the host: t itself when it is on the CPU (no copy), else a copy.
inline Tensor to_host(const Tensor& t) { return t.device() == Device::CPU ? t : t.to(Device::CPU); }

// Whether t's values can be read on the host without waiting for a device: t is on the CPU, or
// it carries a host mirror (host_values below then makes no copy).
inline bool host_readable(const Tensor& t) { return t.device() == Device::CPU || t.host_mirror().defined(); }

// Whether t's values are known to lie in [0, n) where reading them would cost a device -> host
// copy: a device tensor without a host mirror whose storage carries its writer's promise
// (Tensor::checked_bound, e.g. a batch staged into a device ring after a host range check) of a
// bound <= n. The index checks (the CUDA backend's, cross-entropy's count of non-ignored targets,
// GPT's token check) then read nothing; without the promise they copy the values back and check.
inline bool range_proven(const Tensor& t, int64_t n) {
  const int64_t b = t.checked_bound();
  return t.device() != Device::CPU && !t.host_mirror().defined() && b >= 1 && b <= n;
}

// t's values on the host for reading: t itself on the CPU, its host mirror when it was uploaded
// from a host table (no copy, no wait for the device), else a copy (to_host).
inline Tensor host_values(const Tensor& t) {
  if (t.device() == Device::CPU) return t;
  Tensor m = t.host_mirror();
  return m.defined() ? m : t.to(Device::CPU);
}

}  // namespace ctx
