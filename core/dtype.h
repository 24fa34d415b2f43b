// core/dtype.h — element types and devices a Tensor can hold.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ctx {

enum class DType : uint8_t { F32, F64, I32, I64 };
enum class Device : uint8_t { CPU, CUDA };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}
inline bool is_float(DType t) { return t == DType::F32 || t == DType::F64; }
inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

// C++ type -> DType
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };

}  // namespace ctx
