// train/cli/cli_eval_attn.h — `ctxlab eval --attn-stats` (docs/evaluation.md): the attention
// entropy, sink mass and mean distance per layer and head at every length (train/eval.h
// EvalResult::attn), as a table on stdout, in --json and in --attn-stats-csv.
//   --attn-stats [--attn-sinks K] [--attn-stats-csv F]
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "train/eval.h"

namespace ctx::cli {

// The "attention" option group of eval.
void add_eval_attn_options(cxxopts::Options& o);
// The sink count evaluate() is asked for: 0 without --attn-stats, else --attn-sinks (>= 1).
// Checks the group's options (they need --attn-stats; the CSV file is writable).
int64_t attn_sink_keys(const cxxopts::ParseResult& r);
// With --task: none of the group's options may be given.
void check_no_attn_options(const cxxopts::ParseResult& r);
// The table of one length on stdout: layer, head, entropy, sink mass, mean distance.
void print_attn_stats(const EvalResult& e);
// {"sink_keys": K, "heads": [{layer, head, rows, entropy, sink_mass, distance}, ...]}
nlohmann::json attn_stats_json(const EvalResult& e);
// length,layer,head,rows,entropy,sink_mass,distance: one row per head of every length.
void write_attn_stats_csv(const std::string& path, const std::vector<EvalResult>& results);

}  // namespace ctx::cli
