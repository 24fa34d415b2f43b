// train/cli/cli_eval.cpp — the verbs that use a trained model without changing it:
//   ctxlab eval    --checkpoint C [--data F] --lengths 128,256,512 [--hierarchical]
//                  [--rope-scaling TYPE --factor S [--original-context L]] [--window W | --segmented]
//                  [--csv F] [--json F]
//                  [--task NAME --depths D,... | --per-position]   (train/cli/cli_eval_tasks.h)
//                  [--attn-stats [--attn-sinks K]]                 (train/cli/cli_eval_attn.h)
//   ctxlab sample  --checkpoint C [--prompt TEXT] [--max-tokens N] [--temperature T] [--top-k K] [--seed S]
// (MODEL_SPEC §6; evaluation in train/eval.h, sampling in train/sample.h.)
#include <chrono>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "train/run_dir.h"  // check_output_file
#include "train/io/checkpoint.h"
#include "train/cli/cli.h"
#include "train/cli/cli_common.h"
#include "train/cli/cli_eval_attn.h"
#include "train/cli/cli_eval_tasks.h"
#include "train/data.h"
#include "train/io/data_files.h"
#include "train/eval.h"
#include "train/io/fileio.h"
#include "train/cli/terminal_text.h"
#include "train/sample.h"
#include "train/io/tokenizer.h"

