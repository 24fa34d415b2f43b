// train/cli/cli_eval_tasks.cpp — eval's retrieval tasks and per-position loss (see
// cli_eval_tasks.h): options, tables, CSV and JSON. The measurements are train/task_eval.h's and
// train/eval.h's.
#include "train/cli/cli_eval_tasks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "train/cli/cli_common.h"
#include "train/io/fileio.h"
#include "train/run_dir.h"  // check_output_file
#include "train/task_eval.h"

namespace ctx::cli {

namespace {

constexpr int64_t kAutoBuckets = 64;  // --bucket 0: the longest length in about this many buckets

std::vector<double> parse_depths(const std::string& s) {
  std::vector<double> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    char* end = nullptr;
    const double v = item.empty() ? NAN : std::strtod(item.c_str(), &end);
    CTX_CHECK(!item.empty() && end == item.c_str() + item.size() && std::isfinite(v) && v >= 0 && v <= 1,
              "--depths: ", quoted_str(item), " is not a depth in [0, 1] (expected a comma-separated list, e.g. "
              "0,0.5,1: 0 = the needle at the start of the text, 1 = just before the question)");
    out.push_back(v);
    i = j + 1;
  }
  return out;
}

void write_text(const std::string& path, const std::string& text, const char* what) {
  write_file_atomic(path, {{text.data(), text.size()}}, what);
  std::printf("wrote %s\n", path.c_str());
}

std::string cells_csv(const std::vector<TaskCell>& cells) {
  std::string csv = "length,depth,trials,correct,accuracy,ci_low,ci_high,answer_tokens,tokens_correct,token_accuracy\n";
  char buf[320];
  for (const TaskCell& c : cells) {
    std::snprintf(buf, sizeof buf, "%lld,%.9g,%lld,%lld,%.9g,%.9g,%.9g,%lld,%lld,%.9g\n", (long long)c.length, c.depth,
                  (long long)c.trials, (long long)c.correct, c.accuracy, c.ci.lo, c.ci.hi, (long long)c.answer_tokens,
                  (long long)c.tokens_correct, c.token_accuracy);
    csv += buf;
  }
  return csv;
}

nlohmann::json cells_json(const std::vector<TaskCell>& cells) {
  nlohmann::json a = nlohmann::json::array();
  for (const TaskCell& c : cells)
    a.push_back({{"length", c.length}, {"depth", c.depth}, {"trials", c.trials}, {"correct", c.correct},
                 {"accuracy", c.accuracy}, {"ci_low", c.ci.lo}, {"ci_high", c.ci.hi},
                 {"answer_tokens", c.answer_tokens}, {"tokens_correct", c.tokens_correct},
                 {"token_accuracy", c.token_accuracy}});
  return a;
}

}  // namespace

void add_eval_task_options(cxxopts::Options& o) {
  o.add_options("tasks")(
      "task", "evaluate a retrieval task instead of perplexity: passkey | kv-recall | copy (docs/evaluation.md); "
      "accuracy per length and depth, with a 95% Wilson interval", cxxopts::value<std::string>())(
      "depths", "with --task: where the needle sits in the filler text, comma-separated in [0, 1], e.g. 0,0.5,1",
      cxxopts::value<std::string>()->default_value("0,0.25,0.5,0.75,1"))(
      "trials", "with --task: sequences per (length, depth), >= 1, e.g. 100",
      cxxopts::value<int64_t>()->default_value("20"))(
      "seed", "with --task: seed of the keys and filler offsets; same seed, same sequences, e.g. 1",
      cxxopts::value<uint64_t>()->default_value("0"));
  add_task_param_options(o, "tasks");
  o.add_options("per-position")(
      "per-position", "also the mean loss at each window position, in buckets (with their token counts), into "
      "--json and --per-position-csv")(
      "bucket", "with --per-position: positions per bucket, >= 0 (0 = the longest length / 64, rounded up), e.g. 16",
      cxxopts::value<int64_t>()->default_value("0"))(
      "per-position-csv", "with --per-position: write length,begin,end,count,loss per bucket, e.g. positions.csv",
      cxxopts::value<std::string>());
}

