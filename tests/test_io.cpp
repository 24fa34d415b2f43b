// tests/test_io.cpp — file formats and configs: safetensors, .npy, config JSON, the byte
// tokenizer, atomic writes. Round trips, plus one test per malformed input asserting that the
// one-line error names the file and the offending tensor or field.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "core/error.h"
#include "core/tensor.h"
#include "train/io/config.h"
#include "train/io/npy.h"
#include "train/io/safetensors.h"
#include "train/io/tokenizer.h"

using namespace ctx;
using json = nlohmann::json;

namespace {

using ctx::testing_util::test_dir;
using ctx::testing_util::write_bytes;

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

using ctx::testing_util::expect_error;

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = (char)((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a raw header text (padded to alignment) and a data section.
std::string st_bytes(const std::string& header, const std::string& data) {
  std::string h = header;
  while (h.size() % 8) h += ' ';
  return le64(h.size()) + h + data;
}

// Writes st_bytes to <dir>/<name> and returns the path.
std::string st_file(const std::string& name, const std::string& header, const std::string& data) {
  std::string p = test_dir() + name;
  write_bytes(p, st_bytes(header, data));
  return p;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

Tensor f32(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector(v, s); }

}  // namespace

// ======================= safetensors =======================

TEST(SafetensorsTest, RoundTripAllDtypesWithMetadata) {
  const std::string p = test_dir() + "rt.safetensors";
  std::vector<std::pair<std::string, Tensor>> ts = {
      {"wte.weight", f32({1.5f, -2.f, 3.25f, NAN, INFINITY, -0.f}, {2, 3})},
      {"b.f64", Tensor::from_vector<double>({1e-300, -7.0, 3.141592653589793}, {3})},
      {"a.i32", Tensor::from_vector<int32_t>({-1, 0, 2147483647, -2147483647 - 1}, {2, 1, 2})},
      {"c.i64", Tensor::from_vector<int64_t>({INT64_C(9007199254740993), -5}, {2})},
      {"scalar", f32({42.f}, {})},
      {"empty", Tensor::empty({0, 3}, DType::F32)},
  };
  std::map<std::string, std::string> meta = {
      {"format", "ctxlab/1"}, {"config", "{\"d_model\": 64}"}, {"step", "12"}, {"note", "é\n\"x\""}};
  save_safetensors(p, ts, meta);
  EXPECT_FALSE(exists(p + ".tmp"));

  // The layout is standard: LE length, header padded so data starts 8-aligned, offsets relative
  // to the data start, tensors in the given order.
  const std::string raw = read_bytes(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | (unsigned char)raw[i];
  ASSERT_LE(8 + n, raw.size());
  EXPECT_EQ((8 + n) % 8, 0u);
  json h = json::parse(raw.substr(8, n));
  EXPECT_EQ(h["__metadata__"]["format"], "ctxlab/1");
  EXPECT_EQ(h["wte.weight"]["dtype"], "F32");
  EXPECT_EQ(h["b.f64"]["dtype"], "F64");
  EXPECT_EQ(h["a.i32"]["dtype"], "I32");
  EXPECT_EQ(h["c.i64"]["dtype"], "I64");
  EXPECT_EQ(h["wte.weight"]["shape"], json({2, 3}));
  EXPECT_EQ(h["wte.weight"]["data_offsets"], json({0, 24}));
  EXPECT_EQ(h["b.f64"]["data_offsets"], json({24, 48}));
  EXPECT_EQ(h["scalar"]["shape"], json::array());
  EXPECT_EQ(raw.size(), 8 + n + 24 + 24 + 16 + 16 + 4);
  EXPECT_EQ(std::memcmp(raw.data() + 8 + n + 24, ts[1].second.raw(), 24), 0);

  SafetensorsFile f = load_safetensors(p);
  EXPECT_EQ(f.metadata, meta);
  std::vector<std::string> names;
  for (auto& nt : ts) names.push_back(nt.first);
  EXPECT_EQ(f.names, names);
  ASSERT_EQ(f.tensors.size(), ts.size());
  for (auto& nt : ts) EXPECT_TRUE(same_bytes(f.at(nt.first), nt.second)) << nt.first;
  expect_error([&] { f.at("nope"); }, {p, "'nope'"});

  // The in-memory reader agrees.
  SafetensorsFile g = load_safetensors_bytes((const uint8_t*)raw.data(), raw.size(), "mem");
  EXPECT_EQ(g.names, names);
  EXPECT_TRUE(same_bytes(g.at("c.i64"), ts[3].second));
}

TEST(SafetensorsTest, NoMetadataAndEmptyFile) {
  const std::string p = test_dir() + "plain.safetensors";
  save_safetensors(p, {{"x", f32({1, 2}, {2})}}, {});
  SafetensorsFile f = load_safetensors(p);
  EXPECT_TRUE(f.metadata.empty());
  EXPECT_EQ(f.names, std::vector<std::string>{"x"});
  save_safetensors(p, {}, {});
  EXPECT_TRUE(load_safetensors(p).tensors.empty());
}

TEST(SafetensorsTest, ReadsF16AndBF16AsF32) {
  // F16: 1, -2, 0.5, smallest subnormal, +inf, 65504. BF16: 1, -3.
  std::string d16;
  for (uint16_t v : {0x3C00, 0xC000, 0x3800, 0x0001, 0x7C00, 0x7BFF}) d16 += std::string((char*)&v, 2);
  std::string db;
  for (uint16_t v : {0x3F80, 0xC040}) db += std::string((char*)&v, 2);
  std::string p = st_file("half.safetensors",
                          R"({"h":{"dtype":"F16","shape":[6],"data_offsets":[0,12]},)"
                          R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[12,16]}})",
                          d16 + db);
  SafetensorsFile f = load_safetensors(p);
  EXPECT_EQ(f.names, (std::vector<std::string>{"h", "b"}));
  auto h = f.at("h").to_vector<float>();
  EXPECT_EQ(f.at("h").dtype(), DType::F32);
  EXPECT_EQ(h[0], 1.f);
  EXPECT_EQ(h[1], -2.f);
  EXPECT_EQ(h[2], 0.5f);
  EXPECT_EQ(h[3], std::ldexp(1.f, -24));
  EXPECT_TRUE(std::isinf(h[4]) && h[4] > 0);
  EXPECT_EQ(h[5], 65504.f);
  EXPECT_EQ(f.at("b").to_vector<float>(), (std::vector<float>{1.f, -3.f}));
}

TEST(SafetensorsTest, SaveRejectsBadNames) {
  const std::string p = test_dir() + "bad.safetensors";
  expect_error([&] { save_safetensors(p, {{"a", f32({1}, {1})}, {"a", f32({1}, {1})}}); },
               {p, "duplicate tensor name 'a'"});
  expect_error([&] { save_safetensors(p, {{"__metadata__", f32({1}, {1})}}); }, {p, "__metadata__"});
  expect_error([&] { save_safetensors(p, {{"u", Tensor()}}); }, {p, "'u'", "undefined"});
  EXPECT_FALSE(exists(p));
  EXPECT_FALSE(exists(p + ".tmp"));
}

TEST(SafetensorsTest, ErrorMissingFile) {
  const std::string p = test_dir() + "missing.safetensors";
  expect_error([&] { load_safetensors(p); }, {p, "cannot open"});
  expect_error([&] { load_safetensors(test_dir()); }, {"not a regular file"});
}

TEST(SafetensorsTest, ErrorShorterThan8Bytes) {
  const std::string p = test_dir() + "short.safetensors";
  write_bytes(p, "abc");
  expect_error([&] { load_safetensors(p); }, {p, "3 bytes", "8-byte header length"});
}

TEST(SafetensorsTest, ErrorHeaderLengthBeyondFile) {
  const std::string p = test_dir() + "hlen.safetensors";
  write_bytes(p, le64(100) + "{}      ");
  expect_error([&] { load_safetensors(p); }, {p, "header length 100", "beyond the end"});
}

TEST(SafetensorsTest, ErrorAbsurdHeaderLength) {
  const std::string p = test_dir() + "absurd.safetensors";
  write_bytes(p, le64(UINT64_C(0xffffffffffffff00)) + "{}");
  expect_error([&] { load_safetensors(p); }, {p, "header length", "absurd"});
}

TEST(SafetensorsTest, ErrorMalformedJson) {
  std::string p = st_file("json.safetensors", R"({"a": {"dtype": "F32",)", "");
  expect_error([&] { load_safetensors(p); }, {p, "header", "JSON parse error", "line 1"});
  p = st_file("array.safetensors", "[1, 2]", "");
  expect_error([&] { load_safetensors(p); }, {p, "header must be a JSON object", "array"});
}

TEST(SafetensorsTest, ErrorEntryNotObject) {
  std::string p = st_file("entry.safetensors", R"({"w": [1, 2]})", "");
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "must be an object"});
}

