// train/io/kill_point.h — a test hook that makes a kill -9 (or a SIGSTOP) land at a chosen point:
// with CTXLAB_TEST_KILL_AT=NAME@N (docs/settings.md), the N-th call of kill_point(NAME) sends
// SIGKILL to this process (no cleanup, no flush: what kill -9 from outside does at that moment);
// with NAME@N:STOP it sends SIGSTOP (the process stays alive and silent, as a partitioned node).
// Without it a call is one comparison. The points: "write:<file name>" in write_file_atomic
// (half of the bytes in the .tmp file, not yet renamed), the steps of Checkpointer::save
// ("ckpt:optim_aside", "ckpt:optim_saved", "ckpt:model_saved", "ckpt:done"; train/checkpointer.cpp)
// and the end of an MPI run ("dist:finalize" before the last barrier, "dist:mpi_finalize" after
// it, before MPI_Finalize; train/dist/distributed.cpp). tests/python/train_checks.py (kill9) kills
// a training run at each checkpoint point; tests/python/distributed_checks.py (stopped_at_end)
// stops one rank at each end-of-run point.
#pragma once
#include <string>

namespace ctx {

void kill_point(const std::string& name);

}  // namespace ctx
