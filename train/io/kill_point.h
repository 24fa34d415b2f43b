// train/io/kill_point.h — a test hook that makes a kill -9 land at a chosen point of a write:
// with CTXLAB_TEST_KILL_AT=NAME@N (docs/settings.md), the N-th call of kill_point(NAME) sends
// SIGKILL to this process (no cleanup, no flush: what kill -9 from outside does at that moment).
// Without it a call is one comparison. The points: "write:<file name>" in write_file_atomic
// (half of the bytes in the .tmp file, not yet renamed) and the steps of Checkpointer::save
// ("ckpt:optim_aside", "ckpt:optim_saved", "ckpt:model_saved", "ckpt:done"; train/checkpointer.cpp).
// tests/python/train_checks.py (kill9) kills a training run at each of them.
#pragma once
#include <string>

namespace ctx {

void kill_point(const std::string& name);

}  // namespace ctx