namespace ctx::cli {

namespace {

// The shipped corpus. CTXLAB_SOURCE_DIR (a compile definition of this file, when the build sets
// it) makes the default work from any directory; otherwise, or when that file is gone, the path
// is taken relative to the current directory.
const char* kCorpusRelative = "data/pride_and_prejudice.txt";

std::string shipped_corpus_path() {
#ifdef CTXLAB_SOURCE_DIR
  std::string p = std::string(CTXLAB_SOURCE_DIR) + "/" + kCorpusRelative;
  struct stat st;
  if (::stat(p.c_str(), &st) == 0) return p;
#endif
  return kCorpusRelative;
}

// The validation split of the shipped corpus: its last floor(10% of n) bytes, the same split as
// the trainer's (train/data.cpp split_text with val_fraction 0.1), encoded on its own.
constexpr double kValidationFraction = 0.10;

std::vector<int64_t> parse_lengths(const std::string& s) {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string item = s.substr(i, j - i);
    size_t used = 0;
    long long v = 0;
    bool ok = !item.empty() && item.find_first_not_of("0123456789") == std::string::npos;
    if (ok) {
      try {
        v = std::stoll(item, &used);
      } catch (...) {
        ok = false;
      }
    }
    CTX_CHECK(ok && used == item.size() && v >= 1, "--lengths: ", quoted_str(item),
              " is not a positive integer (expected a comma-separated list, e.g. 128,256,512)");
    out.push_back((int64_t)v);
    i = j + 1;
  }
  return out;
}

// The posenc override built from --hierarchical and --rope-scaling/--factor/--original-context
// (null when none is given).
nlohmann::json posenc_override(const cxxopts::ParseResult& r, const std::string& ckpt) {
  nlohmann::json ov = nlohmann::json::object();
  if (r["hierarchical"].as<bool>()) ov["hierarchical"] = true;
  const bool scaling = r.count("rope-scaling") > 0;
  CTX_CHECK(scaling || !r.count("factor"), "--factor needs --rope-scaling TYPE (e.g. --rope-scaling pi --factor 4)");
  CTX_CHECK(scaling || !r.count("original-context"),
            "--original-context needs --rope-scaling TYPE (e.g. --rope-scaling yarn --factor 4 --original-context 256)");
  if (scaling) {
    LoadedModel plain = load_checkpoint(ckpt);
    const nlohmann::json& pe = plain.model->cfg.posenc;
    const std::string type = pe.value("type", std::string("none"));
    CTX_CHECK(type == "rope", ckpt, ": --rope-scaling needs a rope model (config.posenc.type is \"", type, "\")");
    nlohmann::json sc = rope_scaling_option(r["rope-scaling"].as<std::string>());
    if (r.count("factor")) {
      double f = r["factor"].as<double>();
      CTX_CHECK(std::isfinite(f) && f > 0, "--factor must be a positive number (e.g. 4), got ", f);
      sc["factor"] = f;
    }
    if (r.count("original-context")) {
      int64_t L = r["original-context"].as<int64_t>();
      CTX_CHECK(L >= 1, "--original-context must be a positive integer (e.g. 256), got ", L);
      sc["original_context"] = L;
    } else if (!sc.contains("original_context")) {
      // Keep the pretraining context a fine-tuned checkpoint recorded (POSENC_SPEC §2: L must
      // not change when the scaling is overridden).
      if (pe.contains("scaling") && pe["scaling"].is_object() && pe["scaling"].contains("original_context"))
        sc["original_context"] = pe["scaling"]["original_context"];
    }
    ov["scaling"] = sc;
  }
  return ov.empty() ? nlohmann::json() : ov;
}

void write_text(const std::string& path, const std::string& text, const char* what) {
  write_file_atomic(path, {{text.data(), text.size()}}, what);
}

cxxopts::Options eval_options() {
  cxxopts::Options o(
      "ctxlab eval",
      "Perplexity and bits per byte of a checkpoint at one or more context lengths.\n"
      "The text is cut into non-overlapping windows of LENGTH+1 tokens; each window is evaluated on\n"
      "its own (positions 0..LENGTH-1, nothing carried over), and the loss is the mean cross-entropy\n"
      "over every predicted token. Without --data the validation split of the shipped corpus is used:\n"
      "the last 10% of the bytes of data/pride_and_prejudice.txt.\n"
      "\n"
      "examples:\n"
      "  ctxlab eval --checkpoint runs/small/model.safetensors --lengths 64,128,256   # learned: <= its context\n"
      "  ctxlab eval --checkpoint learned.safetensors --lengths 256,1024 --hierarchical --csv out.csv\n"
      "  ctxlab eval --checkpoint rope.safetensors --lengths 1024 --rope-scaling pi --factor 4\n"
      "  ctxlab eval --checkpoint alibi.safetensors --lengths 256,1024 --window 256   # local attention\n"
      "  ctxlab eval --checkpoint learned.safetensors --lengths 1024 --segmented     # chunks of L\n"
      "  ctxlab eval --checkpoint rope.safetensors --lengths 256,1024 --task passkey --depths 0,0.5,1 --trials 50\n"
      "  ctxlab eval --checkpoint rope.safetensors --lengths 256,1024 --per-position --json pos.json\n"
      "  ctxlab eval --checkpoint rope.safetensors --lengths 256,1024 --attn-stats --attn-stats-csv attn.csv\n"
      "A checkpoint trained with --window W is evaluated with that window unless --window says otherwise.");
  o.add_options()("checkpoint", "model checkpoint to evaluate (.safetensors), e.g. runs/small/model.safetensors",
                  cxxopts::value<std::string>())(
      "data", str("data to evaluate on, all of it (default: the last 10% of data/pride_and_prejudice.txt); ",
                  kDataFilesHelp),
      cxxopts::value<std::vector<std::string>>())(
      "lengths", "context lengths, comma-separated, e.g. 128,256,512 (default: the model's context)",
      cxxopts::value<std::string>())(
      "batch", "windows per forward pass; 0 = automatic (about 8192 tokens per forward), e.g. 4",
      cxxopts::value<int64_t>()->default_value("0"))(
      "max-windows", "use at most the first N windows per length (0 = all), e.g. 50 for a quick look",
      cxxopts::value<int64_t>()->default_value("0"))(
      "h,help", "this help");
  add_data_field_option(o, "");
  o.add_options("positions")(
      "hierarchical", "learned positions only: extend the table beyond the context L with Su's "
      "hierarchical decomposition (POSENC_SPEC §1), needed for lengths > L")(
      "rope-scaling", "rope only: context-extension method, one of pi | ntk | dynamic-ntk | yarn | "
      "rerope | leaky-rerope | llama3 | longrope | self-extend (POSENC_SPEC §2), e.g. --rope-scaling yarn, or "
      "the scaling as JSON, e.g. '{\"type\":\"self-extend\",\"group\":4,\"window\":64}'",
      cxxopts::value<std::string>())(
      "factor", "with --rope-scaling: the scale factor s (leaky-rerope: the leak k), e.g. 4",
      cxxopts::value<double>())(
      "original-context", "with --rope-scaling: the pretraining context L (default: the value the "
      "checkpoint recorded, else its context), e.g. 256",
      cxxopts::value<int64_t>());
  o.add_options("baselines")(
      "window", "sliding-window (local) attention: each token attends to its last W positions only, "
      "e.g. --window 256 (the model's context is the usual choice); default: the window the checkpoint was "
      "trained with (train --window), else none; 0 = full attention", cxxopts::value<int64_t>())(
      "sinks", "with --window: attention sinks, the first S positions stay visible to every token (StreamingLLM; "
      "POSENC_SPEC §6), e.g. --sinks 4", cxxopts::value<int64_t>())(
      "segmented", "evaluate each window in independent chunks of the model's context L (positions "
      "restart at 0 in every chunk, no attention across chunks)");
  o.add_options("output")("csv", "also write the table as CSV (length,windows,tokens,loss,ppl,bits_per_byte,bytes), "
                          "e.g. results.csv", cxxopts::value<std::string>())(
      "json", "also write the results as JSON, e.g. results.json", cxxopts::value<std::string>());
  add_eval_task_options(o);
  add_eval_attn_options(o);
  add_tokenizer_option(o, "default: the tokenizer the checkpoint records; given, it must be that one");
  add_device_option(o, "where the windows are evaluated");
  add_precision_options(o);
  return o;
}

// The checkpoint, with the posenc of --hierarchical / --rope-scaling when given.
LoadedModel load_for_eval(const cxxopts::ParseResult& r, const std::string& ckpt) {
  nlohmann::json ov = posenc_override(r, ckpt);
  try {
    return load_checkpoint(ckpt, DType::F32, ov);
  } catch (const Error& e) {
    if (ov.is_null()) throw;
    throw Error(str(e.what(), " (with the override posenc ", ov.dump(), " from --hierarchical / --rope-scaling)"));
  }
}

// --window W or --segmented (chunks of the model's context), or neither.
EvalMode eval_mode(const cxxopts::ParseResult& r, const nn::GPT& model) {
  EvalMode mode;
  mode.window = model.attention_window();  // a checkpoint trained with --window W: W
  if (r.count("window")) {
    mode.window = r["window"].as<int64_t>();
    CTX_CHECK(mode.window >= 0, "--window must be >= 0 positions (0 = full attention, e.g. ", model.cfg.context,
              "), got ", mode.window);
  }
  if (r.count("sinks")) {
    mode.sinks = r["sinks"].as<int64_t>();
    model.check_sinks(mode.window, mode.sinks);
  }
  if (r.count("segmented")) {
    CTX_CHECK(mode.window == 0, r.count("window") ? "--window and --segmented are two different baselines; give one of them"
              : "--segmented: the checkpoint was trained with a sliding window; add --window 0 to evaluate it in chunks");
    mode.segment = model.cfg.context;
  }
  return mode;
}

// How the output names the mode: "sliding window 256 + 4 sinks", "segmented, chunks of 128", ...
std::string eval_mode_name(const EvalMode& mode) {
  if (mode.window > 0) return str("sliding window ", mode.window, mode.sinks > 0 ? str(" + ", mode.sinks, " sinks") : "");
  return mode.segment > 0 ? str("segmented, chunks of ", mode.segment) : std::string("full causal attention");
}

// The tokens evaluated: all of --data, or the validation split of the shipped corpus.
struct EvalText {
  std::string data, split;  // what the output names: the file (and split), and the split alone
  TokenStream tokens;
};

EvalText eval_text(const cxxopts::ParseResult& r, const Tokenizer& tok) {
  EvalText t;
  if (r.count("data")) {
    t.data = data_list_option(r, "data");
    t.tokens = load_tokens(data_sources(t.data, "--data"), tok, r["data-field"].as<std::string>());
    t.split = "all";
  } else {
    t.data = shipped_corpus_path();
    t.tokens = tok.encode(split_text(read_file(t.data, "text corpus"), kValidationFraction).second);
    t.split = "validation (last 10%)";
    t.data += " [validation split]";
  }
  return t;
}

// The lengths of --lengths (default: the model's context), every one checked before any compute
// so that a bad one fails at once.
std::vector<int64_t> eval_lengths(const cxxopts::ParseResult& r, const nn::GPT& model, const EvalText& text,
                                  const EvalMode& mode) {
  std::vector<int64_t> lengths =
      r.count("lengths") ? parse_lengths(r["lengths"].as<std::string>()) : std::vector<int64_t>{model.cfg.context};
  const bool learned_plain = model.pe->type() == "learned" && !model.cfg.posenc.value("hierarchical", false);
  for (int64_t len : lengths) {
    try {
      check_eval_length(model, (int64_t)text.tokens.size(), len, text.data, mode);
    } catch (const Error& e) {
      if (learned_plain && len > model.cfg.context)
        throw Error(str(e.what(), " (ctxlab eval: pass --hierarchical, or --segmented, to evaluate beyond L)"));
      throw;
    }
  }
  return lengths;
}

void write_eval_csv(const std::string& path, const std::vector<EvalResult>& results) {
  std::string csv = "length,windows,tokens,loss,ppl,bits_per_byte,bytes\n";
  char buf[256];
  for (auto& e : results) {
    std::snprintf(buf, sizeof buf, "%lld,%lld,%lld,%.9g,%.9g,%.9g,%lld\n", (long long)e.length,
                  (long long)e.windows, (long long)e.tokens, e.loss, e.ppl, e.bpb, (long long)e.bytes);
    csv += buf;
  }
  write_text(path, csv, "eval CSV");
  std::printf("wrote %s\n", path.c_str());
}

void write_eval_json(const std::string& path, nlohmann::json j, const std::vector<EvalResult>& results,
                     int64_t bucket) {
  j["results"] = nlohmann::json::array();
  for (auto& e : results) {
    j["results"].push_back({{"length", e.length},
                            {"windows", e.windows},
                            {"tokens", e.tokens},
                            {"loss", e.loss},
                            {"ppl", e.ppl},
                            {"bits_per_byte", e.bpb},
                            {"bytes", e.bytes}});
    if (bucket > 0) j["results"].back()["per_position"] = positions_json(e, bucket);
    if (e.attn_sink_keys > 0) j["results"].back()["attn_stats"] = attn_stats_json(e);
  }
  write_text(path, j.dump(2) + "\n", "eval JSON");
  std::printf("wrote %s\n", path.c_str());
}

}  // namespace

