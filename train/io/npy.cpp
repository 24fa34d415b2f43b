// train/io/npy.cpp — NumPy .npy reader/writer (see npy.h).
// The header is a Python dict literal, e.g. {'descr': '<f4', 'fortran_order': False,
// 'shape': (3, 4), }; it is read by a small parser for exactly that grammar (string keys; string,
// bool or tuple-of-int values) rather than by rewriting it into JSON.
#include "train/io/npy.h"

#include <cstring>
#include <limits>
#include <vector>

#include "core/device_table.h"  // to_host
#include "train/io/fileio.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "npy I/O assumes a little-endian host");

namespace ctx {
namespace {

const char kMagic[] = "\x93NUMPY";  // 6 bytes
const char* kDescrList = "'<i4', '<i8', '<f4', '<f8'";

struct DictValue {
  enum Kind { Str, Bool, Tuple } kind = Str;
  std::string s;
  bool b = false;
  std::vector<int64_t> tuple;
};

// Parser for the header dict; errors name the file and the position in the header.
struct HeaderParser {
  const std::string& text;
  const std::string& where;
  size_t p = 0;

  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(str(where, ": malformed header at character ", p, ": ", msg, " (header ",
                    quoted_str(text, 100), ")"));
  }
  void ws() {
    while (p < text.size() && (text[p] == ' ' || text[p] == '\t' || text[p] == '\n' ||
                               text[p] == '\r'))
      ++p;
  }
  bool eat(char c) {
    ws();
    if (p < text.size() && text[p] == c) {
      ++p;
      return true;
    }
    return false;
  }
  std::string string_lit() {
    ws();
    if (p >= text.size() || (text[p] != '\'' && text[p] != '"')) fail("expected a quoted string");
    char q = text[p++];
    std::string out;
    while (p < text.size() && text[p] != q) {
      if (text[p] == '\\') fail("escape sequences are not supported in header strings");
      out += text[p++];
    }
    if (p >= text.size()) fail("unterminated string");
    ++p;
    return out;
  }
  int64_t integer() {
    ws();
    size_t start = p;
    uint64_t v = 0;
    while (p < text.size() && text[p] >= '0' && text[p] <= '9') {
      uint64_t d = (uint64_t)(text[p] - '0');
      if (v > ((uint64_t)std::numeric_limits<int64_t>::max() - d) / 10)
        fail("shape dimension too large");
      v = v * 10 + d;
      ++p;
    }
    if (p == start) fail("expected a non-negative integer in 'shape'");
    if (p < text.size() && text[p] == 'L') ++p;  // Python 2 long suffix
    return (int64_t)v;
  }
  DictValue value() {
    ws();
    DictValue v;
    if (p < text.size() && (text[p] == '\'' || text[p] == '"')) {
      v.kind = DictValue::Str;
      v.s = string_lit();
    } else if (text.compare(p, 4, "True") == 0) {
      v.kind = DictValue::Bool;
      v.b = true;
      p += 4;
    } else if (text.compare(p, 5, "False") == 0) {
      v.kind = DictValue::Bool;
      v.b = false;
      p += 5;
    } else if (eat('(')) {
      v.kind = DictValue::Tuple;
      if (!eat(')')) {
        for (;;) {
          v.tuple.push_back(integer());
          if (eat(')')) break;
          if (!eat(',')) fail("expected ',' or ')' in a tuple");
          if (eat(')')) break;  // trailing comma: (3,)
        }
      }
    } else {
      fail("expected a string, True, False or a tuple");
    }
    return v;
  }
};

struct NpyHeader {
  DType dtype = DType::F32;
  Shape shape;
  uint64_t numel = 0;
  size_t data_start = 0;
};

NpyHeader parse_npy_header(const uint8_t* data, size_t size, const std::string& name) {
  const std::string where = "npy " + name;
  CTX_CHECK(size >= 10, where, ": file is ", size, " bytes, too short for the .npy magic and "
            "header length (truncated header)");
  CTX_CHECK(std::memcmp(data, kMagic, 6) == 0, where, ": bad magic (expected \\x93NUMPY, got ",
            quoted_str(std::string((const char*)data, 6)), "); not a .npy file");
  const int major = data[6], minor = data[7];
  CTX_CHECK((major == 1 || major == 2 || major == 3) && minor == 0, where,
            ": unsupported format version ", major, ".", minor, " (expected 1.0, 2.0 or 3.0)");
  size_t hlen, hstart;
  if (major == 1) {
    hlen = (size_t)data[8] | ((size_t)data[9] << 8);
    hstart = 10;
  } else {
    CTX_CHECK(size >= 12, where, ": file is ", size, " bytes, too short for a version ", major,
              " header length (truncated header)");
    hlen = (size_t)data[8] | ((size_t)data[9] << 8) | ((size_t)data[10] << 16) |
           ((size_t)data[11] << 24);
    hstart = 12;
  }
  CTX_CHECK(hlen <= size - hstart, where, ": truncated header: header length is ", hlen,
            " bytes but only ", size - hstart, " follow");
  const std::string text((const char*)data + hstart, hlen);
  HeaderParser ps{text, where};
  if (!ps.eat('{')) ps.fail("expected '{'");
  bool have_descr = false, have_fortran = false, have_shape = false;
  std::string descr;
  bool fortran = false;
  std::vector<int64_t> shape;
  while (!ps.eat('}')) {
    const std::string key = ps.string_lit();
    if (!ps.eat(':')) ps.fail("expected ':' after key " + quoted_str(key));
    DictValue v = ps.value();
    if (key == "descr") {
      CTX_CHECK(!have_descr, where, ": field 'descr' appears twice in the header");
      CTX_CHECK(v.kind == DictValue::Str, where, ": field 'descr' must be a dtype string such as "
                "'<f4' (structured dtypes are not supported)");
      descr = v.s;
      have_descr = true;
    } else if (key == "fortran_order") {
      CTX_CHECK(!have_fortran, where, ": field 'fortran_order' appears twice in the header");
      CTX_CHECK(v.kind == DictValue::Bool, where, ": field 'fortran_order' must be True or False");
      fortran = v.b;
      have_fortran = true;
    } else if (key == "shape") {
      CTX_CHECK(!have_shape, where, ": field 'shape' appears twice in the header");
      CTX_CHECK(v.kind == DictValue::Tuple, where, ": field 'shape' must be a tuple of "
                "non-negative integers");
      shape = v.tuple;
      have_shape = true;
    } else {
      throw Error(str(where, ": unknown header key ", quoted_str(key),
                      " (expected 'descr', 'fortran_order', 'shape')"));
    }
    if (ps.eat('}')) break;
    if (!ps.eat(',')) ps.fail("expected ',' or '}' after the value of " + quoted_str(key));
  }
  ps.ws();
  if (ps.p != text.size()) ps.fail("unexpected text after the closing '}'");
  CTX_CHECK(have_descr, where, ": header has no field 'descr'");
  CTX_CHECK(have_fortran, where, ": header has no field 'fortran_order'");
  CTX_CHECK(have_shape, where, ": header has no field 'shape'");
  CTX_CHECK(!fortran, where, ": field 'fortran_order' is True; only C order is supported "
            "(save with np.ascontiguousarray)");
  NpyHeader h;
  size_t itemsize;
  if (descr == "<i4") h.dtype = DType::I32, itemsize = 4;
  else if (descr == "<i8") h.dtype = DType::I64, itemsize = 8;
  else if (descr == "<f4") h.dtype = DType::F32, itemsize = 4;
  else if (descr == "<f8") h.dtype = DType::F64, itemsize = 8;
  else
    throw Error(str(where, ": unsupported dtype (field 'descr') ", quoted_str(descr),
                    " (expected one of ", kDescrList, ")"));
  uint64_t numel = 1;
  for (int64_t d : shape) {
    CTX_CHECK(mul_ok(numel, (uint64_t)d, &numel) &&
                  numel <= (uint64_t)std::numeric_limits<int64_t>::max(),
              where, ": field 'shape' ", brief(shape_str(shape)), " has too many elements");
  }
  h.shape = shape;
  h.numel = numel;
  h.data_start = hstart + hlen;
  const uint64_t have = size - h.data_start;
  uint64_t need = 0;
  bool fits = mul_ok(numel, itemsize, &need);
  CTX_CHECK(fits && need == have, where, ": field 'shape' ", brief(shape_str(shape)), " with dtype ",
            quoted_str(descr), " needs ", fits ? str(need) : std::string("more than 2^64"),
            " data bytes but the file has ", have,
            have < need || !fits ? " (truncated data)" : " (trailing bytes)");
  return h;
}

}  // namespace

