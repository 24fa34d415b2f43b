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
#include "core/device_table.h"  // to_host, table_cache_stats
#include "core/settings.h"
#include "core/step_graph.h"
#include "train/batch_ring.h"
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
  // forward, backward, clip, update; on `drawn` when given (the step's micro-batches, already drawn)
  void train_step(int64_t s, double lr, int64_t slot, const std::vector<std::pair<Tensor, Tensor>>* drawn = nullptr);
  std::pair<Tensor, Tensor> draw(BatchSampler& sampler, int64_t s, int64_t a);
  std::pair<Tensor, Tensor> batch(int64_t s, int64_t a);
  void stage_ring(int64_t first);
  std::string graph_refusal() const;
  void graph_step(int64_t s, double lr, int64_t slot);
  // hist: the losses' buffer (loss_hist_ unless given), slot k of it
  void forward_backward(const Tensor& x, const Tensor& y, int64_t k, int64_t a, Tensor* hist = nullptr);
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
  // CUDA: the batches of the steps up to each report, staged on the device at the report before
  // them (train/batch_ring.h): a warm step uploads nothing. Runs that draw their batches otherwise
  // (segments, task rows) upload each batch as before.
  std::unique_ptr<BatchRing> ring_;
  // CTXLAB_CUDA_GRAPH=1 (docs/cuda.md "A CUDA Graph of the warm step"): from the third step on,
  // the step's forward, backward, clip and update are recorded once and replayed; the host copies
  // each micro-batch into the recording's input buffers (gx_, gy_: device to device) and writes the
  // optimizer's step constants (AdamW::begin_step) before each replay, and copies the recorded
  // losses (step_loss_) and norm (graph_norm_) into the histories after it.
  std::unique_ptr<StepGraph> graph_;
  static constexpr int64_t kGraphWarmup = 2;  // eager steps first (bf16 plans and copies settle)
  std::vector<Tensor> gx_, gy_;
  Tensor step_loss_, graph_norm_;
  uint64_t graph_evictions_ = 0;  // the table cache's evictions when the step was captured
  int graph_refused_ = 0;         // recordings refused in a row (at 2 the run goes on without a graph)
  AdamW* device_terms_ = nullptr;  // the optimizer, when its step constants live on the device
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
  optim_->anchor_value_bounds();  // (the host's bounds on the parameters that want one, from their values now)
  // A new run over an old one (--force) replaces its files: say so (even under --quiet).
  if (span_.start_step == 0 && root_ && std::filesystem::exists(opt_.out + "/model.safetensors"))
    std::fprintf(stderr, "train: %s already holds a run; this new run replaces its checkpoint and logs "
                 "(`ctxlab train --resume %s` continues the old one instead)\n", opt_.out.c_str(), opt_.out.c_str());
  log_ = std::make_unique<RunLog>(opt_.out, span_.start_step, root_, quiet_);
  tree_ = opt_.deterministic;
  tree_ranks_ = tree_ && !segments_;
  shards_ = tree_ranks_ ? sequence_shards(r1_ - r0_) : std::vector<std::pair<int64_t, int64_t>>{{0, r1_ - r0_}};
  pending_.reserve((size_t)history_);
  if (model_.wte->weight.data().device() != Device::CPU && !segments_ && !mixer_) {
    // at most 256 MiB of batches on the device: a longer interval restages when it runs out
    const int64_t step_bytes = opt_.accum * 2 * (r1_ - r0_) * T_ * (int64_t)sizeof(int64_t);
    const int64_t cap = std::max<int64_t>(1, std::min<int64_t>(history_, (int64_t(256) << 20) / step_bytes));
    ring_ = std::make_unique<BatchRing>(cap, opt_.accum, r1_ - r0_, T_, model_.cfg.vocab_size,
                                        model_.wte->weight.data().device());
  }
  if (setting_flag("CTXLAB_CUDA_GRAPH", true)) {  // (on by default: silent where no device can record)
    const std::string why = graph_refusal();
    const bool cpu = model_.wte->weight.data().device() == Device::CPU;
    if (why.empty()) {
      graph_ = std::make_unique<StepGraph>(backend_of(model_.wte->weight.data()));
      device_terms_ = static_cast<AdamW*>(optim_.get());
      device_terms_->use_device_terms();
    } else if (root_ && (!cpu || setting_env("CTXLAB_CUDA_GRAPH"))) {
      std::fprintf(stderr, "train: no CUDA Graph (CTXLAB_CUDA_GRAPH): %s; training eagerly\n", why.c_str());
    }
  }
}

