// train/cli/cli_common.cpp — option helpers shared by the CLI verbs (see cli_common.h).
#include "train/cli/cli_common.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <typeinfo>

#include "core/backend.h"  // backend(Device::CUDA) for --device cuda
#include "core/precision.h"
#include "train/dist/distributed.h"
#include "train/io/data_files.h"
#include "train/io/limits.h"

namespace ctx::cli {

void add_config_options(cxxopts::Options& o) {
  o.add_options("model")("config", "model config JSON file (MODEL_SPEC §2)", cxxopts::value<std::string>())(
      "preset", "built-in config: tiny | small | medium (without --config or --preset: small)",
      cxxopts::value<std::string>())(
      "posenc", "positional encoding, a type name or JSON, e.g. rope or '{\"type\":\"alibi\"}'",
      cxxopts::value<std::string>())(
      "set", "override one field of the config (MODEL_SPEC §2) as KEY=VALUE, VALUE as JSON or a bare word; "
      "repeatable, e.g. --set n_layers=4 --set norm=rmsnorm (d_ff follows a new d_model unless set too; "
      "posenc: --posenc)",
      cxxopts::value<std::vector<std::string>>())(
      "dropout", "dropout probability in training, in [0, 1): the embedding, the attention probabilities and "
      "both residual branches (docs/training.md); overrides the config's (0 in every preset)",
      cxxopts::value<double>());
}

namespace {
// --set KEY=VALUE and --dropout P applied to cfg's JSON (validated by config_from_json, which
// names an unknown key or a bad value)
ModelConfig apply_overrides(const ModelConfig& cfg, const cxxopts::ParseResult& r, std::string& source) {
  nlohmann::json j = config_to_json(cfg);
  bool d_ff_given = false, d_model_given = false;
  auto put = [&](const std::string& key, const nlohmann::json& v, const std::string& shown) {
    CTX_CHECK(key != "posenc", "--set posenc=...: use --posenc");
    j[key] = v;
    d_ff_given = d_ff_given || key == "d_ff";
    d_model_given = d_model_given || key == "d_model";
    source += " with " + shown;
  };
  if (r.count("set"))
    for (const std::string& kv : r["set"].as<std::vector<std::string>>()) {
      const size_t eq = kv.find('=');
      CTX_CHECK(eq != std::string::npos && eq > 0, "--set: expected KEY=VALUE (e.g. n_layers=4), got '", kv, "'");
      const std::string key = kv.substr(0, eq), text = kv.substr(eq + 1);
      nlohmann::json v = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (v.is_discarded()) v = text;  // a bare word: norm=rmsnorm
      put(key, v, "--set " + kv);
    }
  if (r.count("dropout")) put("dropout", r["dropout"].as<double>(), str("--dropout ", r["dropout"].as<double>()));
  if (d_model_given && !d_ff_given && cfg.d_ff == 4 * cfg.d_model) j.erase("d_ff");  // d_ff = 4 d_model again
  return config_from_json(j, source);
}
}  // namespace

std::pair<ModelConfig, std::string> config_from_options(const cxxopts::ParseResult& r) {
  CTX_CHECK(!(r.count("config") && r.count("preset")), "give --config or --preset, not both");
  ModelConfig cfg;
  std::string source;
  if (r.count("config")) {
    source = r["config"].as<std::string>();
    cfg = load_config_file(source);
  } else {
    std::string p = r.count("preset") ? r["preset"].as<std::string>() : "small";
    source = "preset " + p;
    cfg = preset_config(p);
  }
  if (r.count("posenc")) {
    std::string s = r["posenc"].as<std::string>();
    nlohmann::json j;
    if (!s.empty() && s[0] == '{') {
      try {
        j = nlohmann::json::parse(s);
      } catch (const std::exception& e) {
        throw Error(str("--posenc: not valid JSON: ", e.what()));
      }
    } else {
      j = {{"type", s}};
    }
    nlohmann::json full = config_to_json(cfg);
    full["posenc"] = j;
    source += " with --posenc";
    cfg = config_from_json(full, source);
  }
  if (r.count("set") || r.count("dropout")) cfg = apply_overrides(cfg, r, source);
  check_model_fits(cfg, source);  // a config that cannot fit: refused before any allocation
  return {cfg, source};
}

// cxxopts reads a decimal option with a stream, which stops at the first character it cannot
// use ("--lr 2x" gives 2): every decimal option given must be a number to its last character.
static void check_decimal_options(const cxxopts::ParseResult& r) {
  for (const cxxopts::KeyValue& kv : r.arguments()) {
    try {
      (void)r[kv.key()].as<double>();  // std::bad_cast: not a decimal option
    } catch (const std::bad_cast&) {
      continue;
    }
    const std::string& v = kv.value();
    char* end = nullptr;
    (void)std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || std::isspace((unsigned char)v[0]))
      throw Error(str("--", kv.key(), ": '", v, "' is not a valid value: expected a number (see --help)"));
  }
}