TEST(SafetensorsTest, ErrorUnknownEntryField) {
  std::string p = st_file("field.safetensors",
                          R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})",
                          std::string(4, '\0'));
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "unknown field 'extra'"});
}

TEST(SafetensorsTest, ErrorMissingDtype) {
  std::string p = st_file("nodtype.safetensors", R"({"w": {"shape":[1],"data_offsets":[0,4]}})",
                          std::string(4, '\0'));
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "missing field 'dtype'", "F32"});
}

TEST(SafetensorsTest, ErrorUnknownDtype) {
  std::string p = st_file("dtype.safetensors",
                          R"({"w": {"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})",
                          std::string(4, '\0'));
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "unsupported dtype 'Q7'", "F32"});
  p = st_file("dtype2.safetensors", R"({"w": {"dtype":7,"shape":[1],"data_offsets":[0,4]}})",
              std::string(4, '\0'));
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "'dtype' must be a string"});
}

TEST(SafetensorsTest, ErrorShapeNotListOfNonNegativeInts) {
  std::string d(4, '\0');
  std::string p = st_file("s1.safetensors",
                          R"({"w": {"dtype":"F32","shape":4,"data_offsets":[0,4]}})", d);
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "'shape' must be a list"});
  p = st_file("s2.safetensors", R"({"w": {"dtype":"F32","shape":[1,-1],"data_offsets":[0,4]}})", d);
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "shape[1]", "non-negative", "-1"});
  p = st_file("s3.safetensors", R"({"w": {"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", d);
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "shape[0]"});
  p = st_file("s4.safetensors", R"({"w": {"dtype":"F32","data_offsets":[0,4]}})", d);
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "missing field 'shape'"});
  // A product that overflows int64 before reaching the zero dimension.
  p = st_file("s5.safetensors",
              R"({"w": {"dtype":"F32","shape":[4611686018427387904,4,0],"data_offsets":[0,0]}})",
              "");
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "too many elements"});
}