Tensor load_npy_bytes(const uint8_t* data, size_t size, const std::string& name) {
  NpyHeader h = parse_npy_header(data, size, name);
  Tensor t = Tensor::empty(h.shape, h.dtype);
  if (t.nbytes()) std::memcpy(t.raw(), data + h.data_start, t.nbytes());
  return t;
}

Tensor load_npy(const std::string& path) {
  const std::string bytes = read_file(path, "npy");
  return load_npy_bytes((const uint8_t*)bytes.data(), bytes.size(), path);
}

std::string npy_header(const Tensor& t) {
  const char* descr = "";
  switch (t.dtype()) {
    case DType::F32: descr = "<f4"; break;
    case DType::F64: descr = "<f8"; break;
    case DType::I32: descr = "<i4"; break;
    case DType::I64: descr = "<i8"; break;
  }
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) shape += (i ? ", " : "") + str(t.shape()[i]);
  if (t.shape().size() == 1) shape += ",";
  shape += ")";
  std::string dict = str("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Pad with spaces and end with '\n' so that the data starts at a multiple of 64 bytes.
  size_t prefix = 10;
  size_t total = prefix + dict.size() + 1;
  if ((total + 63) / 64 * 64 - prefix > 65535) prefix = 12;  // needs format 2.0
  total = prefix + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict += std::string(padded - total, ' ');
  dict += '\n';
  std::string out(kMagic, 6);
  const size_t hlen = dict.size();
  if (prefix == 10) {
    out += '\x01';
    out += '\x00';
    out += (char)(hlen & 0xff);
    out += (char)((hlen >> 8) & 0xff);
  } else {
    CTX_CHECK(hlen <= 0xffffffffu, "save_npy: header too long (", hlen, " bytes)");
    out += '\x02';
    out += '\x00';
    for (int i = 0; i < 4; ++i) out += (char)((hlen >> (8 * i)) & 0xff);
  }
  return out + dict;
}

void save_npy(const std::string& path, const Tensor& t) {
  CTX_CHECK(t.defined(), "save_npy ", path, ": tensor is undefined");
  Tensor h = to_host(t);
  const std::string header = npy_header(h);
  write_file_atomic(path, {{header.data(), header.size()}, {h.raw(), h.nbytes()}}, "npy");
}

}  // namespace ctx
