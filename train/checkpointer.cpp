// train/checkpointer.cpp — saving and restoring a training run (see checkpointer.h).
#include "train/checkpointer.h"

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <system_error>

#include "train/dist/distributed.h"
#include "core/device_table.h"  // to_host
#include "train/io/checkpoint.h"
#include "train/io/fileio.h"  // brief
#include "train/io/kill_point.h"
#include "train/io/safetensors.h"

namespace ctx {

namespace {

std::string rng_to_string(const Rng& r) {
  auto s = r.state();
  char buf[256];
  std::snprintf(buf, sizeof buf, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %d %a", s.s[0], s.s[1],
                s.s[2], s.s[3], s.has_cached ? 1 : 0, s.cached);
  return buf;
}

// Strict: four u64 words (not all zero: xoshiro would return 0 forever), the cached flag 0 or 1,
// the cached normal as a finite %a number, and nothing after it.
void rng_from_string(Rng& r, const std::string& text, const std::string& source) {
  const std::string bad = str(source, ": malformed RNG state ", quoted_str(brief(text)),
                              " (expected four unsigned 64-bit words, 0 or 1, and a finite number)");
  Rng::State s{};
  const char* p = text.c_str();
  auto word = [&](uint64_t* out) {
    while (*p == ' ') ++p;
    CTX_CHECK(*p >= '0' && *p <= '9', bad);
    errno = 0;
    char* end = nullptr;
    *out = std::strtoull(p, &end, 10);
    CTX_CHECK(errno == 0 && end != p && (*end == ' ' || *end == '\0'), bad);
    p = end;
  };
  for (int i = 0; i < 4; ++i) word(&s.s[i]);
  uint64_t cached = 2;
  word(&cached);
  CTX_CHECK(cached <= 1, bad);
  while (*p == ' ') ++p;
  CTX_CHECK(*p != '\0', bad);
  char* end = nullptr;
  s.cached = std::strtod(p, &end);
  CTX_CHECK(end != p && *end == '\0' && std::isfinite(s.cached), bad);
  CTX_CHECK(s.s[0] | s.s[1] | s.s[2] | s.s[3], source, ": RNG state ", quoted_str(brief(text)),
            " is all zero (not a state the generator can reach; it would repeat one batch forever)");
  s.has_cached = cached != 0;
  r.set_state(s);
}

// The first non-finite element of a host tensor (or a negative one when `nonneg`), -1 if none.
int64_t first_bad_element(const Tensor& host, bool nonneg) {
  const Tensor t = host.dtype() == DType::F32 ? host : host.to(DType::F32);
  const float* x = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(x[i]) || (nonneg && x[i] < 0)) return i;
  return -1;
}

bool second_moment(const std::string& name) { return name.rfind("exp_avg_sq.", 0) == 0; }

// The `step` recorded in the metadata of the safetensors file `path`; "?" when it has none.
std::string step_in(const std::string& path) {
  SafetensorsFile f = load_safetensors(path);
  auto st = f.metadata.find("step");
  return st == f.metadata.end() ? std::string("?") : st->second;
}

}  // namespace

void Checkpointer::restore(const std::string& dir) {
  const std::string op = dir + "/model.optim.safetensors";
  restore(load_safetensors(op), op);
}

void Checkpointer::restore(const SafetensorsFile& f, const std::string& op) {
  // Exactly the optimizer's tensors (an extra one is a file from another config or optimizer),
  // every value finite, and the second moments non-negative (sqrt of a negative is NaN).
  std::set<std::string> expected;
  for (const auto& [name, t] : optim_.state()) expected.insert(name);
  for (const auto& n : f.names)
    CTX_CHECK(expected.count(n), op, ": unexpected tensor ", quoted_str(n), " (not part of the ", opt_.optimizer,
              " state of this model)");
  optim_.load_state(f.tensors, op);
  for (const auto& [name, t] : f.tensors) {
    const bool nonneg = second_moment(name);
    const int64_t i = first_bad_element(t, nonneg);
    CTX_CHECK(i < 0, op, ": optimizer state tensor ", quoted_str(name), " holds ", t.at(i), " at flat index ", i,
              nonneg ? "; a second moment must be finite and non-negative" : "; optimizer state must be finite");
  }
  auto get = [&](const char* k) {
    auto it = f.metadata.find(k);
    CTX_CHECK(it != f.metadata.end(), op, ": __metadata__.", k, " missing");
    return it->second;
  };
  const std::string os = get("optimizer_steps");
  size_t used = 0;
  int64_t n = -1;
  try {
    if (!os.empty() && os[0] >= '0' && os[0] <= '9') n = std::stoll(os, &used);
  } catch (const std::logic_error&) {  // not a number, or out of range
  }
  CTX_CHECK(used == os.size() && n >= 0, op, ": __metadata__.optimizer_steps is ", quoted_str(brief(os)),
            ", expected a non-negative integer");
  optim_.steps = n;
  rng_from_string(data_rng_, get("data_rng"), op + " (__metadata__.data_rng)");
  rng_from_string(model_.dropout_rng, get("dropout_rng"), op + " (__metadata__.dropout_rng)");
  // randomized positions (POSENC_SPEC §7.3): the sampler continues where it stopped
  if (posenc_randomized(model_.cfg.posenc, model_.cfg.context, op) > 0)
    rng_from_string(model_.position_rng, get("position_rng"), op + " (__metadata__.position_rng)");
}

