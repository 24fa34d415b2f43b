// train/checkpointer.cpp — saving and restoring a training run (see checkpointer.h).
#include "train/checkpointer.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <system_error>

#include "train/dist/distributed.h"
#include "train/io/checkpoint.h"
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

void rng_from_string(Rng& r, const std::string& str_, const std::string& source) {
  Rng::State s{};
  int cached = 0;
  char tail[64] = {0};
  int n = std::sscanf(str_.c_str(), "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %d %63s", &s.s[0],
                      &s.s[1], &s.s[2], &s.s[3], &cached, tail);
  CTX_CHECK(n == 6, source, ": malformed RNG state \"", str_, "\"");
  s.has_cached = cached != 0;
  s.cached = std::strtod(tail, nullptr);
  r.set_state(s);
}

// The `step` recorded in the metadata of the safetensors file `path`; "?" when it has none.
std::string step_in(const std::string& path) {
  SafetensorsFile f = load_safetensors(path);
  auto st = f.metadata.find("step");
  return st == f.metadata.end() ? std::string("?") : st->second;
}

}  // namespace

void Checkpointer::restore(const std::string& dir) {
  std::string op = dir + "/model.optim.safetensors";
  SafetensorsFile f = load_safetensors(op);
  optim_.load_state(f.tensors, op);
  auto get = [&](const char* k) {
    auto it = f.metadata.find(k);
    CTX_CHECK(it != f.metadata.end(), op, ": __metadata__.", k, " missing");
    return it->second;
  };
  const std::string os = get("optimizer_steps");
  size_t used = 0;
  int64_t n = -1;
  try {
    n = std::stoll(os, &used);
  } catch (const std::logic_error&) {  // not a number, or out of range
  }
  CTX_CHECK(used == os.size() && n >= 0, op, ": __metadata__.optimizer_steps is \"", os,
            "\", expected a non-negative integer");
  optim_.steps = n;
  rng_from_string(data_rng_, get("data_rng"), op);
  rng_from_string(model_.dropout_rng, get("dropout_rng"), op);
}

void Checkpointer::save(int64_t step) {
  std::map<std::string, std::string> meta{{"step", std::to_string(step)},
                                          {"optimizer_steps", std::to_string(optim_.steps)},
                                          {"data_rng", rng_to_string(data_rng_)},
                                          {"dropout_rng", rng_to_string(model_.dropout_rng)},
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
  save_safetensors(op, optim_.state(), meta);
  std::map<std::string, std::string> model_meta = tokenizer_metadata(tok_);
  model_meta["train_options"] = train_options_to_json(opt_).dump();
  save_checkpoint(opt_.out + "/model.safetensors", model_, step, model_meta);
  std::filesystem::remove(pp, rec);
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
