// train/trainer.cpp — the training loop (see trainer.h): a Trainer holds a run's parts (data,
// optimizer, checkpointer, run log) and step() takes one optimizer step. The logs and progress
// lines are train/run_log.h's, the checkpoints train/checkpointer.h's, the validation loss
// train/eval.h's, the options' JSON and range checks train/train_options.cpp's.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include <unistd.h>

#include "core/determinism.h"
#include "core/device_table.h"  // to_host
#include "train/checkpointer.h"
#include "train/data.h"
#include "train/dist/distributed.h"
#include "train/dist/grad_tree.h"
#include "train/eval.h"
#include "train/io/limits.h"
#include "train/optim.h"
#include "train/run_dir.h"
#include "train/run_log.h"
#include "train/task_mix.h"

namespace ctx {

namespace {

using Clock = std::chrono::steady_clock;

// SIGINT / SIGTERM while the loop runs: the first asks the run to stop after its step (with a
// checkpoint); a second ends the process at once, as the default action would.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop_signal = sig;
  static const char msg[] = "\ntrain: interrupted; finishing this step and writing a checkpoint (again to quit at once)\n";
  const ssize_t ignored = ::write(2, msg, sizeof msg - 1);
  (void)ignored;
}

// Installs the handlers for the life of the loop, and puts back the previous ones.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_, old_term_;
};

// The signal that stops the run, the same on every rank (the largest any rank received).
int agreed_stop_signal() {
  double sig = (double)g_stop_signal;
  if (dist::size() > 1) {
    const std::vector<double> all = dist::allgather(&sig, 1);
    for (double v : all) sig = std::max(sig, v);
  }
  return (int)sig;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The run's tokens (training and validation split) from opt.data or the shipped corpus, once the
// tokenizer is known to fit the model; the run directory is created (rank 0).
Corpus open_corpus(const nn::GPT& model, const TrainOptions& opt, int64_t T, const Tokenizer& tok, bool root) {
  DataSpec spec;
  spec.data = opt.data.empty() ? default_corpus_path() : opt.data;
  spec.val_data = opt.val_data;
  spec.val_fraction = opt.val_fraction;
  spec.field = opt.data_field;
  CTX_CHECK(tok.vocab_size() == model.cfg.vocab_size, "train: the tokenizer (", tok.describe(), ") has ",
            tok.vocab_size(), " tokens but the model's vocab_size is ", model.cfg.vocab_size);
  Corpus corpus = load_corpus(spec, T, &tok);
  std::error_code ec;
  if (root) std::filesystem::create_directories(opt.out, ec);
  CTX_CHECK(!ec, "train: cannot create the run directory ", opt.out, ": ", ec.message());
  return corpus;
}

std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& opt, const nn::NamedParams& params) {
  if (opt.optimizer == "adamw")
    return std::make_unique<AdamW>(params, AdamWOptions{opt.lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay});
  return std::make_unique<SGD>(params, opt.momentum, opt.weight_decay);
}

// What a step does besides training, from its number alone: the same on every rank.
struct StepEvents {
  bool last = false, stop = false, evaluate = false, checkpoint = false;
  bool print = false;   // a progress line (rank 0, not --quiet)
  bool report = false;  // read the losses and norms back and log them (every rank)
};

// Where a run starts and ends, as train() was given it (after_step: the caller's, by reference).
struct RunSpan {
  int64_t start_step;
  const std::string& resume_dir;
  int64_t stop_after;
  const std::function<void(int64_t, bool)>& after_step;
};

class Trainer {
 public:
  Trainer(nn::GPT& model, const TrainOptions& opt, int64_t T, const RunSpan& span);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  TrainResult run();

 private:
  bool step(int64_t s);  // false: --stop-after ends the run after this step
  std::pair<Tensor, Tensor> batch(int64_t s, int64_t a);
  void forward_backward(const Tensor& x, const Tensor& y, int64_t k, int64_t a);
  void average_gradients();
  void record_norm(const Tensor& norm_sq, int64_t slot);
  StepEvents events(int64_t s) const;
  std::vector<double> pending_losses(const Tensor& loss_hist, std::vector<double>* rank_losses) const;
  void report(int64_t s, double lr, Clock::time_point t0, bool print);
  void evaluate(int64_t s);
  void print_start() const;
  void finish();