int run_task_eval(const cxxopts::ParseResult& r, nn::GPT& model, const Tokenizer& tok,
                  const TokenStream& filler, const std::vector<int64_t>& lengths, const EvalMode& mode,
                  nlohmann::json header) {
  const std::string name = r["task"].as<std::string>();
  const TaskParams params = task_params_from_options(r);
  try {
    check_task(name, params);
  } catch (const Error& e) {
    throw Error(str("--task: ", e.what()));
  }
  CTX_CHECK(mode.segment == 0, "--task and --segmented: a task sequence is one window (use --window W for a local-"
            "attention baseline)");
  CTX_CHECK(!r.count("per-position"), "--per-position measures the text's loss; it does not apply to --task");
  const std::vector<double> depths = parse_depths(r["depths"].as<std::string>());
  const int64_t trials = r["trials"].as<int64_t>(), batch_opt = r["batch"].as<int64_t>();
  CTX_CHECK(trials >= 1, "--trials must be a positive integer (e.g. 100), got ", trials);
  const uint64_t seed = r["seed"].as<uint64_t>();
  const TaskGenerator gen(name, params, tok, &filler);
  for (int64_t len : lengths) gen.check_length(len);

  std::printf("task %s (digits %lld, pairs %lld, span %lld): %lld trials per cell, seed %llu; a trial is right when "
              "the whole answer is (greedy); 95%% Wilson interval\n",
              name.c_str(), (long long)params.digits, (long long)params.pairs, (long long)params.span,
              (long long)trials, (unsigned long long)seed);
  std::printf("%8s %6s %7s %8s %9s %17s %10s\n", "length", "depth", "trials", "correct", "accuracy", "95% interval",
              "token acc");
  std::fflush(stdout);
  std::vector<TaskCell> cells;
  for (int64_t len : lengths)
    for (double d : depths) {
      const int64_t batch = batch_opt > 0 ? batch_opt : std::max<int64_t>(1, 8192 / len);
      const TaskCell c = evaluate_task_cell(model, gen, len, d, trials, batch, seed, mode.window);
      std::printf("%8lld %6.3g %7lld %8lld %9.3f    [%.3f, %.3f] %10.3f\n", (long long)c.length, c.depth,
                  (long long)c.trials, (long long)c.correct, c.accuracy, c.ci.lo, c.ci.hi, c.token_accuracy);
      std::fflush(stdout);
      cells.push_back(c);
    }
  if (r.count("csv")) write_text(r["csv"].as<std::string>(), cells_csv(cells), "eval CSV");
  if (r.count("json")) {
    header["task"] = {{"name", name}, {"digits", params.digits}, {"pairs", params.pairs}, {"span", params.span},
                      {"trials", trials}, {"seed", seed}, {"depths", depths}, {"interval", "wilson 95%"}};
    header["task_results"] = cells_json(cells);
    write_text(r["json"].as<std::string>(), header.dump(2) + "\n", "eval JSON");
  }
  return 0;
}

void check_no_task_options(const cxxopts::ParseResult& r) {
  for (const char* k : {"depths", "trials", "seed", "task-digits", "task-pairs", "task-span"})
    CTX_CHECK(!r.count(k), "--", k, " needs --task NAME (passkey | kv-recall | copy)");
}

int64_t position_bucket(const cxxopts::ParseResult& r, const std::vector<int64_t>& lengths) {
  const bool on = r.count("per-position") > 0;
  CTX_CHECK(on || !r.count("per-position-csv"), "--per-position-csv needs --per-position");
  CTX_CHECK(on || !r.count("bucket"), "--bucket needs --per-position");
  if (!on) return 0;
  CTX_CHECK(r.count("json") || r.count("per-position-csv"), "--per-position needs --json FILE or "
            "--per-position-csv FILE (where the buckets are written)");
  if (r.count("per-position-csv")) check_output_file(r["per-position-csv"].as<std::string>(), "--per-position-csv");
  const int64_t b = r["bucket"].as<int64_t>();
  CTX_CHECK(b >= 0, "--bucket must be >= 0 (0 = automatic, e.g. 16), got ", b);
  if (b > 0) return b;
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  return (longest + kAutoBuckets - 1) / kAutoBuckets;
}

nlohmann::json positions_json(const EvalResult& e, int64_t bucket) {
  nlohmann::json a = nlohmann::json::array();
  for (const PositionBucket& b : e.positions)
    a.push_back({{"begin", b.begin}, {"end", b.end}, {"count", b.count}, {"loss", b.loss}});
  return {{"bucket", bucket}, {"buckets", a}};
}

void write_positions_csv(const std::string& path, const std::vector<EvalResult>& results) {
  std::string csv = "length,begin,end,count,loss\n";
  char buf[160];
  for (const EvalResult& e : results)
    for (const PositionBucket& b : e.positions) {
      std::snprintf(buf, sizeof buf, "%lld,%lld,%lld,%lld,%.9g\n", (long long)e.length, (long long)b.begin,
                    (long long)b.end, (long long)b.count, b.loss);
      csv += buf;
    }
  write_text(path, csv, "per-position CSV");
}

}  // namespace ctx::cli
