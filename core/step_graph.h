// core/step_graph.h — a piece of device work (a warm training step) recorded once and replayed:
// a CUDA Graph on CUDA (Backend::capture_begin / capture_end; docs/cuda.md "A CUDA Graph of the
// warm step"). capture() runs the host code once with the device's work recorded, NOT run;
// replay() runs the recording (the captured step included). What the host code computes for the
// device (kernel arguments, pointers, grid sizes) is frozen in the recording: anything that must
// change between replays has to live in device memory, written outside the recording.
#pragma once
#include <functional>
#include <memory>

#include "core/backend.h"
#include "core/error.h"

namespace ctx {

class StepGraph {
 public:
  explicit StepGraph(Backend& be) : be_(be) {
    CTX_CHECK(be.can_capture(), "StepGraph: ", be.name(), " cannot record its work (CUDA Graphs are CUDA's)");
  }
  // Records `body`'s device work. If body throws (or the device refuses something it did), the
  // recording is abandoned and the error rethrown: nothing recorded ran.
  void capture(const std::function<void()>& body) {
    work_.reset();
    be_.capture_begin();
    try {
      body();
    } catch (...) {
      try {
        be_.capture_end(false);
      } catch (...) {
      }
      throw;
    }
    work_ = be_.capture_end(true);
  }
  bool captured() const { return work_ != nullptr; }
  void replay() {
    CTX_CHECK(work_, "StepGraph::replay: nothing captured");
    work_->replay();
  }
  void reset() { work_.reset(); }  // the next step is captured afresh (the recording's memory freed)

 private:
  Backend& be_;
  std::shared_ptr<CapturedWork> work_;
};

}  // namespace ctx
