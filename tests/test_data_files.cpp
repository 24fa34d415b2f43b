// tests/test_data_files.cpp — what --data may name (train/io/data_files.h): several files, a
// directory, JSONL, nanoGPT and llm.c token files (memory-mapped), the pre-tokenized vocabulary
// check, the split by fraction or by file; one test per malformed case, each asserting that the
// one-line error names the file, the field and the expected value.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"
#include "train/data.h"
#include "train/io/data_files.h"
#include "train/io/jsonl.h"
#include "train/io/token_files.h"
#include "train/io/token_stream.h"
#include "train/io/tokenizer.h"

using namespace ctx;
using ctx::testing_util::expect_error;
using ctx::testing_util::test_dir;
using ctx::testing_util::write_bytes;

namespace {

std::string u16s(const std::vector<int>& ids) {
  std::string s;
  for (int v : ids) s += (char)(v & 0xff), s += (char)((v >> 8) & 0xff);
  return s;
}

// An llm.c header (256 little-endian int32: magic, version, count, zeros).
std::string llmc_header(int32_t magic, int32_t version, int32_t count) {
  std::string h(1024, '\0');
  std::memcpy(&h[0], &magic, 4);
  std::memcpy(&h[4], &version, 4);
  std::memcpy(&h[8], &count, 4);
  return h;
}

std::vector<int32_t> iota_ids(int n, int mod) {
  std::vector<int32_t> v((size_t)n);
  for (int i = 0; i < n; ++i) v[(size_t)i] = i % mod;
  return v;
}

std::vector<int> as_int(const std::vector<int32_t>& v) { return std::vector<int>(v.begin(), v.end()); }

}  // namespace

// ---- TokenStream ----