TEST(SafetensorsTest, ErrorDataOffsetsNotTwoInts) {
  std::string d(4, '\0');
  std::string p = st_file("o1.safetensors", R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0]}})", d);
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "'data_offsets'", "2 integers"});
  p = st_file("o2.safetensors", R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", d);
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "data_offsets[1]"});
  p = st_file("o3.safetensors", R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", d);
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "data_offsets[0]", "non-negative"});
  p = st_file("o4.safetensors", R"({"w": {"dtype":"F32","shape":[1]}})", d);
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "missing field 'data_offsets'"});
}

TEST(SafetensorsTest, ErrorBeginAfterEnd) {
  std::string p = st_file("be.safetensors",
                          R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[8,4]}})",
                          std::string(8, '\0'));
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "[8, 4]", "begin > end"});
}

TEST(SafetensorsTest, ErrorEndBeyondData) {
  std::string p = st_file("end.safetensors",
                          R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                          std::string(4, '\0'));
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "beyond the data section", "4 bytes"});
  // One byte past the data: refused by the header check, from a file and from memory (which would
  // otherwise copy a byte beyond the buffer); the same tensor with its last byte present loads.
  const std::string header = R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  p = st_file("end1.safetensors", header, std::string(7, '\0'));
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "[0, 8] end beyond the data section (7 bytes)"});
  const std::string raw = st_bytes(header, std::string(7, '\0'));
  expect_error([&] { load_safetensors_bytes((const uint8_t*)raw.data(), raw.size(), "mem"); },
               {"mem", "tensor 'w'", "[0, 8] end beyond the data section (7 bytes)"});
  EXPECT_EQ(load_safetensors(st_file("end0.safetensors", header, std::string(8, '\0'))).at("w").numel(), 2);
  // An end near 2^64 must not wrap around.
  p = st_file("end2.safetensors",
              R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]}})",
              std::string(4, '\0'));
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "beyond the data section"});
}

TEST(SafetensorsTest, ErrorSizeMismatch) {
  std::string p = st_file("size.safetensors",
                          R"({"w": {"dtype":"F64","shape":[2,3],"data_offsets":[0,24]}})",
                          std::string(24, '\0'));
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "span 24 bytes", "needs 48 bytes"});
  // numel * dtype size overflowing 64 bits.
  p = st_file("size2.safetensors",
              R"({"w": {"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", "");
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'w'", "more than 2^64"});
}

