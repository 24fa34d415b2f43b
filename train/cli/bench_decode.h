// train/cli/bench_decode.h — the memory side of `ctxlab bench`: the STREAM-style copy bandwidth
// that `bench --peak-only` reports next to the FMA peak, and `bench --decode`, which times
// sampling (train/sample.h: the graph-free decoder where the model allows it) against the
// weight-streaming bound (docs/sampling.md, "Decoding at memory speed"):
//   bound tokens/s = samples x copy bandwidth / bytes of weights read per step
// (each step streams every GEMM weight once, shared by the samples' rows; the KV cache's bytes
// are reported beside it, since at long contexts they are streamed too).
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "nn/gpt.h"

namespace ctx::cli {

// STREAM's copy (b[i] = a[i], counted as 2 x the bytes of a per pass: read a, write b) over a
// working set of `bytes` (two arrays of bytes / 2), on `threads` OpenMP threads, each copying its
// contiguous share; the best of repeats over ~0.2 s, GB/s (1e9 bytes).
double copy_bandwidth_gbps(int64_t bytes, int threads);

// The bytes a decoding step streams from the GEMM weights of `cfg` (every Linear's weight and the
// output head; embeddings, norms and biases are a row each), at `bytes_per_value` (4: fp32, 2: the
// bf16 copies of --precision bf16).
int64_t decode_weight_bytes(const ModelConfig& cfg, int bytes_per_value);

struct DecodeBenchOptions {
  int64_t tokens = 256;     // generated per sample
  int64_t prompt = 1;       // prompt tokens (random ids)
  int64_t samples = 1;      // --num-samples: rows decoded together
  int64_t rounds = 3;       // timed generations; the median is reported
  int threads = 1;          // the team (and the copy bandwidth's) thread count
  bool bf16 = false;        // --precision bf16 (the weights' bf16 copies are streamed)
  uint64_t seed = 1337;
};

// Times opt.rounds greedy generations of opt.tokens tokens per sample (after one untimed warm-up
// generation) and returns the JSON of `bench --decode` (tokens/s, ms per token, the path taken,
// the weight and KV bytes per step, the copy bandwidth at the weights' size on the team's threads
// and on one, and the fractions of the bound).
nlohmann::json bench_decode(nn::GPT& model, const DecodeBenchOptions& opt);

}  // namespace ctx::cli
