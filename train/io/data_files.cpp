// train/io/data_files.cpp — --data lists: files, directories, JSONL and token files (see data_files.h).
#include "train/io/data_files.h"

#include <algorithm>
#include <filesystem>

#include "train/io/fileio.h"
#include "train/io/jsonl.h"
#include "train/io/token_files.h"

namespace ctx {

namespace fs = std::filesystem;

namespace {

std::string extension(const std::string& path) {
  return fs::path(path).extension().string();
}

DataSource::Kind kind_of(const std::string& path) {
  const std::string e = extension(path);
  if (e == ".bin" || e == ".u16") return DataSource::kTokens;
  if (e == ".jsonl") return DataSource::kJsonl;
  return DataSource::kText;
}

constexpr const char* kDirExtensions[] = {".txt", ".md", ".jsonl", ".bin", ".u16"};

void add_directory(const std::string& dir, const std::string& option, std::vector<DataSource>* out) {
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.' || !it->is_regular_file(ec)) continue;
    const std::string e = extension(name);
    if (std::find(std::begin(kDirExtensions), std::end(kDirExtensions), e) != std::end(kDirExtensions))
      files.push_back(it->path().string());
  }
  CTX_CHECK(!ec, option, " ", dir, ": cannot list the directory: ", ec.message());
  CTX_CHECK(!files.empty(), option, " ", dir, ": the directory holds no data files (expected regular files "
            "ending .txt, .md, .jsonl, .bin or .u16)");
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) out->push_back({f, kind_of(f)});
}

}  // namespace

std::vector<DataSource> data_sources(const std::string& list, const std::string& option) {
  std::vector<DataSource> out;
  size_t at = 0;
  for (;;) {
    const size_t comma = list.find(',', at);
    const std::string entry = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    CTX_CHECK(!entry.empty(), option, " ", quoted_str(list), ": empty entry in the comma-separated list of files");
    std::error_code ec;
    const fs::file_status st = fs::status(entry, ec);
    CTX_CHECK(fs::exists(st), option, " ", entry, ": cannot open: ",
              ec && ec != std::errc::no_such_file_or_directory ? ec.message() : "no such file or directory");
    if (fs::is_directory(st))
      add_directory(entry, option, &out);
    else
      out.push_back({entry, kind_of(entry)});
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

bool has_token_files(const std::vector<DataSource>& sources) {
  return std::any_of(sources.begin(), sources.end(), [](const DataSource& s) { return s.kind == DataSource::kTokens; });
}

std::string source_text(const DataSource& s, const std::string& field) {
  CTX_CHECK(s.kind != DataSource::kTokens, s.path, ": a token file has no text");
  const std::string bytes = read_file(s.path, "text corpus");
  if (s.kind == DataSource::kText) return bytes;
  return jsonl_text(bytes.data(), bytes.data() + bytes.size(), field, s.path);
}

TokenStream load_tokens(const std::vector<DataSource>& sources, const Tokenizer& tok, const std::string& field) {
  TokenStream all;
  std::string text;  // text sources since the last token file, encoded together
  auto flush = [&] {
    if (!text.empty()) all.append(TokenStream(tok.encode(text)));
    text.clear();
  };
  for (const DataSource& s : sources) {
    if (s.kind != DataSource::kTokens) {
      text += source_text(s, field);
      continue;
    }
    flush();
    const TokenStream t = map_token_file(s.path);
    t.check_ids_below(tok.vocab_size(), str("a token file carries no tokenizer: give the one that made it, "
                                            "--vocab N (its vocabulary size) or --tokenizer MODEL; this run's is ",
                                            tok.describe()));
    all.append(t);
  }
  flush();
  return all;
}

std::string load_text(const std::vector<DataSource>& sources, const std::string& field, const std::string& option) {
  std::string text;
  for (const DataSource& s : sources) {
    CTX_CHECK(s.kind != DataSource::kTokens, option, " ", s.path, ": a token file (.bin / .u16) is already "
              "tokenized; give text or JSONL here");
    text += source_text(s, field);
  }
  return text;
}

}  // namespace ctx
