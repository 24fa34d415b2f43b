// train/io/safetensors.cpp — safetensors reader (strict validation) and atomic writer.
// See safetensors.h for the format. Every check below produces a one-line ctx::Error that starts
// with "safetensors <file>: " and names the tensor or field and what was expected.
#include "train/io/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <set>

#include "core/device_table.h"  // to_host
#include "train/io/fileio.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors I/O assumes a little-endian host");

namespace ctx {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;  // for writing: keeps the given tensor order

// dtypes as stored in the file; F16/BF16 are converted to F32 when read.
enum class FileType { F32, F64, I32, I64, F16, BF16 };

struct FileTypeInfo {
  const char* name;
  FileType type;
  size_t size;
  DType loaded;
};
const FileTypeInfo kTypes[] = {
    {"F32", FileType::F32, 4, DType::F32},  {"F64", FileType::F64, 8, DType::F64},
    {"I32", FileType::I32, 4, DType::I32},  {"I64", FileType::I64, 8, DType::I64},
    {"F16", FileType::F16, 2, DType::F32},  {"BF16", FileType::BF16, 2, DType::F32},
};
const char* kTypeList = "F32, F64, I32, I64, F16, BF16";

const char* st_dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
  }
  return "?";
}

struct Entry {
  std::string name;
  const FileTypeInfo* type = nullptr;
  Shape shape;
  uint64_t numel = 0;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;
};

