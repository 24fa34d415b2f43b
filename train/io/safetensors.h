// train/io/safetensors.h — read and write the safetensors format (checkpoints, gradient dumps).
// Layout: 8-byte little-endian header length N, N bytes of JSON header (padded with spaces so
// that 8 + N is a multiple of 8), then the raw little-endian tensor data. The header maps each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the start
// of the data section) and may hold "__metadata__": {string: string}.
// Writes are atomic (<path>.tmp, fsync, rename). Reads validate everything and throw a one-line
// ctx::Error naming the file and the tensor or field on any inconsistency.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ctx {

// Tensors are written in the given order (F32/F64/I32/I64 as "F32"/"F64"/"I32"/"I64"); CUDA
// tensors are copied to the host first. Names must be unique, non-empty and not "__metadata__".
// An empty `metadata` writes no "__metadata__" entry.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The file's bytes up to the data section (8-byte length + padded JSON header) for `tensors` as
// save_safetensors writes them; the data section is the tensors' bytes in order.
std::string safetensors_header(const std::vector<std::pair<std::string, Tensor>>& tensors,
                               const std::map<std::string, std::string>& metadata);

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;  // "__metadata__" (empty when absent)
  std::vector<std::string> names;               // tensor names in header order
  std::map<std::string, Tensor> tensors;        // contiguous CPU tensors
  const Tensor& at(const std::string& name) const;  // throws naming the file when missing
  std::string source;                           // the path (or name) it was read from
};

// Reads F32, F64, I32, I64 as they are and F16/BF16 converted to F32.
SafetensorsFile load_safetensors(const std::string& path);
// The same from memory; `name` stands in for the file name in error messages.
SafetensorsFile load_safetensors_bytes(const uint8_t* data, size_t size, const std::string& name);

// Largest header accepted (as the reference implementation: 100 MB).
constexpr uint64_t kSafetensorsMaxHeader = 100000000;

}  // namespace ctx