  nn::GPT& model_;
  const TrainOptions& opt_;
  const int64_t T_;  // training sequence length
  const RunSpan span_;
  // Data parallel (docs/distributed.md): every rank draws the same global batch and trains on
  // its rows [r0_, r1_); rank 0 alone prints and writes files.
  int64_t r0_ = 0, r1_ = 0;
  const bool root_, quiet_;
  const Tokenizer& tok_;
  Corpus corpus_;
  BatchSampler sampler_;
  // Encodings with segment memory (xl with mem_len > 0) train on consecutive segments, each
  // batch row continuing the previous batch's row, with the memory carried over (detached).
  const bool segments_;
  std::unique_ptr<SegmentSampler> seg_;
  // --task-mix: task rows in the batches, trained on their answers (nn::GPT::masked_loss)
  std::unique_ptr<TaskMixer> mixer_;
  // "randomized": M (POSENC_SPEC §7.3; 0 = off) and this step's draw
  int64_t randomized_ = 0;
  Positions positions_;
  nn::NamedParams params_;
  std::unique_ptr<Optimizer> optim_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<RunLog> log_;
  RunDirLock run_dir_;     // rank 0: the run directory, locked for the run's life
  int stop_signal_ = 0;    // SIGINT / SIGTERM received (agreed over the ranks)
  // --deterministic: each micro-batch runs one sequence at a time (a leaf), and the gradients of
  // every leaf of every micro-batch, on every rank, are summed in one fixed tree: the same bits
  // whatever the number of ranks, --accum or threads (train/dist/grad_tree.h). Otherwise one piece
  // per micro-batch, the micro-batches accumulate in order and the ranks average. XL's segments
  // keep one memory per stream: one piece per micro-batch, a local tree over them, then the mean.
  std::vector<std::pair<int64_t, int64_t>> shards_;
  bool tree_ = false;         // --deterministic: the gradients go through grad_tree_
  bool tree_ranks_ = false;   // ... and its leaves are sequences, summed across the ranks
  std::unique_ptr<GradTree> grad_tree_;
  // No host round trip inside a step (docs/cuda.md): each micro-batch's loss and each step's
  // squared gradient norm are copied (device to device) into these buffers, and read back in
  // one copy each when the steps are reported: at every logging interval, and at the steps that
  // evaluate, checkpoint or stop. [log_interval * accum] losses and [log_interval] norms.
  Tensor loss_hist_, norm_hist_;
  // their length in steps: a report comes at least every log_interval steps and at the last
  const int64_t history_ = std::max<int64_t>(1, std::min(opt_.log_interval, opt_.steps));
  struct Pending { int64_t step; double lr, ms; };
  std::vector<Pending> pending_;  // the steps since the last report
  TrainResult res_;
  double window_ms_ = 0, window_tokens_ = 0, last_loss_ = 0;
  int64_t timed_steps_ = 0;  // steps after the first, whose times make the averages
  double allreduce_ms_ = 0;  // gradient averaging (or the tree's gather) over the timed steps (distributed runs)
};