TEST(TokenStream, PiecesReadAsOneSequence) {
  TokenStream s(std::vector<int32_t>{1, 2, 3});
  s.append(TokenStream(std::vector<int32_t>{4, 5}));
  s.append(TokenStream(std::vector<int32_t>{6, 7, 8, 9}));
  ASSERT_EQ(s.size(), 9);
  EXPECT_EQ(s[0], 1);
  EXPECT_EQ(s[3], 4);
  EXPECT_EQ(s[8], 9);
  int64_t row[6];
  s.read(2, 6, row);  // crosses two piece boundaries
  EXPECT_EQ(std::vector<int64_t>(row, row + 6), (std::vector<int64_t>{3, 4, 5, 6, 7, 8}));
  const TokenStream mid = s.slice(2, 7);
  EXPECT_EQ(mid.to_vector(), (std::vector<int32_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(mid.slice(1, 4).to_vector(), (std::vector<int32_t>{4, 5, 6}));
  expect_error([&] { s.read(7, 3, row); }, {"[7, 10)", "9 tokens"});
  expect_error([&] { (void)s[9]; }, {"index 9", "[0, 9)"});
}

TEST(TokenStream, BatchesSpanPieces) {
  // the same windows from one piece and from three
  const std::vector<int32_t> all = iota_ids(40, 37);
  TokenStream split(std::vector<int32_t>(all.begin(), all.begin() + 7));
  split.append(TokenStream(std::vector<int32_t>(all.begin() + 7, all.begin() + 30)));
  split.append(TokenStream(std::vector<int32_t>(all.begin() + 30, all.end())));
  const TokenStream whole(all);
  auto a = sequential_batch(split, 1, 3, 8), b = sequential_batch(whole, 1, 3, 8);
  for (int64_t i = 0; i < 24; ++i) {
    EXPECT_EQ(a.first.host<int64_t>()[i], 8 + i);
    EXPECT_EQ(a.first.host<int64_t>()[i], b.first.host<int64_t>()[i]);
    EXPECT_EQ(a.second.host<int64_t>()[i], b.second.host<int64_t>()[i]);
  }
  BatchSampler bs(&split, 5), bw(&whole, 5);
  auto c = bs.next(4, 10), d = bw.next(4, 10);
  for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(c.second.host<int64_t>()[i], d.second.host<int64_t>()[i]);
}

// ---- token files ----

TEST(TokenFiles, NanoGptIsMappedNotCopied) {
  const std::string p = test_dir() + "train.bin";
  write_bytes(p, u16s({7, 300, 65535, 0, 42}));
  const TokenStream t = map_token_file(p);
  EXPECT_EQ(as_int(t.to_vector()), (std::vector<int>{7, 300, 65535, 0, 42}));
  // the stream reads the file's pages: a write to the file shows through (a copy would not)
  std::FILE* f = std::fopen(p.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, 2, SEEK_SET);
  const std::string nine = u16s({9});
  std::fwrite(nine.data(), 1, 2, f);
  std::fclose(f);
  EXPECT_EQ(t[1], 9);
}

TEST(TokenFiles, LlmcHeaderAndTokens) {
  const std::string p = test_dir() + "shard_000000.bin";
  write_bytes(p, llmc_header(kLlmcMagic, 1, 4) + u16s({50256, 1, 2, 3}));
  const std::string bytes = llmc_header(kLlmcMagic, 1, 4) + u16s({50256, 1, 2, 3});
  const TokenFileLayout l = token_file_layout((const unsigned char*)bytes.data(), bytes.size(), p);
  EXPECT_EQ(l.format, "llm.c");
  EXPECT_EQ(l.offset, 1024);
  EXPECT_EQ(l.count, 4);
  EXPECT_EQ(as_int(map_token_file(p).to_vector()), (std::vector<int>{50256, 1, 2, 3}));
}

TEST(TokenFiles, MalformedEachNamed) {
  const std::string d = test_dir();
  auto bad = [&](const std::string& name, const std::string& bytes, std::initializer_list<std::string> needles) {
    SCOPED_TRACE(name);
    write_bytes(d + name, bytes);
    std::vector<std::string> n(needles);
    n.push_back(d + name);
    try {
      map_token_file(d + name);
      ADD_FAILURE() << name << ": no error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      for (const std::string& s : n) EXPECT_NE(m.find(s), std::string::npos) << "'" << s << "' not in: " << m;
    }
  };
  bad("truncated.bin", llmc_header(kLlmcMagic, 1, 4).substr(0, 100),
      {"truncated header", "100 bytes", "256 int32", "1024 bytes"});
  bad("magic.bin", llmc_header(20240519, 1, 4) + u16s({1, 2, 3, 4}), {"header[0] (magic)", "20240519", "20240520"});
  bad("version.bin", llmc_header(kLlmcMagic, 2, 4) + u16s({1, 2, 3, 4}), {"header[1] (version)", "is 2", "expected 1"});
  bad("short.bin", llmc_header(kLlmcMagic, 1, 5) + u16s({1, 2, 3, 4}), {"header[2] (token count) is 5", "1034 bytes",
                                                                           "the file has 1032", "truncated"});
  bad("long.bin", llmc_header(kLlmcMagic, 1, 3) + u16s({1, 2, 3, 4}), {"header[2] (token count) is 3", "1030 bytes",
                                                                          "the file has 1032", "trailing"});
  // the size of an llm.c shard of 4 tokens, the magic off by one: refused as .bin, raw as .u16
  write_bytes(d + "collide.u16", llmc_header(20240519, 1, 4) + u16s({1, 2, 3, 4}));
  EXPECT_EQ(map_token_file(d + "collide.u16").size(), 516);
  bad("odd.bin", std::string("\x01\x00\x02", 3), {"nanoGPT", "3 bytes", "odd byte count", "uint16"});
  bad("empty.bin", "", {"holds no tokens"});
  expect_error([&] { map_token_file(d + "missing.bin"); }, {d + "missing.bin", "cannot open"});
}

// ---- JSONL ----

TEST(Jsonl, TextFieldOfEveryLine) {
  const std::string in = "{\"text\": \"first doc\", \"id\": 1}\n\n  \n{\"text\": \"caf\\u00e9\\nline\"}\r\n"
                         "{\"body\": \"b\", \"text\": \"\"}";
  EXPECT_EQ(jsonl_text(in.data(), in.data() + in.size(), "text", "x.jsonl"), "first doc\ncaf\xc3\xa9\nline\n\n");
  const std::string other = "{\"body\": \"one\"}\n{\"body\": \"two\"}\n";
  EXPECT_EQ(jsonl_text(other.data(), other.data() + other.size(), "body", "x.jsonl"), "one\ntwo\n");
}

TEST(Jsonl, MalformedLinesNamed) {
  auto bad = [](const std::string& in, std::initializer_list<std::string> needles) {
    SCOPED_TRACE(in);
    expect_error([&] { jsonl_text(in.data(), in.data() + in.size(), "text", "c.jsonl"); }, needles);
  };
  bad("{\"text\": \"a\"}\n[1, 2]\n", {"c.jsonl line 2", "expected a JSON object", "'text'", "array"});
  bad("{\"text\": \"a\"}\n\n{\"txt\": \"b\"}\n", {"c.jsonl line 3", "no field 'text'", "--data-field"});
  bad("{\"text\": 17}\n", {"c.jsonl line 1", "field 'text' is a JSON number", "expected a string"});
  bad("{\"text\": \"a\"}\n{\"text\": \"b\"\n", {"c.jsonl line 2", "JSON parse error"});
  bad("{\"text\": \"a\", \"text\": \"b\"}\n", {"c.jsonl line 1", "duplicate key"});
}

// ---- --data lists ----

TEST(DataSources, ListsDirectoriesAndKinds) {
  const std::string d = test_dir();
  ::mkdir((d + "corpus").c_str(), 0755);
  ::mkdir((d + "corpus/sub").c_str(), 0755);
  write_bytes(d + "corpus/b.txt", "bee\n");
  write_bytes(d + "corpus/a.jsonl", "{\"text\": \"ay\"}\n");
  write_bytes(d + "corpus/c.bin", u16s({1, 2}));
  write_bytes(d + "corpus/notes.csv", "skipped");
  write_bytes(d + "corpus/.hidden.txt", "skipped");
  write_bytes(d + "corpus/sub/deep.txt", "not recursed");
  write_bytes(d + "one.md", "# one\n");
  const std::vector<DataSource> s = data_sources(d + "one.md," + d + "corpus", "--data");
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].path, d + "one.md");
  EXPECT_EQ(s[0].kind, DataSource::kText);
  EXPECT_EQ(s[1].path, d + "corpus/a.jsonl");
  EXPECT_EQ(s[1].kind, DataSource::kJsonl);
  EXPECT_EQ(s[2].path, d + "corpus/b.txt");
  EXPECT_EQ(s[3].path, d + "corpus/c.bin");
  EXPECT_EQ(s[3].kind, DataSource::kTokens);
  EXPECT_TRUE(has_token_files(s));
  // text sources concatenated in order (JSONL as its documents), token files after them
  std::vector<int32_t> want = encode_bytes("# one\nay\nbee\n");
  want.push_back(1);
  want.push_back(2);
  EXPECT_EQ(load_tokens(s, *byte_tokenizer(), "text").to_vector(), want);
  expect_error([&] { load_tokens(s, IdTokenizer(300), "text"); }, {"no text encoding", "--tokenizer"});
  const std::vector<DataSource> text_only(s.begin(), s.begin() + 3);
  EXPECT_EQ(load_text(text_only, "text", "--data"), "# one\nay\nbee\n");
  expect_error([&] { load_text(s, "text", "--data"); }, {"--data", "c.bin", "already tokenized"});
}

