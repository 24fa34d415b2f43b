// train/cli/study_spec.h — the study file of `ctxlab study` (docs/evaluation.md, "ctxlab study"):
// one JSON object naming a grid of encodings x eval-time RoPE scalings x seeds x tasks, how each
// model trains, and what is measured. Parsed strictly: an unknown key, a wrong type or a bad value
// is an error naming the file, the field and what was expected.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ctx::cli {

// Extra options of a child verb, in the study file as {"option": value}: true -> --option,
// false -> nothing, a number or string -> --option VALUE.
using OptionArgs = std::vector<std::pair<std::string, std::string>>;  // (option, value or "")

struct StudyTask {
  std::string name;    // passkey | kv-recall | copy (train/tasks.h)
  std::string depths;  // "0,0.5,1" as eval --depths takes it
  int64_t trials = 20;
  OptionArgs args;     // task sizes: task-digits, task-pairs, task-span
};

struct StudySpec {
  std::string data;            // the corpus (default: the shipped one)
  double val_fraction = 0.1;   // its last fraction: held out from training and the tokenizer
  std::string tokenizer_type;  // "" = bytes; bpe | unigram: trained on the training split only
  int64_t tokenizer_vocab = 0;
  std::string preset = "tiny";
  int64_t context = 0;         // training length L (0: the preset's)
  int64_t steps = 0;
  OptionArgs train_args;       // e.g. lr, warmup, batch, task-mix
  struct Encoding {
    std::string name;
    nlohmann::json posenc;
    OptionArgs eval_args;  // its own eval options, e.g. hierarchical for learned positions past L
  };
  std::vector<Encoding> encodings;
  std::vector<std::pair<std::string, std::string>> scalings;       // (name, --rope-scaling value)
  std::vector<uint64_t> seeds;
  std::vector<int64_t> lengths;
  std::vector<StudyTask> tasks;
  bool per_position = true;
  OptionArgs eval_args;        // e.g. max-windows, batch
};

// `j` (from `where`, e.g. the file's name) as a study. Throws ctx::Error on the first bad field.
// Object keys keep the file's order (the grid runs, and reports, in that order).
StudySpec parse_study(const nlohmann::ordered_json& j, const std::string& where);
// A study file read strictly (duplicate keys are errors) and parsed.
StudySpec read_study(const std::string& path);

// Whether an encoding is rotary (the scalings apply to it).
bool is_rotary(const nlohmann::json& posenc);
// A directory name for encoding `enc` evaluated under scaling `scaling` ("" = none): "rope", "rope+yarn".
inline std::string cell_name(const std::string& enc, const std::string& scaling) {
  return scaling.empty() ? enc : enc + "+" + scaling;
}

// The cells of the grid in the study's order: each encoding, then it under each scaling when it
// is rotary ("rope", "rope+pi", "rope+yarn", "alibi", ...).
std::vector<std::string> study_cells(const StudySpec& s);

}  // namespace ctx::cli
