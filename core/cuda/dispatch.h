// core/cuda/dispatch.h — dtype switches for the CUDA backend: run a block with `T` (or `I`) bound
// to the C++ type of a DType, or throw naming the op (the messages of the CPU backend).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

#define CTX_CUDA_DISPATCH_FLOAT(DT, WHAT, ...)                                               \
  switch (DT) {                                                                              \
    case ::ctx::DType::F32: { using T = float; __VA_ARGS__; break; }                         \
    case ::ctx::DType::F64: { using T = double; __VA_ARGS__; break; }                        \
    default: throw ::ctx::Error(::ctx::str(WHAT, ": expected a float tensor, got ", ::ctx::dtype_name(DT))); \
  }
#define CTX_CUDA_DISPATCH_INDEX(DT, WHAT, ...)                                                       \
  switch (DT) {                                                                                      \
    case ::ctx::DType::I32: { using I = int32_t; __VA_ARGS__; break; }                               \
    case ::ctx::DType::I64: { using I = int64_t; __VA_ARGS__; break; }                               \
    default: throw ::ctx::Error(::ctx::str(WHAT, ": index tensor must be i32 or i64, got ", ::ctx::dtype_name(DT))); \
  }
#define CTX_CUDA_DISPATCH_ALL(DT, ...)                                 \
  switch (DT) {                                                        \
    case ::ctx::DType::F32: { using T = float; __VA_ARGS__; break; }   \
    case ::ctx::DType::F64: { using T = double; __VA_ARGS__; break; }  \
    case ::ctx::DType::I32: { using T = int32_t; __VA_ARGS__; break; } \
    case ::ctx::DType::I64: { using T = int64_t; __VA_ARGS__; break; } \
  }
