// core/tensor.h — dense, contiguous, row-major tensors over shared storage.
// A Tensor is (storage, element offset, shape, dtype). Reshape and leading-dimension slices are
// free views of the same storage; everything else (permute, general slices) materialises
// through the backend. Memory comes from the device's buffer pool.
#pragma once
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace ctx {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3, 4]"
Shape contiguous_strides(const Shape& s);  // in elements

// Where a device block comes from. Step: the caching pool every tensor uses (a step asks for the
// same sizes each time, so after the first step no request reaches the driver). Table: a second
// pool with its own free lists, for the constant tables device_table keeps across steps
// (core/device_table.h): a kept table never holds a block that the step's temporaries took in
// the step before, so keeping it cannot send a warm step to cudaMalloc. The host ignores it.
enum class Arena : uint8_t { Step = 0, Table = 1 };

// Device memory hooks: the CUDA backend registers these when it is compiled in.
// copy moves `bytes` between host and device or within the device; dst_dev and src_dev say which
// side each pointer is on. Device -> host returns with the bytes there (the host waits); host ->
// device may return before the device has them (queued on the stream behind earlier work, from a
// pinned staging copy of the source, which the caller may then free or overwrite).
struct DeviceAllocator {
  void* (*alloc)(size_t bytes, Arena arena) = nullptr;
  void (*free)(void* p, size_t bytes, Arena arena) = nullptr;
  void (*copy)(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) = nullptr;
};
void register_device_allocator(Device d, DeviceAllocator a);

// A block of memory on one device, returned to its pool when the last Tensor lets go.
struct Storage {
  Storage(size_t bytes, Device device, Arena arena = Arena::Step);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data = nullptr;
  size_t bytes = 0;
  Device device = Device::CPU;
  Arena arena = Arena::Step;
  // Device storage uploaded from a host table (to_device_like): a host copy of the same bytes,
  // so that code needing the values on the host (index range checks, the CUDA index_add plan)
  // reads them without a device -> host copy. Dropped by the first mutable access (Tensor::raw()).
  std::shared_ptr<Storage> host_mirror;
  // An integer storage whose every value the code that wrote it checked on the host to lie in
  // [0, checked_bound) (-1: no such promise). For device tensors with no host mirror (a batch
  // staged into a device ring, range-checked on the host when staged): the CUDA backend's index
  // checks take it as the proof instead of copying the values back (docs/cuda.md). Set with
  // Tensor::set_checked_bound; dropped by the first mutable access (Tensor::raw()), like the
  // host mirror, so a kernel writing the storage later cannot leave a stale promise.
  int64_t checked_bound = -1;
  // An f32 host storage's values rounded to bf16 (u16 bits, same element order), made once for
  // the bf16 GEMMs that read it as a weight (cpu::bf16_copy, core/cpu/bf16_convert.h) and reused
  // by every GEMM until the storage is written. Dropped by the first mutable access, like the
  // host mirror; owned here (atomic: threads of a parallel region may all take a mutable
  // pointer to one storage, and exactly one of them frees the copy).
  std::atomic<Storage*> bf16_copy{nullptr};
  // Mutable accesses so far (Tensor::raw()): a promise made about the values on the host (a
  // leaf's ValueBound, autograd/variable.h) records the count it was made at and holds only while
  // the count is unchanged, so that any later writer through a Tensor retires it. Atomic, as above.
  std::atomic<uint64_t> writes{0};
  void drop_bf16_copy() {
    if (bf16_copy.load(std::memory_order_relaxed)) delete bf16_copy.exchange(nullptr);
  }
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device dev = Device::CPU,
                      Arena arena = Arena::Step);
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device dev = Device::CPU);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32,
                     Device dev = Device::CPU);
  template <class T>
  static Tensor from_vector(const std::vector<T>& v, const Shape& shape);
  static Tensor scalar(double v, DType dtype = DType::F32) { return full({}, v, dtype); }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return (int64_t)shape_.size(); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::CPU; }
  size_t nbytes() const { return (size_t)numel() * dtype_size(dtype_); }
  int64_t offset() const { return offset_; }
  // The tensor covers its whole storage (offset 0, every byte): not a view of part of another.
  bool spans_storage() const { return storage_ && offset_ == 0 && nbytes() == storage_->bytes; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::string str() const;  // "f32[2, 3]"

  // Typed access (checks dtype). data<T>(): the pointer wherever the memory is (backends, which
  // know their device). host<T>(): for host-only code (data, checkpoints, printing, sampling):
  // throws "... is on cuda; copy it with .to(Device::CPU) first" for device memory.
  template <class T> T* data();
  template <class T> const T* data() const;
  template <class T> T* host();
  template <class T> const T* host() const;
  void check_host(const char* what) const;  // the check of host(); `what` names the caller
  void* raw() {  // mutable access: the storage may change, so the copies made of it are dropped
    if (storage_->host_mirror) storage_->host_mirror.reset();
    storage_->checked_bound = -1;
    storage_->drop_bf16_copy();
    storage_->writes.fetch_add(1, std::memory_order_relaxed);
    return (char*)storage_->data + offset_ * dtype_size(dtype_);
  }
  const void* raw() const { return (const char*)storage_->data + offset_ * dtype_size(dtype_); }

  // Views (share storage).
  Tensor view(const Shape& shape) const;   // reshape; one dim may be -1
  Tensor slice0(int64_t begin, int64_t end) const;  // rows [begin, end) of dim 0
  Tensor select0(int64_t i) const;         // row i of dim 0, that dim dropped

  // Copies.
  Tensor clone() const;
  Tensor to(DType dt) const;     // converts (copy even when dtype equal)
  Tensor to(Device dev, Arena arena = Arena::Step) const;  // device transfer
  // same numel; converts dtype on one device, or transfers between devices (same dtype)
  void copy_from(const Tensor& src);
  // The host mirror of a device tensor (Storage::host_mirror): this tensor's values on the host
  // without a copy, or an undefined tensor when there is none (then copy with to(Device::CPU)).
  Tensor host_mirror() const;
  // Records `host` (a CPU tensor with this shape and dtype, the values this device tensor was
  // uploaded from) as the mirror of the whole storage; the bytes are copied.
  void set_host_mirror(const Tensor& host);
  // The promise of Storage::checked_bound: every value of this tensor's storage (all of it, not
  // only this view) lies in [0, bound). Integer dtypes only; bound >= 0, or -1 to drop the
  // promise. Set it after the last write (a mutable access drops it). checked_bound(): -1 = none.
  void set_checked_bound(int64_t bound);
  int64_t checked_bound() const { return storage_ ? storage_->checked_bound : -1; }

  // Host helpers for tests and I/O (CPU tensors; the same check as host()).
  double item() const;                // one-element tensor
  double at(int64_t flat_index) const;  // element as double
  void set(int64_t flat_index, double v);
  template <class T> std::vector<T> to_vector() const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  DType dtype_ = DType::F32;
};

