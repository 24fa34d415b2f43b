// train/io/npy.h — NumPy .npy files (token arrays, reference data for tests).
// Reads format versions 1.0, 2.0 and 3.0 with dtype '<i4', '<i8', '<f4' or '<f8' in C order;
// anything else is a one-line ctx::Error naming the file and the field. Writes version 1.0
// (2.0 when the header needs it) atomically (<path>.tmp, fsync, rename).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace ctx {

Tensor load_npy(const std::string& path);
// The same from memory; `name` stands in for the file name in error messages.
Tensor load_npy_bytes(const uint8_t* data, size_t size, const std::string& name);

// CUDA tensors are copied to the host first.
void save_npy(const std::string& path, const Tensor& t);

// The .npy header (magic, version, length, padded dict) that save_npy writes before the data.
std::string npy_header(const Tensor& t);

}  // namespace ctx
