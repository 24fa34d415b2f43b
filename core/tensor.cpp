// core/tensor.cpp — Tensor and Storage (see tensor.h).
#include "core/tensor.h"

#include <cstring>
#include <sstream>

#include "core/allocator.h"
#include "core/backend.h"
#include "core/cuda_module.h"  // the CUDA backend, loaded on first use

namespace ctx {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = (int64_t)s.size() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

static DeviceAllocator g_cuda_alloc;
void register_device_allocator(Device d, DeviceAllocator a) {
  if (d == Device::CUDA) g_cuda_alloc = a;
}

Storage::Storage(size_t nbytes, Device dev, Arena a) : bytes(nbytes), device(dev), arena(a) {
  if (dev == Device::CPU) {
    data = BufferPool::host().alloc(nbytes);
  } else {
#ifdef CTXLAB_WITH_CUDA
    cuda_module().ensure_allocator();
#endif
    CTX_CHECK(g_cuda_alloc.alloc, "Tensor: CUDA device requested but this build has no CUDA "
              "backend (configure with -DCTXLAB_WITH_CUDA=ON on a machine with nvcc)");
    data = g_cuda_alloc.alloc(nbytes, arena);
  }
}

Storage::~Storage() {
  delete bf16_copy.load();
  if (device == Device::CPU) BufferPool::host().free(data, bytes);
  else if (g_cuda_alloc.free) g_cuda_alloc.free(data, bytes, arena);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device dev, Arena arena) {
  for (int64_t d : shape)
    CTX_CHECK(d >= 0, "Tensor::empty: negative dimension in shape ", shape_str(shape));
  Tensor t;
  size_t bytes = (size_t)shape_numel(shape) * dtype_size(dtype);
  t.storage_ = std::make_shared<Storage>(bytes ? bytes : 1, dev, arena);
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device dev) { return full(shape, 0.0, dtype, dev); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device dev) {
  Tensor t = empty(shape, dtype, dev);
  backend(dev).fill(t, value);
  return t;
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  int64_t dd = d < 0 ? d + n : d;
  CTX_CHECK(dd >= 0 && dd < n, "Tensor::size: dim ", d, " out of range for ", str());
  return shape_[dd];
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype_)) + shape_str(shape_);
}