std::optional<cxxopts::ParseResult> parse_or_help(cxxopts::Options& o, int argc, char** argv) {
  try {
    auto r = o.parse(argc, argv);
    if (r.count("help")) {
      std::printf("%s\n", o.help().c_str());
      return std::nullopt;
    }
    if (!r.unmatched().empty())
      throw Error(str("unexpected argument '", r.unmatched()[0], "' (see --help)"));
    check_decimal_options(r);
    return r;
  } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
    // cxxopts names the value only ("Argument 'fast' failed to parse"): find the flag it was given to
    const std::string what = e.what();
    const size_t a = what.find(cxxopts::LQUOTE), b = what.rfind(cxxopts::RQUOTE);
    const size_t v0 = a + cxxopts::LQUOTE.size();
    const std::string value = a != std::string::npos && b != std::string::npos && b >= v0 ? what.substr(v0, b - v0) : "";
    for (int i = 1; i < argc && !value.empty(); ++i) {
      const std::string arg = argv[i];
      const size_t eq = arg.find('=');
      if (arg.rfind("--", 0) == 0 && eq != std::string::npos && arg.substr(eq + 1) == value)
        throw Error(str(arg.substr(0, eq), ": '", value, "' is not a valid value (see --help)"));
      if (arg == value && i > 1 && argv[i - 1][0] == '-')
        throw Error(str(argv[i - 1], ": '", value, "' is not a valid value (see --help)"));
    }
    throw Error(str(what, " (see --help)"));
  } catch (const cxxopts::exceptions::exception& e) {
    throw Error(str(e.what(), " (see --help)"));
  }
}

void require(const cxxopts::ParseResult& r, const char* name, const cxxopts::Options&) {
  CTX_CHECK(r.count(name), "missing required option --", name, " (see --help)");
}

Device device_from_option(const std::string& s) {
  if (s == "cpu") return Device::CPU;
  CTX_CHECK(s == "cuda", "--device must be cpu or cuda, got ", quoted_str(s));
#ifndef CTXLAB_WITH_CUDA
  throw Error("--device cuda: this build has no CUDA backend (configure with -DCTXLAB_WITH_CUDA=ON on a "
              "machine with nvcc)");
#else
  backend(Device::CUDA);  // throws when the CUDA backend cannot start
  try {  // a real build on a machine without a GPU: say so here, in one line, before any work
    Tensor::empty({1}, DType::F32, Device::CUDA);
  } catch (const Error& e) {
    throw Error(str("--device cuda: ", e.what()));
  }
  return Device::CUDA;
#endif
}

void add_tokenizer_option(cxxopts::Options& o, const std::string& help) {
  o.add_options("tokenizer")("tokenizer", help, cxxopts::value<std::string>());
}

std::shared_ptr<const Tokenizer> tokenizer_from_option(const cxxopts::ParseResult& r) {
  if (!r.count("tokenizer")) return byte_tokenizer();
  try {
    return load_tokenizer_file(r["tokenizer"].as<std::string>());
  } catch (const Error& e) {
    throw Error(str("--tokenizer: ", e.what()));
  }
}

std::shared_ptr<const Tokenizer> checkpoint_tokenizer(const LoadedModel& lm, const cxxopts::ParseResult& r,
                                                      const std::string& ckpt) {
  if (!r.count("tokenizer")) return lm.tokenizer ? lm.tokenizer : byte_tokenizer();
  const std::string path = r["tokenizer"].as<std::string>();
  std::shared_ptr<const Tokenizer> given = tokenizer_from_option(r);
  if (lm.tokenizer) {
    CTX_CHECK(given->fingerprint() == lm.tokenizer->fingerprint(), "--tokenizer ", path, " (", given->type(),
              ", vocab ", given->vocab_size(), ", fingerprint ", given->fingerprint(),
              ") is not the tokenizer recorded in ", ckpt, " (", lm.tokenizer->type(), ", vocab ",
              lm.tokenizer->vocab_size(), ", fingerprint ", lm.tokenizer->fingerprint(),
              "); leave --tokenizer out to use the recorded one");
    return lm.tokenizer;
  }
  CTX_CHECK(given->vocab_size() == lm.model->cfg.vocab_size, "--tokenizer ", path, " has ", given->vocab_size(),
            " tokens but ", ckpt, " (which records no tokenizer) has vocab_size ", lm.model->cfg.vocab_size);
  return given;
}