int run_eval(int argc, char** argv) {
  cxxopts::Options o = eval_options();
  auto r = parse_or_help(o, argc, argv);
  if (!r) return 0;
  apply_precision_options(*r);
  require(*r, "checkpoint", o);
  const Device dev = device_option(*r);
  const int64_t batch_opt = (*r)["batch"].as<int64_t>();
  const int64_t max_windows = (*r)["max-windows"].as<int64_t>();
  CTX_CHECK(batch_opt >= 0, "--batch must be >= 0 (0 = automatic, e.g. 4), got ", batch_opt);
  CTX_CHECK(max_windows >= 0, "--max-windows must be >= 0 (0 = all, e.g. 50), got ", max_windows);

  // where the results go, checked before the evaluation runs
  if (r->count("csv")) check_output_file((*r)["csv"].as<std::string>(), "--csv");
  if (r->count("json")) check_output_file((*r)["json"].as<std::string>(), "--json");
  const std::string ckpt = (*r)["checkpoint"].as<std::string>();
  LoadedModel lm = load_for_eval(*r, ckpt);
  nn::GPT& model = *lm.model;
  const std::shared_ptr<const Tokenizer> tok = checkpoint_tokenizer(lm, *r, ckpt);
  move_model(model, dev);
  const EvalMode mode = eval_mode(*r, model);
  const EvalText text = eval_text(*r, *tok);
  const std::vector<int64_t> lengths = eval_lengths(*r, model, text, mode);

  const std::string mode_name = eval_mode_name(mode);
  const nlohmann::json header = {
      {"checkpoint", ckpt},
      {"data", r->count("data") ? data_list_option(*r, "data") : shipped_corpus_path()},
      {"split", text.split},
      {"posenc", model.cfg.posenc},
      {"context", model.cfg.context},
      {"step", lm.step},
      {"tokenizer", {{"type", tok->type()}, {"vocab_size", tok->vocab_size()}, {"fingerprint", tok->fingerprint()}}},
      {"mode", mode_name},
      {"window", mode.window},
      {"sinks", mode.sinks},
      {"segment", mode.segment}};
  std::printf("eval %s (posenc %s, context %lld, tokenizer %s) on %s: %zu tokens, %s\n", ckpt.c_str(),
              model.cfg.posenc.dump().c_str(), (long long)model.cfg.context, tok->describe().c_str(), text.data.c_str(),
              (size_t)text.tokens.size(), mode_name.c_str());
  if (r->count("task")) {
    check_no_attn_options(*r);
    return run_task_eval(*r, model, *tok, text.tokens, lengths, mode, header);
  }
  check_no_task_options(*r);
  const int64_t bucket = position_bucket(*r, lengths);
  const int64_t sink_keys = attn_sink_keys(*r);
  std::printf("%8s %8s %10s %10s %12s %10s\n", "length", "windows", "tokens", "loss", "ppl", "bits/byte");
  std::fflush(stdout);
  std::vector<EvalResult> results;
  for (int64_t len : lengths) {
    const int64_t batch = batch_opt > 0 ? batch_opt : std::max<int64_t>(1, 8192 / len);
    // pre-tokenized data without a tokenizer (--vocab): no text, so "bits per byte" is per token
    const Tokenizer* bytes_of = tok->type() == "ids" ? nullptr : tok.get();
    EvalResult e =
        evaluate(model, text.tokens, len, batch, max_windows, text.data, mode, bytes_of, bucket, sink_keys);
    std::printf("%8lld %8lld %10lld %10.4f %12.4f %10.4f\n", (long long)e.length, (long long)e.windows,
                (long long)e.tokens, e.loss, e.ppl, e.bpb);
    std::fflush(stdout);
    results.push_back(e);
  }
  if (sink_keys > 0)
    for (const EvalResult& e : results) print_attn_stats(e);

  if (r->count("csv")) write_eval_csv((*r)["csv"].as<std::string>(), results);
  if (r->count("json")) write_eval_json((*r)["json"].as<std::string>(), header, results, bucket);
  if (r->count("per-position-csv")) write_positions_csv((*r)["per-position-csv"].as<std::string>(), results);
  if (r->count("attn-stats-csv")) write_attn_stats_csv((*r)["attn-stats-csv"].as<std::string>(), results);
  return 0;
}