TEST(DataSources, BadListsNamed) {
  const std::string d = test_dir();
  ::mkdir((d + "empty").c_str(), 0755);
  write_bytes(d + "empty/readme.csv", "no data extension");
  write_bytes(d + "a.txt", "a");
  expect_error([&] { data_sources(d + "empty", "--data"); },
               {"--data", d + "empty", "no data files", ".txt, .md, .jsonl, .bin or .u16"});
  expect_error([&] { data_sources(d + "a.txt,," + d + "a.txt", "--val-data"); }, {"--val-data", "empty entry"});
  expect_error([&] { data_sources(d + "nope.txt", "--data"); }, {"--data", d + "nope.txt", "no such file"});
}

TEST(DataSources, TokenIdsMustFitTheVocabulary) {
  const std::string p = test_dir() + "gpt2.bin";
  write_bytes(p, llmc_header(kLlmcMagic, 1, 4) + u16s({5, 50256, 17, 300}));
  const std::vector<DataSource> s = data_sources(p, "--data");
  EXPECT_EQ(load_tokens(s, IdTokenizer(50257), "text").to_vector(), (std::vector<int32_t>{5, 50256, 17, 300}));
  // bytes (vocab 256): 50256 at token 1, byte offset 1024 + 2
  expect_error([&] { load_tokens(s, *byte_tokenizer(), "text"); },
               {p, "token 50256", "token index 1", "byte offset 1026", "vocabulary size 256", "--vocab N",
                "--tokenizer"});
  expect_error([&] { load_tokens(s, IdTokenizer(300), "text"); },
               {p, "token 50256", "token index 1", "vocabulary size 300"});
}

