// train/dist/distributed.cpp — MPI start-up, batch slices and reductions (see distributed.h).
#include "train/dist/distributed.h"

#define OMPI_SKIP_MPICXX 1   // the C API only: no C++ bindings (their header warns)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/threads.h"
#include "core/error.h"
#include "core/settings.h"  // setting_env: CTXLAB_THREADS
#include "train/io/kill_point.h"  // the test hooks of a run's start and end ("dist:init", "dist:finalize")
#ifdef CTXLAB_WITH_NCCL
#include "core/cuda_module.h"  // NCCL lives in libctxlab_cuda.so, loaded with the CUDA backend
#include "train/dist/nccl/nccl_allreduce.h"  // its entry point's table (plain C++)
#endif

namespace ctx::dist {

namespace {

bool g_active = false;
int g_rank = 0, g_size = 1;
double g_timeout_s = kDefaultTimeoutSeconds;  // --dist-timeout

// The one-line error of a failed call (`api` "MPI" or "NCCL"): the operation, this rank, the reason.
std::string failure_message(const char* api, const std::string& call, const std::string& reason) {
  return str(api, ": ", call, " failed on rank ", g_rank, " of ", g_size, ": ", reason,
             " (another rank died or the network failed; the job ends)");
}

std::string mpi_failure(int rc, const char* call) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return failure_message("MPI", call, std::string(msg, (size_t)len));
}

// Throws a one-line error naming the MPI call when it failed.
void check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw Error(mpi_failure(rc, call));
}

using Clock = std::chrono::steady_clock;

// Who is missing, asked only after a timeout: a ping to every other rank on a communicator of
// its own; a rank waiting in wait_bounded (any collective) answers it, one that is stopped, hung,
// cut off or busy outside MPI does not. Ranks answer each other's pings while they wait.
MPI_Comm g_ping_comm = MPI_COMM_NULL;
constexpr int kPingTag = 1, kPongTag = 2;
int g_ping_buf = 0, g_pong_buf = 0;  // the payload is unused; MPI needs a buffer that outlives the send

void answer_pings() {
  if (g_ping_comm == MPI_COMM_NULL) return;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, g_ping_comm, &flag, &st) != MPI_SUCCESS || !flag) return;
    int in = 0;
    MPI_Recv(&in, 1, MPI_INT, st.MPI_SOURCE, kPingTag, g_ping_comm, MPI_STATUS_IGNORE);  // already here
    MPI_Request r;
    if (MPI_Isend(&g_pong_buf, 1, MPI_INT, st.MPI_SOURCE, kPongTag, g_ping_comm, &r) == MPI_SUCCESS)
      MPI_Request_free(&r);
  }
}