float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while (!(man & 0x400));
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);  // inf / nan
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Parses and validates the JSON header. `data_len` is the size of the data section.
Header parse_header(const char* text, size_t n, uint64_t data_len, const std::string& file) {
  const std::string where = "safetensors " + file;
  std::vector<std::string> order;  // header keys in file order
  const json j = parse_json_strict<json>(text, text + n, where + ": header", &order);
  CTX_CHECK(j.is_object(), where, ": header must be a JSON object mapping tensor names to "
            "entries (got ", j.type_name(), ")");
  Header h;
  for (const std::string& key : order) {
    const json& v = j.at(key);
    if (key == "__metadata__") {
      CTX_CHECK(v.is_object(), where, ": field '__metadata__' must be an object of strings (got ",
                v.type_name(), ")");
      for (auto m = v.begin(); m != v.end(); ++m) {
        CTX_CHECK(m.value().is_string(), where, ": __metadata__ value for key ", quoted_str(m.key()),
                  " must be a string (got ", m.value().type_name(), ")");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string t = "tensor " + quoted_str(key);
    CTX_CHECK(!key.empty(), where, ": empty tensor name in the header");
    CTX_CHECK(v.is_object(), where, ": ", t, ": entry must be an object with dtype, shape and "
              "data_offsets (got ", v.type_name(), ")");
    for (auto f = v.begin(); f != v.end(); ++f)
      CTX_CHECK(f.key() == "dtype" || f.key() == "shape" || f.key() == "data_offsets", where, ": ",
                t, ": unknown field ", quoted_str(f.key()), " (expected dtype, shape, data_offsets)");
    Entry e;
    e.name = key;
    // dtype
    auto d = v.find("dtype");
    CTX_CHECK(d != v.end(), where, ": ", t, ": missing field 'dtype' (expected one of ", kTypeList,
              ")");
    CTX_CHECK(d->is_string(), where, ": ", t, ": field 'dtype' must be a string (got ",
              d->type_name(), ")");
    const std::string dn = d->get<std::string>();
    for (const FileTypeInfo& ti : kTypes)
      if (dn == ti.name) e.type = &ti;
    CTX_CHECK(e.type, where, ": ", t, ": unsupported dtype ", quoted_str(dn), " (expected one of ",
              kTypeList, ")");
    // shape
    auto s = v.find("shape");
    CTX_CHECK(s != v.end(), where, ": ", t, ": missing field 'shape' (expected a list of "
              "non-negative integers)");
    CTX_CHECK(s->is_array(), where, ": ", t, ": field 'shape' must be a list of non-negative "
              "integers (got ", s->type_name(), ")");
    uint64_t numel = 1;
    for (size_t i = 0; i < s->size(); ++i) {
      const json& x = (*s)[i];
      CTX_CHECK(x.is_number_unsigned() &&
                    x.get<uint64_t>() <= (uint64_t)std::numeric_limits<int64_t>::max(),
                where, ": ", t, ": shape[", i, "] must be a non-negative integer (got ",
                x.is_number() ? x.dump() : std::string(x.type_name()), ")");
      uint64_t dim = x.get<uint64_t>();
      CTX_CHECK(mul_ok(numel, dim, &numel) &&
                    numel <= (uint64_t)std::numeric_limits<int64_t>::max(),
                where, ": ", t, ": shape ", brief(s->dump()), " has too many elements");
      e.shape.push_back((int64_t)dim);
    }
    e.numel = numel;
    // data_offsets
    auto o = v.find("data_offsets");
    CTX_CHECK(o != v.end(), where, ": ", t, ": missing field 'data_offsets' (expected [begin, "
              "end])");
    CTX_CHECK(o->is_array() && o->size() == 2, where, ": ", t, ": field 'data_offsets' must be a "
              "list of 2 integers [begin, end] (got ", brief(o->dump(), 80), ")");
    for (size_t i = 0; i < 2; ++i)
      CTX_CHECK((*o)[i].is_number_unsigned(), where, ": ", t, ": data_offsets[", i,
                "] must be a non-negative integer (got ", brief((*o)[i].dump(), 80), ")");
    e.begin = (*o)[0].get<uint64_t>();
    e.end = (*o)[1].get<uint64_t>();
    CTX_CHECK(e.begin <= e.end, where, ": ", t, ": data_offsets [", e.begin, ", ", e.end,
              "] has begin > end");
    CTX_CHECK(e.end <= data_len, where, ": ", t, ": data_offsets [", e.begin, ", ", e.end,
              "] end beyond the data section (", data_len, " bytes)");
    uint64_t bytes = 0;
    bool fits = mul_ok(numel, e.type->size, &bytes);
    CTX_CHECK(fits && bytes == e.end - e.begin, where, ": ", t, ": data_offsets [", e.begin, ", ",
              e.end, "] span ", e.end - e.begin, " bytes but ", e.type->name,
              brief(shape_str(e.shape)), " needs ", fits ? str(bytes) : std::string("more than 2^64"),
              " bytes");
    h.entries.push_back(std::move(e));
  }
  // Overlaps: sort the non-empty ranges by begin; neighbours must not intersect.
  std::vector<const Entry*> ranges;
  for (const Entry& e : h.entries)
    if (e.end > e.begin) ranges.push_back(&e);
  std::sort(ranges.begin(), ranges.end(),
            [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < ranges.size(); ++i)
    CTX_CHECK(ranges[i]->begin >= ranges[i - 1]->end, where, ": tensor ", quoted_str(ranges[i]->name),
              ": data_offsets [", ranges[i]->begin, ", ", ranges[i]->end,
              "] overlap those of tensor ", quoted_str(ranges[i - 1]->name), " [",
              ranges[i - 1]->begin, ", ", ranges[i - 1]->end, ")");
  return h;
}

// Builds the tensor for `e`; `read(offset_in_data, bytes, dst)` copies raw bytes.
template <class Read>
Tensor materialize(const Entry& e, Read&& read) {
  Tensor t = Tensor::empty(e.shape, e.type->loaded);
  const uint64_t bytes = e.end - e.begin;
  if (bytes == 0) return t;
  if (e.type->type == FileType::F16 || e.type->type == FileType::BF16) {
    std::vector<uint16_t> tmp((size_t)e.numel);
    read(e.begin, (size_t)bytes, tmp.data());
    float* dst = t.host<float>();
    const bool half = e.type->type == FileType::F16;
    for (size_t i = 0; i < tmp.size(); ++i)
      dst[i] = half ? half_to_float(tmp[i]) : bf16_to_float(tmp[i]);
  } else {
    read(e.begin, (size_t)bytes, t.raw());
  }
  return t;
}

void check_header_len(uint64_t n, uint64_t file_size, const std::string& file) {
  CTX_CHECK(n <= kSafetensorsMaxHeader, "safetensors ", file, ": header length ", n,
            " is absurd (limit ", kSafetensorsMaxHeader, " bytes); not a safetensors file?");
  CTX_CHECK(n <= file_size - 8, "safetensors ", file, ": header length ", n,
            " goes beyond the end of the file (", file_size - 8,
            " bytes after the 8-byte length)");
}

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

SafetensorsFile assemble(Header&& h, const std::string& file,
                         const std::function<void(uint64_t, size_t, void*)>& read) {
  SafetensorsFile out;
  out.source = file;
  out.metadata = std::move(h.metadata);
  for (const Entry& e : h.entries) {
    out.names.push_back(e.name);
    out.tensors.emplace(e.name, materialize(e, read));
  }
  return out;
}

}  // namespace

const Tensor& SafetensorsFile::at(const std::string& name) const {
  auto it = tensors.find(name);
  CTX_CHECK(it != tensors.end(), "safetensors ", source, ": no tensor ", quoted_str(name), " (the file has ",
            tensors.size(), " tensors)");
  return it->second;
}

SafetensorsFile load_safetensors_bytes(const uint8_t* data, size_t size, const std::string& name) {
  CTX_CHECK(size >= 8, "safetensors ", name, ": file is ", size,
            " bytes, shorter than the 8-byte header length");
  const uint64_t n = read_le64(data);
  check_header_len(n, size, name);
  const uint64_t data_len = size - 8 - n;
  Header h = parse_header((const char*)data + 8, (size_t)n, data_len, name);
  const uint8_t* base = data + 8 + n;
  return assemble(std::move(h), name, [&](uint64_t off, size_t bytes, void* dst) {
    std::memcpy(dst, base + off, bytes);
  });
}

SafetensorsFile load_safetensors(const std::string& path) {
  const std::string what = "safetensors " + path;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    throw Error(str(what, ": cannot open: ", std::strerror(err)));
  }
  CTX_CHECK(S_ISREG(st.st_mode), what, ": not a regular file");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    int err = errno;
    throw Error(str(what, ": cannot open: ", std::strerror(err)));
  }
  struct Closer {
    std::FILE* f;
    ~Closer() { std::fclose(f); }
  } closer{f};
  const uint64_t size = (uint64_t)st.st_size;
  CTX_CHECK(size >= 8, what, ": file is ", size, " bytes, shorter than the 8-byte header length");
  unsigned char len8[8];
  CTX_CHECK(std::fread(len8, 1, 8, f) == 8, what, ": read error in the header length");
  const uint64_t n = read_le64(len8);
  check_header_len(n, size, path);
  std::string text((size_t)n, '\0');
  CTX_CHECK(std::fread(&text[0], 1, (size_t)n, f) == n, what,
            ": file ended inside the header (was it truncated while being read?)");
  const uint64_t data_len = size - 8 - n;
  Header h = parse_header(text.data(), text.size(), data_len, path);
  const uint64_t data_start = 8 + n;
  return assemble(std::move(h), path, [&](uint64_t off, size_t bytes, void* dst) {
    CTX_CHECK(::fseeko(f, (off_t)(data_start + off), SEEK_SET) == 0 &&
                  std::fread(dst, 1, bytes, f) == bytes,
              what, ": file ended inside the data at offset ", off,
              " (was it truncated while being read?)");
  });
}

