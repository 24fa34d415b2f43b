// core/threads.h — the one thread policy of the host: how many threads the CPU kernels use.
// ctxlab runs one pool at a time: our kernels and oneDNN share libgomp's OpenMP pool;
// OpenBLAS is run single-threaded inside our own OpenMP partition of a GEMM (the CPU backend
// pins it), so its pthread pool never competes with spinning OpenMP threads. Thread count:
// CTXLAB_THREADS, else OMP_NUM_THREADS, else the number of cores available to the process.
// In core (not the CPU backend) because the layers above set it: data-parallel ranks share the
// cores, decoding runs on one thread, the CLI's --threads (docs/threading.md).
#pragma once

namespace ctx {
int num_threads();            // threads used for OpenMP regions
void set_num_threads(int n);  // also applies to oneDNN (same pool)
void init_threading();        // idempotent; called by the CPU backend on first use
// True when the count came from CTXLAB_THREADS or OMP_NUM_THREADS (the user chose it), false
// when it is the cores available (callers may then pick fewer where that measures faster).
bool threads_chosen_by_user();
}  // namespace ctx
