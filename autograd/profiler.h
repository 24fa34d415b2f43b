// autograd/profiler.h — a per-op profile of training steps: where the forward, the backward and
// the optimizer spend their time, by op name. Off unless CTXLAB_PROFILE=1 (read once) or
// prof::set_enabled(true); when off, each hook is one branch on a cached flag.
//
// Forward time is attributed by marks: every op result (autograd make_result) charges the time
// since the previous mark to that op, so call prof::mark() where a forward starts (GPT::forward)
// to keep unrelated work out. Backward time is measured around each node's backward closure.
// `ctxlab bench --profile` prints the table. On a GPU every mark waits for the device (sync()), so
// each op is charged its kernels' time rather than their launch; profiling slows a GPU step down.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace ctx::prof {

bool enabled();
void set_enabled(bool on);
void reset();                                    // forget all samples
void sync();                                     // wait for the GPU, if one is in use (else nothing)
void mark();                                     // restart the forward clock (no charge)
void forward_op(const std::string& name);        // charge time since the last mark to name
void add(const char* phase, const std::string& name, double seconds);  // e.g. ("backward", "matmul", dt)

// Rows sorted by total time: phase, op, calls, ms total, ms per call, % of the profiled time.
// `steps` divides the totals (per-step figures); top = number of rows (0 = all).
std::string table(int steps = 1, int top = 25);
nlohmann::json to_json(int steps = 1);

}  // namespace ctx::prof