std::string safetensors_header(const std::vector<std::pair<std::string, Tensor>>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  ojson h = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto& kv : metadata) m[kv.first] = kv.second;
    h["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  std::set<std::string> seen;
  for (const auto& nt : tensors) {
    const std::string& name = nt.first;
    const Tensor& t = nt.second;
    CTX_CHECK(!name.empty(), "save_safetensors: empty tensor name");
    CTX_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' is reserved, not a tensor "
              "name");
    CTX_CHECK(seen.insert(name).second, "save_safetensors: duplicate tensor name ",
              quoted_str(name));
    CTX_CHECK(t.defined(), "save_safetensors: tensor ", quoted_str(name), " is undefined");
    const uint64_t bytes = t.nbytes();
    ojson e = ojson::object();
    e["dtype"] = st_dtype_name(t.dtype());
    e["shape"] = t.shape();
    e["data_offsets"] = {offset, offset + bytes};
    h[name] = std::move(e);
    offset += bytes;
  }
  std::string text;
  try {
    text = h.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(str("save_safetensors: tensor names and metadata must be valid UTF-8 (",
                    json_error_text(e), ")"));
  }
  while (text.size() % 8) text += ' ';
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = (char)((n >> (8 * i)) & 0xff);
  return out + text;
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> host;
  host.reserve(tensors.size());
  for (const auto& nt : tensors) {
    CTX_CHECK(nt.second.defined(), "save_safetensors ", path, ": tensor ", quoted_str(nt.first),
              " is undefined");
    host.emplace_back(nt.first, to_host(nt.second));
  }
  std::string header;
  try {
    header = safetensors_header(host, metadata);
  } catch (const Error& e) {
    throw Error(str(e.what(), " (writing ", path, ")"));
  }
  std::vector<ByteSpan> parts;
  parts.push_back({header.data(), header.size()});
  for (const auto& nt : host) parts.push_back({nt.second.raw(), nt.second.nbytes()});
  write_file_atomic(path, parts, "safetensors");
}

}  // namespace ctx