namespace {

cxxopts::Options sample_options() {
  cxxopts::Options o(
      "ctxlab sample",
      "Generate text from a checkpoint, one token at a time: the prompt goes through the model once,\n"
      "then each new token costs one position (KV cache; --no-cache recomputes the whole forward per\n"
      "token). Tokens stream to stdout as they are produced (the prompt first); tokens/s go to stderr at\n"
      "the end. Beyond the trained context the encoding extrapolates (with its config's scaling), or\n"
      "--window W limits attention to the last W positions; learned / tupe positions shift the context\n"
      "(--keep). Deterministic for a given checkpoint, prompt and seed\n"
      "(docs/sampling.md). On a terminal, control characters in the text (ESC, BEL, ...) are shown as\n"
      "\\xNN so that generated bytes cannot drive the terminal; into a pipe or a file, or with --raw, the\n"
      "bytes are written as they are.\n"
      "\n"
      "examples:\n"
      "  ctxlab sample --checkpoint runs/small/model.safetensors --prompt \"It is a truth\"\n"
      "  ctxlab sample --checkpoint model.safetensors --temperature 0 --max-tokens 100   # greedy\n"
      "  ctxlab sample --checkpoint model.safetensors --precision bf16   # CPUs with avx512_bf16: each token\n"
      "      reads the weights as bf16 (converted once), ~2x the tokens/s of fp32 (docs/sampling.md)");
  o.add_options()("checkpoint", "model checkpoint (.safetensors), e.g. runs/small/model.safetensors",
                  cxxopts::value<std::string>())(
      "prompt", "text to continue, e.g. \"It is a truth\" (empty: start from a newline, which is not printed)",
      cxxopts::value<std::string>()->default_value(""))(
      "max-tokens", "number of tokens to generate (bytes, or pieces of a tokenizer), >= 0, e.g. 500",
      cxxopts::value<int64_t>()->default_value("200"))(
      "temperature", "softmax temperature, >= 0: lower is more conservative, 0 = greedy argmax, e.g. 1.0",
      cxxopts::value<double>()->default_value("0.8"))(
      "top-k", "draw only among the K most likely tokens, >= 0 (0 = all), e.g. 10",
      cxxopts::value<int64_t>()->default_value("40"))(
      "seed", "random seed for the draws; same seed, same text, e.g. 1234",
      cxxopts::value<uint64_t>()->default_value("0"))(
      "window", "sliding-window attention: each token sees its last W positions, >= 0 (0 = all), e.g. 256; "
      "default: the window the checkpoint was trained with (train --window), else 0",
      cxxopts::value<int64_t>()->default_value("0"))(
      "sinks", "with --window: attention sinks, the first S positions stay visible; the KV cache keeps them and "
      "the last W (StreamingLLM, POSENC_SPEC §6), >= 0, e.g. 4", cxxopts::value<int64_t>()->default_value("0"))(
      "no-cache", "recompute the full forward for every token instead of the KV cache (for comparison)")(
      "num-samples", "continuations to draw together, >= 1 (sample b with --seed + b): one batch, so each token's "
      "weights are read once for all of them; printed one after another at the end (1: streamed). Needs the "
      "graph-free decoder (docs/sampling.md: none, learned, sinusoidal, rope without a two-branch scaling, no "
      "--sinks)", cxxopts::value<int64_t>()->default_value("1"))(
      "keep", "learned / tupe positions: when the context is full keep the last K tokens, re-encoded at positions "
      "0..K-1, and go on (0 = half the context; K = context: recompute the last `context` tokens every step)",
      cxxopts::value<int64_t>()->default_value("0"))(
      "raw", "write the text's bytes as they are on a terminal too, control characters included (the default "
      "into a pipe or a file)")(
      "h,help", "this help");
  add_tokenizer_option(o, "default: the tokenizer the checkpoint records; given, it must be that one");
  add_device_option(o, "where the forward passes run (the draws are made on the host)");
  add_precision_options(o);
  return o;
}

}  // namespace

