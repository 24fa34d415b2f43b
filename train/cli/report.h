// train/cli/report.h — `ctxlab report`: one self-contained HTML page that puts training runs side by
// side: train / validation loss, learning rate and tokens/s against the step, perplexity and bits
// per byte against the context length (the runs' eval results), and the config keys that differ.
// Charts are dygraphs (Debian's libjs-dygraphs), inlined, so the page opens offline.
//
// What a run directory holds (written by `ctxlab train` / `finetune` / `eval`):
//   metrics.jsonl     {"step", "loss", "lr", "grad_norm", "ms", "tok_s"} and {"step", "val_loss"} lines
//                     (train.csv + val.csv are read when there is no metrics.jsonl)
//   model.safetensors __metadata__: config, train_options, tokenizer, step (the header only is read)
//   eval*.json        `ctxlab eval --json`: results [{length, ppl, bits_per_byte, ...}]
//   eval*.csv         `ctxlab eval --csv`: length,...,ppl,bits_per_byte
#pragma once
#include <string>
#include <vector>

namespace ctx {

// Reads every run directory and writes the page to `out` (atomically). `title` heads the page.
// Errors name the directory or file: missing, not a run directory, malformed metrics.
void write_report(const std::vector<std::string>& run_dirs, const std::string& out, const std::string& title);

}  // namespace ctx