// Why this run cannot record its step into a CUDA Graph ("" when it can): what the recording
// would freeze must not change between steps, and a step must not talk to the host.
std::string Trainer::graph_refusal() const {
  const Tensor& w = model_.wte->weight.data();
  if (w.device() == Device::CPU || !backend_of(w).can_capture()) return std::string("the model is on ") + device_name(w.device());
  if (!ring_) return "the batches are drawn per step (segment memory or --task-mix)";
  if (dist::size() > 1) return "the gradients are averaged over processes (MPI / NCCL) each step";
  if (tree_) return "--deterministic sums the gradients in a tree on the host's schedule";
  if (randomized_ > 0) return "randomized positions upload a new position table each step";
  const auto* adamw = dynamic_cast<const AdamW*>(optim_.get());
  if (!adamw || !adamw->fused()) return "the optimizer is not the fused AdamW (its constants change each step)";
  return "";
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
  if (ring_ && !ring_->holds(s)) stage_ring(s);
  if (device_terms_) device_terms_->begin_step(lr);
  if (graph_ && s >= span_.start_step + kGraphWarmup)
    graph_step(s, lr, slot);
  else
    train_step(s, lr, slot);
  if (!stop_signal_) stop_signal_ = agreed_stop_signal();
  const StepEvents ev = events(s);
  pending_.push_back({s, lr, 0.0});
  if (!ev.report) {
    pending_.back().ms = ms_since(t0);
    if (span_.after_step) span_.after_step(s + 1, false);
    return true;
  }
  report(s, lr, t0, ev.print);
  if (ev.evaluate) {
    evaluate(s);
    // the evaluation ran the model outside the recording: what the host believes of the model's
    // kept copies may no longer be what the recording writes, so the next step records afresh
    if (graph_) graph_->reset();
  }
  if (ring_ && !ev.stop && s + 1 < opt_.steps) stage_ring(s + 1);  // the next interval's batches, now
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

// The step's training: --accum micro-batches forward and backward (each as its shards), the
// gradients averaged over the ranks, clipped and applied.
void Trainer::train_step(int64_t s, double lr, int64_t slot, const std::vector<std::pair<Tensor, Tensor>>* drawn) {
  for (int64_t a = 0; a < opt_.accum; ++a) {
    const auto [x, y] = drawn ? (*drawn)[(size_t)a] : batch(s, a);
    forward_backward(x, y, slot * opt_.accum + a, a);
  }
  const auto ta = Clock::now();
  if (tree_) grad_tree_->finish();
  average_gradients();
  if (dist::size() > 1 && s > span_.start_step) allreduce_ms_ += ms_since(ta);
  // clip_grad_norm + step (fused for AdamW: the norm stays on the device)
  record_norm(optim_->clip_and_step_deferred(lr, opt_.grad_clip), slot);
  optim_->zero_grad();
}

// The same step as a replay of its recording (recorded first when there is none, or when the
// table cache evicted something since: the recording reads kept tables by their address).
void Trainer::graph_step(int64_t s, double lr, int64_t slot) {
  std::vector<std::pair<Tensor, Tensor>> drawn;
  for (int64_t a = 0; a < opt_.accum; ++a) {
    drawn.push_back(batch(s, a));
    const auto& [x, y] = drawn.back();
    if ((int64_t)gx_.size() <= a) {
      gx_.push_back(Tensor::empty(x.shape(), x.dtype(), x.device()));
      gy_.push_back(Tensor::empty(y.shape(), y.dtype(), y.device()));
    }
    gx_[(size_t)a].copy_from(x);  // device to device
    gy_[(size_t)a].copy_from(y);
    gx_[(size_t)a].set_checked_bound(model_.cfg.vocab_size);  // (the ring's check holds for the copy)
    gy_[(size_t)a].set_checked_bound(model_.cfg.vocab_size);
  }
  // a recording reads kept tables by their address: record afresh when the cache evicted one
  if (graph_->captured() && table_cache_stats().evictions != graph_evictions_) graph_->reset();
  // it also freezes the choices the host made from bounds on parameter values (FIRE's threshold):
  // when one would change, this step runs eagerly (the new choice's tables uploaded on the way)
  // and the next one records afresh
  if (graph_->captured() && !graph_->decisions_hold()) {
    graph_->reset();
    train_step(s, lr, slot, &drawn);
    return;
  }
  const bool recorded_now = !graph_->captured();
  if (!graph_->captured()) {
    if (!step_loss_.defined()) step_loss_ = Tensor::zeros({opt_.accum}, loss_hist_.dtype(), loss_hist_.device());
    graph_evictions_ = table_cache_stats().evictions;
    const Rng dropout_before = model_.dropout_rng;  // the recording draws this step's seeds from it
    const AdamWBounds bounds_before = device_terms_->value_bounds();  // and widens the host's bounds
    try {
      graph_->capture([&] {
        for (int64_t a = 0; a < opt_.accum; ++a) forward_backward(gx_[(size_t)a], gy_[(size_t)a], a, a, &step_loss_);
        graph_norm_ = optim_->clip_and_step_deferred(lr, opt_.grad_clip);
        optim_->zero_grad();
      });
    } catch (const Error& e) {
      // Nothing recorded ran: forget what the host code believed it did, then train eagerly. A
      // first refusal may be passing (a path first taken uploads its tables, which the eager step
      // caches): the next step records again; a second in a row ends the recording for the run.
      const bool give_up = ++graph_refused_ >= 2;
      if (root_) std::fprintf(stderr, "train: step %lld could not be recorded into a CUDA Graph (%s); %s\n",
                              (long long)(s + 1), e.what(), give_up ? "training goes on without it"
                                                                    : "it trains eagerly and the next step records again");
      if (give_up) graph_.reset();
      model_.dropout_rng = dropout_before;
      device_terms_->restore_value_bounds(bounds_before);
      optim_->zero_grad();
      // the weights' kept copies the recording believed it wrote (never written); not their values
      for (auto& np : params_) np.second.data().storage()->drop_bf16_copy();
      train_step(s, lr, slot, &drawn);
      return;
    }
    graph_refused_ = 0;
  }
  graph_->replay(&model_.dropout_rng);  // (this step's dropout seeds written first)
  if (!recorded_now) device_terms_->replayed_update(lr);  // (the recording's host code took its own step)
  loss_hist_.slice0(slot * opt_.accum, (slot + 1) * opt_.accum).copy_from(step_loss_);
  record_norm(graph_norm_, slot);
}

// Micro-batch `a` of step `s` drawn with `sampler` on the host: this rank's rows of the global
// batch [B, T] -> [B/N, T].
std::pair<Tensor, Tensor> Trainer::draw(BatchSampler& sampler, int64_t s, int64_t a) {
  Tensor x, y;
  if (segments_) {
    bool starts_over = false;
    std::tie(x, y) = seg_->get(s * opt_.accum + a, &starts_over);
    if (starts_over) model_.reset_memory();
  } else {
    std::tie(x, y) = sampler.next(opt_.batch, T_);
    if (mixer_) mixer_->apply(x, y, sampler.rng());
  }
  if (dist::size() > 1) {
    x = x.slice0(r0_, r1_).clone();
    y = y.slice0(r0_, r1_).clone();
  }
  return {x, y};
}

// Micro-batch `a` of step `s`: drawn on the host (the sampler advances as always: checkpoints
// save it), and with the ring, the staged device copy of the same draw.
std::pair<Tensor, Tensor> Trainer::batch(int64_t s, int64_t a) {
  auto xy = draw(sampler_, s, a);
  if (!ring_) return xy;
  const auto [hx, hy] = ring_->staged_host(s, a);
  CTX_CHECK(std::memcmp(hx.raw(), xy.first.raw(), hx.nbytes()) == 0 &&
                std::memcmp(hy.raw(), xy.second.raw(), hy.nbytes()) == 0,
            "train: internal error: the batch staged on the device for step ", s + 1,
            " differs from the sampler's draw");
  return ring_->get(s, a);
}

// Stages the steps from `first` up to the next report (at most the ring's capacity), drawn ahead
// from a copy of the sampler: one upload.
void Trainer::stage_ring(int64_t first) {
  int64_t n = 1;
  while (n < ring_->capacity() && first + n - 1 < opt_.steps - 1 && !events(first + n - 1).report) ++n;
  BatchSampler ahead = sampler_;
  ring_->stage(first, n, [&](int64_t s, int64_t a) { return draw(ahead, s, a); });
}

// One forward/backward per shard (--deterministic: per sequence, a leaf of the tree of
// train/dist/grad_tree.h); micro-batch a's loss (this rank's rows) goes to slot k of loss_hist_.
void Trainer::forward_backward(const Tensor& x, const Tensor& y, int64_t k, int64_t a, Tensor* hist_buf) {
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
    Tensor hist = (hist_buf ? *hist_buf : loss_hist_).slice0(k, k + 1);
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
  optim_->anchor_value_bounds();  // read at the report's sync: bounds until the next one start from here
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
  if (graph_ && !quiet_)
    std::printf("CUDA Graph: the step is recorded at step %lld and replayed from then on (CTXLAB_CUDA_GRAPH=0: "
                "eager steps)\n",
                (long long)(span_.start_step + kGraphWarmup + 1));
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