Trainer::Trainer(nn::GPT& model, const TrainOptions& opt, int64_t T, const RunSpan& span)
    : model_(model), opt_(opt), T_(T), span_(span),
      root_(dist::is_root()), quiet_(opt.quiet || !root_),
      tok_(opt.tokenizer ? *opt.tokenizer : *byte_tokenizer()),
      corpus_(), sampler_(&corpus_.train, opt.seed), segments_(model.pe->memory_length() > 0) {
  std::tie(r0_, r1_) = dist::batch_rows(opt.batch, "--batch");
  if (opt_.window > 0) {  // the same window as eval --window: Attention::set_window, the fused kernels' mask
    CTX_CHECK(!segments_, "--window: ", model_.pe->type(), " with segment memory (mem_len ",
              model_.pe->memory_length(), ") already limits attention to its memory; use mem_len 0 with --window");
    model_.set_attention_window(opt_.window);
  }
  corpus_ = open_corpus(model_, opt_, T_, tok_, root_);
  if (!opt_.task_mix.empty()) {
    CTX_CHECK(!segments_, "--task-mix: ", model_.pe->type(), " with segment memory trains on consecutive segments "
              "of one text; task rows would break them (use mem_len 0)");
    mixer_ = std::make_unique<TaskMixer>(parse_task_mix(opt_.task_mix), opt_.task_params, tok_, &corpus_.train, T_);
  }
  if (root_) run_dir_ = take_run_dir(opt_.out, "train", span_.start_step > 0, opt_.force);
  if (segments_) seg_ = std::make_unique<SegmentSampler>(&corpus_.train, opt_.batch, T_);
  model_.dropout_rng.seed_with(opt_.seed ^ 0x5DEECE66DULL);
  model_.position_rng.seed_with(opt_.seed ^ 0x9E3779B97F4A7C15ULL);
  randomized_ = posenc_randomized(model_.cfg.posenc, model_.cfg.context, "train");
  CTX_CHECK(randomized_ == 0 || T_ <= randomized_, "train: --context ", T_, " exceeds posenc.randomized = ",
            randomized_, " (POSENC_SPEC §7.3 draws T distinct positions from 0..M-1)");
  params_ = model_.named_parameters();
  optim_ = make_optimizer(opt_, params_);
  dist::check_same_parameters(params_, span_.start_step > 0 ? "after loading the checkpoint" : "after initialisation");
  checkpointer_ = std::make_unique<Checkpointer>(opt_, model_, *optim_, sampler_.rng(), tok_);
  if (span_.start_step > 0) checkpointer_->restore(span_.resume_dir);
  checkpointer_->set_last_saved(span_.start_step);
  // A new run over an old one (--force) replaces its files: say so (even under --quiet).
  if (span_.start_step == 0 && root_ && std::filesystem::exists(opt_.out + "/model.safetensors"))
    std::fprintf(stderr, "train: %s already holds a run; this new run replaces its checkpoint and logs "
                 "(`ctxlab train --resume %s` continues the old one instead)\n", opt_.out.c_str(), opt_.out.c_str());
  log_ = std::make_unique<RunLog>(opt_.out, span_.start_step, root_, quiet_);
  tree_ = opt_.deterministic;
  tree_ranks_ = tree_ && !segments_;
  shards_ = tree_ranks_ ? sequence_shards(r1_ - r0_) : std::vector<std::pair<int64_t, int64_t>>{{0, r1_ - r0_}};
  pending_.reserve((size_t)history_);
}

// One optimizer step: --accum micro-batches forward and backward (each as its shards), the
// gradients averaged over the ranks, clipped and applied; then what the step reports.
bool Trainer::step(int64_t s) {
  const auto t0 = Clock::now();
  const double lr = lr_warmup_cosine(s, opt_.warmup, opt_.steps, opt_.lr, opt_.min_lr);
  const int64_t slot = (int64_t)pending_.size();
  // randomized positions (POSENC_SPEC §7.3): one sorted draw per optimizer step, every row and
  // micro-batch of the step (the same on every rank: the same seed)
  if (randomized_ > 0) positions_ = randomized_positions(model_.position_rng, randomized_, T_);
  for (int64_t a = 0; a < opt_.accum; ++a) {
    const auto [x, y] = batch(s, a);
    forward_backward(x, y, slot * opt_.accum + a, a);
  }
  const auto ta = Clock::now();
  if (tree_) grad_tree_->finish();
  average_gradients();
  if (dist::size() > 1 && s > span_.start_step) allreduce_ms_ += ms_since(ta);
  // clip_grad_norm + step (fused for AdamW: the norm stays on the device)
  record_norm(optim_->clip_and_step_deferred(lr, opt_.grad_clip), slot);
  optim_->zero_grad();
  if (!stop_signal_) stop_signal_ = agreed_stop_signal();
  const StepEvents ev = events(s);
  pending_.push_back({s, lr, 0.0});
  if (!ev.report) {
    pending_.back().ms = ms_since(t0);
    if (span_.after_step) span_.after_step(s + 1, false);
    return true;
  }
  report(s, lr, t0, ev.print);
  if (ev.evaluate) evaluate(s);
  log_->flush();
  if (ev.checkpoint && root_) checkpointer_->save(s + 1);
  if (span_.after_step) span_.after_step(s + 1, true);
  if (ev.stop && stop_signal_ && root_)
    std::fprintf(stderr, "train: stopped by %s after step %lld; checkpoint written to %s; continue with "
                 "`ctxlab train --resume %s`\n", stop_signal_ == SIGINT ? "SIGINT" : "SIGTERM", (long long)(s + 1),
                 opt_.out.c_str(), opt_.out.c_str());
  else if (ev.stop && !quiet_)
    std::printf("stopping after step %lld (--stop-after); continue with --resume %s\n", (long long)(s + 1),
                opt_.out.c_str());
  return !ev.stop;
}

