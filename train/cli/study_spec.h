// train/cli/study_spec.h — the study file of `ctxlab study` (docs/evaluation.md, "ctxlab study"):
// one JSON object naming a grid of encodings x eval-time RoPE scalings x seeds x tasks, fine-tunes
// of the trained models at a longer context (PI / YaRN fine-tuning cells), how each model trains,
// and what is measured. Parsed strictly: an unknown key, a wrong type or a bad value
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
  // "tokenizers": more tokenizers, by name, each trained on the training split like "tokenizer";
  // an encoding that names one ({"posenc": "rope", "tokenizer": "bpe4k"}) trains with it, so
  // byte-level and word-piece runs of the same model sit in one grid.
  struct Tokenizer {
    std::string name, type;  // type: bpe | unigram
    int64_t vocab = 0;
  };
  std::vector<Tokenizer> tokenizers;
  std::string preset = "tiny";
  int64_t context = 0;         // training length L (0: the preset's)
  int64_t steps = 0;
  OptionArgs model_set;        // config fields over the preset's ("set": {"d_model": 128}): --set KEY=VALUE
  OptionArgs train_args;       // e.g. lr, warmup, batch, task-mix
  struct Encoding {
    std::string name;
    nlohmann::json posenc;
    OptionArgs eval_args;  // its own eval options, e.g. hierarchical for learned positions past L
    std::string tokenizer;  // a "tokenizers" name: trained with that one; "" = the study's "tokenizer" (or bytes)
  };
  std::vector<Encoding> encodings;
  struct Scaling {
    std::string name, value;  // value: as eval --rope-scaling takes it
    bool per_length = false;  // "factor": "len/L": at each length, factor max(1, length / L)
    std::vector<std::string> encodings;  // "encodings": the rotary encodings it applies to (default: all)
  };
  std::vector<Scaling> scalings;
  std::vector<uint64_t> seeds;
  std::vector<int64_t> lengths;
  // An eval variant of trained runs, no training of its own: the segmented / sliding-window
  // baselines ({"window": {"eval": {"window": 128}, "encodings": ["rope"]}}).
  struct Variant {
    std::string name;
    OptionArgs eval_args;
    std::vector<std::string> encodings;  // required: the encodings whose runs it evaluates
  };
  std::vector<Variant> variants;
  // A fine-tune cell: each selected encoding's trained run fine-tuned (`ctxlab finetune`) at a
  // longer context, with a RoPE scaling or without one ("direct"), then evaluated as it is (the
  // fine-tuned checkpoint records its scaling).
  struct Finetune {
    std::string name;
    std::string scaling;             // as finetune --rope-scaling takes it; "" = no scaling
    std::string scaling_type;        // "pi", "yarn", ... ("" without a scaling), for the label
    double factor = 0;               // the scaling's factor (length / L for "len/L"); 0: none / its default
    bool factor_default = false;     // "len/L": --factor left to finetune (context / L)
    int64_t length = 0;              // the fine-tuning context L'
    int64_t length_mult = 0;         // L' = length_mult x L when given as "4L" (for the label), else 0
    int64_t steps = 0;
    OptionArgs args;                 // further finetune options, e.g. lr, warmup, batch
    std::vector<std::string> encodings;  // the encodings it applies to (default: the rotary ones)
  };
  std::vector<Finetune> finetunes;
  std::vector<StudyTask> tasks;
  bool per_position = true;
  OptionArgs eval_args;        // e.g. max-windows, batch
};

// `j` (from `where`, e.g. the file's name) as a study. Throws ctx::Error on the first bad field.
// Object keys keep the file's order (the grid runs, and reports, in that order).
StudySpec parse_study(const nlohmann::ordered_json& j, const std::string& where);
// A study file read strictly (duplicate keys are errors) and parsed.
StudySpec read_study(const std::string& path);

// The tokenizer model encoding `e` trains with in study directory `out`: OUT/tokenizers/NAME.model
// for a "tokenizers" one, OUT/tokenizer.model for the study's "tokenizer", "" for bytes.
std::string study_tokenizer_path(const StudySpec& s, const StudySpec::Encoding& e, const std::string& out);

// Whether an encoding is rotary (the scalings apply to it).
bool is_rotary(const nlohmann::json& posenc);
// A directory name for encoding `enc` evaluated under scaling `scaling` ("" = none): "rope", "rope+yarn".
inline std::string cell_name(const std::string& enc, const std::string& scaling) {
  return scaling.empty() ? enc : enc + "+" + scaling;
}

// A cell of the grid: an encoding, a rotary one under a scaling ("rope", "rope+pi", "alibi"), an
// encoding's run under an eval variant ("rope+window"), or fine-tuned ("rope+pi_ft").
struct StudyCell {
  std::string name;
  const StudySpec::Encoding* enc = nullptr;
  const StudySpec::Scaling* scaling = nullptr;    // nullptr: as trained
  const StudySpec::Finetune* finetune = nullptr;  // non-null: the fine-tuned run, evaluated as it is
  const StudySpec::Variant* variant = nullptr;    // non-null: the trained run under the variant's eval options
  std::string label;  // for tables and plots: the name, or e.g. "rope + pi s=4 ft 300@4L"
};
// The cells in the study's order: each encoding, then it under each scaling when it is rotary,
// then its variants, then its fine-tunes.
std::vector<StudyCell> study_cells(const StudySpec& s);

// Whether scaling `sc` applies to encoding `e` (a rotary one it names, or any rotary one by default).
bool scales_encoding(const StudySpec::Scaling& sc, const StudySpec::Encoding& e);
// Whether fine-tune `f` applies to encoding `e`.
bool finetunes_encoding(const StudySpec::Finetune& f, const StudySpec::Encoding& e);
// The label of encoding `enc` fine-tuned by `f` in a study trained at context L: "rope + pi s=4 ft 300@4L".
std::string finetune_label(const std::string& enc, const StudySpec::Finetune& f);

// One eval invocation of a cell: its lengths, and for a per-length scaling its --factor.
struct EvalSlice {
  std::vector<int64_t> lengths;
  double factor = 0;   // 0: the scaling's own (or none)
  std::string suffix;  // of its result files: "" or ".len512"
};
std::vector<EvalSlice> eval_slices(const StudySpec& s, const StudyCell& c);

}  // namespace ctx::cli