TEST(SafetensorsTest, ErrorOverlappingTensors) {
  std::string p = st_file("overlap.safetensors",
                          R"({"a": {"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b": {"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          std::string(12, '\0'));
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'b'", "overlap", "tensor 'a'"});
  // Empty tensors inside another's range are fine; identical ranges are not.
  p = st_file("overlap2.safetensors",
              R"({"a": {"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("e": {"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
              R"("b": {"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
              std::string(8, '\0'));
  expect_error([&] { load_safetensors(p); }, {p, "overlap"});
}

TEST(SafetensorsTest, ErrorMetadataNotStrings) {
  std::string p = st_file("meta.safetensors", R"({"__metadata__": {"step": 12}})", "");
  expect_error([&] { load_safetensors(p); }, {p, "__metadata__", "'step'", "must be a string"});
  p = st_file("meta2.safetensors", R"({"__metadata__": ["x"]})", "");
  expect_error([&] { load_safetensors(p); }, {p, "'__metadata__' must be an object"});
}

TEST(SafetensorsTest, ErrorDuplicateNames) {
  std::string p = st_file("dup.safetensors",
                          R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("w": {"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                          std::string(8, '\0'));
  expect_error([&] { load_safetensors(p); }, {p, "duplicate key 'w'"});
}

TEST(SafetensorsTest, ErrorNamesAreQuotedOnOneLine) {
  std::string p = st_file("nl.safetensors", "{\"bad\\nname\": 3}", "");
  expect_error([&] { load_safetensors(p); }, {p, "tensor 'bad\\nname'"});
}

TEST(SafetensorsTest, ErrorDeeplyNestedHeader) {
  std::string deep = "{\"w\": " + std::string(5000, '[') + std::string(5000, ']') + "}";
  std::string p = st_file("deep.safetensors", deep, "");
  expect_error([&] { load_safetensors(p); }, {p, "nested deeper than 64"});
}

// ======================= atomic writes =======================

TEST(IOAtomicTest, StaleTmpFromKilledWriterLeavesPreviousFileLoadable) {
  const std::string p = test_dir() + "ckpt.safetensors";
  save_safetensors(p, {{"w", f32({1, 2, 3}, {3})}}, {{"step", "1"}});
  // A writer killed half-way leaves a partial <path>.tmp behind; the real file is untouched.
  const std::string partial = read_bytes(p).substr(0, 13);
  write_bytes(p + ".tmp", partial);
  SafetensorsFile f = load_safetensors(p);
  EXPECT_EQ(f.metadata.at("step"), "1");
  EXPECT_EQ(f.at("w").to_vector<float>(), (std::vector<float>{1, 2, 3}));
  // The partial tmp file itself is detected as broken.
  expect_error([&] { load_safetensors(p + ".tmp"); }, {p + ".tmp"});
  // The next save overwrites the stale tmp, replaces the file and leaves no tmp behind.
  save_safetensors(p, {{"w", f32({4, 5}, {2})}}, {{"step", "2"}});
  EXPECT_FALSE(exists(p + ".tmp"));
  SafetensorsFile g = load_safetensors(p);
  EXPECT_EQ(g.metadata.at("step"), "2");
  EXPECT_EQ(g.at("w").to_vector<float>(), (std::vector<float>{4, 5}));
}

TEST(IOAtomicTest, FailedSaveKeepsOldFileAndRemovesTmp) {
  const std::string d = test_dir();
  // The target is a directory: the rename fails after the tmp file was written.
  const std::string p = d + "isdir.safetensors";
  ::mkdir(p.c_str(), 0755);
  expect_error([&] { save_safetensors(p, {{"w", f32({1}, {1})}}, {}); }, {p, "rename"});
  EXPECT_FALSE(exists(p + ".tmp"));
  // A missing directory: nothing can be opened.
  const std::string q = d + "no/such/dir/x.npy";
  expect_error([&] { save_npy(q, f32({1}, {1})); }, {q, "cannot write"});
  // A failed save (bad tensor name) leaves the previous file intact.
  const std::string r = d + "keep.safetensors";
  save_safetensors(r, {{"w", f32({7}, {1})}}, {});
  expect_error([&] { save_safetensors(r, {{"", f32({1}, {1})}}, {}); }, {r, "empty tensor name"});
  EXPECT_EQ(load_safetensors(r).at("w").to_vector<float>(), std::vector<float>{7});
}

TEST(IOAtomicTest, NpySaveReplacesAtomically) {
  const std::string p = test_dir() + "tok.npy";
  save_npy(p, Tensor::from_vector<int32_t>({1, 2, 3}, {3}));
  write_bytes(p + ".tmp", "\x93NUMPY\x01");  // stale partial tmp
  EXPECT_EQ(load_npy(p).to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
  save_npy(p, Tensor::from_vector<int32_t>({9}, {1}));
  EXPECT_FALSE(exists(p + ".tmp"));
  EXPECT_EQ(load_npy(p).to_vector<int32_t>(), std::vector<int32_t>{9});
}

// ======================= npy =======================

namespace {
// An .npy file as NumPy writes it: magic, version, LE header length, dict padded to 64 bytes.
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  std::string d = dict;
  size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + d.size() + 1) % 64) d += ' ';
  d += '\n';
  std::string out = std::string("\x93NUMPY", 6) + (char)major + '\0';
  if (major == 1) {
    out += (char)(d.size() & 0xff);
    out += (char)(d.size() >> 8);
  } else {
    for (int i = 0; i < 4; ++i) out += (char)((d.size() >> (8 * i)) & 0xff);
  }
  return out + d + data;
}
std::string npy_file(const std::string& name, const std::string& bytes) {
  std::string p = test_dir() + name;
  write_bytes(p, bytes);
  return p;
}
template <class T>
std::string raw_of(const std::vector<T>& v) {
  return std::string((const char*)v.data(), v.size() * sizeof(T));
}
}  // namespace

TEST(NpyTest, RoundTripAllDtypes) {
  const std::string d = test_dir();
  std::vector<Tensor> ts = {
      Tensor::from_vector<int32_t>({1, -2, 3, 2147483647, 0, -7}, {2, 3}),
      Tensor::from_vector<int64_t>({INT64_C(1) << 40, -1, 5}, {3}),
      f32({0.5f, -1.25f, NAN, 1e-40f}, {1, 2, 2}),
      Tensor::from_vector<double>({3.141592653589793}, {}),
      Tensor::empty({0, 4}, DType::F64),
  };
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string p = d + "t" + std::to_string(i) + ".npy";
    save_npy(p, ts[i]);
    const std::string raw = read_bytes(p);
    EXPECT_EQ(raw.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    size_t hlen = (unsigned char)raw[8] | ((size_t)(unsigned char)raw[9] << 8);
    EXPECT_EQ((10 + hlen) % 64, 0u) << "data must start 64-byte aligned";
    EXPECT_EQ(raw[10 + hlen - 1], '\n');
    Tensor back = load_npy(p);
    EXPECT_TRUE(same_bytes(back, ts[i])) << p << " " << back.str() << " vs " << ts[i].str();
  }
  // The header text is what NumPy writes.
  EXPECT_NE(npy_header(ts[1]).find("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }"),
            std::string::npos);
  EXPECT_NE(npy_header(ts[3]).find("'shape': ()"), std::string::npos);
}

TEST(NpyTest, ReadsNumpyWrittenFilesV1V2V3) {
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  for (int major : {1, 2, 3}) {
    std::string p = npy_file("v" + std::to_string(major) + ".npy",
                             npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }",
                                       raw_of(v), major));
    Tensor t = load_npy(p);
    EXPECT_EQ(t.shape(), (Shape{3, 2}));
    EXPECT_EQ(t.to_vector<float>(), v);
  }
  // Key order and spacing vary between writers; Python 2 'L' suffixes and 1-tuples are fine.
  std::vector<int64_t> w = {7, 8, 9};
  std::string p = npy_file("order.npy", npy_bytes("{\"shape\":(3L,),\"fortran_order\":False,\"descr\":\"<i8\"}",
                                                  raw_of(w)));
  EXPECT_EQ(load_npy(p).to_vector<int64_t>(), w);
}

TEST(NpyTest, ErrorBadMagic) {
  std::string p = npy_file("magic.npy", "PK\x03\x04 this is a zip, not npy");
  expect_error([&] { load_npy(p); }, {p, "bad magic", "not a .npy file"});
  p = npy_file("ver.npy", std::string("\x93NUMPY\x09\x00\x00\x00", 10));
  expect_error([&] { load_npy(p); }, {p, "unsupported format version 9.0"});
}

TEST(NpyTest, ErrorTruncatedHeader) {
  std::string p = npy_file("th1.npy", std::string("\x93NUMPY\x01", 7));
  expect_error([&] { load_npy(p); }, {p, "truncated header"});
  std::string full = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", "abcd");
  p = npy_file("th2.npy", full.substr(0, 40));
  expect_error([&] { load_npy(p); }, {p, "truncated header", "header length is 118"});
  p = npy_file("th3.npy", std::string("\x93NUMPY\x02\x00\x05", 9));
  expect_error([&] { load_npy(p); }, {p, "truncated header"});
}

TEST(NpyTest, ErrorTruncatedOrTrailingData) {
  std::string dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string p = npy_file("td.npy", npy_bytes(dict, std::string(20, '\0')));
  expect_error([&] { load_npy(p); }, {p, "'shape'", "[2, 3]", "needs 24", "has 20", "truncated data"});
  p = npy_file("tt.npy", npy_bytes(dict, std::string(28, '\0')));
  expect_error([&] { load_npy(p); }, {p, "'shape'", "needs 24", "has 28", "trailing"});
}

TEST(NpyTest, ErrorShapeMismatchAndOverflow) {
  std::string p = npy_file("sm.npy", npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }",
                                               std::string(32, '\0')));
  expect_error([&] { load_npy(p); }, {p, "field 'shape'", "[5]", "needs 40", "has 32"});
  p = npy_file("ov.npy", npy_bytes("{'descr': '<f8', 'fortran_order': False, "
                                   "'shape': (4611686018427387904, 4611686018427387904), }", ""));
  expect_error([&] { load_npy(p); }, {p, "field 'shape'", "too many elements"});
  p = npy_file("ov2.npy", npy_bytes("{'descr': '<f8', 'fortran_order': False, "
                                    "'shape': (99999999999999999999,), }", ""));
  expect_error([&] { load_npy(p); }, {p, "malformed header", "too large"});
}

