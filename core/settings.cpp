// core/settings.cpp — the table of CTXLAB_* environment variables (core/settings.h). Adding a
// variable: one row here, one in docs/settings.md.
#include "core/settings.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace ctx {

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = {
      {"CTXLAB_THREADS", "OMP_NUM_THREADS, else the cores in the affinity mask", "a positive integer",
       "threads of the OpenMP / oneDNN pool", "core/threads.cpp"},
      {"CTXLAB_GEMM", "per-shape choice (oneDNN; OpenBLAS for long-K weight gradients without AVX-512)",
       "onednn | openblas | reference", "the CPU GEMM implementation for every GEMM", "core/cpu/gemm_select.cpp"},
      {"CTXLAB_OPENBLAS_CORETYPE", "OPENBLAS_CORETYPE, or autodetect on AVX-512 CPUs",
       "an OpenBLAS core name (Haswell, SkylakeX, ...)", "the core type OpenBLAS is loaded with",
       "core/cpu/gemm_openblas.cpp"},
      {"CTXLAB_ONEDNN_OPS", "measured per-op policy", "all | none",
       "use oneDNN for every softmax / layer norm / GELU op, or for none", "core/cpu/onednn_ops.cpp"},
      {"CTXLAB_GELU", "measured policy (fast or oneDNN)", "reference | fast | onednn",
       "the CPU GELU (tanh) implementation", "core/cpu/gelu_fast.cpp"},
      // The fast-path switches: each is also a row of core/fast_paths.cpp's table, which reads it
      // (the fused op, its composed twin, who asks; tests check that the two tables agree).
      {"CTXLAB_FUSED_ATTENTION", "unset: fused on the CPU; on CUDA the backend's measured choice (composed "
       "for training shapes, fused past 2^27 scores and for decoding)", "0 | 1",
       "0: attention always composed (matmul, mask, softmax, matmul); 1: fused wherever the backend has it",
       "core/fast_paths.cpp"},
      {"CTXLAB_BF16_ATTENTION", "unset: off on the CPU, on on CUDA", "0 | 1",
       "under --precision bf16, whether the fused attention's tile products take bf16 inputs too: on the "
       "CPU opt-in (1; faster, measured +1.8% validation loss on the main job); on CUDA on unless 0: the "
       "tensor-core FlashAttention-2 kernels for every call without a bias or relative terms (docs/cuda.md; "
       "measured on an H200: GPT-2 small bf16 step 49.7 -> 34.0 ms)", "core/fast_paths.cpp"},
      {"CTXLAB_TC_FORWARD_ROWS", "64", "64 | 128",
       "query rows a block of CUDA's tensor-core attention forward takes for head dims up to 64: 64 "
       "(4 warps x 16 rows, timed on an H200) or 128 (4 x 32, each K / V fragment feeding twice the mma; "
       "not yet timed on a GPU); the same results",
       "core/cuda/attention_tc.cu"},
      {"CTXLAB_TC_BACKWARD_ROWS", "64", "64 | 128",
       "rows a block of CUDA's tensor-core attention backward takes (keys in the dK/dV pass, queries in the "
       "dQ pass): 64 (4 warps x 16, timed on an H200) or 128 (4 x 32, each B fragment of the P Y products "
       "feeding four mma; dK/dV for head dims up to 64); not yet timed on a GPU; the same results",
       "core/cuda/attention_tc.cu"},
      {"CTXLAB_CUDA_GRAPH", "1", "0 | 1",
       "on CUDA, `train` and `bench` record the warm step (forward, backward, clip, AdamW) into a CUDA Graph "
       "once and replay it each step (docs/cuda.md; the same bits as eager steps; measured on an H200: small "
       "bf16 1.83x, GPT-2 small bf16 1.065x the eager step); runs that cannot (MPI, --deterministic, "
       "randomized positions, segments, task rows, SGD; `bench --profile`) say why and step eagerly. 0: "
       "eager steps always",
       "train/trainer.cpp"},
      {"CTXLAB_HUGE_PAGES", "1", "0 | 1",
       "0: host buffers of 2 MiB and more in 4 KiB pages; 1: 2 MiB-aligned and advised as transparent huge "
       "pages (madvise(MADV_HUGEPAGE), Linux), which the fp32 decoder's weight stream needs not to miss the "
       "TLB (docs/performance.md, \"Huge pages\")",
       "core/allocator.cpp"},
      {"CTXLAB_FUSED_ADD_NORM", "1", "0 | 1",
       "0: each residual add and the norm after it as two ops (add, then layer_norm / rms_norm), and the "
       "norm's input gradient summed into the residual stream's by its own pass, instead of one kernel each "
       "way (Backend::add_layernorm, layernorm_backward's dres)", "core/fast_paths.cpp"},
      {"CTXLAB_FUSED_CAUSAL_SOFTMAX", "1", "0 | 1",
       "0: the composed attention's mask and softmax as causal_fill + softmax (two passes) instead of "
       "Backend::causal_softmax (one pass each way)", "core/fast_paths.cpp"},
      {"CTXLAB_FUSED_ROPE", "1", "0 | 1",
       "0: rotary rotations (rope_rotate, complex_order_embed) composed from primitives instead of "
       "Backend::rope_rotate", "core/fast_paths.cpp"},
      {"CTXLAB_FUSED_HEADS", "1", "0 | 1", "0: head split / merge through reshape + permute + slice",
       "core/fast_paths.cpp"},
      {"CTXLAB_FUSED_LINEAR", "1", "0 | 1", "0: Linear as matmul + add (two nodes) instead of one GEMM with bias",
       "core/fast_paths.cpp"},
      {"CTXLAB_FUSED_MLP", "0", "0 | 1",
       "1: the MLP as one node whose GELU runs in the GEMMs' epilogues on CUDA (cuBLASLt GELU_AUX_BIAS / "
       "DGELU under --precision bf16 or --tf32) instead of linear, gelu_tanh, linear (three nodes). "
       "Opt-in: on an H200 the first version (with DGELU_BGRAD) was 1.5% slower a GPT-2 small bf16 step; "
       "the DGELU version awaits a GPU",
       "core/fast_paths.cpp"},
      {"CTXLAB_FUSED_DECODE", "1", "0 | 1",
       "0: sampling decodes through the autograd ops (GPT::forward_cached) instead of the graph-free decoder "
       "(nn/decode_engine.h; the same kernels, no graph, no per-token allocation)",
       "core/fast_paths.cpp"},
      {"CTXLAB_FUSED_DECODE_STEP", "1", "0 | 1",
       "0: the graph-free decoder runs a step op by op (~150 backend calls a token) instead of one backend "
       "call for the whole stack (Backend::make_decode_step; the same logits, docs/sampling.md)",
       "core/fast_paths.cpp"},
      {"CTXLAB_FIRE_TABLE", "1", "0 | 1",
       "FIRE's bias as a per-head distance table where every query of the call is below thr = "
       "|L_multiplier init_L| (the MLP on S distances instead of T x S pairs; on CUDA the tensor-core "
       "attention). Unset: on; on CUDA decided from L_multiplier's host-side bound (kept through AdamW's "
       "updates, no copy), the per-pair bias where the bound cannot tell. 1: there, read the value "
       "instead (one device -> host copy per FIRE call). 0: the per-pair bias everywhere (docs/posenc.md)",
       "core/fast_paths.cpp"},
      {"CTXLAB_FUSED_ODE", "1", "0 | 1",
       "0: FLOATER's RK4 as the composed loop (~10 primitives per stage) instead of one call (its ode_rk4 kernels)",
       "core/fast_paths.cpp"},
      {"CTXLAB_FUSED_GRU", "1", "0 | 1",
       "0: the rnn encoding's GRU as the composed loop (each gate its own GEMM and ~20 primitives per step)",
       "core/fast_paths.cpp"},
      {"CTXLAB_PROFILE", "0", "0 | 1",
       "1: time every autograd op by name (ctxlab bench --profile, example_step_timing print it)",
       "autograd/profiler.cpp"},
      {"CTXLAB_NO_AVX512_BF16", "0", "0 | 1",
       "1: treat the CPU as one without avx512_bf16 (--precision bf16 refused, the bf16 kernels decline), "
       "so that the fallbacks are tested on a CPU that has it", "core/precision.cpp"},
      {"CTXLAB_NO_REEXEC", "unset", "any value",
       "set: the CLI does not restart itself with GOMP_SPINCOUNT=1000", "train/cli/main.cpp"},
      {"CTXLAB_TEST_KILL_AT", "unset", "NAME@N | NAME@N:STOP",
       "tests: SIGKILL (:STOP: SIGSTOP) the process at the N-th pass of the kill point NAME (a checkpoint "
       "write's steps; dist:init, dist:finalize, dist:mpi_finalize: the MPI waits of a run's start and end)",
       "train/io/kill_point.cpp"},
      // The CUDA emulator (core/cuda/emu, a library that does not depend on ctxlab's core) reads
      // its own variables with getenv; they are listed here so that this table is complete.
      {"CTXLAB_EMU_SCHEDULE", "forward", "forward | reverse | shuffle | shuffle:SEED",
       "emulator: the order the threads of a block run between barriers", "core/cuda/emu/runtime.cpp"},
      {"CTXLAB_EMU_THREADS", "2", "an integer in 1..64", "emulator: OS threads that run blocks",
       "core/cuda/emu/scheduler.cpp"},
      {"CTXLAB_EMU_STACK_KB", "256", "an integer >= 64", "emulator: fiber stack size of a CUDA thread",
       "core/cuda/emu/fiber.cpp"},
      {"CTXLAB_EMU_QUIET", "unset", "1", "emulator: record faults without printing them",
       "core/cuda/emu/runtime.cpp"},
      {"CTXLAB_EMU_RACECHECK", "0", "0 | 1",
       "emulator: 1 turns on the race detector (shared/global hazards within a launch; needs the access hooks)",
       "core/cuda/emu/access.cpp"},
      {"CTXLAB_EMU_COUNTERS", "unset", "a file path",
       "emulator: count every launch's global sectors per warp request, shared-memory wavefronts, "
       "bytes and mma instructions, and every cuBLAS call's FLOPs and bytes; written there as JSON at "
       "exit (bench/roofline.py --counters; docs/cuda.md)",
       "core/cuda/emu/counters.cpp"},
      // Test harness only.
      {"CTXLAB_BACKEND_CASES", "unset (every case)", "a regular expression (ECMAScript)",
       "tests: the backend table runs only the cases whose name it matches, e.g. ^attention (scripts/gpu_check.sh: "
       "the attention kernels under compute-sanitizer's racecheck, which the whole table overruns)",
       "tests/test_backend_ops.cpp"},
      {"CTXLAB_BACKEND_DIGEST", "unset", "a file path",
       "tests: the backend table appends a hash of every cuda case's output bytes there",
       "tests/test_backend_ops.cpp"},
      {"CTXLAB_ALLOW_MISSING", "unset (never set in CI)", "comma-separated dependency names, or all",
       "tests: a missing dependency listed here skips instead of failing (docs/testing.md)",
       "tests/test_util.h"},
  };
  return table;
}

const char* setting_env(const char* name) {
  const auto& t = settings();
  const bool known =
      std::any_of(t.begin(), t.end(), [&](const Setting& s) { return std::strcmp(s.name, name) == 0; });
  CTX_CHECK(known, "setting_env: ", name, " is not in the settings table (core/settings.cpp)");
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

bool setting_flag(const char* name, bool default_on) {
  const char* v = setting_env(name);
  if (!v) return default_on;
  CTX_CHECK(!std::strcmp(v, "0") || !std::strcmp(v, "1"), name, "=", v, ": expected 0 or 1 (docs/settings.md)");
  return v[0] == '1';
}

void check_setting_flags() {
  for (const Setting& s : settings())
    if (!std::strcmp(s.values, "0 | 1")) (void)setting_flag(s.name, false);
}

std::string settings_help() {
  size_t w = 0;
  for (const Setting& s : settings()) w = std::max(w, std::strlen(s.name));
  std::string out;
  for (const Setting& s : settings()) {
    out += "  " + std::string(s.name) + std::string(w + 2 - std::strlen(s.name), ' ') + s.values +
           " (default: " + s.default_value + ")\n";
    out += std::string(w + 4, ' ') + s.meaning + "\n";
  }
  return out;
}

}  // namespace ctx
