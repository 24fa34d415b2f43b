// train/data.h — the training corpus as tokens: a deterministic train/validation split (the
// last `val_fraction` of the bytes is validation when all of --data is text, whatever the
// tokenizer: each part is encoded on its own; of the tokens when any file is pre-tokenized; or
// the files of --val-data) and seeded random batches whose RNG state can be saved and restored
// (resume continues the same batches). What --data may name: train/io/data_files.h.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "train/io/token_stream.h"
#include "train/io/tokenizer.h"

namespace ctx {

// data/pride_and_prejudice.txt in the source tree (the corpus shipped with ctxlab).
std::string default_corpus_path();

struct Corpus {
  std::string source;
  TokenStream train, val;
};
// Where the corpus comes from: --data, --val-data, --val-fraction, --data-field.
struct DataSpec {
  std::string data;      // comma-separated files / directories (train/io/data_files.h)
  std::string val_data;  // "": the last val_fraction of `data` is validation
  double val_fraction = 0.1;
  std::string field = "text";  // JSONL text field
};
// All text: splits the text at byte n - floor(n * val_fraction) and encodes both parts with `tok`
// (nullptr: bytes). Any token file: splits the tokens at n - floor(n * val_fraction). With
// val_data: all of `data` trains, all of `val_data` validates. Errors: those of the readers; too
// short to hold one window of `min_window` tokens in each split.
Corpus load_corpus(const DataSpec& spec, int64_t min_window, const Tokenizer* tok = nullptr);
Corpus load_corpus(const std::string& path, double val_fraction, int64_t min_window, const Tokenizer* tok = nullptr);
// The same split of a text: (train part, validation part).
std::pair<std::string, std::string> split_text(const std::string& text, double val_fraction);

// Random windows of T+1 tokens from `tokens`: (inputs [B, T], targets [B, T]) as i64.
class BatchSampler {
 public:
  BatchSampler(const TokenStream* tokens, uint64_t seed) : tokens_(tokens), rng_(seed) {}
  std::pair<Tensor, Tensor> next(int64_t B, int64_t T);
  Rng& rng() { return rng_; }

 private:
  const TokenStream* tokens_;
  Rng rng_;
};

// Consecutive segments for encodings with segment memory (Transformer-XL): the tokens are cut
// into B equal streams; micro-batch number n takes segment k = n mod segments() of every stream
// (row b = tokens [b*len + k*T, b*len + k*T + T] of stream b), so that row b of a batch continues
// row b of the previous one. A batch with k == 0 starts the streams over: the caller clears the
// memory then (`starts_over`). Deterministic in n, so resuming needs only the step count.
class SegmentSampler {
 public:
  SegmentSampler(const TokenStream* tokens, int64_t B, int64_t T);
  std::pair<Tensor, Tensor> get(int64_t n, bool* starts_over) const;
  int64_t segments() const { return segs_; }

 private:
  const TokenStream* tokens_;
  int64_t B_, T_, len_, segs_;
};

// Consecutive, non-overlapping windows (validation): window i starts at i*T.
std::pair<Tensor, Tensor> sequential_batch(const TokenStream& tokens, int64_t first_window,
                                           int64_t B, int64_t T);

}  // namespace ctx
