// autograd/gradcheck.h — finite-difference check of analytic gradients (f64).
// The function's output is projected on a fixed random vector w (L = sum(w * f(x))), so one
// backward gives the full vector-Jacobian product; each input element is then perturbed by
// +-eps and the central difference of L is compared with the analytic gradient, with
// PyTorch's defaults: eps 1e-6, atol 1e-5, rtol 1e-3, pass if |a - n| <= atol + rtol * |n|.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"

namespace ctx {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  uint64_t seed = 1234;       // of the projection vector
  int64_t max_elements = -1;  // check at most this many elements per input (-1: all)
};

struct GradcheckTensorReport {
  std::string name;
  double max_abs_err = 0;     // worst |analytic - numeric|
  double max_rel_err = 0;     // worst |a - n| / max(|n|, tiny)
  int64_t worst_index = -1;   // flat index of the worst element (by the pass criterion)
  double worst_analytic = 0, worst_numeric = 0;
  bool pass = true;
};

struct GradcheckResult {
  bool pass = true;
  std::vector<GradcheckTensorReport> tensors;
  std::string summary() const;  // one line per input: name, max abs/rel err, worst element
};

using GradFn = std::function<Variable(const std::vector<Variable>&)>;

// inputs: f64 tensors; every one is checked unless `names` marks it "-" (then it is a constant).
GradcheckResult gradcheck(const GradFn& f, const std::vector<Tensor>& inputs,
                          const std::vector<std::string>& names = {},
                          const GradcheckOptions& opt = {});

// The same check with respect to parameters that live inside something else (a model's
// named_parameters(), f64): `loss` is any closure computing a scalar from them (e.g.
// [&] { return model.loss(x, y); }). Each parameter becomes a gradcheck input for the duration
// (bound to the model's graph by an identity node, as `ctxlab gradcheck` does); `check(name)`
// selects the ones checked (null: all), the others are held constant. Afterwards every
// parameter is exactly as before (value, gradient, leaf).
using NamedVariables = std::vector<std::pair<std::string, Variable>>;
GradcheckResult gradcheck_params(const NamedVariables& params, const std::function<Variable()>& loss,
                                 const std::function<bool(const std::string&)>& check = nullptr,
                                 const GradcheckOptions& opt = {});

}  // namespace ctx
