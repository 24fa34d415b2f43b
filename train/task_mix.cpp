// train/task_mix.cpp — task sequences mixed into training batches (see task_mix.h).
#include "train/task_mix.h"

#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "nn/gpt.h"  // kIgnoreTarget

namespace ctx {

std::vector<TaskRate> parse_task_mix(const std::string& text) {
  std::vector<TaskRate> mix;
  double total = 0;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    const size_t colon = item.rfind(':');
    CTX_CHECK(colon != std::string::npos && colon > 0, "--task-mix: ", quoted_str(item),
              " is not NAME:P (e.g. passkey:0.25; several: passkey:0.2,copy:0.1)");
    TaskRate tr{item.substr(0, colon), 0};
    const std::string p = item.substr(colon + 1);
    char* end = nullptr;
    tr.rate = p.empty() ? NAN : std::strtod(p.c_str(), &end);
    CTX_CHECK(!p.empty() && end == p.c_str() + p.size() && std::isfinite(tr.rate) && tr.rate >= 0 && tr.rate <= 1,
              "--task-mix ", item, ": the rate P must be a number in [0, 1], got ", quoted_str(p));
    try {
      check_task(tr.name, TaskParams{});
    } catch (const Error& e) {
      throw Error(str("--task-mix: ", e.what()));
    }
    for (const TaskRate& m : mix) CTX_CHECK(m.name != tr.name, "--task-mix: task ", tr.name, " is given twice");
    total += tr.rate;
    mix.push_back(tr);
    i = j + 1;
  }
  CTX_CHECK(total <= 1 + 1e-12, "--task-mix: the rates add up to ", total, ", more than 1");
  return mix;
}

TaskMixer::TaskMixer(const std::vector<TaskRate>& mix, const TaskParams& params, const Tokenizer& tok,
                     const TokenStream* filler, int64_t T)
    : T_(T) {
  for (const TaskRate& m : mix) {
    rates_.push_back(m.rate);
    gens_.push_back(std::make_unique<TaskGenerator>(m.name, params, tok, filler));
    try {
      gens_.back()->check_length(T);
    } catch (const Error& e) {
      throw Error(str("--task-mix ", m.name, " at the training length ", T, ": ", e.what()));
    }
  }
}

int64_t TaskMixer::apply(Tensor& x, Tensor& y, Rng& rng) const {
  CTX_CHECK(x.dim() == 2 && x.size(1) == T_ && y.shape() == x.shape() && x.dtype() == DType::I64 &&
                y.dtype() == DType::I64,
            "TaskMixer: batch ", x.str(), " / ", y.str(), " is not i64 [B, ", T_, "]");
  int64_t* xp = x.host<int64_t>();
  int64_t* yp = y.host<int64_t>();
  int64_t rows = 0;
  for (int64_t b = 0; b < x.size(0); ++b) {
    double u = rng.uniform();
    size_t k = 0;
    while (k < rates_.size() && u >= rates_[k]) u -= rates_[k++];
    if (k == rates_.size()) continue;  // a text row
    const TaskSequence s = gens_[k]->make(T_, rng.uniform(), rng);
    for (int64_t t = 0; t < T_; ++t) {
      xp[b * T_ + t] = s.tokens[(size_t)t];
      yp[b * T_ + t] = t + 1 >= s.answer_begin ? s.tokens[(size_t)t + 1] : nn::GPT::kIgnoreTarget;
    }
    ++rows;
  }
  return rows;
}

}  // namespace ctx
