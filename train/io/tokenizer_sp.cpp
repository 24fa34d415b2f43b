// train/io/tokenizer_sp.cpp — SentencePiece training and tokenizer (see tokenizer_sp.h).
#include "train/io/tokenizer_sp.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unordered_map>

#include "core/error.h"
#include "train/io/data_files.h"
#include "train/io/fileio.h"
#include "train/io/sp_model_check.h"

namespace ctx {

namespace {

// The lines of a text, one sentence each (as SentencePiece reads a file: split at '\n').
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::string& text) : text_(text) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    if (at_ >= text_.size()) {
      done_ = true;
      return;
    }
    const size_t nl = text_.find('\n', at_);
    const size_t end = nl == std::string::npos ? text_.size() : nl;
    line_.assign(text_, at_, end - at_);
    at_ = end + 1;
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  const std::string& text_;
  size_t at_ = 0;
  std::string line_;
  bool done_ = false;
};

// SentencePiece statuses read "Internal: ./src/x.cc(660) [cond] Message.": keep the message.
std::string status_message(const sentencepiece::util::Status& s) {
  std::string m = s.ToString();
  const size_t b = m.find("] ");
  if (b != std::string::npos) m = m.substr(b + 2);
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  // SentencePiece gives no text for a protobuf that does not parse: say what that means
  if (m.empty() || m == "INTERNAL" || m == "INTERNAL: ")
    m = str("the bytes do not parse as a SentencePiece ModelProto: damaged, truncated or another format; status code ",
            (int)s.code());
  return m;
}

// "\xe2\x96\x81" (U+2581, the SentencePiece whitespace mark) -> ' '.
std::string unmark_spaces(const std::string& piece) {
  static const std::string mark = "\xe2\x96\x81";
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, mark.size(), mark) == 0) {
      out += ' ';
      i += mark.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

// Text every usable model encodes: ASCII letters, digits, punctuation and whitespace, Latin-1 and
// other multi-byte UTF-8, and the unknown-piece mark as plain text.
const char* const kProbeText =
    "It is a truth universally acknowledged, \xc3\xa9t\xc3\xa9\n\t<unk> 12 !\"#$%&'()*+-./:;<=>?@[\\]^_`{|}~ "
    "\xe2\x82\xac \xf0\x9f\x98\x80";

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model, const std::string& source)
    : model_(model), source_(source), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  check_sentencepiece_model(model, source);  // what the library would read out of bounds or throw on
  sentencepiece::util::Status st;
  try {
    st = sp_->LoadFromSerializedProto(model);
  } catch (const std::exception& e) {  // its trie builder throws on keys it cannot hold
    throw Error(str(source, ": not a SentencePiece model (", e.what(), ")"));
  }
  CTX_CHECK(st.ok(), source, ": not a SentencePiece model (", status_message(st), ")");
  vocab_ = sp_->GetPieceSize();
  CTX_CHECK(vocab_ >= 1, source, ": SentencePiece model with an empty vocabulary");
  // A model the library loads may still be unable to encode text (pieces that leave characters
  // unconsumed: "all normalized characters are not consumed", found by fuzz_tokenizer): refused
  // here, naming the file, rather than at the first encode of a run.
  std::vector<int> probe;
  const sentencepiece::util::Status enc = sp_->Encode(kProbeText, &probe);
  CTX_CHECK(enc.ok(), source, ": SentencePiece model that cannot encode text (", status_message(enc), ")");
  text_.resize((size_t)vocab_);
  for (int i = 0; i < (int)vocab_; ++i) {
    if (sp_->IsControl(i) || sp_->IsUnknown(i)) continue;  // decodes to nothing / to the unk mark
    const std::string& p = sp_->IdToPiece(i);
    if (sp_->IsByte(i)) {  // "<0xNN>"
      text_[(size_t)i] = std::string(1, (char)std::stoi(p.substr(3, 2), nullptr, 16));
    } else {
      text_[(size_t)i] = unmark_spaces(p);
    }
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  auto st = sp_->Encode(text, &ids);
  CTX_CHECK(st.ok(), source_, ": encode failed (", status_message(st), ")");
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(const int32_t* ids, size_t n) const {
  std::vector<int> v(n);
  for (size_t i = 0; i < n; ++i) {
    CTX_CHECK(ids[i] >= 0 && ids[i] < vocab_, "tokenizer: decode: token id ", ids[i], " at position ", i,
              " is outside the vocabulary [0, ", vocab_, ") of ", source_);
    v[i] = ids[i];
  }
  std::string out;
  auto st = sp_->Decode(v, &out);
  CTX_CHECK(st.ok(), source_, ": decode failed (", status_message(st), ")");
  return out;
}

std::string SentencePieceTokenizer::token_text(int32_t id) const {
  CTX_CHECK(id >= 0 && id < vocab_, "tokenizer: token id ", id, " is outside the vocabulary [0, ", vocab_,
            ") of ", source_);
  return text_[(size_t)id];
}

std::string SentencePieceTokenizer::describe() const {
  return str("sentencepiece (vocab ", vocab_, ", ", source_, ")");
}

std::string train_sentencepiece(const SentencePieceTrainOptions& opt) {
  CTX_CHECK(opt.type == "bpe" || opt.type == "unigram", "--type must be bpe or unigram, got ", quoted_str(opt.type));
  CTX_CHECK(opt.vocab >= 2 && opt.vocab <= (1 << 24), "--vocab must be an integer in [2, 16777216], got ", opt.vocab);
  CTX_CHECK(opt.max_lines >= 0, "--max-lines must be >= 0 (0 = all lines), got ", opt.max_lines);
  const std::string text = load_text(data_sources(opt.data, "--data"), opt.field, "--data");  // names the file
  CTX_CHECK(text.find_first_not_of(" \t\r\n") != std::string::npos, opt.data,
            ": the training text is empty (nothing to learn a vocabulary from)");
  std::unordered_map<std::string, std::string> kw = {
      {"model_type", opt.type},
      {"vocab_size", std::to_string(opt.vocab)},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"user_defined_symbols", "\n"},  // lines are read one by one: without this '\n' is a byte piece
      {"unk_id", "0"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"pad_id", "-1"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
      {"max_sentence_length", "1000000"},
  };
  if (opt.max_lines > 0) {
    kw["input_sentence_size"] = std::to_string(opt.max_lines);
    kw["shuffle_input_sentence"] = "true";
  }
  std::string model;
  LineIterator lines(text);
  auto st = sentencepiece::SentencePieceTrainer::Train(kw, &lines, &model);
  if (!st.ok()) {
    // SentencePiece's own advice names its options ("--character_coverage"), which ctxlab does not
    // expose (every character is kept: character_coverage 1.0): say what to change here instead.
    std::string msg = status_message(st);
    const size_t hint = msg.find(" Increase vocab_size");
    if (hint != std::string::npos) msg = msg.substr(0, hint) + " (raise --vocab to at least the number after 'vs')";
    throw Error(str(opt.data, ": training a ", opt.type, " tokenizer with --vocab ", opt.vocab, " failed: ", msg));
  }
  return model;
}

}  // namespace ctx