TEST(NpyTest, ErrorFortranOrder) {
  std::string p = npy_file("f.npy", npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
                                              std::string(16, '\0')));
  expect_error([&] { load_npy(p); }, {p, "fortran_order", "C order"});
}

TEST(NpyTest, ErrorUnsupportedDtype) {
  for (const char* descr : {"<i2", ">i4", "|u1", "<c8", "|b1"}) {
    std::string p = npy_file("dt.npy", npy_bytes(std::string("{'descr': '") + descr +
                                                     "', 'fortran_order': False, 'shape': (1,), }",
                                                 std::string(8, '\0')));
    expect_error([&] { load_npy(p); }, {p, "unsupported dtype", "'descr'", std::string("'") + descr + "'",
                                        "'<i4', '<i8', '<f4', '<f8'"});
  }
  std::string p = npy_file("struct.npy", npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
                                                   std::string(4, '\0')));
  expect_error([&] { load_npy(p); }, {p, "malformed header"});
}

TEST(NpyTest, ErrorMalformedOrIncompleteHeader) {
  std::string p = npy_file("nokey.npy", npy_bytes("{'descr': '<f4', 'shape': (1,), }", std::string(4, '\0')));
  expect_error([&] { load_npy(p); }, {p, "no field 'fortran_order'"});
  p = npy_file("extra.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}",
                                      std::string(4, '\0')));
  expect_error([&] { load_npy(p); }, {p, "malformed header"});
  p = npy_file("extra2.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': True}",
                                       std::string(4, '\0')));
  expect_error([&] { load_npy(p); }, {p, "unknown header key 'x'"});
  p = npy_file("junk.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False 'shape': (1,)}", std::string(4, '\0')));
  expect_error([&] { load_npy(p); }, {p, "malformed header", "expected ',' or '}'"});
  p = npy_file("neg.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", ""));
  expect_error([&] { load_npy(p); }, {p, "malformed header", "'shape'"});
  p = npy_file("missing.npy", "");
  std::remove(p.c_str());
  expect_error([&] { load_npy(p); }, {p, "cannot open"});
}