void Checkpointer::check_finite(int64_t step) const {
  auto bad = [&](const std::string& what, const std::string& name, const Tensor& dev, bool nonneg) {
    const Tensor t = to_host(dev);
    const int64_t i = first_bad_element(t, nonneg);
    if (i < 0) return;
    throw Error(str("train: after step ", step, " ", what, " ", quoted_str(name), " holds ", t.at(i),
                    " at flat index ", i, "; no checkpoint is written from a non-finite state: the last good one",
                    last_saved_ > 0 ? str(" (step ", last_saved_, ")") : std::string(), " stays in ", opt_.out,
                    " (lower --lr, or check the data)"));
  };
  for (auto& [name, p] : model_.named_parameters()) bad("parameter", name, p.data(), false);
  for (const auto& [name, t] : optim_.state()) bad("optimizer state", name, t, second_moment(name));
}

void Checkpointer::save(int64_t step) {
  check_finite(step);  // before anything on disk changes
  std::map<std::string, std::string> meta{{"step", std::to_string(step)},
                                          {"optimizer_steps", std::to_string(optim_.steps)},
                                          {"data_rng", rng_to_string(data_rng_)},
                                          {"dropout_rng", rng_to_string(model_.dropout_rng)},
                                          {"position_rng", rng_to_string(model_.position_rng)},
                                          {"train_options", train_options_to_json(opt_).dump()}};
  // Two files cannot be replaced in one atomic step. The optimizer state that matches the
  // model on disk is therefore kept as model.optim.prev.safetensors until the new model is in
  // place: a crash at any point leaves model.safetensors with a matching optimizer file,
  // model.optim.safetensors or the .prev one, and --resume picks it (recover_optimizer_state).
  const std::string op = opt_.out + "/model.optim.safetensors";
  const std::string pp = opt_.out + "/model.optim.prev.safetensors";
  std::error_code rec;
  std::filesystem::rename(op, pp, rec);  // no such file at a run's first save
  CTX_CHECK(!rec || rec == std::errc::no_such_file_or_directory, "train: cannot rename ", op, " to ",
            pp, ": ", rec.message());
  kill_point("ckpt:optim_aside");  // the kill -9 test's points (train/io/kill_point.h)
  save_safetensors(op, optim_.state(), meta);
  kill_point("ckpt:optim_saved");
  std::map<std::string, std::string> model_meta = tokenizer_metadata(tok_);
  model_meta["train_options"] = train_options_to_json(opt_).dump();
  save_checkpoint(opt_.out + "/model.safetensors", model_, step, model_meta);
  kill_point("ckpt:model_saved");
  std::filesystem::remove(pp, rec);
  kill_point("ckpt:done");
  last_saved_ = step;
}

void recover_optimizer_state(const std::string& dir, int64_t step) {
  const std::string op = dir + "/model.optim.safetensors", pp = dir + "/model.optim.prev.safetensors";
  const std::string want = std::to_string(step);
  auto matches = [&](const std::string& p) { return std::filesystem::exists(p) && step_in(p) == want; };
  // Rank 0 alone repairs the files; the others wait for it (docs/distributed.md).
  if (dist::is_root() && !matches(op) && matches(pp)) {
    std::error_code ec;
    std::filesystem::rename(pp, op, ec);
    CTX_CHECK(!ec, "cannot rename ", pp, " to ", op, ": ", ec.message());
    std::printf("resume: the run was interrupted while checkpointing; using the optimizer state of "
                "step %s kept in %s\n", want.c_str(), pp.c_str());
  }
  dist::barrier();
  const std::string ostep = step_in(op);
  CTX_CHECK(ostep == want, op, ": step ", ostep, " does not match model.safetensors step ", step);
}

}  // namespace ctx
