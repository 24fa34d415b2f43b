// train/io/token_stream.cpp — pieces of owned or mapped token ids read as one sequence (see token_stream.h).
#include "train/io/token_stream.h"

#include <algorithm>

#include "core/error.h"

namespace ctx {

TokenStream::TokenStream(std::vector<int32_t> ids) {
  if (ids.empty()) return;
  auto owned = std::make_shared<const std::vector<int32_t>>(std::move(ids));
  Piece p;
  p.i32 = owned->data();
  p.n = (int64_t)owned->size();
  p.keep = owned;
  pieces_.push_back(std::move(p));
  starts_.push_back(0);
  total_ = pieces_.back().n;
}

TokenStream TokenStream::mapped(std::shared_ptr<const void> keep, const uint16_t* u16, int64_t n,
                                std::string source, int64_t byte_offset) {
  TokenStream s;
  if (n == 0) return s;
  Piece p;
  p.keep = std::move(keep);
  p.u16 = u16;
  p.n = n;
  p.source = std::move(source);
  p.byte_offset = byte_offset;
  s.pieces_.push_back(std::move(p));
  s.starts_.push_back(0);
  s.total_ = n;
  return s;
}

size_t TokenStream::locate(int64_t i, int64_t* in_piece) const {
  CTX_CHECK(i >= 0 && i < total_, "tokens: index ", i, " is outside [0, ", total_, ")");
  const size_t k = (size_t)(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1;
  *in_piece = i - starts_[k];
  return k;
}

int32_t TokenStream::operator[](int64_t i) const {
  int64_t j = 0;
  const Piece& p = pieces_[locate(i, &j)];
  return p.i32 ? p.i32[j] : (int32_t)p.u16[j];
}

template <class T>
void TokenStream::read_as(int64_t start, int64_t n, T* out) const {
  if (n <= 0) return;
  CTX_CHECK(start >= 0 && start + n <= total_, "tokens: ids [", start, ", ", start + n, ") run past the end of ",
            total_, " tokens");
  int64_t j = 0;
  for (size_t k = locate(start, &j); n > 0; ++k, j = 0) {
    const Piece& p = pieces_[k];
    const int64_t m = std::min(n, p.n - j);
    if (p.i32)
      for (int64_t t = 0; t < m; ++t) out[t] = (T)p.i32[j + t];
    else
      for (int64_t t = 0; t < m; ++t) out[t] = (T)p.u16[j + t];
    out += m;
    n -= m;
  }
}

void TokenStream::read(int64_t start, int64_t n, int64_t* out) const { read_as(start, n, out); }
void TokenStream::read(int64_t start, int64_t n, int32_t* out) const { read_as(start, n, out); }

std::vector<int32_t> TokenStream::slice_vector(int64_t begin, int64_t end) const {
  std::vector<int32_t> v((size_t)std::max<int64_t>(0, end - begin));
  read(begin, (int64_t)v.size(), v.data());
  return v;
}

TokenStream TokenStream::slice(int64_t begin, int64_t end) const {
  CTX_CHECK(0 <= begin && begin <= end && end <= total_, "tokens: slice [", begin, ", ", end, ") of ", total_,
            " tokens");
  TokenStream s;
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const int64_t lo = std::max(begin, starts_[k]), hi = std::min(end, starts_[k] + pieces_[k].n);
    if (lo >= hi) continue;
    Piece p = pieces_[k];
    const int64_t skip = lo - starts_[k];
    if (p.i32) p.i32 += skip;
    if (p.u16) p.u16 += skip, p.byte_offset += skip * (int64_t)sizeof(uint16_t);
    p.file_index += skip;
    p.n = hi - lo;
    s.starts_.push_back(s.total_);
    s.total_ += p.n;
    s.pieces_.push_back(std::move(p));
  }
  return s;
}

void TokenStream::append(const TokenStream& more) {
  for (const Piece& p : more.pieces_) {
    starts_.push_back(total_);
    total_ += p.n;
    pieces_.push_back(p);
  }
}

void TokenStream::check_ids_below(int64_t vocab, const std::string& hint) const {
  for (const Piece& p : pieces_) {
    if (p.u16 && vocab > 0xffff) continue;  // every uint16 fits
    for (int64_t j = 0; j < p.n; ++j) {
      const int64_t id = p.i32 ? p.i32[j] : p.u16[j];
      if (id >= 0 && id < vocab) continue;
      const std::string where = p.u16 ? str(" (byte offset ", p.byte_offset + j * 2, ")") : std::string();
      throw Error(str(p.source.empty() ? std::string("encoded text") : p.source, ": token ", id, " at token index ",
                      p.file_index + j, where, " is not below the vocabulary size ", vocab,
                      hint.empty() ? "" : "; ", hint));
    }
  }
}

}  // namespace ctx