// ======================= config =======================

TEST(ConfigTest, DefaultsAndRoundTrip) {
  ModelConfig c = config_from_json(json::object(), "empty");
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.d_model, 256);
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.d_ff, 1024);  // resolved to 4 * d_model
  EXPECT_EQ(c.context, 256);
  EXPECT_EQ(c.norm, "layernorm");
  EXPECT_EQ(c.norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.dropout, 0.0);
  EXPECT_EQ(c.posenc, json({{"type", "none"}}));
  EXPECT_EQ(c.head_dim(), 32);

  json spec = json::parse(R"({
    "vocab_size": 256, "d_model": 96, "n_layers": 3, "n_heads": 6, "d_ff": 200,
    "context": 128, "norm": "rmsnorm", "norm_eps": 1e-6, "tie_embeddings": false,
    "dropout": 0.1, "posenc": { "type": "rope", "base": 10000.0 } })");
  ModelConfig d = config_from_json(spec, "spec.json");
  EXPECT_EQ(d.head_dim(), 16);
  EXPECT_EQ(d.d_ff, 200);
  EXPECT_EQ(d.norm, "rmsnorm");
  EXPECT_FALSE(d.tie_embeddings);
  EXPECT_EQ(config_to_json(d), spec);
  ModelConfig e = config_from_json(config_to_json(d), "again");
  EXPECT_EQ(config_to_json(e), spec);

  // A struct built in code with d_ff = -1 serialises with d_ff resolved.
  ModelConfig f;
  f.d_model = 64;
  f.n_heads = 4;
  EXPECT_EQ(config_to_json(f)["d_ff"], 256);
  EXPECT_EQ(f.ff_dim(), 256);
}