// The ranks that do not answer a ping within min(2 s, --dist-timeout); every other rank when
// there is no ping communicator (a timeout in start-up, before it exists).
std::vector<int> silent_ranks() {
  std::vector<int> others = other_ranks(g_rank, g_size);
  if (g_ping_comm == MPI_COMM_NULL) return others;
  std::vector<MPI_Request> pong(others.size(), MPI_REQUEST_NULL);
  std::vector<int> got(others.size(), 0);
  for (size_t i = 0; i < others.size(); ++i) {
    MPI_Irecv(&got[i], 1, MPI_INT, others[i], kPongTag, g_ping_comm, &pong[i]);
    MPI_Request s;
    if (MPI_Isend(&g_ping_buf, 1, MPI_INT, others[i], kPingTag, g_ping_comm, &s) == MPI_SUCCESS) MPI_Request_free(&s);
  }
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(std::min(g_timeout_s, 2.0)));
  std::vector<int> silent;
  for (;;) {
    silent.clear();
    for (size_t i = 0; i < others.size(); ++i) {
      int done = pong[i] == MPI_REQUEST_NULL;
      if (!done && MPI_Test(&pong[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 0;
      if (!done) silent.push_back(others[i]);
    }
    if (silent.empty() || Clock::now() >= until) break;
    answer_pings();
    std::this_thread::yield();
  }
  // the pongs never received stay posted: the job ends now (MPI_Abort)
  return silent;
}

std::string silent_description() {
  const std::vector<int> silent = silent_ranks();
  if (silent.empty())
    return str("no rank in particular: every other rank answers from inside a collective (they arrived just "
               "after the timeout, or the ranks run different collectives: a bug)");
  return str(rank_list(silent), " (no answer: stopped, hung, cut off, or busy outside MPI for longer than the "
             "timeout)");
}

// A collective of this job (`api` "MPI" or "NCCL", the operation `op`) bounded by --dist-timeout:
// a rank that is stopped, hung or cut off never completes it, and the job must end rather than
// wait forever. After the first 10 ms (another rank is still computing, evaluating or writing a
// checkpoint) each poll also answers the pings of ranks that gave up, and yields the core; past
// the timeout the pings name the ranks that do not answer (a rank waiting in an NCCL collective
// answers too: it polls here).
WaitSpec job_wait(const char* api, const std::string& op) {
  return {api, op, g_timeout_s, g_rank, g_size, [] {
            answer_pings();
            std::this_thread::yield();
          },
          silent_description};
}

// A non-blocking MPI collective in flight: MPI_Test drives its progress as the blocking call's
// wait would.
class MpiRequest final : public PendingOp {
 public:
  MpiRequest(MPI_Request& req, const char* call) : req_(req), call_(call) {}
  State poll(std::string& error) override {
    int done = 0;
    const int rc = MPI_Test(&req_, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      error = mpi_failure(rc, call_);
      return State::Failed;
    }
    return done ? State::Done : State::Pending;
  }
  // Nothing to cancel here (MPI cannot cancel a collective): the error reaches main(), whose
  // abort_job (MPI_Abort) ends every rank.
  void abort() override {}

 private:
  MPI_Request& req_;
  const char* call_;
};

// Waits for the non-blocking collective `req` (started by `call`), at most --dist-timeout seconds
// (TimeoutError naming the ranks that do not answer).
void wait_bounded(MPI_Request& req, const char* call) {
  MpiRequest op(req, call);
  wait_bounded(op, job_wait("MPI", call));
}

// Runs `blocking` (an MPI call with no non-blocking form: MPI_Init_thread, MPI_Finalize) under
// the watchdog of bounded_wait.h. `rank` of `size`: this process (before MPI_Init, as the
// launcher says). It names every other rank: nothing can ask MPI who is missing from inside its
// own call.
template <class F>
void with_watchdog(const char* call, int rank, int size, F&& blocking) {
  WaitSpec spec{"MPI", call, g_timeout_s, rank, size, {}, {}};
  if (size == 1) spec.missing = [] { return std::string("the MPI launcher"); };
  run_with_watchdog(spec, blocking);
}

int env_int(const char* name, int fallback) {
  const char* s = std::getenv(name);
  if (!s || !*s) return fallback;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  return (end && *end == 0 && v > 0) ? (int)v : fallback;
}

// FNV-1a over the bytes of every parameter (host copies), names included.
uint64_t params_hash(const nn::NamedParams& params) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&](const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    for (size_t i = 0; i < n; ++i) { h ^= b[i]; h *= 1099511628211ULL; }
  };
  for (auto& [name, v] : params) {
    mix(name.data(), name.size());
    Tensor t = v.data().device() == Device::CPU ? v.data() : v.data().to(Device::CPU);
    t = t.clone();  // contiguous host copy
    mix(t.raw(), t.nbytes());
  }
  return h;
}

}  // namespace

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_SIZE");
}

namespace {

// The exit handler of an MPI run (registered by init): finalize(), whose errors cannot leave
// an exit handler, so they end the job here.
void finalize_at_exit() {
  try {
    finalize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ctxlab: error (rank %d of %d): %s\n", g_rank, g_size, e.what());
    abort_job(dynamic_cast<const TimeoutError*>(&e) ? kTimeoutExitCode : 1);
  }
}

}  // namespace

