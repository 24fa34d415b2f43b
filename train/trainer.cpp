// train/trainer.cpp — the training loop (see trainer.h).
#include "train/trainer.h"
#include "train/dist/grad_tree.h"

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "core/determinism.h"
#include "core/device_table.h"  // to_host
#include "train/io/checkpoint.h"
#include "train/data.h"
#include "train/dist/distributed.h"
#include "train/io/fileio.h"
#include "train/optim.h"
#include "train/io/safetensors.h"

namespace ctx {

nlohmann::json train_options_to_json(const TrainOptions& o) {
  return {{"data", o.data}, {"out", o.out}, {"steps", o.steps}, {"batch", o.batch}, {"accum", o.accum},
          {"deterministic", o.deterministic},
          {"context", o.context}, {"optimizer", o.optimizer}, {"lr", o.lr}, {"min_lr", o.min_lr},
          {"warmup", o.warmup}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps},
          {"weight_decay", o.weight_decay}, {"momentum", o.momentum}, {"grad_clip", o.grad_clip},
          {"val_fraction", o.val_fraction}, {"log_interval", o.log_interval},
          {"eval_interval", o.eval_interval}, {"eval_batches", o.eval_batches},
          {"ckpt_interval", o.ckpt_interval}, {"seed", o.seed}, {"plot", o.plot}, {"quiet", o.quiet}};
}

TrainOptions train_options_from_json(const nlohmann::json& j, const std::string& source) {
  TrainOptions o;
  nlohmann::json ref = train_options_to_json(o);
  CTX_CHECK(j.is_object(), source, ": train options must be a JSON object");
  for (auto& kv : j.items()) {
    CTX_CHECK(ref.contains(kv.key()), source, ": unknown train option '", kv.key(), "'");
    CTX_CHECK(std::string(ref[kv.key()].type_name()) == kv.value().type_name() ||
                  (ref[kv.key()].is_number() && kv.value().is_number()),
              source, ": train option '", kv.key(), "' must be ", ref[kv.key()].type_name(), ", got ",
              kv.value().dump());
    ref[kv.key()] = kv.value();
  }
  o.data = ref["data"]; o.out = ref["out"]; o.steps = ref["steps"]; o.batch = ref["batch"];
  o.accum = ref["accum"]; o.deterministic = ref["deterministic"]; o.context = ref["context"]; o.optimizer = ref["optimizer"]; o.lr = ref["lr"];
  o.min_lr = ref["min_lr"]; o.warmup = ref["warmup"]; o.beta1 = ref["beta1"]; o.beta2 = ref["beta2"];
  o.eps = ref["eps"]; o.weight_decay = ref["weight_decay"]; o.momentum = ref["momentum"];
  o.grad_clip = ref["grad_clip"]; o.val_fraction = ref["val_fraction"]; o.log_interval = ref["log_interval"];
  o.eval_interval = ref["eval_interval"]; o.eval_batches = ref["eval_batches"];
  o.ckpt_interval = ref["ckpt_interval"]; o.seed = ref["seed"]; o.plot = ref["plot"]; o.quiet = ref["quiet"];
  return o;
}

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

