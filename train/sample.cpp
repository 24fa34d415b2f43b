// train/sample.cpp — autoregressive sampling (see sample.h).
#include "train/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/variable.h"
#include "core/device_table.h"  // to_host

namespace ctx {

void check_sample_options(const SampleOptions& opt) {
  CTX_CHECK(std::isfinite(opt.temperature) && opt.temperature >= 0, "sample: --temperature must be >= 0 ",
            "(0 = greedy, e.g. 0.8), got ", opt.temperature);
  CTX_CHECK(opt.top_k >= 0, "sample: --top-k must be >= 0 (0 = whole vocabulary, e.g. 40), got ", opt.top_k);
  CTX_CHECK(opt.max_tokens >= 0, "sample: --max-tokens must be >= 0 (e.g. 200), got ", opt.max_tokens);
}

int32_t sample_next(const float* logits, int64_t V, double temperature, int64_t top_k, Rng& rng) {
  CTX_CHECK(V >= 1, "sample_next: empty logits row");
  CTX_CHECK(temperature >= 0 && top_k >= 0, "sample_next: temperature (", temperature, ") and top_k (",
            top_k, ") must be >= 0");
  for (int64_t i = 0; i < V; ++i)
    CTX_CHECK(!std::isnan(logits[i]), "sample_next: logit ", i, " is NaN (the model diverged?)");
  if (temperature == 0) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
  }
  // Candidates in order of decreasing logit, ties by lower index; keep the first k.
  std::vector<int32_t> idx((size_t)V);
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t k = (top_k == 0 || top_k > V) ? V : top_k;
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  idx.resize((size_t)k);
  const double top = logits[idx[0]];
  std::vector<double> p((size_t)k);
  double z = 0;
  for (int64_t i = 0; i < k; ++i) z += (p[(size_t)i] = std::exp(((double)logits[idx[(size_t)i]] - top) / temperature));
  double u = rng.uniform() * z, c = 0;
  for (int64_t i = 0; i < k; ++i) {
    c += p[(size_t)i];
    if (u < c) return idx[(size_t)i];
  }
  return idx[(size_t)k - 1];  // rounding: u landed at the very top
}

std::vector<int32_t> sample(nn::GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                            const std::function<void(int32_t)>& on_token) {
  check_sample_options(opt);
  CTX_CHECK(!prompt.empty(), "sample: the prompt must hold at least one token");
  const int64_t V = model.cfg.vocab_size, L = model.cfg.context;
  for (size_t i = 0; i < prompt.size(); ++i)
    CTX_CHECK(prompt[i] >= 0 && prompt[i] < V, "sample: prompt token ", prompt[i], " at position ", i,
              " is out of range for vocab_size ", V);
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  Rng rng(opt.seed);
  std::vector<int32_t> seq = prompt, out;
  out.reserve((size_t)opt.max_tokens);
  for (int64_t s = 0; s < opt.max_tokens; ++s) {
    const int64_t n = std::min<int64_t>((int64_t)seq.size(), L);
    Tensor in = Tensor::empty({1, n}, DType::I64);
    int64_t* ip = in.host<int64_t>();
    for (int64_t t = 0; t < n; ++t) ip[t] = seq[seq.size() - (size_t)n + (size_t)t];
    Tensor logits = model.forward(in).data();  // [1, n, V]
    logits = to_host(logits);
    Tensor row = logits.view({n, V}).select0(n - 1);
    if (row.dtype() != DType::F32) row = row.to(DType::F32);
    int32_t next = sample_next(row.host<float>(), V, opt.temperature, opt.top_k, rng);
    seq.push_back(next);
    out.push_back(next);
    if (on_token) on_token(next);
  }
  if (was_training) model.train();
  return out;
}

}  // namespace ctx