void init(bool forced, double timeout_s) {
  CTX_CHECK(std::isfinite(timeout_s) && timeout_s > 0, "--dist-timeout ", timeout_s,
            ": expected a positive number of seconds (default ", kDefaultTimeoutSeconds, ")");
  g_timeout_s = timeout_s;
  if (g_active || !(forced || launched_by_mpi())) return;
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    int provided = 0;
    // the launcher's rank and size, for the watchdog's message (MPI does not know them yet)
    const int rank = env_int("OMPI_COMM_WORLD_RANK", env_int("PMIX_RANK", env_int("PMI_RANK", 0)));
    const int size = env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", 1));
    kill_point("dist:init");
    // Only the main thread calls MPI (OpenMP threads never do). MPI_Init waits for every rank.
    int rc = MPI_SUCCESS;
    with_watchdog("MPI_Init_thread (start-up)", rank, size,
                  [&] { rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided); });
    if (rc != MPI_SUCCESS) throw Error("MPI: MPI_Init_thread failed (is this process started by mpirun?)");
    std::atexit(finalize_at_exit);
  }
  g_active = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &g_size), "MPI_Comm_size");
  if (g_size > 1) {  // the communicator of the pings that name a silent rank after a timeout
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Request req;
    check(MPI_Comm_idup(MPI_COMM_WORLD, &c, &req), "MPI_Comm_idup (start-up)");
    wait_bounded(req, "MPI_Comm_idup (start-up)");
    g_ping_comm = c;
  }
  // One GPU per rank on a node (--device cuda): the backend uses device 0, so each rank sees only
  // the GPU of its local rank, unless the user (or the batch system) chose already.
  if (const char* lr = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"); lr && !std::getenv("CUDA_VISIBLE_DEVICES"))
    setenv("CUDA_VISIBLE_DEVICES", lr, 1);
  // Threads per rank: an explicit CTXLAB_THREADS / OMP_NUM_THREADS wins (the user asked for it);
  // otherwise the node's cores are shared among the ranks on this node, never oversubscribed.
  if (!setting_env("CTXLAB_THREADS") && !std::getenv("OMP_NUM_THREADS")) {
    const int local = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env_int("MPI_LOCALNRANKS", g_size));
    const int cores = (int)std::max(1u, std::thread::hardware_concurrency());
    const int per_rank = std::max(1, cores / std::max(1, local));
    if (ctx::num_threads() > per_rank) ctx::set_num_threads(per_rank);
  }
}

bool active() { return g_active; }
int rank() { return g_rank; }
int size() { return g_size; }

std::string describe() {
  if (!g_active) return "single process";
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(lib, &len);
  std::string l(lib, (size_t)len);
  if (auto nl = l.find_first_of(",\n"); nl != std::string::npos) l = l.substr(0, nl);
  return str("MPI: ", g_size, " rank", g_size == 1 ? "" : "s", " (", l, "), ", ctx::num_threads(),
             " thread", ctx::num_threads() == 1 ? "" : "s", " per rank");
}

std::pair<int64_t, int64_t> batch_rows(int64_t B, const std::string& what) {
  CTX_CHECK(B % g_size == 0, what, " ", B, " (the global batch) does not split evenly across ", g_size,
            " MPI ranks; use a multiple of ", g_size);
  const int64_t per = B / g_size;
  return {g_rank * per, (g_rank + 1) * per};
}

#ifdef CTXLAB_WITH_NCCL
// The NCCL allreduce in libctxlab_cuda.so, behind its own entry point (train/dist/nccl).
const nccl::NcclModule& nccl_module() {
  static const nccl::NcclModule* m = [] {
    auto entry = reinterpret_cast<nccl::NcclModuleEntry>(cuda_module_symbol("ctxlab_nccl_entry"));
    CTX_CHECK(entry, "MPI: libctxlab_cuda.so has no NCCL entry point (rebuild it with NCCL found)");
    const nccl::NcclModule* r = entry();
    CTX_CHECK(r && r->abi == nccl::kNcclModuleAbi, "MPI: the NCCL entry of libctxlab_cuda.so has interface ",
              r ? r->abi : -1, ", this executable needs ", nccl::kNcclModuleAbi, " (rebuild both)");
    return r;
  }();
  return *m;
}