void add_device_option(cxxopts::Options& o, const char* what) {
  o.add_options("device")("device", str("cpu | cuda: ", what), cxxopts::value<std::string>()->default_value("cpu"));
}

Device device_option(const cxxopts::ParseResult& r) {
  const Device dev = device_from_option(r["device"].as<std::string>());
#ifndef CTXLAB_WITH_NCCL
  CTX_CHECK(!(dev == Device::CUDA && dist::size() > 1),
            "--device cuda with more than one MPI rank needs NCCL, and this build has none (configure the "
            "real CUDA build where nccl.h and libnccl are found; docs/distributed.md), or use --device cpu");
#endif
  return dev;
}

void move_model(nn::GPT& model, Device dev) {
  model.to(dev);
  for (auto& [name, p] : model.named_parameters())
    CTX_CHECK(p.data().device() == dev, "move_model: parameter '", name, "' is on ", device_name(p.data().device()),
              " after moving the model to ", device_name(dev));
}

void add_precision_options(cxxopts::Options& o) {
  o.add_options("precision")("precision",
                             "fp32 | bf16: GEMM inputs (linear layers, matmuls) in bf16 with fp32 accumulation; "
                             "weights, gradients, optimizer state, norms, softmax, loss stay fp32 (autocast)",
                             cxxopts::value<std::string>()->default_value("fp32"))(
      "tf32", "CUDA: fp32 GEMMs may use TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32); off by default");
}

void apply_precision_options(const cxxopts::ParseResult& r) {
  const Precision p = precision_from_string(r["precision"].as<std::string>());
  const Device dev = r.count("device") && r["device"].as<std::string>() == "cuda" ? Device::CUDA : Device::CPU;
  const std::string note = apply_precision_request(p, r.count("tf32") > 0, dev);
  if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  if (dev == Device::CPU && gemm_precision() == Precision::BF16 && r.count("deterministic") && r["deterministic"].as<bool>())
    std::fprintf(stderr,
                 "--deterministic with --precision bf16: the bf16 GEMMs take their bf16 operands widened to fp32 "
                 "through OpenBLAS's shape-fixed blocks (the same numerics, the same bits for any thread count; "
                 "the fp32 rate, not bf16's)\n");
}

void start_distributed(const cxxopts::ParseResult& r) {
  // parsed here, whole (cxxopts reads "2x" as 2): a positive finite number of seconds
  const std::string t = r["dist-timeout"].as<std::string>();
  char* end = nullptr;
  const double seconds = std::strtod(t.c_str(), &end);
  CTX_CHECK(!t.empty() && end && *end == 0 && std::isfinite(seconds) && seconds > 0, "--dist-timeout ", quoted_str(t),
            ": expected a positive number of seconds (default ", dist::kDefaultTimeoutSeconds, ")");
  dist::init(r.count("distributed") > 0, seconds);
}

std::pair<Tensor, Tensor> split_inputs_targets(const Tensor& all) {
  const int64_t B = all.size(0), T1 = all.size(1), T = T1 - 1;
  Tensor in = Tensor::empty({B, T}, DType::I64), tg = Tensor::empty({B, T}, DType::I64);
  int64_t* ip = in.host<int64_t>();
  int64_t* tp = tg.host<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      ip[b * T + t] = (int64_t)all.at(b * T1 + t);
      tp[b * T + t] = (int64_t)all.at(b * T1 + t + 1);
    }
  return {in, tg};
}

