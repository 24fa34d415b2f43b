// train/cli/cli_eval_attn.cpp — eval's attention statistics (see cli_eval_attn.h): options, table,
// JSON and CSV. The measurement is train/eval.h's (nn/attn_stats.h, from the attention kernels).
#include "train/cli/cli_eval_attn.h"

#include <cstdio>

#include "train/io/fileio.h"
#include "train/run_dir.h"  // check_output_file

namespace ctx::cli {

void add_eval_attn_options(cxxopts::Options& o) {
  o.add_options("attention")(
      "attn-stats", "also the attention statistics of every layer and head at every length: the entropy of a "
      "token's attention (nats; log n = uniform over n keys), its mass on the first K tokens (attention sinks) and "
      "its mean distance to the keys it attends to, averaged over every token of every window; a table, and into "
      "--json and --attn-stats-csv")(
      "attn-sinks", "with --attn-stats: how many first tokens of a window count as sinks, >= 1, e.g. 4 "
      "(StreamingLLM's choice)", cxxopts::value<int64_t>()->default_value("4"))(
      "attn-stats-csv", "with --attn-stats: write length,layer,head,rows,entropy,sink_mass,distance, e.g. attn.csv",
      cxxopts::value<std::string>());
}

int64_t attn_sink_keys(const cxxopts::ParseResult& r) {
  const bool on = r.count("attn-stats") > 0;
  CTX_CHECK(on || !r.count("attn-sinks"), "--attn-sinks needs --attn-stats");
  CTX_CHECK(on || !r.count("attn-stats-csv"), "--attn-stats-csv needs --attn-stats");
  if (!on) return 0;
  const int64_t k = r["attn-sinks"].as<int64_t>();
  CTX_CHECK(k >= 1, "--attn-sinks must be >= 1 (the first K tokens of a window count as sinks, e.g. 4), got ", k);
  if (r.count("attn-stats-csv")) check_output_file(r["attn-stats-csv"].as<std::string>(), "--attn-stats-csv");
  return k;
}

void check_no_attn_options(const cxxopts::ParseResult& r) {
  for (const char* k : {"attn-stats", "attn-sinks", "attn-stats-csv"})
    CTX_CHECK(!r.count(k), "--", k, " measures the attention on the text; it does not apply to --task");
}

void print_attn_stats(const EvalResult& e) {
  std::printf("attention at length %lld (means over %lld tokens; sinks: the first %lld)\n", (long long)e.length,
              e.attn.empty() || e.attn[0].empty() ? 0LL : (long long)e.attn[0][0].rows, (long long)e.attn_sink_keys);
  std::printf("%8s %6s %10s %10s %10s\n", "layer", "head", "entropy", "sink mass", "distance");
  for (size_t l = 0; l < e.attn.size(); ++l)
    for (size_t h = 0; h < e.attn[l].size(); ++h) {
      const nn::HeadAttnStats& s = e.attn[l][h];
      std::printf("%8zu %6zu %10.4f %10.4f %10.2f\n", l, h, s.entropy, s.sink_mass, s.distance);
    }
  std::fflush(stdout);
}

nlohmann::json attn_stats_json(const EvalResult& e) {
  nlohmann::json heads = nlohmann::json::array();
  for (size_t l = 0; l < e.attn.size(); ++l)
    for (size_t h = 0; h < e.attn[l].size(); ++h) {
      const nn::HeadAttnStats& s = e.attn[l][h];
      heads.push_back({{"layer", l}, {"head", h}, {"rows", s.rows}, {"entropy", s.entropy},
                       {"sink_mass", s.sink_mass}, {"distance", s.distance}});
    }
  return {{"sink_keys", e.attn_sink_keys}, {"heads", heads}};
}

void write_attn_stats_csv(const std::string& path, const std::vector<EvalResult>& results) {
  std::string csv = "length,layer,head,rows,entropy,sink_mass,distance\n";
  char buf[200];
  for (const EvalResult& e : results)
    for (size_t l = 0; l < e.attn.size(); ++l)
      for (size_t h = 0; h < e.attn[l].size(); ++h) {
        const nn::HeadAttnStats& s = e.attn[l][h];
        std::snprintf(buf, sizeof buf, "%lld,%zu,%zu,%lld,%.9g,%.9g,%.9g\n", (long long)e.length, l, h,
                      (long long)s.rows, s.entropy, s.sink_mass, s.distance);
        csv += buf;
      }
  write_file_atomic(path, {{csv.data(), csv.size()}}, "attention statistics CSV");
  std::printf("wrote %s\n", path.c_str());
}

}  // namespace ctx::cli