TEST(ConfigTest, FileRoundTrip) {
  const std::string p = test_dir() + "model.json";
  ModelConfig c = preset_config("tiny");
  write_bytes(p, config_to_json(c).dump(2));
  ModelConfig d = load_config_file(p);
  EXPECT_EQ(config_to_json(d), config_to_json(c));
}

TEST(ConfigTest, ErrorUnknownKeyListsValidOnes) {
  expect_error([] { config_from_json(json{{"d_modle", 64}}, "typo.json"); },
               {"typo.json", "unknown key 'd_modle'", "did you mean 'd_model'", "vocab_size",
                "posenc", "tie_embeddings"});
  expect_error([] { config_from_json(json{{"learning_rate", 1}}, "x.json"); },
               {"x.json", "'learning_rate'", "valid keys"});
}

TEST(ConfigTest, ErrorWrongTypes) {
  expect_error([] { config_from_json(json{{"d_model", "256"}}, "t.json"); },
               {"t.json", "'d_model'", "must be an integer", "string"});
  expect_error([] { config_from_json(json{{"d_model", 256.5}}, "t.json"); },
               {"t.json", "'d_model'", "must be an integer", "256.5"});
  expect_error([] { config_from_json(json{{"n_layers", true}}, "t.json"); },
               {"t.json", "'n_layers'", "integer"});
  expect_error([] { config_from_json(json{{"tie_embeddings", 1}}, "t.json"); },
               {"t.json", "'tie_embeddings'", "boolean"});
  expect_error([] { config_from_json(json{{"norm_eps", "1e-5"}}, "t.json"); },
               {"t.json", "'norm_eps'", "number"});
  expect_error([] { config_from_json(json{{"norm", 1}}, "t.json"); },
               {"t.json", "'norm'", "string"});
  expect_error([] { config_from_json(json::array(), "t.json"); }, {"t.json", "object"});
}

TEST(ConfigTest, ErrorHeadsMustDivideModel) {
  expect_error([] { config_from_json(json{{"d_model", 100}, {"n_heads", 8}}, "h.json"); },
               {"h.json", "'d_model' (100)", "'n_heads' (8)", "divisible"});
}

