// train/tasks.h — synthetic retrieval tasks that show whether a model uses its far context:
// passkey, kv-recall and copy (docs/evaluation.md gives their exact formats). One mechanism, one
// generator per task: a task draws a needle, a query and an answer (token ids, each piece encoded
// on its own so that the answer's tokens are exactly the ones in the needle); the sequence is
// filler text (a random stretch of a token stream: the corpus) with the needle inserted at a
// chosen depth, then the query, then the answer, length+1 tokens in all: the model reads the first
// `length` and its predictions of the last |answer| tokens are scored (train/task_eval.h) or
// trained on (train/task_mix.h). Deterministic in the Rng it draws from.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "train/io/token_stream.h"
#include "train/io/tokenizer.h"

namespace ctx {

// The tasks' sizes (the same for every task that uses one; CLI: --task-digits / -pairs / -span).
struct TaskParams {
  int64_t digits = 5;  // passkey: digits of the key; kv-recall: digits of every value
  int64_t pairs = 4;   // kv-recall: key-value pairs in the needle
  int64_t span = 16;   // copy: random lowercase letters to repeat
};

// passkey | kv-recall | copy
const std::vector<std::string>& task_names();
// Throw one line naming the option (--task-digits ..., or the unknown task) and the expected value.
void check_task_params(const TaskParams& p);
void check_task(const std::string& name, const TaskParams& p);  // the name, then the params

struct TaskSequence {
  std::vector<int32_t> tokens;                // length + 1 tokens
  int64_t needle_begin = 0, needle_end = 0;   // tokens[needle_begin, needle_end) = the needle
  int64_t query_begin = 0;                    // then the query, then the answer
  int64_t answer_begin = 0;                   // tokens[answer_begin, length] = the answer
  int64_t filler = 0;                         // filler tokens around the needle
};

class TaskGenerator {
 public:
  // `filler`: the tokens the needle hides in; `tok` encodes the pieces. Both must outlive this.
  TaskGenerator(const std::string& name, const TaskParams& params, const Tokenizer& tok,
                const TokenStream* filler);
  const std::string& name() const { return name_; }
  const TaskParams& params() const { return params_; }
  // A sequence of length+1 tokens: the filler is `length` + 1 - |needle| - |query| - |answer|
  // tokens from a random offset of the filler stream, and the needle starts at filler token
  // round(depth * filler) (depth 0: the start, 1: just before the query). Throws when the pieces
  // do not fit in length+1 tokens (naming the length and the minimum) or the filler stream is
  // shorter than the filler needed.
  TaskSequence make(int64_t length, double depth, Rng& rng) const;
  // The same checks as make() with a probe draw, before any compute: the length fits the task
  // (with the byte tokenizer every draw has the same size; with SentencePiece a draw whose pieces
  // tokenize longer can still fail in make(), with the same error).
  void check_length(int64_t length) const;

 private:
  struct Parts {
    std::vector<int32_t> needle, query, answer;
  };
  Parts draw(Rng& rng) const;  // the task's generator
  Parts passkey(Rng& rng) const;
  Parts kv_recall(Rng& rng) const;
  Parts copy(Rng& rng) const;
  void check_fits(int64_t length, const Parts& p) const;

  std::string name_;
  TaskParams params_;
  const Tokenizer& tok_;
  const TokenStream* filler_;
};

}  // namespace ctx
