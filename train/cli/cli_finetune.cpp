// train/cli/cli_finetune.cpp — `ctxlab finetune`: continue training a checkpoint at a longer context,
// typically with a RoPE scaling method (Position Interpolation, Chen et al. 2023). The new
// checkpoint's config carries the longer `context` and the `scaling` (with `original_context`,
// the pretraining L, POSENC_SPEC §2), so `ctxlab eval` and `sample` need no flags afterwards.
// The run directory is an ordinary training run: `ctxlab train --resume DIR` continues it.
#include <cmath>
#include <cstdio>

#include <cxxopts.hpp>

#include "core/cpu/gemm.h"
#include "core/threads.h"
#include "train/io/checkpoint.h"
#include "train/cli/cli.h"
#include "train/cli/cli_common.h"
#include "train/dist/distributed.h"
#include "train/trainer.h"

namespace ctx::cli {

namespace {

// The scaling written into the fine-tuned config: --rope-scaling (with --factor, default
// context / L) or, without it, the scaling the checkpoint already has (a second fine-tune).
// original_context is the checkpoint's recorded one, else its context: it never changes.
nlohmann::json finetune_posenc_override(const cxxopts::ParseResult& r, const ModelConfig& cfg, int64_t context,
                                        const std::string& ckpt) {
  const nlohmann::json& pe = cfg.posenc;
  const bool has_scaling = pe.contains("scaling") && pe["scaling"].is_object();
  if (!r.count("rope-scaling")) {
    CTX_CHECK(!r.count("factor"), "--factor needs --rope-scaling TYPE (e.g. --rope-scaling pi --factor 4)");
    return nlohmann::json();
  }
  const std::string type = pe.value("type", std::string("none"));
  CTX_CHECK(type == "rope", ckpt, ": --rope-scaling needs a rope model (config.posenc.type is \"", type,
            "\"); fine-tune other encodings at a longer context without --rope-scaling");
  int64_t L = cfg.context;
  if (has_scaling && pe["scaling"].contains("original_context") && pe["scaling"]["original_context"].is_number_integer())
    L = pe["scaling"]["original_context"].get<int64_t>();
  if (r.count("original-context")) {
    L = r["original-context"].as<int64_t>();
    CTX_CHECK(L >= 1, "--original-context must be a positive integer (e.g. 256), got ", L);
  }
  nlohmann::json sc = rope_scaling_option(r["rope-scaling"].as<std::string>());
  if (sc.contains("original_context") && sc["original_context"].is_number_integer() && !r.count("original-context"))
    L = sc["original_context"].get<int64_t>();
  sc["original_context"] = L;
  if (r.count("factor")) {
    double f = r["factor"].as<double>();
    CTX_CHECK(std::isfinite(f) && f > 0, "--factor must be a positive number (e.g. 4), got ", f);
    sc["factor"] = f;
  } else if (!sc.contains("factor") && sc["type"] != "rerope" && sc["type"] != "leaky-rerope" &&
             sc["type"] != "self-extend") {
    sc["factor"] = (double)context / (double)L;  // PI: s = L' / L
  }
  return {{"scaling", sc}};
}

TrainingOptionBlock finetune_option_block() {
  TrainingOptionBlock b;
  b.data_group = "";
  b.data_help = "training data (default: the shipped corpus)";
  b.steps = "200", b.batch = "4";
  b.accum_help = "micro-batches per step";
  b.lr = "2e-4", b.lr_help = "learning rate after warmup (constant unless --min-lr is lower: then cosine to it)";
  b.min_lr_help = "final learning rate (default: --lr, i.e. constant)";
  b.warmup = "20";
  b.weight_decay = "0", b.weight_decay_help = "decoupled weight decay";
  b.beta2 = "0.95";
  b.seed_help = "seed of batches and dropout";
  b.out = "runs/finetune";
  b.eval_interval = "25", b.eval_interval_help = "steps between validation losses (at the new context)";
  b.ckpt_interval = "100";
  return b;
}

void add_finetune_options(cxxopts::Options& o) {
  o.add_options()("checkpoint", "the pretrained model (.safetensors), e.g. runs/rope/model.safetensors",
                  cxxopts::value<std::string>())(
      "context", "the new, longer training context L', e.g. 512", cxxopts::value<int64_t>())(
      "rope-scaling", "rope only: pi | ntk | dynamic-ntk | yarn | rerope | leaky-rerope | llama3 | longrope | "
      "self-extend (POSENC_SPEC §2), or the scaling as JSON (longrope's lists, self-extend's group)",
      cxxopts::value<std::string>())(
      "factor", "scale factor s (default L' / L for pi, ntk, dynamic-ntk, yarn; leaky-rerope: the leak k)",
      cxxopts::value<double>())(
      "original-context", "the pretraining context L (default: the checkpoint's recorded one, else its context)",
      cxxopts::value<int64_t>());
  add_training_options(o, finetune_option_block());
  o.add_options()("h,help", "this help");
  add_distributed_option(o);
  add_tokenizer_option(o, "default: the tokenizer the checkpoint records; given, it must be that one");
  add_device_option(o, "where the model trains");
  add_precision_options(o);
}

// The checkpoint at the new context, with the scaling of --rope-scaling / --factor; *context0
// gets the context it was trained at.
LoadedModel load_for_context(const cxxopts::ParseResult& a, const std::string& ckpt, int64_t context,
                             int64_t* context0) {
  LoadedModel plain = load_checkpoint(ckpt);
  const ModelConfig& c0 = plain.model->cfg;
  *context0 = c0.context;
  const std::string type = c0.posenc.value("type", std::string("none"));
  CTX_CHECK(!((type == "learned" || type == "tupe") && context > c0.context), ckpt, ": posenc \"", type,
            "\" has a table of context = ", c0.context, " positions and cannot be fine-tuned at --context ",
            context, " (expected <= ", c0.context, "; rope, alibi, kerple, t5, ... have no such limit)");
  nlohmann::json ov = finetune_posenc_override(a, c0, context, ckpt);
  try {
    return load_checkpoint(ckpt, DType::F32, ov, context);
  } catch (const Error& e) {
    if (ov.is_null()) throw;
    throw Error(str(e.what(), " (with the scaling ", ov.dump(), " from --rope-scaling / --factor)"));
  }
}

}  // namespace

int run_finetune(int argc, char** argv) {
  cxxopts::Options o(
      "ctxlab finetune",
      "Continue training a checkpoint at a longer context (the Position Interpolation workflow).\n"
      "The new checkpoint records the longer context and the RoPE scaling (with original_context = the\n"
      "pretraining context L), so `ctxlab eval` uses them without flags. Defaults follow the PI paper's\n"
      "recipe scaled down: AdamW (0.9, 0.95), no weight decay, a short linear warmup, then a constant\n"
      "small learning rate.\n"
      "\n"
      "examples:\n"
      "  ctxlab finetune --checkpoint runs/rope/model.safetensors --context 512 --rope-scaling pi \\\n"
      "                  --steps 200 --out runs/rope-pi512        # factor defaults to 512 / L\n"
      "  ctxlab finetune --checkpoint runs/rope/model.safetensors --context 1024 --rope-scaling yarn --factor 8\n"
      "  ctxlab finetune --checkpoint runs/alibi/model.safetensors --context 512 --steps 100   # no scaling\n"
      "  ctxlab eval --checkpoint runs/rope-pi512/model.safetensors --lengths 128,512\n"
      "  ctxlab train --resume runs/rope-pi512 --steps 400      # extend an interrupted fine-tune");
  add_finetune_options(o);
  auto r = parse_or_help(o, argc, argv);
  if (!r) return 0;
  apply_precision_options(*r);
  const auto& a = *r;
  start_distributed(a);  // MPI under mpirun / --distributed; nothing otherwise
  require(a, "checkpoint", o);
  require(a, "context", o);
  const Device dev = device_option(a);
  const std::string ckpt = a["checkpoint"].as<std::string>();
  const int64_t context = a["context"].as<int64_t>();
  CTX_CHECK(context >= 1, "--context must be a positive integer (e.g. 512), got ", context);

  int64_t context0 = 0;
  LoadedModel lm = load_for_context(a, ckpt, context, &context0);
  nn::GPT& model = *lm.model;
  model.pe->check_length(context);
  move_model(model, dev);

  TrainOptions opt;
  read_train_options(a, opt);
  opt.tokenizer = checkpoint_tokenizer(lm, a, ckpt);
  opt.context = context;
  opt.optimizer = "adamw";
  opt.min_lr = a.count("min-lr") ? a["min-lr"].as<double>() : opt.lr;
  validate_train_options(opt);
  if (!opt.quiet && dist::is_root())
    std::printf("finetune: %s (step %lld, context %lld) -> context %lld, posenc %s\n"
                "threads: %d, gemm: %s\n",
                ckpt.c_str(), (long long)lm.step, (long long)context0, (long long)context,
                model.cfg.posenc.dump().c_str(), ctx::num_threads(), cpu::gemm_impl_name(cpu::current_gemm_impl()));
  const int sig = train(model, opt, 0, "", -1).signal;  // SIGINT / SIGTERM: 130 / 143
  return sig ? 128 + sig : 0;
}

}  // namespace ctx::cli
