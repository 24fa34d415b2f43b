// train/cli/cli_hf.cpp — Hugging Face checkpoints (train/io/hf_checkpoint.h, docs/huggingface.md):
//   ctxlab export --checkpoint C --format hf DIR     a directory transformers' from_pretrained loads
//   ctxlab import --format hf DIR --out C            a transformers GPT-2 / Llama directory -> ctxlab
#include <cstdio>

#include <cxxopts.hpp>

#include "train/cli/cli.h"
#include "train/cli/cli_common.h"
#include "train/io/hf_checkpoint.h"
#include "train/run_dir.h"  // check_output_file

namespace ctx::cli {

namespace {

// --format (only "hf" today) and the DIR positional argument, shared by both verbs.
void add_format_options(cxxopts::Options& o, const char* dir_help) {
  o.add_options()("format", "checkpoint format: hf (Hugging Face transformers: config.json + model.safetensors "
                  "+ tokenizer files)", cxxopts::value<std::string>()->default_value("hf"))(
      "dir", dir_help, cxxopts::value<std::string>());
  o.parse_positional({"dir"});
  o.positional_help("DIR");
}

std::string format_dir(const cxxopts::ParseResult& r, const cxxopts::Options& o) {
  const std::string fmt = r["format"].as<std::string>();
  CTX_CHECK(fmt == "hf", "--format must be hf (Hugging Face), got ", quoted_str(fmt));
  CTX_CHECK(r.count("dir"), "missing the directory argument DIR (e.g. `", o.program(), " --format hf hf/small`; "
            "see --help)");
  return r["dir"].as<std::string>();
}

}  // namespace

int run_export(int argc, char** argv) {
  cxxopts::Options o(
      "ctxlab export",
      "Write a ctxlab checkpoint as a Hugging Face directory that transformers loads with\n"
      "AutoModelForCausalLM.from_pretrained(DIR) (and AutoTokenizer.from_pretrained(DIR)).\n"
      "  learned positions + layernorm  -> GPT2LMHeadModel (Conv1D weights, fused c_attn)\n"
      "  rope + rmsnorm                 -> LlamaForCausalLM (gelu_pytorch_tanh; up_proj = constant 1,\n"
      "                                    so the gated MLP equals ctxlab's; biases on; rope_scaling from\n"
      "                                    pi/dynamic-ntk/yarn/llama3/longrope)\n"
      "Anything else (alibi, rope + layernorm, ntk scaling, ...) is refused naming the field that does not\n"
      "map. Tokenizer files: bytes -> tokenizer.json, SentencePiece -> tokenizer.model (docs/huggingface.md).\n"
      "\n"
      "examples:\n"
      "  ctxlab export --checkpoint runs/small/model.safetensors --format hf hf/small\n"
      "  python -c \"import transformers as t; m = t.AutoModelForCausalLM.from_pretrained('hf/small')\"");
  o.add_options()("checkpoint", "the ctxlab checkpoint to export (.safetensors), e.g. runs/small/model.safetensors",
                  cxxopts::value<std::string>())("h,help", "this help");
  add_format_options(o, "the directory to write (created if missing; config.json, model.safetensors and the "
                        "tokenizer files in it are replaced)");
  auto r = parse_or_help(o, argc, argv);
  if (!r) return 0;
  require(*r, "checkpoint", o);
  const std::string dir = format_dir(*r, o), ckpt = (*r)["checkpoint"].as<std::string>();
  LoadedModel lm = load_checkpoint(ckpt);
  export_hf(*lm.model, lm.tokenizer.get(), dir, ckpt);
  std::printf("wrote %s: %s layout, tokenizer %s\n", dir.c_str(),
              hf_layout_for(lm.model->cfg, ckpt) == "gpt2" ? "GPT2LMHeadModel" : "LlamaForCausalLM",
              lm.text_tokenizer().describe().c_str());
  return 0;
}

int run_import(int argc, char** argv) {
  cxxopts::Options o(
      "ctxlab import",
      "Read a Hugging Face GPT-2 or Llama-layout directory (config.json + model.safetensors, one file,\n"
      "F32/F16/BF16) into a ctxlab checkpoint you can train, finetune, eval and sample.\n"
      "GPT-2 checkpoints map exactly (e.g. a downloaded openai-community/gpt2). Llama checkpoints map when\n"
      "their MLP is ctxlab's: hidden_act gelu_pytorch_tanh and up_proj the constant 1 (what `ctxlab export`\n"
      "writes); a SwiGLU Llama is refused naming the field. Grouped-query k/v heads are repeated.\n"
      "ctxlab's tokenizers are bytes and SentencePiece: a tokenizer.model is kept, GPT-2's BPE is not\n"
      "(then train on pre-tokenized token files).\n"
      "\n"
      "examples:\n"
      "  ctxlab import --format hf ~/models/gpt2 --out gpt2.safetensors\n"
      "  ctxlab eval --checkpoint gpt2.safetensors --lengths 256");
  o.add_options()("out", "the ctxlab checkpoint to write (.safetensors), e.g. gpt2.safetensors",
                  cxxopts::value<std::string>())("h,help", "this help");
  add_format_options(o, "the Hugging Face checkpoint directory to read");
  auto r = parse_or_help(o, argc, argv);
  if (!r) return 0;
  require(*r, "out", o);
  const std::string dir = format_dir(*r, o), out = (*r)["out"].as<std::string>();
  check_output_file(out, "--out");
  std::string note;
  LoadedModel lm = import_hf(dir, &note);
  save_checkpoint(out, *lm.model, 0, lm.tokenizer ? tokenizer_metadata(*lm.tokenizer) : std::map<std::string, std::string>{});
  if (!note.empty()) std::printf("note: %s\n", note.c_str());
  size_t n = 0;
  for (auto& p : lm.model->named_parameters()) n += (size_t)p.second.data().numel();
  std::printf("wrote %s: %zu parameters (posenc %s, norm %s), tokenizer %s\n", out.c_str(), n,
              lm.model->pe->type().c_str(), lm.model->cfg.norm.c_str(),
              lm.tokenizer ? lm.tokenizer->describe().c_str() : "none recorded");
  return 0;
}

}  // namespace ctx::cli
