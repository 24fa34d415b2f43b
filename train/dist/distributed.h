// train/dist/distributed.h — data-parallel training over MPI (docs/distributed.md): start-up when
// ctxlab runs under mpirun (or with --distributed), rank / size, the rank's slice of a global
// batch, the gradient allreduce (average over ranks), reductions of validation sums, and the
// check that every rank starts from the same parameters. Without MPI (a plain `ctxlab train`)
// nothing here calls MPI: rank 0 of 1, every reduction is the identity.
// Errors: every MPI call is checked (MPI_ERRORS_RETURN on the communicator) and throws a
// ctx::Error naming the call; main() then ends the whole job with abort_job(). Every wait on
// another rank is bounded by --dist-timeout seconds, so a rank that is stopped or cut off (it
// never dies, so mpirun never notices) ends the job too, instead of a wait forever: every
// collective is non-blocking and polled (TimeoutError past the timeout, naming the ranks that do
// not answer), and MPI_Init_thread / MPI_Finalize, which have no non-blocking form, run under a
// watchdog thread that ends the process with kTimeoutExitCode (both: train/dist/bounded_wait.h).
// The NCCL communicator of --device cuda is non-blocking too: its set-up, allreduce and finalize
// are polled the same way, and aborted (ncclCommAbort) past the timeout.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/module.h"
#include "train/dist/bounded_wait.h"

namespace ctx::dist {

// True when the process was started by an MPI launcher (OpenMPI's OMPI_COMM_WORLD_SIZE, PMIx's
// PMIX_RANK, MPICH/Hydra's PMI_SIZE).
bool launched_by_mpi();
// --dist-timeout's default: longer than any pause of one rank that the others wait out in a
// collective (a checkpoint of a large model, a validation pass), short enough for an overnight run.
constexpr double kDefaultTimeoutSeconds = 300;
// kTimeoutExitCode (124) and TimeoutError, which main() turns into abort_job(kTimeoutExitCode):
// train/dist/bounded_wait.h, the one wait that every collective (MPI and NCCL) goes through.
// Initialises MPI when launched_by_mpi() or `forced` (--distributed); idempotent. Under MPI with
// more than one rank per node and no CTXLAB_THREADS / OMP_NUM_THREADS, sets the threads of this
// rank to cores / ranks-on-this-node (at least 1), so N ranks x T threads fit the cores.
// `timeout_s` (--dist-timeout, > 0): the longest wait in one collective before the job ends.
void init(bool forced, double timeout_s = kDefaultTimeoutSeconds);
bool active();  // MPI was initialised by init()
int rank();     // 0 when not active
int size();     // 1 when not active
inline bool is_root() { return rank() == 0; }
std::string describe();  // "MPI: 2 ranks (OpenMPI v4.1.4), 1 thread per rank" for the start line

// Rows [begin, end) of a global batch of B rows that this rank trains on. Throws when B is not
// a multiple of size() (the slices must be equal so that the mean of the ranks' mean losses is
// the mean over the global batch).
std::pair<int64_t, int64_t> batch_rows(int64_t B, const std::string& what);

// g <- (sum over ranks of g) / size(), in place; g: a host F32 tensor (any shape). One
// MPI_Allreduce. A no-op when size() == 1.
void allreduce_mean(Tensor& g);
// Averages every defined gradient of `params` over the ranks: one allreduce of `flat_grads` (the
// optimizer's flat gradient buffer, when given and every gradient is a view of it) or one per
// gradient. Host F32 only (throws for --device cuda: see docs/distributed.md).
void average_gradients(const nn::NamedParams& params, const Tensor* flat_grads, bool all_views);
// Sum over ranks of `v` (n doubles), in place.
void allreduce_sum(double* v, int n);
// Every rank's `n` doubles, rank-major: out[r * n + i] = v[i] of rank r (size() * n values). One
// MPI_Allgather; a copy of v when size() == 1.
std::vector<double> allgather(const double* v, int n);
// Every rank's floats, rank after rank: rank r sends counts[r] of them (`mine` on this rank). One
// MPI_Allgatherv; a copy of mine when size() == 1.
std::vector<float> allgather_varying(const std::vector<float>& mine, const std::vector<int64_t>& counts);
// Throws unless every rank holds bit-identical parameters (a 64-bit hash compared by min/max).
void check_same_parameters(const nn::NamedParams& params, const std::string& when);
void barrier();  // bounded like every collective
// Ends every rank of the job with `code` (MPI_Abort) when active; returns otherwise.
void abort_job(int code);
// The end of an MPI run, when active: a barrier (so that a rank stopped before it is named:
// TimeoutError), then MPI_Finalize under the watchdog. main() calls it after the verb; the exit
// handler that init registers calls it too (an error there ends the job with kTimeoutExitCode).
void finalize();

}  // namespace ctx::dist