// --- template definitions ---
template <class T> T* Tensor::data() {
  CTX_CHECK(defined(), "Tensor::data: undefined tensor");
  CTX_CHECK(dtype_of<T>::value == dtype_, "Tensor::data: tensor is ", dtype_name(dtype_),
            str(), " but ", dtype_name(dtype_of<T>::value), " was requested");
  return reinterpret_cast<T*>(raw());
}
template <class T> const T* Tensor::data() const {
  CTX_CHECK(defined(), "Tensor::data: undefined tensor");
  CTX_CHECK(dtype_of<T>::value == dtype_, "Tensor::data: tensor is ", dtype_name(dtype_),
            str(), " but ", dtype_name(dtype_of<T>::value), " was requested");
  return reinterpret_cast<const T*>(raw());
}
template <class T> T* Tensor::host() {
  check_host("Tensor::host");
  return data<T>();
}
template <class T> const T* Tensor::host() const {
  check_host("Tensor::host");
  return data<T>();
}
template <class T> Tensor Tensor::from_vector(const std::vector<T>& v, const Shape& shape) {
  CTX_CHECK((int64_t)v.size() == shape_numel(shape), "Tensor::from_vector: ", v.size(),
            " values for shape ", shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>::value);
  T* p = t.host<T>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = v[i];
  return t;
}
template <class T> std::vector<T> Tensor::to_vector() const {
  check_host("Tensor::to_vector");
  std::vector<T> out((size_t)numel());
  for (int64_t i = 0; i < numel(); ++i) out[(size_t)i] = (T)at(i);
  return out;
}

}  // namespace ctx