std::string fmt_duration(double sec) {
  char b[32];
  if (sec < 0 || !std::isfinite(sec)) return "?";
  int64_t s = (int64_t)sec;
  if (s >= 3600) std::snprintf(b, sizeof b, "%" PRId64 "h%02" PRId64 "m", s / 3600, (s / 60) % 60);
  else std::snprintf(b, sizeof b, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
  return b;
}

// Mean validation loss (nats / token) over the first `batches` batches of consecutive windows;
// *bpb gets the bits per byte of the same windows (the bytes their target tokens stand for).
double validation_loss(nn::GPT& model, const Corpus& c, int64_t B, int64_t T, int64_t batches,
                       const Tokenizer& tok, double* bpb) {
  NoGradGuard ng;
  bool was = model.is_training();
  model.eval();
  int64_t windows = ((int64_t)c.val.size() - 1) / T;
  int64_t nb = std::min(batches, windows / B);
  if (nb == 0) { B = std::max<int64_t>(1, windows); nb = 1; }
  // Under MPI rank r evaluates batches r, r + N, ... and the sums are reduced (same batches,
  // same mean as one process; only the summation order differs).
  double total = 0;
  for (int64_t i = dist::rank(); i < nb; i += dist::size()) {
    auto [x, y] = sequential_batch(c.val, i * B, B, T);
    total += to_host(model.loss(x, y).data()).item();  // host batches move to the model's device in GPT
  }
  dist::allreduce_sum(&total, 1);
  model.train(was);
  int64_t bytes = 0;  // windows 0 .. nb*B-1 of sequential_batch: targets val[w*T+1 .. w*T+T]
  for (int64_t w = 0; w < nb * B; ++w)
    for (int64_t t = 1; t <= T; ++t) bytes += (int64_t)tok.token_text(c.val[(size_t)(w * T + t)]).size();
  *bpb = bytes > 0 ? total / (double)nb * (double)(nb * B * T) / std::log(2.0) / (double)bytes : 0.0;
  return total / (double)nb;
}

void plot(const std::string& out) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::printf("plot: gnuplot not found; skipping %s/loss.png (install gnuplot-nox)\n", out.c_str());
    return;
  }
  std::string script = std::string(CTXLAB_SOURCE_DIR) + "/scripts/plot_loss.gp";
  std::string cmd = "gnuplot -e \"dir='" + out + "'\" '" + script + "' 2>/dev/null";
  if (std::system(cmd.c_str()) == 0) std::printf("plot: wrote %s/loss.png\n", out.c_str());
  else std::printf("plot: gnuplot failed; see %s\n", script.c_str());
}

}  // namespace

// Every option in range, named as its command-line flag (train and finetune share these; a
// resumed run's saved options pass through here too).
void validate_train_options(const TrainOptions& o) {
  auto positive_int = [](int64_t v, const char* flag) {
    CTX_CHECK(v >= 1, flag, " must be a positive integer, got ", v);
  };
  auto at_least_zero = [](int64_t v, const char* flag, const char* zero) {
    CTX_CHECK(v >= 0, flag, " must be >= 0 (0: ", zero, "), got ", v);
  };
  auto number_in = [](double v, double lo, bool lo_open, double hi, bool hi_open, const char* flag) {
    const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    if (std::isinf(hi)) CTX_CHECK(ok, flag, " must be a finite number ", lo_open ? "> " : ">= ", lo, ", got ", v);
    CTX_CHECK(ok, flag, " must be in ", lo_open ? "(" : "[", lo, ", ", hi, hi_open ? ")" : "]", ", got ", v);
  };
  const double inf = std::numeric_limits<double>::infinity();
  positive_int(o.steps, "--steps");
  positive_int(o.batch, "--batch");
  positive_int(o.accum, "--accum");
  CTX_CHECK(o.context == -1 || o.context >= 1, "--context must be a positive integer, got ", o.context);
  CTX_CHECK(o.optimizer == "adamw" || o.optimizer == "sgd", "--optimizer must be adamw or sgd, got '", o.optimizer,
            "'");
  number_in(o.lr, 0, true, inf, true, "--lr");
  number_in(o.min_lr, 0, false, o.lr, false, "--min-lr (at most --lr)");
  at_least_zero(o.warmup, "--warmup", "no warmup");
  number_in(o.beta1, 0, false, 1, true, "--beta1");
  number_in(o.beta2, 0, false, 1, true, "--beta2");
  number_in(o.eps, 0, true, inf, true, "AdamW eps");
  number_in(o.weight_decay, 0, false, inf, true, "--weight-decay");
  number_in(o.momentum, 0, false, 1, true, "--momentum");
  number_in(o.grad_clip, 0, false, inf, true, "--grad-clip (0: off)");
  number_in(o.val_fraction, 0, true, 1, true, "--val-fraction");
  positive_int(o.log_interval, "--log-interval");
  at_least_zero(o.eval_interval, "--eval-interval", "at the end only");
  positive_int(o.eval_batches, "--eval-batches");
  at_least_zero(o.ckpt_interval, "--ckpt-interval", "a checkpoint at the end only");
}

