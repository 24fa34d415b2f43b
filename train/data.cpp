// train/data.cpp — corpus loading, the split and batches (see data.h).
#include "train/data.h"

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

Corpus load_corpus(const std::string& path, double val_fraction, int64_t min_window, const Tokenizer* tok) {
  CTX_CHECK(val_fraction > 0 && val_fraction < 1, "data: val_fraction must be in (0, 1), got ", val_fraction);
  const std::string text = read_file(path, "text corpus");
  auto [tr, va] = split_text(text, val_fraction);
  const Tokenizer& t = tok ? *tok : *byte_tokenizer();
  Corpus c;
  c.source = path;
  c.train = t.encode(tr);
  c.val = t.encode(va);
  const int64_t nt = (int64_t)c.train.size(), nv = (int64_t)c.val.size();
  CTX_CHECK(nt > min_window + 1 && nv > min_window + 1, path, ": corpus of ", text.size(), " bytes (", nt,
            " + ", nv, " tokens with the ", t.type(), " tokenizer) is too short for windows of ", min_window + 1,
            " tokens in both the train split and the ", val_fraction * 100, "% validation split");
  return c;
}

std::pair<Tensor, Tensor> BatchSampler::next(int64_t B, int64_t T) {
  const int64_t n = (int64_t)tokens_->size();
  CTX_CHECK(n > T + 1, "data: ", n, " tokens cannot hold a window of ", T + 1);
  Tensor x = Tensor::empty({B, T}, DType::I64), y = Tensor::empty({B, T}, DType::I64);
  int64_t* xp = x.host<int64_t>();
  int64_t* yp = y.host<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t s = (int64_t)rng_.below((uint64_t)(n - T - 1));
    for (int64_t t = 0; t < T; ++t) {
      xp[b * T + t] = (*tokens_)[s + t];
      yp[b * T + t] = (*tokens_)[s + t + 1];
    }
  }
  return {x, y};
}

SegmentSampler::SegmentSampler(const std::vector<int32_t>* tokens, int64_t B, int64_t T)
    : tokens_(tokens), B_(B), T_(T) {
  CTX_CHECK(B >= 1 && T >= 1, "data: segments need B >= 1 and T >= 1, got B ", B, ", T ", T);
  len_ = (int64_t)tokens->size() / B;
  segs_ = (len_ - 1) / T;
  CTX_CHECK(segs_ >= 1, "data: ", tokens->size(), " tokens cannot hold ", B, " streams of one segment of ",
            T + 1, " tokens (use a smaller --batch or --context)");
}

std::pair<Tensor, Tensor> SegmentSampler::get(int64_t n, bool* starts_over) const {
  CTX_CHECK(n >= 0, "data: segment index must be >= 0, got ", n);
  const int64_t k = n % segs_;
  if (starts_over) *starts_over = k == 0;
  Tensor x = Tensor::empty({B_, T_}, DType::I64), y = Tensor::empty({B_, T_}, DType::I64);
  int64_t* xp = x.host<int64_t>();
  int64_t* yp = y.host<int64_t>();
  for (int64_t b = 0; b < B_; ++b) {
    const int32_t* s = tokens_->data() + b * len_ + k * T_;
    for (int64_t t = 0; t < T_; ++t) {
      xp[b * T_ + t] = s[t];
      yp[b * T_ + t] = s[t + 1];
    }
  }
  return {x, y};
}

std::pair<Tensor, Tensor> sequential_batch(const std::vector<int32_t>& tokens, int64_t first_window,
                                           int64_t B, int64_t T) {
  Tensor x = Tensor::empty({B, T}, DType::I64), y = Tensor::empty({B, T}, DType::I64);
  int64_t* xp = x.host<int64_t>();
  int64_t* yp = y.host<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t s = (first_window + b) * T;
    CTX_CHECK(s + T + 1 <= (int64_t)tokens.size(), "data: window ", first_window + b, " of ", T,
              " tokens runs past the end of ", tokens.size(), " tokens");
    for (int64_t t = 0; t < T; ++t) {
      xp[b * T + t] = tokens[s + t];
      yp[b * T + t] = tokens[s + t + 1];
    }
  }
  return {x, y};
}

}  // namespace ctx
