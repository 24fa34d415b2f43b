// train/run_log.cpp — a training run's logs and console lines (see run_log.h).
#include "train/run_log.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <iterator>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "train/io/fileio.h"

namespace ctx {

RunLog::RunLog(const std::string& out, int64_t start_step, bool write, bool quiet) : quiet_(quiet) {
  if (!write) return;
  if (start_step > 0) {
    truncate_log(out + "/metrics.jsonl", true, start_step);
    truncate_log(out + "/train.csv", false, start_step);
    truncate_log(out + "/val.csv", false, start_step);
  }
  const auto mode = start_step > 0 ? std::ios::app : std::ios::trunc;
  jsonl_.open(out + "/metrics.jsonl", mode);
  tcsv_.open(out + "/train.csv", mode);
  vcsv_.open(out + "/val.csv", mode);
  for (auto [f, name] : {std::pair{&jsonl_, "metrics.jsonl"}, {&tcsv_, "train.csv"}, {&vcsv_, "val.csv"}})
    CTX_CHECK(f->is_open(), "train: cannot open ", out, "/", name, " for writing: ", std::strerror(errno));
  if (start_step == 0) {
    tcsv_ << "step,loss,lr,grad_norm,ms,tok_s\n";
    vcsv_ << "step,val_loss,val_bpb\n";
  }
}

void RunLog::train_row(const TrainRow& r) {
  tcsv_ << r.step << "," << r.loss << "," << r.lr << "," << r.grad_norm << "," << r.ms << "," << r.tok_s << "\n";
  nlohmann::json row{{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                     {"ms", r.ms}, {"tok_s", r.tok_s}};
  if (!r.rank_loss.empty()) row["rank_loss"] = r.rank_loss;
  jsonl_ << row.dump() << "\n";
}

void RunLog::val_row(int64_t step, double val_loss, double val_bpb) {
  vcsv_ << step << "," << val_loss << "," << val_bpb << "\n";
  jsonl_ << nlohmann::json{{"step", step}, {"val_loss", val_loss}, {"val_bpb", val_bpb}}.dump() << "\n";
  if (!quiet_)
    std::printf("step %5" PRId64 " | val loss %.4f | ppl %.2f | %.3f bits/byte\n", step, val_loss,
                std::exp(val_loss), val_bpb);
}

void RunLog::progress(int64_t step, int64_t steps, double loss, double lr, double grad_norm, double avg_ms,
                      double avg_tok_s) {
  std::printf("step %5" PRId64 "/%" PRId64 " | loss %.4f | lr %.2e | norm %.2f | %.0f ms | %.0f tok/s | ETA %s\n",
              step, steps, loss, lr, grad_norm, avg_ms, avg_tok_s,
              fmt_duration(avg_ms / 1000.0 * (double)(steps - step)).c_str());
  std::fflush(stdout);
}

void RunLog::flush() {
  jsonl_.flush();
  tcsv_.flush();
  vcsv_.flush();
  // a full disk or a vanished directory: one line, not logs that silently stop
  CTX_CHECK(!jsonl_.is_open() || (jsonl_.good() && tcsv_.good() && vcsv_.good()),
            "train: writing the run's logs (metrics.jsonl, train.csv, val.csv) failed: ", std::strerror(errno));
}

void truncate_log(const std::string& path, bool jsonl, int64_t last_step) {
  std::ifstream in(path);
  if (!in) return;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), kept;
  in.close();
  size_t pos = 0;
  for (size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    std::string line = text.substr(pos, nl - pos);
    long long st = -1;
    if (jsonl) {
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer())
        st = j["step"].get<long long>();
    } else if (pos == 0) {
      st = 0;  // the header
    } else {
      char* end = nullptr;
      st = std::strtoll(line.c_str(), &end, 10);
      if (end == line.c_str() || *end != ',') st = -1;
    }
    if (st >= 0 && st <= last_step) kept += line + "\n";
  }
  if (kept.size() != text.size()) write_file_atomic(path, {{kept.data(), kept.size()}}, "train: log");
}

std::string fmt_duration(double sec) {
  char b[32];
  if (sec < 0 || !std::isfinite(sec)) return "?";
  int64_t s = (int64_t)sec;
  if (s >= 3600) std::snprintf(b, sizeof b, "%" PRId64 "h%02" PRId64 "m", s / 3600, (s / 60) % 60);
  else std::snprintf(b, sizeof b, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
  return b;
}

std::string gnuplot_single_quoted(const std::string& s) {
  std::string q = "'";
  for (unsigned char c : s) {
    if (c == '\'') q += "''";  // the one escape of a single-quoted gnuplot string
    else if (c < 0x20 || c == 0x7f) q += '?';  // a newline would end the -e command
    else q += (char)c;
  }
  return q + "'";
}

namespace {

// Runs args[0] (PATH-searched) with `fa`'s redirections and waits (see spawn_wait).
int spawn_and_wait(const std::vector<std::string>& args, posix_spawn_file_actions_t* fa) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawnp(&pid, argv[0], fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(fa);
  if (err != 0) return err == ENOENT ? -2 : -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

int spawn_wait(const std::vector<std::string>& args, const std::string& cwd, bool quiet_stderr) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  if (quiet_stderr) posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  return spawn_and_wait(args, &fa);
}

int spawn_wait_logged(const std::vector<std::string>& args, const std::string& log_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  return spawn_and_wait(args, &fa);
}

void plot_loss(const std::string& out) {
  // No shell and no user text in gnuplot's syntax beyond one escaped string: gnuplot runs with
  // argv, in the run directory (dir='.'), and the path appears only as the title, single-quoted.
  const std::string script = std::string(CTXLAB_SOURCE_DIR) + "/scripts/plot_loss.gp";
  const int rc = spawn_wait({"gnuplot", "-e", "dir='.'; title=" + gnuplot_single_quoted(out), script}, out, true);
  if (rc == -2) std::printf("plot: gnuplot not found; skipping %s/loss.png (install gnuplot-nox)\n", out.c_str());
  else if (rc == 0) std::printf("plot: wrote %s/loss.png\n", out.c_str());
  else std::printf("plot: gnuplot failed; see %s\n", script.c_str());
}

}  // namespace ctx
