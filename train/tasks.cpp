// train/tasks.cpp — the retrieval tasks' generators and the one way a sequence is laid out
// (see tasks.h).
#include "train/tasks.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"

namespace ctx {

namespace {

constexpr int64_t kMaxDigits = 64, kMaxPairs = 1000, kMaxSpan = 4096;

std::string random_string(Rng& rng, int64_t n, char first, int64_t alphabet) {
  std::string s((size_t)n, ' ');
  for (auto& c : s) c = (char)(first + (char)rng.below((uint64_t)alphabet));
  return s;
}

void append(std::vector<int32_t>& to, const std::vector<int32_t>& piece) { to.insert(to.end(), piece.begin(), piece.end()); }

}  // namespace

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = {"passkey", "kv-recall", "copy"};
  return names;
}

void check_task(const std::string& name, const TaskParams& p) {
  const auto& n = task_names();
  std::string all;
  for (const auto& t : n) all += (all.empty() ? "" : " | ") + t;
  CTX_CHECK(std::find(n.begin(), n.end(), name) != n.end(), "unknown task ", quoted_str(name), " (expected ", all,
            ")");
  check_task_params(p);
}

void check_task_params(const TaskParams& p) {
  CTX_CHECK(p.digits >= 1 && p.digits <= kMaxDigits, "--task-digits must be an integer in [1, ", kMaxDigits,
            "], got ", p.digits);
  CTX_CHECK(p.pairs >= 1 && p.pairs <= kMaxPairs, "--task-pairs must be an integer in [1, ", kMaxPairs, "], got ",
            p.pairs);
  CTX_CHECK(p.span >= 1 && p.span <= kMaxSpan, "--task-span must be an integer in [1, ", kMaxSpan, "], got ", p.span);
}

TaskGenerator::TaskGenerator(const std::string& name, const TaskParams& params, const Tokenizer& tok,
                             const TokenStream* filler)
    : name_(name), params_(params), tok_(tok), filler_(filler) {
  check_task(name, params);
  CTX_CHECK(filler_ != nullptr, "task ", name, ": no filler text");
}

// " The pass key is KEY. " ... " What is the pass key? The pass key is " -> KEY
TaskGenerator::Parts TaskGenerator::passkey(Rng& rng) const {
  const std::vector<int32_t> key = tok_.encode(random_string(rng, params_.digits, '0', 10));
  Parts p;
  p.needle = tok_.encode(" The pass key is ");
  append(p.needle, key);
  append(p.needle, tok_.encode(". "));
  p.query = tok_.encode(" What is the pass key? The pass key is ");
  p.answer = key;
  return p;
}

// " {abc=12345 def=67890 ...} " ... " def=" -> 67890 (distinct 3-letter keys; the pair asked
// for drawn uniformly)
TaskGenerator::Parts TaskGenerator::kv_recall(Rng& rng) const {
  std::set<std::string> seen;
  std::vector<std::string> keys;
  while ((int64_t)keys.size() < params_.pairs) {
    std::string k = random_string(rng, 3, 'a', 26);
    if (seen.insert(k).second) keys.push_back(k);
  }
  std::vector<std::vector<int32_t>> values;
  for (int64_t i = 0; i < params_.pairs; ++i) values.push_back(tok_.encode(random_string(rng, params_.digits, '0', 10)));
  const size_t asked = (size_t)rng.below((uint64_t)params_.pairs);
  Parts p;
  p.needle = tok_.encode(" {");
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) append(p.needle, tok_.encode(" "));
    append(p.needle, tok_.encode(keys[i]));
    append(p.needle, tok_.encode("="));
    append(p.needle, values[i]);
  }
  append(p.needle, tok_.encode("} "));
  p.query = tok_.encode(" ");
  append(p.query, tok_.encode(keys[asked]));
  append(p.query, tok_.encode("="));
  p.answer = values[asked];
  return p;
}

// " <<SPAN>> " ... " <<" -> SPAN (random lowercase letters)
TaskGenerator::Parts TaskGenerator::copy(Rng& rng) const {
  const std::vector<int32_t> span = tok_.encode(random_string(rng, params_.span, 'a', 26));
  Parts p;
  p.needle = tok_.encode(" <<");
  append(p.needle, span);
  append(p.needle, tok_.encode(">> "));
  p.query = tok_.encode(" <<");
  p.answer = span;
  return p;
}

TaskGenerator::Parts TaskGenerator::draw(Rng& rng) const {
  if (name_ == "passkey") return passkey(rng);
  if (name_ == "kv-recall") return kv_recall(rng);
  return copy(rng);  // check_task admitted only these three
}

void TaskGenerator::check_fits(int64_t length, const Parts& p) const {
  const int64_t fixed = (int64_t)(p.needle.size() + p.query.size() + p.answer.size());
  CTX_CHECK(length >= 1 && length + 1 >= fixed, "task ", name_, ": length ", length, " is too short; its needle, "
            "query and answer take ", fixed, " tokens and a sequence of length L holds L + 1, so the length must be "
            "at least ", fixed - 1);
  const int64_t filler = length + 1 - fixed;
  CTX_CHECK(filler_->size() >= filler, "task ", name_, ": the filler text has ", filler_->size(),
            " tokens, fewer than the ", filler, " a sequence of length ", length, " needs; use a longer text or a "
            "shorter length");
}

void TaskGenerator::check_length(int64_t length) const {
  Rng probe(0);
  check_fits(length, draw(probe));
}

TaskSequence TaskGenerator::make(int64_t length, double depth, Rng& rng) const {
  CTX_CHECK(std::isfinite(depth) && depth >= 0 && depth <= 1, "task ", name_, ": depth must be in [0, 1], got ",
            depth);
  const Parts p = draw(rng);
  check_fits(length, p);
  TaskSequence s;
  s.filler = length + 1 - (int64_t)(p.needle.size() + p.query.size() + p.answer.size());
  const int64_t offset = (int64_t)rng.below((uint64_t)(filler_->size() - s.filler + 1));
  const std::vector<int32_t> fill = filler_->slice_vector(offset, offset + s.filler);
  const auto from = fill.begin();
  const int64_t at = std::llround(depth * (double)s.filler);
  s.tokens.reserve((size_t)length + 1);
  s.tokens.insert(s.tokens.end(), from, from + at);
  s.needle_begin = at;
  append(s.tokens, p.needle);
  s.needle_end = (int64_t)s.tokens.size();
  s.tokens.insert(s.tokens.end(), from + at, from + s.filler);
  s.query_begin = (int64_t)s.tokens.size();
  append(s.tokens, p.query);
  s.answer_begin = (int64_t)s.tokens.size();
  append(s.tokens, p.answer);
  return s;
}

}  // namespace ctx
