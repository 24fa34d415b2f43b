// autograd/gradcheck.cpp — finite differences against backward (see gradcheck.h).
#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/ops.h"
#include "core/rng.h"

namespace ctx {

std::string GradcheckResult::summary() const {
  std::ostringstream os;
  for (auto& t : tensors) {
    os << (t.pass ? "PASS " : "FAIL ") << t.name << ": max abs err " << t.max_abs_err
       << ", max rel err " << t.max_rel_err;
    if (t.worst_index >= 0)
      os << " (worst element " << t.worst_index << ": analytic " << t.worst_analytic
         << ", numeric " << t.worst_numeric << ")";
    os << "\n";
  }
  return os.str();
}

GradcheckResult gradcheck(const GradFn& f, const std::vector<Tensor>& inputs,
                          const std::vector<std::string>& names, const GradcheckOptions& opt) {
  for (size_t i = 0; i < inputs.size(); ++i)
    CTX_CHECK(inputs[i].dtype() == DType::F64 || !is_float(inputs[i].dtype()),
              "gradcheck: input ", i, " is ", inputs[i].str(), "; gradcheck needs f64");
  auto is_const = [&](size_t i) {
    return !is_float(inputs[i].dtype()) || (i < names.size() && names[i] == "-");
  };
  // Working copies (perturbed in place).
  std::vector<Tensor> xs;
  for (auto& t : inputs) xs.push_back(t.clone());

  // Projection vector, from the output's shape.
  auto run = [&](bool want_grad, std::vector<Variable>* vars_out) {
    std::vector<Variable> vars;
    for (size_t i = 0; i < xs.size(); ++i) vars.emplace_back(xs[i], want_grad && !is_const(i));
    Variable y = f(vars);
    if (vars_out) *vars_out = vars;
    return y;
  };
  Tensor w;
  auto project = [&](const Variable& y) -> Variable {
    if (!w.defined()) {
      Rng rng(opt.seed);
      w = Tensor::empty(y.shape(), DType::F64);
      rng.fill_uniform(w, -1.0, 1.0);
    }
    return sum(mul(y, Variable(w, false)));
  };
  auto loss_value = [&]() {
    NoGradGuard ng;
    Variable y = run(false, nullptr);
    CTX_CHECK(y.dtype() == DType::F64, "gradcheck: function returned ", y.data().str(),
              ", expected f64");
    return project(y).data().item();
  };

  // Analytic gradients.
  std::vector<Variable> vars;
  Variable y = run(true, &vars);
  Variable L = project(y);
  GradcheckResult res;
  if (L.requires_grad()) L.backward();

  for (size_t i = 0; i < xs.size(); ++i) {
    if (is_const(i)) continue;
    GradcheckTensorReport rep;
    rep.name = i < names.size() && !names[i].empty() ? names[i] : "input" + std::to_string(i);
    Tensor ga = vars[i].grad();
    int64_t n = xs[i].numel();
    int64_t limit = opt.max_elements < 0 ? n : std::min(n, opt.max_elements);
    double worst_excess = -1;
    for (int64_t k = 0; k < limit; ++k) {
      int64_t e = limit == n ? k : (k * n) / limit;  // spread the checked elements
      double orig = xs[i].at(e);
      xs[i].set(e, orig + opt.eps);
      double lp = loss_value();
      xs[i].set(e, orig - opt.eps);
      double lm = loss_value();
      xs[i].set(e, orig);
      double num = (lp - lm) / (2 * opt.eps);
      double ana = ga.defined() ? ga.at(e) : 0.0;
      double err = std::fabs(ana - num);
      double rel = err / std::max(std::fabs(num), 1e-12);
      rep.max_abs_err = std::max(rep.max_abs_err, err);
      rep.max_rel_err = std::max(rep.max_rel_err, err == 0 ? 0.0 : rel);
      double excess = err - (opt.atol + opt.rtol * std::fabs(num));
      if (excess > worst_excess) {
        worst_excess = excess;
        rep.worst_index = e;
        rep.worst_analytic = ana;
        rep.worst_numeric = num;
      }
      if (excess > 0) rep.pass = false;
      if (!std::isfinite(ana) || !std::isfinite(num)) rep.pass = false;
    }
    res.pass = res.pass && rep.pass;
    res.tensors.push_back(rep);
  }
  return res;
}

GradcheckResult gradcheck_params(const NamedVariables& params, const std::function<Variable()>& loss,
                                 const std::function<bool(const std::string&)>& check,
                                 const GradcheckOptions& opt) {
  std::vector<Tensor> inputs;
  std::vector<std::string> names;
  std::vector<VarImpl> saved;
  for (auto& [name, p] : params) {
    CTX_CHECK(p.defined(), "gradcheck_params: parameter '", name, "' is undefined");
    inputs.push_back(p.data().clone());
    names.push_back(check && !check(name) ? "-" : name);
    saved.push_back(*p.impl());
  }
  // Each parameter is rebound to an identity of its gradcheck input: the graph built by `loss`
  // then carries the gradient back to the input gradcheck reads.
  GradFn f = [&](const std::vector<Variable>& in) {
    for (size_t i = 0; i < params.size(); ++i) {
      Variable src = in[i];
      Variable id = make_result(src.data(), "bind", {src}, [src](const Tensor& g) {
        if (src.requires_grad()) accumulate_grad(*src.impl(), g);
      });
      *params[i].second.impl() = *id.impl();
    }
    return loss();
  };
  GradcheckResult res;
  try {
    res = gradcheck(f, inputs, names, opt);
  } catch (...) {
    for (size_t i = 0; i < params.size(); ++i) *params[i].second.impl() = saved[i];
    throw;
  }
  for (size_t i = 0; i < params.size(); ++i) *params[i].second.impl() = saved[i];
  return res;
}

}  // namespace ctx
