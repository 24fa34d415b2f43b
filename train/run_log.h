// train/run_log.h — what a training run writes as it goes: <out>/train.csv (a row per step),
// <out>/val.csv (a row per evaluation), <out>/metrics.jsonl (the rows of both as JSON lines), the
// progress lines on stdout, and <out>/loss.png at the end (gnuplot). Losses are nats / token,
// validation also bits per byte; ms is the wall time of a step, tok_s its tokens per second.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace ctx {

class RunLog {
 public:
  // Opens the logs of the run directory `out` when `write` (rank 0; elsewhere they stay closed
  // and the rows go nowhere). A new run (start_step 0) replaces them and writes the CSV headers;
  // a resumed one appends, after dropping the rows past start_step (a run killed after its last
  // checkpoint logged them, and the resumed run logs them again). `quiet`: no console lines.
  RunLog(const std::string& out, int64_t start_step, bool write, bool quiet);

  struct TrainRow {
    int64_t step = 0;  // 1-based
    double loss = 0, lr = 0, grad_norm = 0, ms = 0, tok_s = 0;
    std::vector<double> rank_loss;  // under MPI: every rank's loss on its own rows; else empty
  };
  void train_row(const TrainRow& r);  // train.csv and metrics.jsonl
  // val.csv, metrics.jsonl and the validation line on stdout
  void val_row(int64_t step, double val_loss, double val_bpb);
  // The progress line of `step` (1-based) of `steps`: ms and tok_s averaged over the timed steps,
  // with the time left at that rate.
  void progress(int64_t step, int64_t steps, double loss, double lr, double grad_norm, double avg_ms,
                double avg_tok_s);
  void flush();

 private:
  bool quiet_;
  std::ofstream jsonl_, tcsv_, vcsv_;
};

// Drops the rows of a log past `last_step` (and a line cut short by a kill): metrics.jsonl rows
// by their "step", CSV rows by their first column (the header stays). Rewrites the file
// atomically when anything was dropped; nothing when it does not exist.
void truncate_log(const std::string& path, bool jsonl, int64_t last_step);

// "12m05s", "1h02m"; "?" for a negative or non-finite number of seconds.
std::string fmt_duration(double sec);

// <out>/loss.png from <out>/train.csv and val.csv with scripts/plot_loss.gp, when gnuplot is
// installed (a line on stdout either way). gnuplot is spawned with an argument vector in the run
// directory: no shell, and the path reaches gnuplot only as a single-quoted string (escaped).
void plot_loss(const std::string& out);
// `s` as a gnuplot single-quoted string: ' doubled, control characters replaced by '?'.
std::string gnuplot_single_quoted(const std::string& s);
// Runs args[0] (searched in PATH) with `args`, no shell, in `cwd` ("" = here), stderr to /dev/null
// when `quiet_stderr`; waits. Returns its exit status, -2 when it is not found, -1 when it could
// not start or died of a signal.
int spawn_wait(const std::vector<std::string>& args, const std::string& cwd, bool quiet_stderr);
// The same with stdout and stderr written to `log_path` (created or truncated).
int spawn_wait_logged(const std::vector<std::string>& args, const std::string& log_path);

}  // namespace ctx