void add_training_options(cxxopts::Options& o, const TrainingOptionBlock& b) {
  const TrainOptions d;
  auto s = [](auto v) { return std::to_string(v); };
  o.add_options(b.data_group)("data", str(b.data_help, "; ", kDataFilesHelp), cxxopts::value<std::vector<std::string>>())(
      "val-fraction", "last fraction of the corpus held out for validation (of its bytes when all of --data is text, "
      "of its tokens when a file is pre-tokenized)",
      cxxopts::value<double>()->default_value("0.1"))(
      "val-data", "validation files instead of the --val-fraction split (the same forms as --data), e.g. val.bin",
      cxxopts::value<std::vector<std::string>>());
  add_data_field_option(o, b.data_group);
  auto optimisation = o.add_options("optimisation");
  optimisation("steps", "optimizer steps", cxxopts::value<int64_t>()->default_value(b.steps))(
      "batch", "sequences per micro-batch", cxxopts::value<int64_t>()->default_value(b.batch))(
      "accum", b.accum_help, cxxopts::value<int64_t>()->default_value("1"))(
      "deterministic",
      "the same run whatever the number of MPI ranks (any that divides --batch), --accum or threads, bit for bit: the "
      "batch runs one sequence at a time and the gradients add in a fixed tree over the sequences "
      "(train/dist/grad_tree.h), and every CPU GEMM in "
      "OpenBLAS blocks fixed by the shape (core/determinism.h; with --precision bf16 on its bf16 operands widened to fp32); slower: docs/distributed.md measures it");
  if (b.optimizer_choice)
    optimisation("optimizer", "adamw | sgd", cxxopts::value<std::string>()->default_value(d.optimizer));
  optimisation("lr", b.lr_help, cxxopts::value<double>()->default_value(b.lr))(
      "min-lr", b.min_lr_help, cxxopts::value<double>())(
      "warmup", "linear warmup steps", cxxopts::value<int64_t>()->default_value(b.warmup))(
      "weight-decay", b.weight_decay_help, cxxopts::value<double>()->default_value(b.weight_decay))(
      "beta1", "AdamW beta1", cxxopts::value<double>()->default_value("0.9"))(
      "beta2", "AdamW beta2", cxxopts::value<double>()->default_value(b.beta2));
  if (b.optimizer_choice) optimisation("momentum", "SGD momentum", cxxopts::value<double>()->default_value("0.9"));
  optimisation("grad-clip", "global grad-norm clip (0 = off)", cxxopts::value<double>()->default_value("1.0"))(
      "seed", b.seed_help, cxxopts::value<uint64_t>()->default_value(s(d.seed)));
  o.add_options("tasks")("task-mix", "retrieval tasks mixed into the batches, NAME:P[,NAME:P...] with NAME passkey | "
                         "kv-recall | copy and P the share of rows in [0, 1]; task rows train on their answer tokens "
                         "only (docs/evaluation.md), e.g. passkey:0.25", cxxopts::value<std::string>());
  add_task_param_options(o, "tasks");
  o.add_options("output")("out", "run directory", cxxopts::value<std::string>()->default_value(b.out))(
      "log-interval", "steps between progress lines", cxxopts::value<int64_t>()->default_value(s(d.log_interval)))(
      "eval-interval", b.eval_interval_help, cxxopts::value<int64_t>()->default_value(b.eval_interval))(
      "eval-batches", "validation batches per evaluation", cxxopts::value<int64_t>()->default_value(s(d.eval_batches)))(
      "ckpt-interval", "steps between checkpoints", cxxopts::value<int64_t>()->default_value(b.ckpt_interval))(
      "no-plot", "skip the gnuplot loss curve")("quiet", "no progress lines")(
      "force", "replace the run already in --out (its checkpoint and logs); without it a new run there is refused");
}

void add_task_param_options(cxxopts::Options& o, const std::string& group) {
  const TaskParams d;
  o.add_options(group)("task-digits", "passkey: digits of the key; kv-recall: digits of every value",
                       cxxopts::value<int64_t>()->default_value(std::to_string(d.digits)))(
      "task-pairs", "kv-recall: key-value pairs in the needle", cxxopts::value<int64_t>()->default_value(std::to_string(d.pairs)))(
      "task-span", "copy: random letters to repeat", cxxopts::value<int64_t>()->default_value(std::to_string(d.span)));
}

TaskParams task_params_from_options(const cxxopts::ParseResult& r) {
  TaskParams p;
  p.digits = r["task-digits"].as<int64_t>();
  p.pairs = r["task-pairs"].as<int64_t>();
  p.span = r["task-span"].as<int64_t>();
  check_task_params(p);
  return p;
}

void add_distributed_option(cxxopts::Options& o) {
  o.add_options("output")("distributed", "data-parallel over MPI even when not started by mpirun (docs/distributed.md)")(
      "dist-timeout", "seconds a rank waits for the others in one MPI call (MPI_Init, each collective, the barrier and "
      "MPI_Finalize at the end) before the job ends with an error naming the silent ranks and exit status 124 "
      "(a rank that is stopped, hung or cut off); longer than any checkpoint or validation pass",
      cxxopts::value<std::string>()->default_value(str(dist::kDefaultTimeoutSeconds)));
}

const char* const kDataFilesHelp =
    "FILES: comma-separated or the option repeated; a directory stands for its *.txt, *.md, *.jsonl, *.bin, *.u16 "
    "files in name order; *.jsonl is JSON Lines (the text in --data-field), *.bin / *.u16 pre-tokenized uint16 "
    "(nanoGPT, or llm.c with its 1024-byte header), memory-mapped; any other file is text (docs/training.md, Data)";

