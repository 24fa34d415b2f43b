// core/step_graph.cpp — the registry of choices frozen in a recording (note_recorded_decision,
// DecisionRecording; core/step_graph.h).
#include "core/step_graph.h"

namespace ctx {
namespace {
DecisionRecording* g_decisions = nullptr;  // the recording in progress (one at a time, as the seeds')
}  // namespace

void note_recorded_decision(std::function<bool()> same_now) {
  if (g_decisions) g_decisions->checks.push_back(std::move(same_now));
}

bool decisions_recording() { return g_decisions != nullptr; }

void DecisionRecording::begin() {
  CTX_CHECK(!g_decisions, "StepGraph: a step is already being recorded");
  checks.clear();
  g_decisions = this;
}

void DecisionRecording::end() {
  if (g_decisions == this) g_decisions = nullptr;
}

}  // namespace ctx