// ---- the corpus: split by fraction or by file ----

TEST(Corpus, TokenFileSplitsByTokens) {
  const std::string p = test_dir() + "train.bin";
  std::vector<int> ids(1000);
  for (int i = 0; i < 1000; ++i) ids[(size_t)i] = (i * 7) % 500;
  write_bytes(p, u16s(ids));
  const IdTokenizer tok(500);
  const Corpus c = load_corpus(p, 0.1, 16, &tok);
  ASSERT_EQ(c.train.size(), 900);  // n - floor(n * 0.1)
  ASSERT_EQ(c.val.size(), 100);
  EXPECT_EQ(c.train[899], ids[899]);
  EXPECT_EQ(c.val[0], ids[900]);
  EXPECT_EQ(c.val[99], ids[999]);
}

TEST(Corpus, SplitByFile) {
  const std::string d = test_dir();
  write_bytes(d + "train.bin", u16s(as_int(iota_ids(300, 250))));
  write_bytes(d + "val.jsonl", "{\"text\": \"" + std::string(80, 'v') + "\"}\n");
  DataSpec spec;
  spec.data = d + "train.bin";
  spec.val_data = d + "val.jsonl";
  const Corpus c = load_corpus(spec, 16, byte_tokenizer().get());
  EXPECT_EQ(c.train.size(), 300);  // all of it: no fraction held out
  EXPECT_EQ(c.val.to_vector(), encode_bytes(std::string(80, 'v') + "\n"));
  spec.val_data = d + "train.bin," + d + "val.jsonl";
  spec.data = d + "val.jsonl";
  spec.val_fraction = 0.5;  // ignored with val_data
  EXPECT_EQ(load_corpus(spec, 16, byte_tokenizer().get()).val.size(), 300 + 81);
  spec.val_data = d + "val.jsonl";
  expect_error([&] { load_corpus(spec, 100, byte_tokenizer().get()); },
               {"too short", "windows of 101", "--val-data " + d + "val.jsonl"});
}

TEST(Corpus, TextFilesSplitByBytesAsOneText) {
  const std::string d = test_dir();
  std::string a, b;
  for (int i = 0; i < 60; ++i) a += "line " + std::to_string(i) + "\n";
  for (int i = 0; i < 40; ++i) b += "doc " + std::to_string(i) + "\n";
  write_bytes(d + "a.txt", a);
  write_bytes(d + "b.txt", b);
  const Corpus c = load_corpus(d + "a.txt," + d + "b.txt", 0.25, 8);
  const auto parts = split_text(a + b, 0.25);
  EXPECT_EQ(c.train.to_vector(), encode_bytes(parts.first));
  EXPECT_EQ(c.val.to_vector(), encode_bytes(parts.second));
}

// ---- the ids tokenizer of --vocab ----

TEST(IdTokenizerTest, RecordedInCheckpointMetadata) {
  const IdTokenizer tok(50257);
  const auto back = tokenizer_from_metadata(tokenizer_metadata(tok), "m.safetensors");
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->type(), "ids");
  EXPECT_EQ(back->vocab_size(), 50257);
  EXPECT_EQ(back->token_text(7), "");
  expect_error([&] { tok.encode("hello"); }, {"pre-tokenized", "--tokenizer"});
  expect_error([&] { IdTokenizer(0); }, {"--vocab", "[1, 16777216]", "got 0"});
}