namespace {

bool g_nccl_ready = false;  // the communicator exists (set up at the first device allreduce)

// The NCCL module's operation in flight (communicator set-up, allreduce, finalize): the module
// polls ncclCommGetAsyncError and the allreduce's stream, and aborts with ncclCommAbort.
class NcclOp final : public PendingOp {
 public:
  NcclOp(const nccl::NcclModule& m, const char* call) : m_(m), call_(call) {}
  State poll(std::string& error) override {
    char reason[512] = {};
    const int s = m_.poll(reason, (int)sizeof reason);
    if (s == nccl::kNcclPending) return State::Pending;
    if (s == nccl::kNcclDone) return State::Done;
    error = failure_message("NCCL", call_, reason);
    return State::Failed;
  }
  void abort() override {
    m_.abort();
    g_nccl_ready = false;
  }

 private:
  const nccl::NcclModule& m_;
  const char* call_;
};

// Waits for the NCCL operation `call` that the module just started (`started`: its NcclStatus,
// `reason` what it wrote on failure), at most --dist-timeout seconds.
void nccl_wait(const nccl::NcclModule& m, const char* call, int started, const char* reason) {
  NcclOp op(m, call);
  if (started == nccl::kNcclFailed) {
    op.abort();
    throw Error(failure_message("NCCL", call, reason));
  }
  if (started == nccl::kNcclPending) wait_bounded(op, job_wait("NCCL", call));
}

// The communicator over every rank: rank 0's ncclUniqueId, broadcast over MPI, then a
// non-blocking ncclCommInitRankConfig (every rank must join it).
void nccl_setup(const nccl::NcclModule& m) {
  std::vector<unsigned char> id((size_t)m.id_bytes);
  char reason[512] = {};
  if (g_rank == 0) nccl_wait(m, "ncclGetUniqueId", m.unique_id(id.data(), reason, (int)sizeof reason), reason);
  MPI_Request req;
  check(MPI_Ibcast(id.data(), m.id_bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &req), "MPI_Bcast (the NCCL id)");
  wait_bounded(req, "MPI_Bcast (the NCCL id)");
  nccl_wait(m, "ncclCommInitRankConfig", m.init_start(id.data(), g_rank, g_size, reason, (int)sizeof reason),
            reason);
  g_nccl_ready = true;
}

// data[0..n) <- mean over ranks, in place, on the device.
void nccl_allreduce_mean(float* data, int64_t n) {
  const nccl::NcclModule& m = nccl_module();
  if (!g_nccl_ready) nccl_setup(m);
  char reason[512] = {};
  nccl_wait(m, "ncclAllReduce (gradients)", m.allreduce_start(data, n, reason, (int)sizeof reason), reason);
}

// ncclCommFinalize (it flushes the communicator's work and waits for the other ranks), then
// ncclCommDestroy; nothing when no communicator was set up.
void nccl_finalize() {
  if (!g_nccl_ready) return;
  const nccl::NcclModule& m = nccl_module();
  char reason[512] = {};
  nccl_wait(m, "ncclCommFinalize (end of the run)", m.finalize_start(reason, (int)sizeof reason), reason);
  m.destroy();
  g_nccl_ready = false;
}

}  // namespace
#endif

void allreduce_mean(Tensor& g) {
  if (g_size == 1) return;
  CTX_CHECK(g.dtype() == DType::F32, "MPI: gradient allreduce supports F32, got ", dtype_name(g.dtype()));
  if (g.device() != Device::CPU) {
#ifdef CTXLAB_WITH_NCCL
    nccl_allreduce_mean(g.data<float>(), g.numel());
    return;
#else
    throw Error(str("MPI: gradients on ", device_name(g.device()), " need NCCL, and this build has none "
                    "(the real CUDA build with NCCL found; docs/distributed.md)"));
#endif
  }
  CTX_CHECK(g.numel() < (int64_t)1 << 31, "MPI: gradient buffer of ", g.numel(), " elements exceeds one MPI count");
  float* p = g.host<float>();
  MPI_Request req;
  check(MPI_Iallreduce(MPI_IN_PLACE, p, (int)g.numel(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req),
        "MPI_Allreduce (gradients)");
  wait_bounded(req, "MPI_Allreduce (gradients)");
  const float inv = 1.0f / (float)g_size;
  for (int64_t i = 0, n = g.numel(); i < n; ++i) p[i] *= inv;
}

void average_gradients(const nn::NamedParams& params, const Tensor* flat_grads, bool all_views) {
  if (g_size == 1) return;
  if (flat_grads && all_views) {
    Tensor g = *flat_grads;  // shares the storage: the parameters' gradients are views of it
    allreduce_mean(g);
    return;
  }
  for (auto& [name, v] : params) {
    Tensor g = v.grad();
    if (!g.defined()) continue;
    allreduce_mean(g);
  }
}

void allreduce_sum(double* v, int n) {
  if (g_size == 1) return;
  MPI_Request req;
  check(MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req), "MPI_Allreduce (sums)");
  wait_bounded(req, "MPI_Allreduce (sums)");
}

