// core/step_graph.h — a piece of device work (a warm training step) recorded once and replayed:
// a CUDA Graph on CUDA (Backend::capture_begin / capture_end; docs/cuda.md "A CUDA Graph of the
// warm step"). capture() runs the host code once with the device's work recorded, NOT run;
// replay() runs the recording (the captured step included). What the host code computes for the
// device (kernel arguments, pointers, grid sizes) is frozen in the recording: anything that must
// change between replays has to live in device memory, written outside the recording. Dropout is
// handled here: the masks drawn while recording read their seeds from the graph's seed table
// (core/dropout_mask.h), and replay(rng) writes the next step's seeds there first, drawn from the
// same Rng the eager step would draw them from, in the same order. Choices the host code makes from
// what it knows of device values without reading them (a parameter's host-side bound, FIRE's
// threshold) are frozen too: each registers, while recording, a check that it would choose the
// same now (note_recorded_decision), and decisions_hold() runs them before a replay.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "core/dropout_mask.h"
#include "core/error.h"
#include "core/rng.h"

namespace ctx {

// While a StepGraph records (on this thread): registers `same_now`, which says whether the host
// code would make the choice it just made again (a choice taken from a promise about device
// values, VarImpl::value_bound, and frozen in the recording). No-op when nothing records.
void note_recorded_decision(std::function<bool()> same_now);
// Whether a StepGraph is recording on this thread (note_recorded_decision keeps what it is given).
bool decisions_recording();

// A choice the host code makes from what it knows of device values without reading them: made now
// by `choose` and, while a StepGraph records, registered so that a replay first checks that
// `choose` still gives the same answer. Outside a recording nothing is kept (no allocation).
template <class Choose>
auto recorded_choice(const Choose& choose) -> decltype(choose()) {
  const auto made = choose();
  if (decisions_recording()) note_recorded_decision([choose, made] { return choose() == made; });
  return made;
}

// The checks registered while recording: collects them between begin() and end() (StepGraph).
class DecisionRecording {
 public:
  void begin();
  void end();
  std::vector<std::function<bool()>> checks;
};

class StepGraph {
 public:
  explicit StepGraph(Backend& be) : be_(be) {
    CTX_CHECK(be.can_capture(), "StepGraph: ", be.name(), " cannot record its work (CUDA Graphs are CUDA's)");
  }
  // Records `body`'s device work. If body throws (or the device refuses something it did), the
  // recording is abandoned and the error rethrown: nothing recorded ran.
  void capture(const std::function<void()>& body) {
    work_.reset();
    if (!seeds_.defined()) seeds_ = Tensor::zeros({kSeeds}, DType::I64, be_.device());
    DropoutSeedRecording rec;
    DecisionRecording decisions;
    be_.capture_begin();
    rec.begin(reinterpret_cast<uint64_t*>(seeds_.data<int64_t>()), kSeeds);
    decisions.begin();
    try {
      body();
    } catch (...) {
      decisions.end();
      rec.end();
      try {
        be_.capture_end(false);
      } catch (...) {
      }
      throw;
    }
    decisions.end();
    rec.end();
    work_ = be_.capture_end(true);
    checks_ = std::move(decisions.checks);
    // the recorded step's own seeds (drawn while recording) for its first replay
    next_seeds_.assign(rec.drawn.begin(), rec.drawn.end());
    nseeds_ = (int64_t)rec.drawn.size();
  }
  bool captured() const { return work_ != nullptr; }
  // Whether every choice frozen in the recording would be made the same now (note_recorded_decision);
  // when not, reset() and record again before replaying.
  bool decisions_hold() const {
    for (const auto& same_now : checks_)
      if (!same_now()) return false;
    return true;
  }
  int64_t recorded_decisions() const { return (int64_t)checks_.size(); }
  int64_t dropout_seeds() const { return nseeds_; }  // masks the recorded step draws
  // Runs the recording. A recording that drew dropout seeds needs `rng`, the Rng the step draws
  // them from: the first replay after the capture uses the seeds drawn while recording, every
  // later one draws as many from rng (the eager step's draws), and they are written into the seed
  // table (Backend::set_values: kernel arguments, no upload) before the replay.
  void replay(Rng* rng = nullptr) {
    CTX_CHECK(work_, "StepGraph::replay: nothing captured");
    if (nseeds_ > 0) {
      if (next_seeds_.empty()) {
        CTX_CHECK(rng, "StepGraph::replay: the recorded step draws ", nseeds_, " dropout seeds; pass their Rng");
        for (int64_t i = 0; i < nseeds_; ++i) next_seeds_.push_back((int64_t)rng->next_u64());
      }
      be_.set_values(seeds_, next_seeds_);
      next_seeds_.clear();
    }
    work_->replay();
  }
  void reset() {  // the next step is captured afresh (the recording's memory freed)
    work_.reset();
    nseeds_ = 0;
    next_seeds_.clear();
    checks_.clear();
  }

 private:
  static constexpr int64_t kSeeds = 4096;  // dropout masks a recorded step may draw
  Backend& be_;
  std::shared_ptr<CapturedWork> work_;
  Tensor seeds_;                     // i64 [kSeeds] on the device: the recorded masks' seeds
  int64_t nseeds_ = 0;
  std::vector<int64_t> next_seeds_;  // the seeds of the next replay, when already drawn
  std::vector<std::function<bool()>> checks_;  // the recording's frozen choices (decisions_hold)
};

}  // namespace ctx
