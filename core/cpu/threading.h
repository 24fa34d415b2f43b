// core/cpu/threading.h — one deliberate thread set-up for OpenMP, oneDNN and OpenBLAS.
// ctxlab runs one pool at a time: our kernels and oneDNN share libgomp's OpenMP pool;
// OpenBLAS is run single-threaded inside our own OpenMP partition of a GEMM, so its pthread
// pool never competes with spinning OpenMP threads. Thread count: CTXLAB_THREADS, else
// OMP_NUM_THREADS, else the number of cores available to the process.
#pragma once

namespace ctx::cpu {
int num_threads();            // threads used for OpenMP regions
void set_num_threads(int n);  // also applies to oneDNN (same pool)
void init_threading();        // idempotent; called by the CPU backend on first use
// True when the count came from CTXLAB_THREADS or OMP_NUM_THREADS (the user chose it), false
// when it is the cores available (callers may then pick fewer where that measures faster).
bool threads_chosen_by_user();
}  // namespace ctx::cpu
