// core/cuda/index_plan.cu — the bucket plan of the deterministic index_add (index.cu), built on
// the host from the indices' host values (index_add_plan_host) or on the device from indices that
// never left it (index_plan: indices whose range the writer proved, Tensor::checked_bound), with
// the same int64 layout and the same bits either way:
//   plan = [U | rows (U) | starts (U + 1) | pos (m)]      (2U + 2 + m <= plan_capacity(m) = 3m + 2)
// rows: the distinct target rows ascending; starts[u]..starts[u + 1]: row u's run in pos; pos: the
// source positions of each row in index order (ascending within a run).
// The device build is three launches whose sizes depend only on m and n (a CUDA Graph bakes the
// grid, never on U), no host round trip, deterministic under every thread schedule:
//   count   cur[j] = number of i with idx[i] == j (integer atomics: order-free, exact)
//   scan    one block: rows, starts, U = plan[0]; cur[j] becomes row j's first slot in pos
//   place   one block, chunk by chunk of blockDim positions in index order: a position's slot is
//           cur[key] + its rank among the chunk's equal keys before it (shared memory); then the
//           chunk's last occurrence of a key advances cur[key] past the chunk's ones
#include <cstdint>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/index_plan.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"
#include "core/cuda/dispatch.h"

namespace ctx::cuda {
namespace {

constexpr int kScanThreads = 1024;  // scan: each thread walks a contiguous slice of the n rows
constexpr int kPlaceThreads = 256;  // place: positions per chunk (rank by comparing all keys)

// idx (m) with values in [0, n); cur (n) zeroed: cur[j] = count of j
template <class I>
__global__ void plan_count_kernel(const I* idx, int64_t m, int64_t* cur) {
  CTX_GRID_STRIDE(i, m)
    atomicAdd(reinterpret_cast<unsigned long long*>(cur + (int64_t)idx[i]), 1ull);
}

// One block of kScanThreads. cur (n): counts in, first slots out (rows with a zero count keep 0);
// plan: U, rows, starts written. Shared: 2 * blockDim int64 (inclusive scans of the slices'
// distinct-row counts and index counts).
__global__ void plan_scan_kernel(int64_t* cur, int64_t n, int64_t* plan) {
  CTX_DYNAMIC_SHARED(int64_t, sh);
  int64_t* rows_sc = sh;               // [blockDim]
  int64_t* count_sc = sh + blockDim.x;  // [blockDim]
  const int t = threadIdx.x, B = (int)blockDim.x;
  const int64_t slice = (n + B - 1) / B, lo = t * slice, hi = lo + slice < n ? lo + slice : n;
  int64_t nz = 0, total = 0;
  for (int64_t j = lo; j < hi; ++j) {
    nz += cur[j] != 0;
    total += cur[j];
  }
  rows_sc[t] = nz;
  count_sc[t] = total;
  __syncthreads();
  for (int off = 1; off < B; off *= 2) {  // Hillis-Steele inclusive scans
    const int64_t a = t >= off ? rows_sc[t - off] : 0, b = t >= off ? count_sc[t - off] : 0;
    __syncthreads();
    rows_sc[t] += a;
    count_sc[t] += b;
    __syncthreads();
  }
  const int64_t U = rows_sc[B - 1];
  int64_t* rows = plan + 1;
  int64_t* starts = plan + 1 + U;
  int64_t u = rows_sc[t] - nz, s = count_sc[t] - total;  // this slice's first row and first slot
  for (int64_t j = lo; j < hi; ++j) {
    const int64_t c = cur[j];
    if (c == 0) continue;
    rows[u] = j;
    starts[u] = s;
    cur[j] = s;
    ++u;
    s += c;
  }
  if (t == B - 1) {
    plan[0] = U;
    starts[U] = count_sc[B - 1];  // = m
  }
}

// One block of kPlaceThreads. idx (m); cur (n): each row's next free slot in pos; plan's pos
// (at 2U + 2, U = plan[0]) written. Shared: blockDim int64 (the chunk's keys, -1 past m).
template <class I>
__global__ void plan_place_kernel(const I* idx, int64_t m, int64_t* cur, int64_t* plan) {
  CTX_DYNAMIC_SHARED(int64_t, key);
  const int t = threadIdx.x, B = (int)blockDim.x;
  int64_t* pos = plan + 2 * plan[0] + 2;
  for (int64_t c0 = 0; c0 < m; c0 += B) {
    const int64_t i = c0 + t;
    const int64_t k = i < m ? (int64_t)idx[i] : -1;
    key[t] = k;
    __syncthreads();
    int64_t before = 0, after = 0;
    if (k >= 0) {
      for (int s = 0; s < B; ++s) {
        const bool eq = key[s] == k;
        before += eq && s < t;
        after += eq && s > t;
      }
      pos[cur[k] + before] = i;
    }
    __syncthreads();  // every thread has read cur[k] (and key) before the cursors move
    if (k >= 0 && after == 0) cur[k] += before + 1;
    // (the next chunk writes key, then its barrier orders these updates before its reads of cur)
  }
}

}  // namespace

template <class I>
void index_plan(const I* idx, int64_t m, int64_t n, int64_t* plan, int64_t* cur) {
  fill<int64_t>(cur, n, 0);
  if (m > 0) {
    CTX_LAUNCH(plan_count_kernel<I>, grid_for(m), kThreads, 0, stream(), idx, m, cur);
    CTX_CUDA_LAUNCH_CHECK("plan_count_kernel");
  }
  CTX_LAUNCH(plan_scan_kernel, 1, kScanThreads, 2 * kScanThreads * sizeof(int64_t), stream(), cur, n, plan);
  CTX_CUDA_LAUNCH_CHECK("plan_scan_kernel");
  if (m > 0) {
    CTX_LAUNCH(plan_place_kernel<I>, 1, kPlaceThreads, kPlaceThreads * sizeof(int64_t), stream(), idx, m, cur, plan);
    CTX_CUDA_LAUNCH_CHECK("plan_place_kernel");
  }
}
template void index_plan<int32_t>(const int32_t*, int64_t, int64_t, int64_t*, int64_t*);
template void index_plan<int64_t>(const int64_t*, int64_t, int64_t, int64_t*, int64_t*);

// The host's counting sort: the reference the device build is held to (tests/test_backend_ops.cpp).
std::vector<int64_t> index_add_plan_host(const std::vector<int64_t>& idx, int64_t n) {
  const int64_t m = (int64_t)idx.size();
  std::vector<int64_t> slot((size_t)n, 0);
  for (int64_t i : idx) slot[(size_t)i]++;
  std::vector<int64_t> plan(1, 0);  // U, rows [U], starts [U + 1], pos [m]
  plan.reserve((size_t)plan_capacity(m));
  for (int64_t j = 0; j < n; ++j)
    if (slot[(size_t)j]) plan.push_back(j);
  const int64_t U = (int64_t)plan.size() - 1;
  plan[0] = U;
  int64_t acc = 0;
  for (int64_t u = 0; u < U; ++u) {
    const int64_t j = plan[(size_t)(1 + u)];
    plan.push_back(acc);
    acc += slot[(size_t)j];
    slot[(size_t)j] = plan.back();  // now the write cursor of row j
  }
  plan.push_back(acc);
  const size_t pos0 = plan.size();
  plan.resize(pos0 + (size_t)m);
  for (int64_t i = 0; i < m; ++i) plan[pos0 + (size_t)slot[(size_t)idx[(size_t)i]]++] = i;
  return plan;
}

Tensor index_add_plan_device(const Tensor& idx, int64_t n) {
  CTX_CHECK(idx.device() == Device::CUDA && n >= 1, "index_add_plan_device: needs a cuda index tensor and n >= 1, got ",
            idx.str(), " on ", device_name(idx.device()), ", n = ", n);
  const int64_t m = idx.numel();
  Tensor plan = Tensor::empty({plan_capacity(m)}, DType::I64, Device::CUDA);
  Tensor cur = Tensor::empty({n}, DType::I64, Device::CUDA);
  CTX_CUDA_DISPATCH_INDEX(idx.dtype(), "index_add",
                          index_plan<I>(idx.data<I>(), m, n, plan.data<int64_t>(), cur.data<int64_t>()));
  return plan;
}

}  // namespace ctx::cuda
