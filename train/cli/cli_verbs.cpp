// train/cli/cli_verbs.cpp — the verb table of the CLI.
#include "train/cli/cli.h"

namespace ctx::cli {

int run_grads(int argc, char** argv);  // cli_model.cpp
int run_train(int argc, char** argv);  // cli_train.cpp
int run_init(int argc, char** argv);   // cli_model.cpp
int run_eval(int argc, char** argv);   // cli_eval.cpp
int run_sample(int argc, char** argv); // cli_eval.cpp
int run_gradcheck(int argc, char** argv);  // cli_gradcheck.cpp
int run_bench(int argc, char** argv);  // cli_bench.cpp
int run_finetune(int argc, char** argv);  // cli_finetune.cpp
int run_tokenizer(int argc, char** argv);  // cli_tokenizer.cpp
int run_report(int argc, char** argv);  // report.cpp
int run_study(int argc, char** argv);   // cli_study.cpp
int run_export(int argc, char** argv);  // cli_hf.cpp
int run_import(int argc, char** argv);  // cli_hf.cpp

const std::vector<Verb>& verbs() {
  static const std::vector<Verb> v = {
      {"train", "train a model from a config or preset on a text corpus", run_train},
      {"eval", "perplexity / bits-per-byte of a checkpoint at one or more context lengths", run_eval},
      {"finetune", "continue training at a longer context with RoPE scaling (PI workflow)", run_finetune},
      {"sample", "generate text from a prompt (temperature, top-k, seed)", run_sample},
      {"grads", "one forward/backward on a token batch; write d(loss)/d(param) as safetensors", run_grads},
      {"init", "write a freshly initialised checkpoint for a config", run_init},
      {"gradcheck", "finite-difference check of an encoding's gradients through a tiny f64 model", run_gradcheck},
      {"bench", "time training steps; tokens/s, ms split, peak RSS, GFLOP/s, MFU as JSON", run_bench},
      {"tokenizer", "tokenizer train: learn a SentencePiece BPE / unigram model for --tokenizer", run_tokenizer},
      {"export", "write a checkpoint as a Hugging Face directory (GPT-2 / Llama layout) for transformers", run_export},
      {"import", "read a Hugging Face GPT-2 / Llama directory into a ctxlab checkpoint", run_import},
      {"report", "one self-contained HTML page comparing run directories (curves, eval, config)", run_report},
      {"study", "a grid of encodings x scalings x seeds x tasks from a study file: train, eval, mean +- 95% CI; resumable",
       run_study},
  };
  return v;
}

}  // namespace ctx::cli
