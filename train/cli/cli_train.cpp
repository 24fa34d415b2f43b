// train/cli/cli_train.cpp — `ctxlab train`: train from a config or preset on a text corpus, or
// `--resume DIR` to continue a run exactly where its last checkpoint left it.
#include <algorithm>
#include <cstdio>

#include <cxxopts.hpp>

#include "core/cpu/gemm.h"
#include "core/threads.h"
#include "train/io/checkpoint.h"
#include "train/io/limits.h"
#include "train/checkpointer.h"
#include "train/cli/cli.h"
#include "train/cli/cli_common.h"
#include "train/dist/distributed.h"
#include "train/run_dir.h"
#include "train/trainer.h"

namespace ctx::cli {

namespace {

TrainingOptionBlock train_option_block() {
  const TrainOptions d;
  auto s = [](auto v) { return std::to_string(v); };
  TrainingOptionBlock b;
  b.data_group = "data";
  b.data_help = "training data (default: the shipped data/pride_and_prejudice.txt)";
  b.steps = s(d.steps), b.batch = s(d.batch);
  b.accum_help = "micro-batches per step (gradient accumulation)";
  b.optimizer_choice = true;
  b.lr = "1e-3", b.lr_help = "peak learning rate";
  b.min_lr_help = "learning rate at the end of the cosine, <= --lr (default: 1e-4, or --lr when that is lower)";
  b.warmup = s(d.warmup);
  b.weight_decay = "0.1", b.weight_decay_help = "decoupled weight decay (matrices only)";
  b.beta2 = "0.99";
  b.seed_help = "seed of init, batches and dropout";
  b.out = d.out;
  b.eval_interval = s(d.eval_interval), b.eval_interval_help = "steps between validation losses";
  b.ckpt_interval = s(d.ckpt_interval);
  return b;
}

void add_train_options(cxxopts::Options& o) {
  add_config_options(o);
  add_device_option(o, "where the model trains (a checkpoint from either device resumes on either)");
  add_training_options(o, train_option_block());
  o.add_options("data")("context", "training sequence length (default: the config's context)",
                        cxxopts::value<int64_t>())(
      "window", "sliding-window attention while training: each token attends to its last W positions only (the "
      "kernels of eval --window), so a model trained local can be tested long; recorded in the checkpoint, and "
      "eval / sample use it unless told otherwise; >= 1, e.g. 64 (default: full causal attention)",
      cxxopts::value<int64_t>());
  o.add_options("output")("resume", "continue the run saved in this directory", cxxopts::value<std::string>())(
      "stop-after", "stop (with a checkpoint) after step N of the run, counted from its start (also when resumed), "
      "as an interruption would: for trying --resume",
      cxxopts::value<int64_t>()->default_value("-1"));
  add_distributed_option(o);
  o.add_options("output")("h,help", "this help");
  add_tokenizer_option(o, "SentencePiece model (ctxlab tokenizer train), e.g. bpe4k.model; "
                          "default: bytes (vocab 256); recorded in the checkpoint");
  add_vocab_option(o, "tokenizer");
  add_precision_options(o);
}

// `--resume DIR`: the run's model, config and options from its checkpoint; only --steps,
// --stop-after, where and how it runs, and its output may be given.
int resume_run(const cxxopts::ParseResult& a, Device dev) {
  std::string dir = a["resume"].as<std::string>();
  // The run directory is locked before its files are read or repaired (train/run_dir.h).
  const RunDirLock lock = dist::is_root() ? take_run_dir(dir, "train", /*resume=*/true, false) : RunDirLock();
  std::string mp = dir + "/model.safetensors";
  LoadedModel lm = load_checkpoint(mp);
  auto it = lm.metadata.find("train_options");
  CTX_CHECK(it != lm.metadata.end(), mp, ": __metadata__.train_options missing (not written by ctxlab train)");
  TrainOptions opt = train_options_from_json(nlohmann::json::parse(it->second), mp + " (train_options)");
  // The run's config and options are saved with it: an option that would change them is an
  // error, not silently ignored. What may be given: --steps, --stop-after, where and how it runs
  // (--device, --precision, --tf32, --distributed, --tokenizer: the same one) and its output.
  for (const char* k : {"config", "preset", "posenc", "set", "dropout", "data", "val-fraction", "val-data",
                        "data-field", "vocab", "context", "window", "batch",
                        "accum", "deterministic", "optimizer", "lr", "min-lr", "warmup", "weight-decay", "beta1",
                        "beta2", "momentum", "grad-clip", "seed", "task-mix", "task-digits", "task-pairs", "task-span",
                        "out", "log-interval", "eval-interval", "eval-batches", "ckpt-interval", "force"})
    CTX_CHECK(!a.count(k), "--resume ", dir, ": --", k, " cannot change a resumed run (its config and training "
              "options are saved in ", mp, "); with --resume give only --steps, --stop-after, --device, "
              "--precision, --tokenizer, --quiet or --no-plot");
  opt.tokenizer = checkpoint_tokenizer(lm, a, mp);
  opt.out = dir;
  if (a.count("steps")) opt.steps = a["steps"].as<int64_t>();
  if (a.count("quiet")) opt.quiet = true;
  if (a.count("no-plot")) opt.plot = false;
  // The optimizer state must belong to the model's step (train/checkpointer.h).
  recover_optimizer_state(dir, lm.step);
  CTX_CHECK(lm.step < opt.steps, mp, ": run already finished (step ", lm.step, " of ", opt.steps,
            "); pass --steps N to extend it");
  if (dist::is_root()) std::printf("resume: %s at step %lld of %lld\n", dir.c_str(), (long long)lm.step, (long long)opt.steps);
  move_model(*lm.model, dev);
  return train(*lm.model, opt, lm.step, dir, a["stop-after"].as<int64_t>()).signal;
}

// A new run: the model of --config / --preset, initialised from --seed.
int new_run(const cxxopts::ParseResult& a, Device dev) {
  auto [cfg, source] = config_from_options(a);
  TrainOptions opt;
  read_train_options(a, opt);
  if (a.count("context")) opt.context = a["context"].as<int64_t>();
  if (a.count("window")) {
    opt.window = a["window"].as<int64_t>();
    CTX_CHECK(opt.window >= 1, "--window must be a positive number of positions (e.g. 64; leave it out for full "
              "attention), got ", opt.window);
  }
  opt.optimizer = a["optimizer"].as<std::string>();
  opt.min_lr = a.count("min-lr") ? a["min-lr"].as<double>() : std::min(1e-4, opt.lr);
  opt.momentum = a["momentum"].as<double>();
  validate_train_options(opt);  // before the model is built: a bad flag fails at once
  check_training_fits(cfg, source, opt.batch, opt.context > 0 ? opt.context : cfg.context,
                      std::min(opt.log_interval, opt.steps) * opt.accum);
  opt.tokenizer = new_run_tokenizer(a, opt.data);
  cfg.vocab_size = opt.tokenizer->vocab_size();  // the config's vocab_size follows the tokenizer

  nn::GPT model(cfg, DType::F32, source);
  model.init_weights(opt.seed);
  move_model(model, dev);  // after the host-side init
  int64_t nparams = 0;
  for (auto& p : model.named_parameters()) nparams += p.second.data().numel();
  if (!opt.quiet && dist::is_root())
    std::printf("model: %s, %lld parameters, d_model %lld, %lld layers, %lld heads, context %lld, posenc %s\n"
                "tokenizer: %s\n"
                "threads: %d%s, gemm: %s\n",
                source.c_str(), (long long)nparams, (long long)cfg.d_model, (long long)cfg.n_layers,
                (long long)cfg.n_heads, (long long)cfg.context, model.pe->type().c_str(), opt.tokenizer->describe().c_str(), ctx::num_threads(),
                dist::active() ? " per rank" : "",
                cpu::gemm_impl_name(cpu::current_gemm_impl()));
  return train(model, opt, 0, "", a["stop-after"].as<int64_t>()).signal;
}

}  // namespace

int run_train(int argc, char** argv) {
  cxxopts::Options o("ctxlab train",
                     "Train a GPT (MODEL_SPEC) on a text corpus: byte-level tokens, or a SentencePiece\n"
                     "tokenizer (`ctxlab tokenizer train`) with --tokenizer; vocab_size follows the tokenizer.\n"
                     "  ctxlab train --preset small --steps 1000 --lr 3e-3 --warmup 50 --out runs/small   # the README's main job\n"
                     "  ctxlab train --preset tiny --posenc alibi --steps 300 --out runs/tiny-alibi\n"
                     "  ctxlab train --resume runs/small                        # continue the same run\n"
                     "  ctxlab train --preset small --tokenizer bpe4k.model --out runs/small-bpe\n"
                     "Writes <out>/model.safetensors (+ .optim.safetensors), metrics.jsonl, train.csv,\n"
                     "val.csv and loss.png.");
  add_train_options(o);
  auto r = parse_or_help(o, argc, argv);
  if (!r) return 0;
  apply_precision_options(*r);
  start_distributed(*r);  // MPI under mpirun / --distributed; nothing otherwise
  const Device dev = device_option(*r);
  // SIGINT / SIGTERM stop the run with a checkpoint: exit 130 / 143, as the shell reports a signal
  const int sig = r->count("resume") ? resume_run(*r, dev) : new_run(*r, dev);
  return sig ? 128 + sig : 0;
}

}  // namespace ctx::cli
