// train/data.cpp — corpus loading, the split and batches (see data.h).
#include "train/data.h"

#include <algorithm>

#include "train/io/data_files.h"
#include "train/io/fileio.h"
#include "train/io/tokenizer.h"

namespace ctx {

std::string default_corpus_path() {
#ifdef CTXLAB_SOURCE_DIR
  return std::string(CTXLAB_SOURCE_DIR) + "/data/pride_and_prejudice.txt";
#else
  return "data/pride_and_prejudice.txt";
#endif
}

std::pair<std::string, std::string> split_text(const std::string& text, double val_fraction) {
  CTX_CHECK(val_fraction > 0 && val_fraction < 1, "data: val_fraction must be in (0, 1), got ", val_fraction);
  const size_t nval = (size_t)((double)text.size() * val_fraction);
  return {text.substr(0, text.size() - nval), text.substr(text.size() - nval)};
}

Corpus load_corpus(const DataSpec& spec, int64_t min_window, const Tokenizer* tok) {
  const Tokenizer& t = tok ? *tok : *byte_tokenizer();
  const std::vector<DataSource> sources = data_sources(spec.data, "--data");
  Corpus c;
  c.source = spec.data;
  std::string how;  // the split, for the too-short message
  if (!spec.val_data.empty()) {
    c.train = load_tokens(sources, t, spec.field);
    c.val = load_tokens(data_sources(spec.val_data, "--val-data"), t, spec.field);
    how = str("--val-data ", spec.val_data);
  } else {
    CTX_CHECK(spec.val_fraction > 0 && spec.val_fraction < 1, "data: val_fraction must be in (0, 1), got ",
              spec.val_fraction);
    if (has_token_files(sources)) {
      const TokenStream all = load_tokens(sources, t, spec.field);
      const int64_t n = all.size(), nval = (int64_t)((double)n * spec.val_fraction);
      c.train = all.slice(0, n - nval);
      c.val = all.slice(n - nval, n);
    } else {  // the byte split of the text, whatever the tokenizer
      std::string text;
      for (const DataSource& s : sources) text += source_text(s, spec.field);
      auto parts = split_text(text, spec.val_fraction);
      c.train = t.encode(parts.first);
      c.val = t.encode(parts.second);
    }
    how = str("the ", spec.val_fraction * 100, "% validation split");
  }
  const int64_t nt = c.train.size(), nv = c.val.size();
  CTX_CHECK(nt > min_window + 1 && nv > min_window + 1, spec.data, ": corpus of ", nt, " + ", nv,
            " tokens (train + validation, with the ", t.type(), " tokenizer) is too short for windows of ",
            min_window + 1, " tokens in both the train split and ", how);
  return c;
}

Corpus load_corpus(const std::string& path, double val_fraction, int64_t min_window, const Tokenizer* tok) {
  DataSpec spec;
  spec.data = path;
  spec.val_fraction = val_fraction;
  return load_corpus(spec, min_window, tok);
}

namespace {

// (inputs [B, T], targets [B, T]) i64: row b is tokens [s_b, s_b + T) and [s_b + 1, s_b + T + 1).
std::pair<Tensor, Tensor> windows(const TokenStream& tokens, const std::vector<int64_t>& starts, int64_t T) {
  const int64_t B = (int64_t)starts.size();
  Tensor x = Tensor::empty({B, T}, DType::I64), y = Tensor::empty({B, T}, DType::I64);
  int64_t* xp = x.host<int64_t>();
  int64_t* yp = y.host<int64_t>();
  std::vector<int64_t> row((size_t)T + 1);
  for (int64_t b = 0; b < B; ++b) {
    tokens.read(starts[(size_t)b], T + 1, row.data());
    std::copy(row.begin(), row.end() - 1, xp + b * T);
    std::copy(row.begin() + 1, row.end(), yp + b * T);
  }
  return {x, y};
}

}  // namespace

std::pair<Tensor, Tensor> BatchSampler::next(int64_t B, int64_t T) {
  const int64_t n = tokens_->size();
  CTX_CHECK(n > T + 1, "data: ", n, " tokens cannot hold a window of ", T + 1);
  std::vector<int64_t> starts((size_t)B);
  for (int64_t b = 0; b < B; ++b) starts[(size_t)b] = (int64_t)rng_.below((uint64_t)(n - T - 1));
  return windows(*tokens_, starts, T);
}

SegmentSampler::SegmentSampler(const TokenStream* tokens, int64_t B, int64_t T)
    : tokens_(tokens), B_(B), T_(T) {
  CTX_CHECK(B >= 1 && T >= 1, "data: segments need B >= 1 and T >= 1, got B ", B, ", T ", T);
  len_ = tokens->size() / B;
  segs_ = (len_ - 1) / T;
  CTX_CHECK(segs_ >= 1, "data: ", tokens->size(), " tokens cannot hold ", B, " streams of one segment of ",
            T + 1, " tokens (use a smaller --batch or --context)");
}

std::pair<Tensor, Tensor> SegmentSampler::get(int64_t n, bool* starts_over) const {
  CTX_CHECK(n >= 0, "data: segment index must be >= 0, got ", n);
  const int64_t k = n % segs_;
  if (starts_over) *starts_over = k == 0;
  std::vector<int64_t> starts((size_t)B_);
  for (int64_t b = 0; b < B_; ++b) starts[(size_t)b] = b * len_ + k * T_;
  return windows(*tokens_, starts, T_);
}

std::pair<Tensor, Tensor> sequential_batch(const TokenStream& tokens, int64_t first_window,
                                           int64_t B, int64_t T) {
  std::vector<int64_t> starts((size_t)B);
  for (int64_t b = 0; b < B; ++b) {
    starts[(size_t)b] = (first_window + b) * T;
    CTX_CHECK(starts[(size_t)b] + T + 1 <= tokens.size(), "data: window ", first_window + b, " of ", T,
              " tokens runs past the end of ", tokens.size(), " tokens");
  }
  return windows(tokens, starts, T);
}

}  // namespace ctx