TrainResult train(nn::GPT& model, const TrainOptions& opt, int64_t start_step, const std::string& resume_dir,
                  int64_t stop_after, const std::function<void(int64_t, bool)>& after_step) {
  validate_train_options(opt);
  CTX_CHECK(stop_after <= 0 || stop_after > start_step, "--stop-after ", stop_after, ": the run is already at step ",
            start_step, " (--stop-after counts the run's steps from its start)");
  const int64_t T = opt.context > 0 ? opt.context : model.cfg.context;
  model.pe->check_length(T);
  // --deterministic: thread-count-invariant kernels too (the GEMMs' blocks fixed by the shape)
  const DeterministicScope deterministic_kernels(opt.deterministic);
  // Data parallel (docs/distributed.md): every rank draws the same global batch and trains on
  // its rows [r0, r1); rank 0 alone prints and writes files.
  const auto [r0, r1] = dist::batch_rows(opt.batch, "--batch");
  const bool root = dist::is_root();
  const bool quiet = opt.quiet || !root;
  std::string data_path = opt.data.empty() ? default_corpus_path() : opt.data;
  const Tokenizer& tok = opt.tokenizer ? *opt.tokenizer : *byte_tokenizer();
  CTX_CHECK(tok.vocab_size() == model.cfg.vocab_size, "train: the tokenizer (", tok.describe(), ") has ",
            tok.vocab_size(), " tokens but the model's vocab_size is ", model.cfg.vocab_size);
  Corpus corpus = load_corpus(data_path, opt.val_fraction, T, &tok);
  std::error_code ec;
  if (root) std::filesystem::create_directories(opt.out, ec);
  CTX_CHECK(!ec, "train: cannot create the run directory ", opt.out, ": ", ec.message());

  BatchSampler sampler(&corpus.train, opt.seed);
  // Encodings with segment memory (xl with mem_len > 0) train on consecutive segments, each
  // batch row continuing the previous batch's row, with the memory carried over (detached).
  const bool segments = model.pe->memory_length() > 0;
  std::unique_ptr<SegmentSampler> seg;
  if (segments) seg = std::make_unique<SegmentSampler>(&corpus.train, opt.batch, T);
  model.dropout_rng.seed_with(opt.seed ^ 0x5DEECE66DULL);
  nn::NamedParams params = model.named_parameters();
  std::unique_ptr<Optimizer> optim;
  if (opt.optimizer == "adamw")
    optim = std::make_unique<AdamW>(params, AdamWOptions{opt.lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay});
  else
    optim = std::make_unique<SGD>(params, opt.momentum, opt.weight_decay);
  dist::check_same_parameters(params, start_step > 0 ? "after loading the checkpoint" : "after initialisation");
  AdamW* adamw = dynamic_cast<AdamW*>(optim.get());

  if (start_step > 0) {
    std::string op = resume_dir + "/model.optim.safetensors";
    SafetensorsFile f = load_safetensors(op);
    optim->load_state(f.tensors, op);
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
    optim->steps = n;
    rng_from_string(sampler.rng(), get("data_rng"), op);
    rng_from_string(model.dropout_rng, get("dropout_rng"), op);
  }

  auto save = [&](int64_t step) {
    std::map<std::string, std::string> meta{{"step", std::to_string(step)},
                                            {"optimizer_steps", std::to_string(optim->steps)},
                                            {"data_rng", rng_to_string(sampler.rng())},
                                            {"dropout_rng", rng_to_string(model.dropout_rng)},
                                            {"train_options", train_options_to_json(opt).dump()}};
    // Two files cannot be replaced in one atomic step. The optimizer state that matches the
    // model on disk is therefore kept as model.optim.prev.safetensors until the new model is in
    // place: a crash at any point leaves model.safetensors with a matching optimizer file,
    // model.optim.safetensors or the .prev one, and --resume picks it (see cli_train.cpp).
    const std::string op = opt.out + "/model.optim.safetensors";
    const std::string pp = opt.out + "/model.optim.prev.safetensors";
    std::error_code rec;
    std::filesystem::rename(op, pp, rec);  // no such file at a run's first save
    CTX_CHECK(!rec || rec == std::errc::no_such_file_or_directory, "train: cannot rename ", op, " to ",
              pp, ": ", rec.message());
    save_safetensors(op, optim->state(), meta);
    std::map<std::string, std::string> model_meta = tokenizer_metadata(tok);
    model_meta["train_options"] = train_options_to_json(opt).dump();
    save_checkpoint(opt.out + "/model.safetensors", model, step, model_meta);
    std::filesystem::remove(pp, rec);
  };

  // A run killed after its last checkpoint has logged steps past it; the resumed run logs them
  // again, so drop those rows (and a line cut short by the kill) first.
  if (start_step > 0 && root) {
    auto keep_upto = [&](const std::string& path, bool jsonl) {
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
        if (st >= 0 && st <= start_step) kept += line + "\n";
      }
      if (kept.size() != text.size()) write_file_atomic(path, {{kept.data(), kept.size()}}, "train: log");
    };
    keep_upto(opt.out + "/metrics.jsonl", true);
    keep_upto(opt.out + "/train.csv", false);
    keep_upto(opt.out + "/val.csv", false);
  }

  // A new run over an old one replaces its files: say so (even under --quiet), once the inputs
  // are known to be good, and how to continue the old one instead.
  if (start_step == 0 && root && std::filesystem::exists(opt.out + "/model.safetensors"))
    std::fprintf(stderr, "train: %s already holds a run; this new run replaces its checkpoint and logs "
                 "(`ctxlab train --resume %s` continues the old one instead)\n", opt.out.c_str(), opt.out.c_str());
  // Only rank 0 opens the logs (streams left closed on the other ranks write nothing).
  const auto mode = start_step > 0 ? std::ios::app : std::ios::trunc;
  std::ofstream jsonl, tcsv, vcsv;
  if (root) {
    jsonl.open(opt.out + "/metrics.jsonl", mode);
    tcsv.open(opt.out + "/train.csv", mode);
    vcsv.open(opt.out + "/val.csv", mode);
  }
  if (start_step == 0 && root) {
    tcsv << "step,loss,lr,grad_norm,ms,tok_s\n";
    vcsv << "step,val_loss,val_bpb\n";
  }

  model.train();
  model.reset_memory();
  if (!quiet && dist::active()) std::printf("distributed: %s; global batch %lld = %lld rows per rank\n",
                                           dist::describe().c_str(), (long long)opt.batch, (long long)(r1 - r0));
  if (segments && !quiet)
    std::printf("segments: %s keeps %lld positions of memory; training on %lld consecutive segments of %lld "
                "tokens per stream%s\n", model.pe->type().c_str(), (long long)model.pe->memory_length(),
                (long long)seg->segments(), (long long)T,
                start_step > 0 ? " (resumed: the first segment starts without memory)" : "");
  TrainResult res;
  auto t_start = std::chrono::steady_clock::now();
  double window_ms = 0, window_tokens = 0, last_loss = 0;
  int64_t timed_steps = 0;
  double allreduce_ms = 0;  // gradient averaging over the timed steps (distributed runs)
  // No host round trip inside a step (docs/cuda.md): each micro-batch's loss and each step's
  // squared gradient norm are copied (device to device) into these buffers, and read back in
  // one copy each when the steps are reported: at every logging interval, and at the steps that
  // evaluate, checkpoint or stop. [log_interval * accum] losses and [log_interval] norms.
  const int64_t window = opt.log_interval;
  Tensor loss_hist, norm_hist;
  struct Pending { int64_t step; double lr, ms; };
  std::vector<Pending> pending;
  pending.reserve((size_t)window);
  // --deterministic: each micro-batch runs as its canonical shards, and the gradients of every
  // shard of every micro-batch are summed in one pairwise tree: the same bits whatever the number
  // of ranks, --accum or threads (train/dist/grad_tree.h). Otherwise one piece per micro-batch, and
  // the micro-batches accumulate in order. XL's segments keep one memory per stream: one piece.
  const std::vector<std::pair<int64_t, int64_t>> shards =
      opt.deterministic && !segments ? canonical_shards(r1 - r0, T)
                                     : std::vector<std::pair<int64_t, int64_t>>{{0, r1 - r0}};
  const int64_t micro_steps = opt.deterministic ? opt.accum * (int64_t)shards.size() : 1;
  GradTree grad_tree(params);
  for (int64_t step = start_step; step < opt.steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    double lr = lr_warmup_cosine(step, opt.warmup, opt.steps, opt.lr, opt.min_lr);
    const int64_t slot = (int64_t)pending.size();
    for (int64_t a = 0; a < opt.accum; ++a) {
      Tensor x, y;
      if (segments) {
        bool starts_over = false;
        std::tie(x, y) = seg->get(step * opt.accum + a, &starts_over);
        if (starts_over) model.reset_memory();
      } else {
        std::tie(x, y) = sampler.next(opt.batch, T);
      }
      if (dist::size() > 1) {  // this rank's rows of the global batch [B, T] -> [B/N, T]
        x = x.slice0(r0, r1).clone();
        y = y.slice0(r0, r1).clone();
      }
      // one forward/backward per canonical shard (train/dist/grad_tree.h), summed in the tree
      const int64_t k = slot * opt.accum + a;
      for (size_t si = 0; si < shards.size(); ++si) {
        const auto [b0, b1] = shards[si];
        const bool whole = shards.size() == 1;
        Variable loss = model.loss(whole ? x : x.slice0(b0, b1), whole ? y : y.slice0(b0, b1), /*use_memory=*/segments);
        if (!loss_hist.defined()) loss_hist = Tensor::zeros({window * opt.accum}, loss.dtype(), loss.data().device());
        // this shard's share of the micro-batch's mean loss (exact for halves: powers of two)
        const double share = (double)(b1 - b0) / (double)(r1 - r0);
        if (!whole) loss = scale(loss, share);
        Tensor hist = loss_hist.slice0(k, k + 1);
        if (si == 0)
          hist.copy_from(loss.data().view({1}));
        else
          backend_of(hist).binary(BinaryOp::Add, hist, loss.data().view({1}), hist);
        if (opt.accum > 1) loss = scale(loss, 1.0 / (double)opt.accum);
        loss.backward();
        const bool last_micro = a + 1 == opt.accum && si + 1 == shards.size();
        if (micro_steps > 1 && !last_micro) grad_tree.push();
      }
    }
    if (micro_steps > 1) grad_tree.finish();
    if (dist::size() > 1) {  // gradients averaged over the ranks: the global batch's mean
      auto ta = std::chrono::steady_clock::now();
      const FlatParams* fp = adamw ? adamw->flat() : nullptr;
      bool views = fp != nullptr;
      for (size_t i = 0; views && i < params.size(); ++i)
        if (params[i].second.grad().defined() && !fp->grad_is_view(i)) views = false;
      dist::average_gradients(params, fp ? &fp->grads : nullptr, views);
      if (step > start_step) allreduce_ms += std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - ta).count();
    }
    // clip_grad_norm + step (fused for AdamW: the norm stays on the device)
    const Tensor norm_sq = optim->clip_and_step_deferred(lr, opt.grad_clip);
    if (!norm_hist.defined()) norm_hist = Tensor::zeros({window}, DType::F64, norm_sq.device());
    norm_hist.slice0(slot, slot + 1).copy_from(norm_sq.device() == norm_hist.device() ? norm_sq
                                                                                      : norm_sq.to(norm_hist.device()));
    optim->zero_grad();
    const bool last = step + 1 == opt.steps;
    const bool stop = stop_after > 0 && step + 1 == stop_after && !last;
    const bool evaluate = (opt.eval_interval > 0 && (step + 1) % opt.eval_interval == 0) || last;
    const bool checkpoint = (opt.ckpt_interval > 0 && (step + 1) % opt.ckpt_interval == 0) || last || stop;
    const bool print = !quiet && ((step + 1) % opt.log_interval == 0 || last || step == start_step);
    // every rank reports at the same steps (the losses are averaged over the ranks there), so this
    // must not depend on `quiet`, which differs between rank 0 and the others
    const bool report = (step + 1) % window == 0 || last || step == start_step || stop || evaluate || checkpoint;
    pending.push_back({step, lr, 0.0});
    if (!report) {
      pending.back().ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (after_step) after_step(step + 1, false);
      continue;
    }
    // The steps since the last report: one copy of each buffer (this waits for the device).
    const Tensor hl = to_host(loss_hist), hn = to_host(norm_hist);
    auto t1 = std::chrono::steady_clock::now();
    pending.back().ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    std::vector<double> losses(pending.size(), 0.0);
    for (size_t i = 0; i < pending.size(); ++i)
      for (int64_t a = 0; a < opt.accum; ++a) losses[i] += hl.at((int64_t)i * opt.accum + a);
    // Under MPI: every rank's loss on its own rows (kept per rank in metrics.jsonl as "rank_loss",
    // which shows that the ranks train on different slices), and their mean, the global batch's.
    const int nranks = dist::size();
    std::vector<double> rank_losses;
    if (nranks > 1) {
      rank_losses = dist::allgather(losses.data(), (int)losses.size());
      for (size_t i = 0; i < losses.size(); ++i) {
        double sum = 0;
        for (int rk = 0; rk < nranks; ++rk) sum += rank_losses[(size_t)rk * losses.size() + i];
        losses[i] = sum / (double)nranks;
      }
    }
    double loss = 0, gnorm = 0, ms = 0, tok_s = 0;
    const double tokens = (double)(opt.batch * opt.accum * T);
    for (size_t i = 0; i < pending.size(); ++i) {
      const Pending& p = pending[i];
      loss = losses[i] / (double)opt.accum;
      gnorm = std::sqrt(hn.at((int64_t)i));
      ms = p.ms;
      CTX_CHECK(std::isfinite(loss), "train: loss became ", loss, " at step ", p.step + 1,
                " (lower --lr or enable --grad-clip)");
      if (p.step > start_step) { window_ms += ms; window_tokens += tokens; ++timed_steps; }  // skip warm-up step
      tok_s = tokens / (ms / 1000.0);
      tcsv << p.step + 1 << "," << loss << "," << p.lr << "," << gnorm << "," << ms << "," << tok_s << "\n";
      nlohmann::json row{{"step", p.step + 1}, {"loss", loss}, {"lr", p.lr}, {"grad_norm", gnorm},
                         {"ms", ms}, {"tok_s", tok_s}};
      if (nranks > 1) {
        std::vector<double> per_rank((size_t)nranks);
        for (int rk = 0; rk < nranks; ++rk)
          per_rank[(size_t)rk] = rank_losses[(size_t)rk * pending.size() + i] / (double)opt.accum;
        row["rank_loss"] = per_rank;
      }
      jsonl << row.dump() << "\n";
    }
    pending.clear();
    last_loss = loss;
    if (print) {
      double avg_ms = timed_steps ? window_ms / timed_steps : ms;
      double avg_tok = timed_steps ? window_tokens / (window_ms / 1000.0) : tok_s;
      std::printf("step %5" PRId64 "/%" PRId64 " | loss %.4f | lr %.2e | norm %.2f | %.0f ms | %.0f tok/s | ETA %s\n",
                  step + 1, opt.steps, loss, lr, gnorm, avg_ms, avg_tok,
                  fmt_duration(avg_ms / 1000.0 * (double)(opt.steps - step - 1)).c_str());
      std::fflush(stdout);
    }
    if (evaluate) {
      std::vector<Tensor> mem = model.memory_state();  // validation windows stand alone
      double vbpb = 0;
      double vl = validation_loss(model, corpus, opt.batch, T, opt.eval_batches, tok, &vbpb);
      model.set_memory_state(mem);
      res.final_val_loss = vl;
      vcsv << step + 1 << "," << vl << "," << vbpb << "\n";
      jsonl << nlohmann::json{{"step", step + 1}, {"val_loss", vl}, {"val_bpb", vbpb}}.dump() << "\n";
      if (!quiet)
        std::printf("step %5" PRId64 " | val loss %.4f | ppl %.2f | %.3f bits/byte\n", step + 1, vl,
                    std::exp(vl), vbpb);
    }
    jsonl.flush();
    tcsv.flush();
    vcsv.flush();
    if (checkpoint && root) save(step + 1);
    if (after_step) after_step(step + 1, true);
    if (stop) {
      if (!quiet) std::printf("stopping after step %lld (--stop-after); continue with --resume %s\n",
                                  (long long)(step + 1), opt.out.c_str());
      res.steps = step + 1;
      res.final_train_loss = last_loss;
      return res;
    }
  }
  res.steps = opt.steps;
  res.final_train_loss = last_loss;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (!quiet && dist::size() > 1 && timed_steps > 0)
    std::printf("distributed: gradient allreduce %.3f ms per step (%.1f%% of %.1f ms), %lld floats\n",
                allreduce_ms / (double)timed_steps, 100.0 * allreduce_ms / window_ms, window_ms / (double)timed_steps,
                (long long)(adamw && adamw->flat() ? adamw->flat()->total : 0));
  if (!quiet)
    std::printf("done: %" PRId64 " steps in %s; checkpoint %s/model.safetensors\n", opt.steps,
                fmt_duration(res.seconds).c_str(), opt.out.c_str());
  if (opt.plot && root) plot(opt.out);
  return res;
}

}  // namespace ctx