// Micro-batch `a` of step `s`: this rank's rows of the global batch [B, T] -> [B/N, T].
std::pair<Tensor, Tensor> Trainer::batch(int64_t s, int64_t a) {
  Tensor x, y;
  if (segments_) {
    bool starts_over = false;
    std::tie(x, y) = seg_->get(s * opt_.accum + a, &starts_over);
    if (starts_over) model_.reset_memory();
  } else {
    std::tie(x, y) = sampler_.next(opt_.batch, T_);
    if (mixer_) mixer_->apply(x, y, sampler_.rng());
  }
  if (dist::size() > 1) {
    x = x.slice0(r0_, r1_).clone();
    y = y.slice0(r0_, r1_).clone();
  }
  return {x, y};
}

// One forward/backward per shard (--deterministic: per sequence, a leaf of the tree of
// train/dist/grad_tree.h); micro-batch a's loss (this rank's rows) goes to slot k of loss_hist_.
void Trainer::forward_backward(const Tensor& x, const Tensor& y, int64_t k, int64_t a) {
  for (size_t si = 0; si < shards_.size(); ++si) {
    const auto [b0, b1] = shards_[si];
    const bool whole = shards_.size() == 1 && !tree_ranks_;
    const Tensor xs = whole ? x : x.slice0(b0, b1), ys = whole ? y : y.slice0(b0, b1);
    // with task rows: the mean over rows of each row's mean (rows weigh the same, so the shard
    // shares below stay exact)
    const Positions* pos = randomized_ > 0 ? &positions_ : nullptr;
    Variable loss = mixer_ ? model_.masked_loss(xs, ys, pos) : model_.loss(xs, ys, /*use_memory=*/segments_, pos);
    if (!loss_hist_.defined())
      loss_hist_ = Tensor::zeros({history_ * opt_.accum}, loss.dtype(), loss.data().device());
    Tensor hist = loss_hist_.slice0(k, k + 1);
    // this shard's share of the rank's mean loss, for the log
    const Tensor part = whole ? loss.data() : scale(loss, (double)(b1 - b0) / (double)(r1_ - r0_)).data();
    if (si == 0)
      hist.copy_from(part.view({1}));
    else
      backend_of(hist).binary(BinaryOp::Add, hist, part.view({1}), hist);
    // the gradient's scale: a sequence of the tree weighs 1 / (global batch) on every rank, so a
    // leaf does not depend on N (the ranks' sum is then the mean, no 1/N)
    if (tree_ranks_) loss = scale(loss, (double)(b1 - b0) / (double)opt_.batch);
    if (opt_.accum > 1) loss = scale(loss, 1.0 / (double)opt_.accum);
    loss.backward();
    if (tree_) grad_tree_->push(tree_ranks_ ? a * opt_.batch + r0_ + b0 : a);
  }
}

// Gradients averaged over the ranks: the global batch's mean. One allreduce of the optimizer's
// flat gradient buffer when it has one, else one per gradient.
void Trainer::average_gradients() {
  if (dist::size() <= 1 || tree_ranks_) return;  // the tree's sum is the global batch's already
  const Tensor* flat = optim_->flat_grads();
  dist::average_gradients(params_, flat, flat != nullptr);
}