int run_sample(int argc, char** argv) {
  cxxopts::Options o = sample_options();
  auto r = parse_or_help(o, argc, argv);
  if (!r) return 0;
  apply_precision_options(*r);
  require(*r, "checkpoint", o);
  SampleOptions opt;
  opt.window = (*r)["window"].as<int64_t>();
  opt.sinks = (*r)["sinks"].as<int64_t>();
  opt.use_cache = !(*r)["no-cache"].as<bool>();
  opt.keep = (*r)["keep"].as<int64_t>();
  opt.max_tokens = (*r)["max-tokens"].as<int64_t>();
  opt.temperature = (*r)["temperature"].as<double>();
  opt.top_k = (*r)["top-k"].as<int64_t>();
  opt.seed = (*r)["seed"].as<uint64_t>();
  opt.num_samples = (*r)["num-samples"].as<int64_t>();
  CTX_CHECK(opt.num_samples >= 1, "sample: --num-samples must be >= 1 (e.g. 4), got ", opt.num_samples);
  const Device dev = device_option(*r);
  const std::string ckpt = (*r)["checkpoint"].as<std::string>();
  LoadedModel lm = load_checkpoint(ckpt);
  if (!r->count("window")) opt.window = lm.model->attention_window();  // trained with --window W: W
  check_sample_options(opt);
  const std::shared_ptr<const Tokenizer> tok = checkpoint_tokenizer(lm, *r, ckpt);
  CTX_CHECK(lm.model->cfg.vocab_size == tok->vocab_size(), ckpt, ": vocab_size is ", lm.model->cfg.vocab_size,
            ", but sample reads and writes text with the ", tok->describe(), " tokenizer");
  move_model(*lm.model, dev);
  std::string prompt = (*r)["prompt"].as<std::string>();
  std::vector<int32_t> ids = tok->encode(prompt.empty() ? std::string("\n") : prompt);
  const bool stream = opt.num_samples == 1;  // several: printed one after another at the end
  // on a terminal, control characters shown as \xNN (train/cli/terminal_text.h)
  const bool escape = !(*r)["raw"].as<bool>() && stdout_is_terminal();
  TerminalText out(escape);
  const auto write = [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  if (stream) write(out.feed(prompt));
  const auto t0 = std::chrono::steady_clock::now();
  const SampleResult got = sample_many(*lm.model, ids, opt, [&](int64_t, int32_t t) {
    if (stream) write(out.feed(tok->token_text(t)));
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stream) write(out.finish() + "\n");
  for (size_t b = 0; !stream && b < got.tokens.size(); ++b) {
    std::string text = prompt;
    for (int32_t t : got.tokens[b]) text += tok->token_text(t);
    std::printf("--- sample %zu of %zu (seed %llu) ---\n", b + 1, got.tokens.size(), (unsigned long long)(opt.seed + b));
    write(out.feed(text) + out.finish() + "\n");
  }
  std::fflush(stdout);
  const size_t n = got.tokens.empty() ? 0 : got.tokens[0].size(), all = n * got.tokens.size();
  const std::string count = stream ? std::to_string(n) : std::to_string(got.tokens.size()) + " x " + std::to_string(n);
  std::fprintf(stderr, "sample: %s tokens in %.3f s, %.1f tokens/s (%s, prompt %zu tokens)\n", count.c_str(), secs,
               secs > 0 ? (double)all / secs : 0.0, got.path.empty() ? "nothing generated" : got.path.c_str(),
               ids.size());
  return 0;
}

}  // namespace ctx::cli
