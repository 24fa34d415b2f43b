// nn/module.cpp — Module (see module.h).
#include "nn/module.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace ctx::nn {

Variable Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  for (auto& p : params_) CTX_CHECK(p.first != name, "Module: parameter '", name, "' registered twice");
  Variable v(std::move(value), requires_grad);
  params_.emplace_back(name, v);
  return v;
}

NamedParams Module::named_parameters(const std::string& prefix) const {
  NamedParams out;
  for (auto& p : params_) out.emplace_back(prefix + p.first, p.second);
  for (auto& c : children_) {
    auto sub = c.second->named_parameters(prefix + c.first + ".");
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<Variable> Module::parameters() const {
  std::vector<Variable> out;
  for (auto& p : named_parameters()) out.push_back(p.second);
  return out;
}

void Module::zero_grad() {
  for (auto& p : named_parameters()) p.second.zero_grad();
}

namespace {
// A leaf that wants a bound on its values (VarImpl::wants_value_bound), uploaded from `host`: the
// exact range of what it was given (none where a value is not finite).
void publish_host_bound(VarImpl& v, const Tensor& host) {
  if (host.numel() == 0 || !is_float(host.dtype())) return;
  double lo = host.at(0), hi = lo;
  for (int64_t i = 0; i < host.numel(); ++i) {
    const double x = host.at(i);
    if (!std::isfinite(x)) return;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  publish_value_bound(v, lo, hi);
}
}  // namespace

void Module::to(Device dev) {
  std::unordered_set<const VarImpl*> seen;
  for (auto& np : named_parameters()) {
    VarImpl& v = *np.second.impl();
    if (!seen.insert(&v).second) continue;
    if (v.data.defined() && v.data.device() != dev) {
      const Tensor from = v.data;
      v.data = v.data.to(dev);
      if (v.wants_value_bound && from.device() == Device::CPU) publish_host_bound(v, from);
    }
    if (v.grad.defined() && v.grad.device() != dev) v.grad = v.grad.to(dev);
    if (v.grad_slot.defined() && v.grad_slot.device() != dev) v.grad_slot = Tensor();  // an optimizer's slot
  }
  move_state_tree(dev);
}

void Module::move_state_tree(Device dev) {
  move_state(dev);
  for (auto& c : children_) c.second->move_state_tree(dev);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

}  // namespace ctx::nn
