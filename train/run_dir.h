// train/run_dir.h — taking a run directory before a run writes into it (docs/reliability.md):
// checked writable before any work, an existing run refused unless the run resumes it or --force
// replaces it, and locked (flock on <dir>/.lock, which records the holder's pid) for as long as the
// run lives, so that two trainings can never write one directory. The lock file is removed when
// the lock is released; one left by a killed run holds no lock (flock dies with its process).
#pragma once
#include <string>
#include <utility>

namespace ctx {

class RunDirLock {
 public:
  RunDirLock() = default;
  RunDirLock(RunDirLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  RunDirLock& operator=(RunDirLock&& o) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();
  bool held() const { return fd_ >= 0; }

 private:
  friend RunDirLock take_run_dir(const std::string&, const std::string&, bool, bool);
  void release();  // unlinks the lock file and closes it (the lock goes with it)
  int fd_ = -1;
  std::string path_;  // the lock file, unlinked on release; "" when not the owner
};

// The files that make `dir` a run: model.safetensors, model.optim.safetensors, metrics.jsonl,
// train.csv. Returns the first one present, or "" when none is.
std::string existing_run_file(const std::string& dir);

// For `verb` (e.g. "train") writing the run directory `dir` (rank 0 only; the other ranks write
// nothing): creates it, checks that a file can be created in it, refuses an existing run unless
// `resume` (the run continues it) or `force` (the user asked to replace it), and takes its lock.
// Throws a one-line ctx::Error naming the directory and, when it is locked, the holder's pid.
RunDirLock take_run_dir(const std::string& dir, const std::string& verb, bool resume, bool force);

// Checks before any work that the file `path` can be written: its directory exists and is
// writable (`what` names the option, e.g. "--json"). Nothing is created.
void check_output_file(const std::string& path, const std::string& what);

}  // namespace ctx
