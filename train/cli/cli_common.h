// train/cli/cli_common.h — option helpers shared by the CLI verbs: --config/--preset/--posenc,
// parse-or-print-help, required options, the training options of train / finetune, --device,
// --precision / --tf32, and splitting a [B, T+1] token batch.
#pragma once
#include <optional>
#include <string>
#include <utility>

#include <cxxopts.hpp>

#include "core/tensor.h"
#include "train/io/checkpoint.h"
#include "nn/gpt.h"
#include "train/io/config.h"
#include "train/trainer.h"

namespace ctx::cli {

void add_config_options(cxxopts::Options& o);
// The config selected by --config FILE or --preset NAME (default "small"), with --posenc JSON
// (e.g. '{"type":"rope"}' or just rope) replacing config.posenc. Returns (config, source).
std::pair<ModelConfig, std::string> config_from_options(const cxxopts::ParseResult& r);
// Parses; prints help and returns nullopt on --help; throws ctx::Error on bad options.
std::optional<cxxopts::ParseResult> parse_or_help(cxxopts::Options& o, int argc, char** argv);
void require(const cxxopts::ParseResult& r, const char* name, const cxxopts::Options& o);
// The defaults and help lines in which the training options of `train` and `finetune` differ.
struct TrainingOptionBlock {
  std::string data_group;  // the help group of --data and --val-fraction
  std::string data_help, accum_help, lr_help, min_lr_help, weight_decay_help, seed_help, eval_interval_help;
  std::string steps, batch, lr, warmup, weight_decay, beta2, out, eval_interval, ckpt_interval;  // defaults
  bool optimizer_choice = false;  // --optimizer and --momentum too (train; finetune is AdamW only)
};
// The training options `train` and `finetune` share, in the groups `data_group` (data,
// val-fraction, val-data, data-field), "optimisation" (steps, batch, accum, deterministic, [optimizer], lr, min-lr,
// warmup, weight-decay, beta1, beta2, [momentum], grad-clip, seed), "tasks" (task-mix and the
// task sizes) and "output" (out,
// log/eval/ckpt intervals, eval-batches, no-plot, quiet); a verb adds its own after them.
void add_training_options(cxxopts::Options& o, const TrainingOptionBlock& b);
// --task-digits / --task-pairs / --task-span (TaskParams, train/tasks.h: its defaults) in the help
// group `group`, for the verbs that generate retrieval tasks (train, finetune: --task-mix; eval:
// --task), and the values given, range-checked (one line naming the option).
void add_task_param_options(cxxopts::Options& o, const std::string& group);
TaskParams task_params_from_options(const cxxopts::ParseResult& r);
// --distributed and --dist-timeout (in the "output" group), for the verbs that train.
void add_distributed_option(cxxopts::Options& o);
// --data's help after the verb's own words: what FILES may be (train/io/data_files.h).
extern const char* const kDataFilesHelp;
// --data-field (JSONL text field, default "text") in the help group `group`.
void add_data_field_option(cxxopts::Options& o, const std::string& group);
// A FILES option (--data, --val-data) as one comma-separated list: the values of a repeated
// option joined with commas; "" when absent.
std::string data_list_option(const cxxopts::ParseResult& r, const std::string& name);
// --vocab N: the vocabulary of pre-tokenized data (the verbs that build a model: train).
void add_vocab_option(cxxopts::Options& o, const std::string& group);
// The tokenizer of a new run on `data` (a --data list, "" for the shipped corpus): --tokenizer,
// --vocab N alone (an IdTokenizer), both when they agree, bytes otherwise. Pre-tokenized files
// with neither option are an error that says the tokenizer that made them must be given.
std::shared_ptr<const Tokenizer> new_run_tokenizer(const cxxopts::ParseResult& r, const std::string& data);
// The training options `train` and `finetune` share (data, val-fraction, val-data, data-field, steps, batch, accum, lr,
// warmup, weight-decay, beta1, beta2, grad-clip, seed, task-mix and sizes, out, log/eval/ckpt
// intervals, eval-batches, no-plot, quiet), read into `opt`; each verb sets the rest (context, optimizer, min-lr, ...).
void read_train_options(const cxxopts::ParseResult& a, TrainOptions& opt);
// --device cpu|cuda: the device named; throws one line when it is not "cpu" or "cuda", or when
// this build has no CUDA backend.
Device device_from_option(const std::string& s);
// The one definition of --device (default cpu) that every verb adds; `what` ends the help line
// ("cpu | cuda: <what>").
void add_device_option(cxxopts::Options& o, const char* what);
// The device --device names, checked by device_from_option (call it before any work, after
// start_distributed: several MPI ranks on cuda need NCCL).
Device device_option(const cxxopts::ParseResult& r);
// Moves a model built or loaded on the host to `dev` (every parameter, buffer and table, tied
// weights staying tied) and checks that every parameter arrived; the optimizer built afterwards
// from model.named_parameters() (train/trainer.cpp) allocates its state on the same device, and
// load_state() copies a checkpoint's host tensors into it.
void move_model(nn::GPT& model, Device dev);
// --precision fp32|bf16 and --tf32 (core/precision.h: the GEMM input precision; autocast), on
// every verb that runs a model.
void add_precision_options(cxxopts::Options& o);
// Applies them for the verb's --device (cpu when the verb has none or it was not given); prints
// the one-line note when the request cannot be honoured as asked (bf16 on a CPU without
// avx512_bf16 runs fp32; --tf32 on the CPU does nothing). Call right after parsing.
void apply_precision_options(const cxxopts::ParseResult& r);
// Starts MPI (train/dist/distributed.h) when the process runs under mpirun or the verb was given
// --distributed; a plain run stays a single process and never touches MPI.
void start_distributed(const cxxopts::ParseResult& r);
// --tokenizer FILE (a SentencePiece .model from `ctxlab tokenizer train`), with `help`.
void add_tokenizer_option(cxxopts::Options& o, const std::string& help);
// For `train`: the tokenizer of --tokenizer, or the byte tokenizer without it.
std::shared_ptr<const Tokenizer> tokenizer_from_option(const cxxopts::ParseResult& r);
// For the verbs that load a checkpoint: the tokenizer it records; --tokenizer, when given, must be
// the same one (a one-line error otherwise). A checkpoint that records none reads bytes, or the
// --tokenizer given when its vocabulary fits the config.
std::shared_ptr<const Tokenizer> checkpoint_tokenizer(const LoadedModel& lm, const cxxopts::ParseResult& r,
                                                      const std::string& ckpt);
// all [B, T+1] -> (inputs [B, T], targets [B, T])
std::pair<Tensor, Tensor> split_inputs_targets(const Tensor& all);
// The value of --rope-scaling (eval, finetune): a type name ("yarn") or the whole scaling as a
// JSON object ('{"type":"longrope","short_factor":[...],...}', the only form for longrope's
// lists and self-extend's group) -> the scaling object (its keys are checked by the encoding).
nlohmann::json rope_scaling_option(const std::string& value);

}  // namespace ctx::cli