void add_data_field_option(cxxopts::Options& o, const std::string& group) {
  o.add_options(group)("data-field", "the field of each JSONL line that holds the text",
                       cxxopts::value<std::string>()->default_value("text"));
}

std::string data_list_option(const cxxopts::ParseResult& r, const std::string& name) {
  if (!r.count(name)) return "";
  std::string list;
  for (const std::string& v : r[name].as<std::vector<std::string>>()) list += (list.empty() ? "" : ",") + v;
  CTX_CHECK(!list.empty(), "--", name, ": expected FILES (comma-separated), got an empty value");
  return list;
}

void add_vocab_option(cxxopts::Options& o, const std::string& group) {
  o.add_options(group)("vocab", "the vocabulary size of pre-tokenized --data (.bin / .u16) made by a tokenizer ctxlab "
                       "does not have, e.g. 50257 for GPT-2's: the model gets N tokens with no text (bits per byte "
                       "is then not reported); with --tokenizer it must equal the tokenizer's",
                       cxxopts::value<int64_t>());
}

std::shared_ptr<const Tokenizer> new_run_tokenizer(const cxxopts::ParseResult& r, const std::string& data) {
  std::shared_ptr<const Tokenizer> tok = tokenizer_from_option(r);
  if (r.count("vocab")) {
    const int64_t n = r["vocab"].as<int64_t>();
    if (!r.count("tokenizer")) return std::make_shared<IdTokenizer>(n);
    CTX_CHECK(n == tok->vocab_size(), "--vocab ", n, " disagrees with --tokenizer ", r["tokenizer"].as<std::string>(),
              " (", tok->vocab_size(), " tokens); give one of them");
    return tok;
  }
  if (!r.count("tokenizer") && !data.empty())
    CTX_CHECK(!has_token_files(data_sources(data, "--data")), "--data ", data, ": pre-tokenized files (.bin / .u16) "
              "carry no tokenizer, and ctxlab cannot tell which one made them: give --vocab N (its vocabulary size, "
              "e.g. 50257 for GPT-2's) or --tokenizer MODEL (the SentencePiece model that made them)");
  return tok;
}

void read_train_options(const cxxopts::ParseResult& a, TrainOptions& opt) {
  opt.data = data_list_option(a, "data");
  opt.val_data = data_list_option(a, "val-data");
  CTX_CHECK(opt.val_data.empty() || !a.count("val-fraction"), "--val-data and --val-fraction both choose the "
            "validation data; give one of them");
  opt.data_field = a["data-field"].as<std::string>();
  opt.val_fraction = a["val-fraction"].as<double>();
  opt.steps = a["steps"].as<int64_t>();
  opt.batch = a["batch"].as<int64_t>();
  opt.accum = a["accum"].as<int64_t>();
  opt.deterministic = a["deterministic"].as<bool>();
  opt.lr = a["lr"].as<double>();
  opt.warmup = a["warmup"].as<int64_t>();
  opt.weight_decay = a["weight-decay"].as<double>();
  opt.beta1 = a["beta1"].as<double>();
  opt.beta2 = a["beta2"].as<double>();
  opt.grad_clip = a["grad-clip"].as<double>();
  opt.seed = a["seed"].as<uint64_t>();
  if (a.count("task-mix")) opt.task_mix = a["task-mix"].as<std::string>();
  opt.task_params = task_params_from_options(a);
  opt.out = a["out"].as<std::string>();
  opt.log_interval = a["log-interval"].as<int64_t>();
  opt.eval_interval = a["eval-interval"].as<int64_t>();
  opt.eval_batches = a["eval-batches"].as<int64_t>();
  opt.ckpt_interval = a["ckpt-interval"].as<int64_t>();
  opt.plot = !a.count("no-plot");
  opt.quiet = a.count("quiet") > 0;
  opt.force = a.count("force") > 0;
  CTX_CHECK(opt.log_interval > 0, "--log-interval must be positive, got ", opt.log_interval);
}


nlohmann::json rope_scaling_option(const std::string& value) {
  const size_t at = value.find_first_not_of(" \t");
  if (at == std::string::npos || value[at] != '{') return {{"type", value}};
  nlohmann::json sc = nlohmann::json::parse(value, nullptr, false);
  CTX_CHECK(!sc.is_discarded() && sc.is_object() && sc.contains("type"), "--rope-scaling: expected a type name or a "
            "JSON object with a \"type\" (e.g. '{\"type\":\"self-extend\",\"group\":4}'), got ", value);
  return sc;
}

}  // namespace ctx::cli
