// train/io/token_stream.h — a sequence of token ids read in place: the concatenation of pieces, each
// either int32 ids held in memory (encoded text) or uint16 ids inside a memory-mapped token file
// (train/io/token_files.h), which stays mapped, read-only and uncopied, for as long as any stream
// refers to it. Slicing and concatenating share the pieces. Random access costs a binary search
// over the pieces (a handful per corpus); read() copies a window in one pass.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ctx {

class TokenStream {
 public:
  TokenStream() = default;
  // Owned ids (implicit: a std::vector<int32_t> is a one-piece stream).
  TokenStream(std::vector<int32_t> ids);  // NOLINT(google-explicit-constructor)
  // `n` uint16 ids at `u16`, kept valid by `keep` (the mapping); `source` and `byte_offset` (of
  // u16[0] in the file) are for messages.
  static TokenStream mapped(std::shared_ptr<const void> keep, const uint16_t* u16, int64_t n, std::string source,
                            int64_t byte_offset);

  int64_t size() const { return total_; }
  bool empty() const { return total_ == 0; }
  int32_t operator[](int64_t i) const;
  // ids [start, start + n) into out[0, n): an i64 row of a batch.
  void read(int64_t start, int64_t n, int64_t* out) const;
  void read(int64_t start, int64_t n, int32_t* out) const;
  std::vector<int32_t> to_vector() const { return slice_vector(0, total_); }
  std::vector<int32_t> slice_vector(int64_t begin, int64_t end) const;
  // ids [begin, end) as a stream sharing this one's pieces.
  TokenStream slice(int64_t begin, int64_t end) const;
  // This stream followed by `more`.
  void append(const TokenStream& more);

  // Every id in [0, vocab); otherwise a ctx::Error naming the file (or "text"), the id's token
  // index and byte offset in it, the id and `vocab`, followed by `hint`.
  void check_ids_below(int64_t vocab, const std::string& hint) const;

 private:
  struct Piece {
    std::shared_ptr<const void> keep;  // the owned vector or the mapping
    const int32_t* i32 = nullptr;      // exactly one of i32 / u16 is set
    const uint16_t* u16 = nullptr;
    int64_t n = 0;
    std::string source;       // the file ("" for encoded text)
    int64_t byte_offset = 0;  // of element 0 in `source`
    int64_t file_index = 0;   // element 0's token index in `source`
  };
  // The piece holding id i and i's index inside it.
  size_t locate(int64_t i, int64_t* in_piece) const;
  template <class T>
  void read_as(int64_t start, int64_t n, T* out) const;

  std::vector<Piece> pieces_;
  std::vector<int64_t> starts_;  // starts_[k]: index of pieces_[k]'s first id
  int64_t total_ = 0;
};

}  // namespace ctx