TEST(ConfigTest, ErrorSizesMustBePositive) {
  for (const char* k : {"vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "context"}) {
    expect_error([&] { config_from_json(json{{k, 0}}, "p.json"); },
                 {"p.json", std::string("'") + k + "'", "positive"});
    expect_error([&] { config_from_json(json{{k, -3}}, "p.json"); },
                 {"p.json", std::string("'") + k + "'", "positive", "-3"});
  }
  expect_error([] { config_from_json(json{{"d_model", INT64_C(1) << 40}}, "p.json"); },
               {"p.json", "'d_model'", "<= 2147483647"});
}

TEST(ConfigTest, ErrorNormDropoutEps) {
  expect_error([] { config_from_json(json{{"norm", "batchnorm"}}, "n.json"); },
               {"n.json", "'norm'", "layernorm", "rmsnorm", "'batchnorm'"});
  expect_error([] { config_from_json(json{{"dropout", 1.0}}, "n.json"); },
               {"n.json", "'dropout'", "[0, 1)"});
  expect_error([] { config_from_json(json{{"dropout", -0.1}}, "n.json"); },
               {"n.json", "'dropout'", "[0, 1)"});
  expect_error([] { config_from_json(json{{"norm_eps", 0}}, "n.json"); },
               {"n.json", "'norm_eps'", "> 0"});
}

TEST(ConfigTest, ErrorPosencShape) {
  expect_error([] { config_from_json(json{{"posenc", "rope"}}, "pe.json"); },
               {"pe.json", "'posenc'", "object"});
  expect_error([] { config_from_json(json{{"posenc", {{"base", 10000}}}}, "pe.json"); },
               {"pe.json", "'posenc'", "'type'"});
  expect_error([] { config_from_json(json{{"posenc", {{"type", 3}}}}, "pe.json"); },
               {"pe.json", "'posenc.type'", "string"});
  // Parameters are passed through untouched for the posenc registry to check.
  ModelConfig c = config_from_json(json{{"posenc", {{"type", "alibi"}, {"whatever", 1}}}}, "pe.json");
  EXPECT_EQ(c.posenc["whatever"], 1);
}

TEST(ConfigTest, ErrorFileUnreadableOrMalformed) {
  const std::string d = test_dir();
  expect_error([&] { load_config_file(d + "nope.json"); }, {d + "nope.json", "cannot open"});
  const std::string p = d + "bad.json";
  write_bytes(p, "{\n  \"d_model\": 64,\n  \"n_heads\" 4\n}\n");
  expect_error([&] { load_config_file(p); }, {p, "JSON parse error", "line 3", "column"});
  const std::string q = d + "dup.json";
  write_bytes(q, R"({"d_model": 64, "n_heads": 4, "d_model": 128})");
  expect_error([&] { load_config_file(q); }, {q, "duplicate key 'd_model'"});
  const std::string r = d + "types.json";
  write_bytes(r, R"({"d_model": "64"})");
  expect_error([&] { load_config_file(r); }, {r, "'d_model'", "integer"});
}

TEST(ConfigTest, ErrorDeeplyNestedPosenc) {
  std::string text = "{\"posenc\": {\"type\": \"rope\", \"x\": " + std::string(1000, '[') +
                     std::string(1000, ']') + "}}";
  expect_error([&] { config_from_string(text, "deep.json"); }, {"deep.json", "nested deeper than 64"});
}

TEST(ConfigTest, Presets) {
  ModelConfig t = preset_config("tiny");
  EXPECT_EQ(t.d_model, 64);
  EXPECT_EQ(t.n_layers, 2);
  EXPECT_EQ(t.n_heads, 4);
  EXPECT_EQ(t.context, 64);
  EXPECT_EQ(t.d_ff, 256);
  ModelConfig s = preset_config("small");
  EXPECT_EQ(s.d_model, 256);
  EXPECT_EQ(s.n_layers, 6);
  EXPECT_EQ(s.n_heads, 8);
  EXPECT_EQ(s.context, 256);
  ModelConfig m = preset_config("medium");
  EXPECT_EQ(m.d_model, 512);
  EXPECT_EQ(m.n_layers, 8);
  EXPECT_EQ(m.n_heads, 8);
  EXPECT_EQ(m.context, 512);
  for (const ModelConfig& c : {t, s, m}) {
    EXPECT_EQ(c.vocab_size, 256);
    EXPECT_EQ(c.norm, "layernorm");
    EXPECT_TRUE(c.tie_embeddings);
    EXPECT_EQ(c.posenc, json({{"type", "learned"}}));
    EXPECT_EQ(config_to_json(config_from_json(config_to_json(c), "rt")), config_to_json(c));
  }
  expect_error([] { preset_config("huge"); }, {"'huge'", "tiny", "small", "medium"});
}

// ======================= tokenizer =======================

TEST(TokenizerTest, ByteRoundTrip) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256);
  std::string all;
  for (int i = 0; i < 256; ++i) all += (char)i;
  std::vector<int32_t> ids = tok.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(ids[i], i);
  EXPECT_EQ(tok.decode(ids), all);
  const std::string utf8 = "Mr. Darcy — café ☕\n";
  EXPECT_EQ(decode_bytes(encode_bytes(utf8)), utf8);
  EXPECT_EQ(encode_bytes("Ab"), (std::vector<int32_t>{65, 98}));
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(TokenizerTest, ErrorIdOutOfRange) {
  expect_error([] { decode_bytes({65, 256}); }, {"token id 256", "position 1", "[0, 256)"});
  expect_error([] { decode_bytes({-1}); }, {"token id -1", "position 0"});
}

TEST(TokenizerTest, LoadTextTokens) {
  const std::string p = test_dir() + "t.txt";
  write_bytes(p, std::string("hi\0\xff", 4));
  EXPECT_EQ(load_text_tokens(p), (std::vector<int32_t>{'h', 'i', 0, 255}));
  expect_error([&] { load_text_tokens(p + ".missing"); }, {p + ".missing", "cannot open"});
  expect_error([&] { load_text_tokens(test_dir()); }, {"not a regular file"});
}

TEST(TokenizerTest, ShippedCorpusRoundTrips) {
  // the repository root as CMake saw it (__FILE__ can be relative, e.g. under ccache's base_dir)
  const std::string p = std::string(CTXLAB_SOURCE_DIR) + "/data/pride_and_prejudice.txt";
  ASSERT_TRUE(exists(p)) << p << " not found: the corpus ships with the repository";
  std::vector<int32_t> ids = load_text_tokens(p);
  EXPECT_GT(ids.size(), 600000u);
  const std::string text = decode_bytes(ids);
  EXPECT_EQ(text.rfind("PRIDE AND PREJUDICE", 0), 0u);
  EXPECT_EQ(text, read_bytes(p));
}
