// train/run_dir.cpp — run directory checks and lock (see run_dir.h).
#include "train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "core/error.h"

namespace ctx {

void RunDirLock::release() {
  if (fd_ < 0) return;
  // Unlinked while still locked, then closed: a process waiting on the old file finds it gone
  // from the directory when it checks (take_run_dir) and starts over on a new one.
  if (!path_.empty()) ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

RunDirLock& RunDirLock::operator=(RunDirLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

RunDirLock::~RunDirLock() { release(); }

std::string existing_run_file(const std::string& dir) {
  for (const char* f : {"model.safetensors", "model.optim.safetensors", "metrics.jsonl", "train.csv"}) {
    std::error_code ec;
    if (std::filesystem::exists(dir + "/" + f, ec)) return f;
  }
  return "";
}

RunDirLock take_run_dir(const std::string& dir, const std::string& verb, bool resume, bool force) {
  CTX_CHECK(!dir.empty(), verb, ": --out is empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  CTX_CHECK(!ec, verb, ": cannot create the run directory ", quoted_str(dir), ": ", ec.message());
  CTX_CHECK(std::filesystem::is_directory(dir, ec), verb, ": --out ", quoted_str(dir), " is not a directory");
  const std::string lock_path = dir + "/.lock";
  RunDirLock lock;
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      const int err = errno;
      throw Error(str(verb, ": cannot write in the run directory ", quoted_str(dir), ": ", std::strerror(err),
                      " (checked before training; choose a writable --out)"));
    }
    lock.fd_ = fd;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      char buf[32] = {0};
      const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
      long pid = n > 0 ? std::strtol(buf, nullptr, 10) : 0;
      // this process holds it already (train --resume locks before reading the run, then trains
      // in it): the outer lock stays, this one owns nothing (closing another descriptor of the
      // file leaves a flock held through the first one)
      if (err == EWOULDBLOCK && pid == (long)::getpid()) return RunDirLock();
      CTX_CHECK(err != EWOULDBLOCK, verb, ": ", quoted_str(dir), " is in use by another run (pid ",
                pid > 0 ? std::to_string(pid) : std::string("unknown"), ", holding ", lock_path,
                "); wait for it to end, or choose another --out");
      throw Error(str(verb, ": cannot lock ", lock_path, ": ", std::strerror(err)));
    }
    // Locked; but the holder before us may have unlinked this file as it let go: then the lock
    // is on a file no longer in the directory, and a newcomer could lock a new one. Start over.
    struct stat a, b;
    if (::fstat(fd, &a) == 0 && ::stat(lock_path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
      lock.path_ = lock_path;
      break;
    }
    ::close(fd);
    lock.fd_ = -1;
    CTX_CHECK(attempt < 100, verb, ": cannot lock ", lock_path, ": it keeps being replaced");
  }
  // Under the lock: the existing run, unless this run continues or replaces it.
  const std::string existing = existing_run_file(dir);
  CTX_CHECK(resume || force || existing.empty(), verb, ": ", quoted_str(dir), " already holds a run (", existing,
            "); `ctxlab train --resume ", dir, "` continues it, --force replaces it, or choose another --out");
  const std::string pid = std::to_string((long)::getpid()) + "\n";
  if (::ftruncate(lock.fd_, 0) != 0 || ::pwrite(lock.fd_, pid.data(), pid.size(), 0) != (ssize_t)pid.size()) {
    const int err = errno;
    throw Error(str(verb, ": cannot write in the run directory ", quoted_str(dir), ": ", std::strerror(err),
                    " (checked before training; choose a writable --out)"));
  }
  return lock;
}

void check_output_file(const std::string& path, const std::string& what) {
  CTX_CHECK(!path.empty(), what, ": empty path");
  std::error_code ec;
  CTX_CHECK(!std::filesystem::is_directory(path, ec), what, " ", quoted_str(path), ": is a directory");
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat st;
  CTX_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), what, " ", quoted_str(path), ": the directory ",
            quoted_str(dir), " does not exist (checked before the work starts)");
  if (::access(dir.c_str(), W_OK) != 0) {
    const int err = errno;
    throw Error(str(what, " ", quoted_str(path), ": cannot write in ", quoted_str(dir), ": ", std::strerror(err),
                    " (checked before the work starts)"));
  }
}

}  // namespace ctx