Tensor Tensor::view(const Shape& shape) const {
  CTX_CHECK(defined(), "reshape: undefined tensor");
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      CTX_CHECK(infer < 0, "reshape: more than one -1 in ", shape_str(shape));
      infer = (int64_t)i;
    } else {
      CTX_CHECK(s[i] >= 0, "reshape: negative dim in ", shape_str(shape));
      known *= s[i];
    }
  }
  if (infer >= 0) {
    CTX_CHECK(known > 0 && numel() % known == 0, "reshape: cannot reshape ", str(), " to ",
              shape_str(shape));
    s[infer] = numel() / known;
  }
  CTX_CHECK(shape_numel(s) == numel(), "reshape: cannot reshape ", str(), " (", numel(),
            " elements) to ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  CTX_CHECK(dim() >= 1, "slice0: tensor ", str(), " has no dim 0");
  CTX_CHECK(0 <= begin && begin <= end && end <= shape_[0], "slice0: range [", begin, ", ", end,
            ") out of bounds for ", str());
  Tensor t = *this;
  int64_t row = shape_numel(shape_) / (shape_[0] ? shape_[0] : 1);
  if (shape_[0] == 0) row = 0;
  t.offset_ = offset_ + begin * row;
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::select0(int64_t i) const {
  Tensor t = slice0(i, i + 1);
  t.shape_.erase(t.shape_.begin());
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dt) const {
  Tensor t = empty(shape_, dt, device());
  backend(device()).convert(*this, t);
  return t;
}

Tensor Tensor::to(Device dev, Arena arena) const {
  if (dev == device()) return clone();
  Tensor t;
  try {
    t = empty(shape_, dtype_, dev, arena);  // registers the device allocator when compiled in
  } catch (const Error& e) {
    throw Error(ctx::str("Tensor::to: transfer of ", str(), " ", device_name(device()), " -> ", device_name(dev), ": ",
                    e.what()));
  }
  CTX_CHECK(g_cuda_alloc.copy, "Tensor::to: transfer ", device_name(device()), " -> ",
            device_name(dev), " needs the CUDA backend (not compiled in)");
  if (nbytes() > 0) g_cuda_alloc.copy(t.raw(), dev, raw(), device(), nbytes());
  return t;
}

Tensor Tensor::host_mirror() const {
  Tensor t;
  if (!defined() || device() == Device::CPU || !storage_->host_mirror) return t;
  t = *this;
  t.storage_ = storage_->host_mirror;
  return t;
}

void Tensor::set_host_mirror(const Tensor& host) {
  CTX_CHECK(defined() && device() != Device::CPU && host.device() == Device::CPU && host.dtype() == dtype_ &&
                host.shape() == shape_ && spans_storage(),
            "set_host_mirror: ", host.str(), " on ", device_name(host.device()), " cannot mirror ", str(), " on ",
            device_name(device()), " (same shape and dtype, the whole storage)");
  auto m = std::make_shared<Storage>(storage_->bytes, Device::CPU);
  if (storage_->bytes) std::memcpy(m->data, host.raw(), storage_->bytes);
  storage_->host_mirror = std::move(m);
}

void Tensor::set_checked_bound(int64_t bound) {
  CTX_CHECK(defined(), "set_checked_bound: undefined tensor");
  CTX_CHECK(!is_float(dtype_), "set_checked_bound: ", str(), " is not an integer tensor (i32 or i64 expected)");
  CTX_CHECK(bound >= -1, "set_checked_bound: bound ", bound, " for ", str(), " must be >= 0 (or -1: none)");
  storage_->checked_bound = bound;
}

void Tensor::copy_from(const Tensor& src) {
  CTX_CHECK(src.numel() == numel(), "copy_from: ", src.str(), " into ", str());
  if (src.device() != device()) {  // a transfer into this (contiguous) tensor: same dtype
    CTX_CHECK(src.dtype() == dtype_, "copy_from: ", src.str(), " on ", device_name(src.device()), " into ", str(),
              " on ", device_name(device()), ": a transfer keeps the dtype");
    CTX_CHECK(g_cuda_alloc.copy, "copy_from: transfer ", device_name(src.device()), " -> ", device_name(device()),
              " needs the CUDA backend (not compiled in)");
    if (nbytes() > 0) g_cuda_alloc.copy(raw(), device(), src.raw(), src.device(), nbytes());
    return;
  }
  if (src.dtype() == dtype_ && device() == Device::CPU) {
    if (raw() != src.raw()) std::memcpy(raw(), src.raw(), nbytes());
  } else {
    backend(device()).convert(src, *this);
  }
}

void Tensor::check_host(const char* what) const {
  CTX_CHECK(defined(), what, ": undefined tensor");
  CTX_CHECK(device() == Device::CPU, what, ": tensor ", str(), " is on ", device_name(device()),
            "; copy it with .to(Device::CPU) first");
}

double Tensor::at(int64_t i) const {
  check_host("Tensor::at");
  CTX_CHECK(i >= 0 && i < numel(), "Tensor::at: index ", i, " out of range for ", str());
  switch (dtype_) {
    case DType::F32: return data<float>()[i];
    case DType::F64: return data<double>()[i];
    case DType::I32: return data<int32_t>()[i];
    case DType::I64: return (double)data<int64_t>()[i];
  }
  return 0;
}

void Tensor::set(int64_t i, double v) {
  check_host("Tensor::set");
  CTX_CHECK(i >= 0 && i < numel(), "Tensor::set: index ", i, " out of range for ", str());
  switch (dtype_) {
    case DType::F32: data<float>()[i] = (float)v; break;
    case DType::F64: data<double>()[i] = v; break;
    case DType::I32: data<int32_t>()[i] = (int32_t)v; break;
    case DType::I64: data<int64_t>()[i] = (int64_t)v; break;
  }
}

double Tensor::item() const {
  check_host("Tensor::item");
  CTX_CHECK(numel() == 1, "Tensor::item: tensor ", str(), " has ", numel(), " elements");
  return at(0);
}

// ---- backend registry ----
static Backend* g_backends[2] = {nullptr, nullptr};
static Backend& (*g_default_backends[2])() = {nullptr, nullptr};  // constant-initialised
void register_backend(Device d, Backend* b) { g_backends[(int)d] = b; }
void register_default_backend(Device d, Backend& (*factory)()) { g_default_backends[(int)d] = factory; }
Backend& backend(Device d) {
  if (d == Device::CPU) {
    if (g_backends[0]) return *g_backends[0];
    CTX_CHECK(g_default_backends[0], "backend: no CPU backend linked in (link the whole ctxlab library: ",
              "CMake's ctxlab::ctxlab does)");
    return g_default_backends[0]();
  }
#ifdef CTXLAB_WITH_CUDA
  if (!g_backends[1]) return cuda_module().backend();  // loads libctxlab_cuda.so
#endif
  CTX_CHECK(g_backends[1], "backend: CUDA backend not available in this build");
  return *g_backends[1];
}

void synchronize_devices() {
  if (g_backends[1]) {
    g_backends[1]->synchronize();
    return;
  }
#ifdef CTXLAB_WITH_CUDA
  if (cuda_module_loaded()) cuda_module().backend().synchronize();  // never loads it
#endif
}

}  // namespace ctx