std::vector<double> allgather(const double* v, int n) {
  std::vector<double> out((size_t)g_size * (size_t)n);
  if (g_size == 1) {
    std::copy(v, v + n, out.begin());
    return out;
  }
  MPI_Request req;
  check(MPI_Iallgather(v, n, MPI_DOUBLE, out.data(), n, MPI_DOUBLE, MPI_COMM_WORLD, &req), "MPI_Allgather");
  wait_bounded(req, "MPI_Allgather (losses, signals)");
  return out;
}

std::vector<float> allgather_varying(const std::vector<float>& mine, const std::vector<int64_t>& counts) {
  if (g_size == 1) return mine;
  CTX_CHECK((int)counts.size() == g_size && counts[(size_t)g_rank] == (int64_t)mine.size(),
            "MPI: allgather of ", mine.size(), " floats on rank ", g_rank, " does not match its count");
  std::vector<int> n((size_t)g_size), at((size_t)g_size);
  int64_t total = 0;
  for (int r = 0; r < g_size; ++r) {
    CTX_CHECK(total + counts[(size_t)r] < (int64_t)1 << 31, "MPI: gathering ", total + counts[(size_t)r],
              " floats exceeds one MPI count");
    at[(size_t)r] = (int)total;
    n[(size_t)r] = (int)counts[(size_t)r];
    total += counts[(size_t)r];
  }
  std::vector<float> out((size_t)total);
  MPI_Request req;
  check(MPI_Iallgatherv(mine.data(), (int)mine.size(), MPI_FLOAT, out.data(), n.data(), at.data(), MPI_FLOAT,
                        MPI_COMM_WORLD, &req), "MPI_Allgatherv (gradient tree)");
  wait_bounded(req, "MPI_Allgatherv (gradient tree)");
  return out;
}

void check_same_parameters(const nn::NamedParams& params, const std::string& when) {
  if (g_size == 1) return;
  unsigned long long h = params_hash(params), lo = h, hi = h;
  MPI_Request req[2];
  check(MPI_Iallreduce(MPI_IN_PLACE, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD, &req[0]),
        "MPI_Allreduce (hash)");
  wait_bounded(req[0], "MPI_Allreduce (parameter hash)");
  check(MPI_Iallreduce(MPI_IN_PLACE, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, &req[1]),
        "MPI_Allreduce (hash)");
  wait_bounded(req[1], "MPI_Allreduce (parameter hash)");
  CTX_CHECK(lo == hi, "MPI: the ranks hold different parameters ", when,
            " (each rank must build the same model from the same seed or checkpoint)");
}

void barrier() {
  if (g_size == 1) return;
  MPI_Request req;
  check(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Barrier");
  wait_bounded(req, "MPI_Barrier");
}

void abort_job(int code) {
  if (!g_active) return;
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
}

void finalize() {
  if (!g_active) return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && g_size > 1) {
    // every rank reaches the end, or the others name the one that does not (MPI_Finalize cannot)
    kill_point("dist:finalize");
    MPI_Request req;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Barrier (end of the run)");
    wait_bounded(req, "MPI_Barrier (end of the run, before MPI_Finalize)");
    kill_point("dist:mpi_finalize");
  }
#ifdef CTXLAB_WITH_NCCL
  nccl_finalize();  // only when a communicator was set up: never loads CUDA just to finalize
#endif
  if (!fin) {
    if (g_ping_comm != MPI_COMM_NULL) MPI_Comm_free(&g_ping_comm);
    with_watchdog("MPI_Finalize", g_rank, g_size, [] { MPI_Finalize(); });
  }
  g_active = false;
}

}  // namespace ctx::dist