// The step's squared gradient norm (f64 [1] on the device) into slot `slot` of norm_hist_.
void Trainer::record_norm(const Tensor& norm_sq, int64_t slot) {
  if (!norm_hist_.defined()) norm_hist_ = Tensor::zeros({history_}, DType::F64, norm_sq.device());
  norm_hist_.slice0(slot, slot + 1).copy_from(norm_sq.device() == norm_hist_.device() ? norm_sq
                                                                                      : norm_sq.to(norm_hist_.device()));
}

StepEvents Trainer::events(int64_t s) const {
  StepEvents e;
  const int64_t n = s + 1;  // steps done
  e.last = n == opt_.steps;
  e.stop = ((span_.stop_after > 0 && n == span_.stop_after) || stop_signal_ != 0) && !e.last;
  e.evaluate = (opt_.eval_interval > 0 && n % opt_.eval_interval == 0) || e.last;
  e.checkpoint = (opt_.ckpt_interval > 0 && n % opt_.ckpt_interval == 0) || e.last || e.stop;
  e.print = !quiet_ && (n % opt_.log_interval == 0 || e.last || s == span_.start_step);
  // every rank reports at the same steps (the losses are averaged over the ranks there), so this
  // must not depend on `quiet`, which differs between rank 0 and the others
  e.report = n % opt_.log_interval == 0 || e.last || s == span_.start_step || e.stop || e.evaluate || e.checkpoint;
  return e;
}

// The pending steps' losses, summed over their micro-batches. Under MPI: every rank's loss on its
// own rows (*rank_losses, rank-major; kept per rank in metrics.jsonl as "rank_loss", which shows
// that the ranks train on different slices), and their mean, the global batch's.
std::vector<double> Trainer::pending_losses(const Tensor& loss_hist, std::vector<double>* rank_losses) const {
  std::vector<double> losses(pending_.size(), 0.0);
  for (size_t i = 0; i < pending_.size(); ++i)
    for (int64_t a = 0; a < opt_.accum; ++a) losses[i] += loss_hist.at((int64_t)i * opt_.accum + a);
  const int nranks = dist::size();
  if (nranks > 1) {
    *rank_losses = dist::allgather(losses.data(), (int)losses.size());
    for (size_t i = 0; i < losses.size(); ++i) {
      double sum = 0;
      for (int rk = 0; rk < nranks; ++rk) sum += (*rank_losses)[(size_t)rk * losses.size() + i];
      losses[i] = sum / (double)nranks;
    }
  }
  return losses;
}

// The steps since the last report, read back in one copy of each buffer (this waits for the
// device), into the logs; the progress line of step s when `print`.
void Trainer::report(int64_t s, double lr, Clock::time_point t0, bool print) {
  const Tensor hl = to_host(loss_hist_), hn = to_host(norm_hist_);
  pending_.back().ms = ms_since(t0);
  std::vector<double> rank_losses;
  const std::vector<double> losses = pending_losses(hl, &rank_losses);
  const int nranks = dist::size();
  const double tokens = (double)(opt_.batch * opt_.accum * T_);
  RunLog::TrainRow row;
  for (size_t i = 0; i < pending_.size(); ++i) {
    const Pending& p = pending_[i];
    row.step = p.step + 1;
    row.loss = losses[i] / (double)opt_.accum;
    row.lr = p.lr;
    row.grad_norm = std::sqrt(hn.at((int64_t)i));
    row.ms = p.ms;
    CTX_CHECK(std::isfinite(row.loss), "train: loss became ", row.loss, " at step ", p.step + 1,
              " (lower --lr or enable --grad-clip)");
    if (p.step > span_.start_step) { window_ms_ += row.ms; window_tokens_ += tokens; ++timed_steps_; }  // skip warm-up step
    row.tok_s = tokens / (row.ms / 1000.0);
    row.rank_loss.clear();
    for (int rk = 0; nranks > 1 && rk < nranks; ++rk)
      row.rank_loss.push_back(rank_losses[(size_t)rk * pending_.size() + i] / (double)opt_.accum);
    log_->train_row(row);
  }
  pending_.clear();
  last_loss_ = row.loss;
  if (print)
    log_->progress(s + 1, opt_.steps, row.loss, lr, row.grad_norm, timed_steps_ ? window_ms_ / timed_steps_ : row.ms,
                   timed_steps_ ? window_tokens_ / (window_ms_ / 1000.0) : row.tok_s);
}

