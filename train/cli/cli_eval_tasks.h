// train/cli/cli_eval_tasks.h — what `ctxlab eval` measures besides perplexity (docs/evaluation.md):
//   --task NAME --depths D,... [--trials N] [--seed S]   retrieval accuracy per (length, depth)
//   --per-position [--bucket N] [--per-position-csv F]   the loss per window position, bucketed
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "nn/gpt.h"
#include "train/eval.h"
#include "train/io/tokenizer.h"

namespace ctx::cli {

// The "tasks" and "per-position" option groups of eval.
void add_eval_task_options(cxxopts::Options& o);

// --task NAME: evaluates the task at every length and depth on `filler` (the eval text), prints
// the table and writes --csv / --json (`header`: what every eval JSON records). Returns 0. The
// options are checked (and every length against the task) before any compute.
int run_task_eval(const cxxopts::ParseResult& r, nn::GPT& model, const Tokenizer& tok,
                  const TokenStream& filler, const std::vector<int64_t>& lengths, const EvalMode& mode,
                  nlohmann::json header);

// Without --task: none of its options (--depths, --trials, --seed, --task-*) may be given.
void check_no_task_options(const cxxopts::ParseResult& r);

// The per-position bucket width eval asks evaluate() for: 0 without --per-position, --bucket N,
// or (0 = automatic) ceil(longest length / 64), one width for every length so that curves align.
// Checks --per-position's options (they need --per-position, and a file to go to).
int64_t position_bucket(const cxxopts::ParseResult& r, const std::vector<int64_t>& lengths);
// The buckets of one result as JSON ({"bucket": W, "buckets": [{begin, end, count, loss}, ...]}).
nlohmann::json positions_json(const EvalResult& e, int64_t bucket);
// --per-position-csv: length,begin,end,count,loss, one row per bucket of every length.
void write_positions_csv(const std::string& path, const std::vector<EvalResult>& results);

}  // namespace ctx::cli