void Trainer::evaluate(int64_t s) {
  std::vector<Tensor> mem = model_.memory_state();  // validation windows stand alone
  double vbpb = 0;
  double vl = validation_loss(model_, corpus_.val, opt_.batch, T_, opt_.eval_batches, tok_, &vbpb);
  model_.set_memory_state(mem);
  res_.final_val_loss = vl;
  log_->val_row(s + 1, vl, vbpb);
}

void Trainer::print_start() const {
  if (!quiet_ && dist::active()) std::printf("distributed: %s; global batch %lld = %lld rows per rank\n",
                                             dist::describe().c_str(), (long long)opt_.batch, (long long)(r1_ - r0_));
  if (mixer_ && !quiet_) std::printf("task mix: %s (task rows train on their answer tokens only)\n", opt_.task_mix.c_str());
  if (segments_ && !quiet_)
    std::printf("segments: %s keeps %lld positions of memory; training on %lld consecutive segments of %lld "
                "tokens per stream%s\n", model_.pe->type().c_str(), (long long)model_.pe->memory_length(),
                (long long)seg_->segments(), (long long)T_,
                span_.start_step > 0 ? " (resumed: the first segment starts without memory)" : "");
}

TrainResult Trainer::run() {
  model_.train();
  model_.reset_memory();
  print_start();
  const auto t_start = Clock::now();
  grad_tree_ = tree_ranks_ ? std::make_unique<GradTree>(params_, opt_.batch, opt_.accum)
                          : std::make_unique<GradTree>(params_);
  const StopSignals signals;
  for (int64_t s = span_.start_step; s < opt_.steps; ++s) {
    if (!step(s)) {  // stopped by --stop-after or a signal: a checkpoint, no summary
      res_.steps = s + 1;
      res_.final_train_loss = last_loss_;
      res_.signal = stop_signal_;
      return res_;
    }
  }
  res_.steps = opt_.steps;
  res_.final_train_loss = last_loss_;
  res_.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  finish();
  return res_;
}

// The summary lines and the loss plot of a run that reached its last step.
void Trainer::finish() {
  if (!quiet_ && dist::size() > 1 && timed_steps_ > 0)
    std::printf("distributed: gradient allreduce %.3f ms per step (%.1f%% of %.1f ms), %lld floats\n",
                allreduce_ms_ / (double)timed_steps_, 100.0 * allreduce_ms_ / window_ms_,
                window_ms_ / (double)timed_steps_, (long long)optim_->flat_grads_numel());
  if (!quiet_)
    std::printf("done: %" PRId64 " steps in %s; checkpoint %s/model.safetensors\n", opt_.steps,
                fmt_duration(res_.seconds).c_str(), opt_.out.c_str());
  if (opt_.plot && root_) plot_loss(opt_.out);
}

}  // namespace

TrainResult train(nn::GPT& model, const TrainOptions& opt, int64_t start_step, const std::string& resume_dir,
                  int64_t stop_after, const std::function<void(int64_t, bool)>& after_step) {
  validate_train_options(opt);
  CTX_CHECK(stop_after <= 0 || stop_after > start_step, "--stop-after ", stop_after, ": the run is already at step ",
            start_step, " (--stop-after counts the run's steps from its start)");
  const int64_t T = opt.context > 0 ? opt.context : model.cfg.context;
  model.pe->check_length(T);
  check_training_fits(model.cfg, "the model", opt.batch, T, std::min(opt.log_interval, opt.steps) * opt.accum);
  // --deterministic: thread-count-invariant kernels too (the GEMMs' blocks fixed by the shape)
  const DeterministicScope deterministic_kernels(opt.deterministic);
  Trainer trainer(model, opt, T, RunSpan{start_step, resume_dir, stop_after, after_step});
  return trainer.run();
}

}  // namespace ctx
