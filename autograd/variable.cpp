// autograd/variable.cpp — Variable, graph recording, backward() and the no-grad guard.
#include "autograd/variable.h"

#include <chrono>
#include <unordered_set>

#include "autograd/profiler.h"
#include "core/backend.h"

namespace ctx {

static thread_local bool t_grad_enabled = true;
bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = prev_; }

Variable::Variable(Tensor data, bool requires_grad) : p_(std::make_shared<VarImpl>()) {
  p_->data = std::move(data);
  p_->requires_grad = requires_grad;
}

static void check_defined(const VarPtr& p) { CTX_CHECK(p, "Variable: undefined variable used"); }
const Tensor& Variable::data() const { check_defined(p_); return p_->data; }
Tensor& Variable::data() { check_defined(p_); return p_->data; }
const Tensor& Variable::grad() const { check_defined(p_); return p_->grad; }
Tensor& Variable::grad() { check_defined(p_); return p_->grad; }
bool Variable::requires_grad() const { return p_ && p_->requires_grad; }
void Variable::set_requires_grad(bool r) {
  check_defined(p_);
  CTX_CHECK(!p_->node || r, "set_requires_grad(false) on a non-leaf (", p_->node->name,
            ") — use detach()");
  p_->requires_grad = r;
}
void Variable::zero_grad() { if (p_) p_->grad = Tensor(); }
std::string Variable::op_name() const { return p_ && p_->node ? p_->node->name : "leaf"; }
Variable Variable::detach() const { return Variable(data(), false); }

namespace {
// Nobody else holds t's storage and t spans all of it: t may be written in place.
bool exclusive(const Tensor& t) {
  return t.storage().use_count() == 1 && t.spans_storage();
}
// v's gradient may be added to in place: a leaf's (its own storage, or its preassigned slot in
// a flat buffer; in place as PyTorch's .grad, so a held reference sees the sum), or an
// intermediate's that nobody else holds.
bool writable(const VarImpl& v) { return !v.node || exclusive(v.grad); }
}  // namespace

const ValueBound* known_value_bound(const VarImpl& v) {
  const ValueBound& b = v.value_bound;
  if (!v.data.defined() || b.storage.lock() != v.data.storage()) return nullptr;
  return v.data.storage()->writes.load(std::memory_order_relaxed) == b.writes ? &b : nullptr;
}

void publish_value_bound(VarImpl& v, double lo, double hi) {
  CTX_CHECK(v.data.defined(), "publish_value_bound: the leaf has no data");
  CTX_CHECK(lo <= hi, "publish_value_bound: [", lo, ", ", hi, "] is not an interval");
  v.value_bound = {lo, hi, v.data.storage(), v.data.storage()->writes.load(std::memory_order_relaxed)};
}

void accumulate_grad(VarImpl& v, const Tensor& g) {
  CTX_CHECK(g.shape() == v.data.shape(), "autograd: gradient ", g.str(),
            " does not match variable ", v.data.str(), (v.node ? " made by " + v.node->name : ""));
  if (!v.grad.defined() && v.grad_slot.defined()) {
    v.grad_slot.copy_from(g);  // the slot's old contents are stale: overwrite, do not add
    v.grad = v.grad_slot;
  } else if (!v.grad.defined()) {
    // An intermediate's gradient (freed when the backward has used it) adopts g even when g is
    // shared (a gradient passed through: add's dy goes to both inputs); a later accumulation
    // then adds out of place (below). A leaf's gradient is the user's: it gets its own storage
    // unless g is a fresh result nobody else holds.
    v.grad = v.node || exclusive(g) ? g : g.clone();
  } else if (writable(v)) {
    backend_of(v.grad).binary(BinaryOp::Add, v.grad, g, v.grad);
  } else {  // shared with another gradient (adopted above): the sum goes to new storage
    Tensor sum = Tensor::empty(v.grad.shape(), v.grad.dtype(), v.grad.device());
    backend_of(v.grad).binary(BinaryOp::Add, v.grad, g, sum);
    v.grad = sum;
  }
}

Tensor grad_target(const VarImpl& v, bool& accumulate) {
  accumulate = v.grad.defined();
  if (accumulate) return writable(v) ? v.grad : Tensor();  // shared: never written in place
  return v.grad_slot;
}

void grad_written(VarImpl& v, const Tensor& target) {
  CTX_CHECK(target.shape() == v.data.shape(), "autograd: gradient ", target.str(),
            " does not match variable ", v.data.str(), (v.node ? " made by " + v.node->name : ""));
  v.grad = target;
}

Variable make_result(Tensor out, const std::string& name, std::vector<Variable> inputs,
                     std::function<void(const Tensor&)> backward_fn) {
  if (prof::enabled()) prof::forward_op(name);
  Variable r(std::move(out), false);
  if (!t_grad_enabled) return r;
  bool any = false;
  for (auto& in : inputs) any = any || in.requires_grad();
  if (!any) return r;
  auto node = std::make_shared<Node>();
  node->name = name;
  for (auto& in : inputs)
    if (in.requires_grad()) node->inputs.push_back(in.impl());
  node->backward = std::move(backward_fn);
  r.impl()->node = std::move(node);
  r.impl()->requires_grad = true;
  return r;
}

void Variable::backward(const Tensor& seed, bool retain_graph) {
  check_defined(p_);
  CTX_CHECK(!p_->graph_freed, "backward: the graph of this ", op_name(),
            " result was already freed by an earlier backward(); pass retain_graph=true to the "
            "first backward to call it twice");
  CTX_CHECK(p_->requires_grad, "backward: the variable does not require grad (no input of the "
            "graph requires grad, or it was built under NoGradGuard)");
  Tensor g = seed;
  if (!g.defined()) {
    CTX_CHECK(p_->data.numel() == 1, "backward: output ", p_->data.str(),
              " is not a scalar; pass a seed gradient of the same shape");
    g = Tensor::full(p_->data.shape(), 1.0, p_->data.dtype(), p_->data.device());
  }
  CTX_CHECK(g.shape() == p_->data.shape(), "backward: seed ", g.str(), " does not match output ",
            p_->data.str());

  // Topological order (iterative DFS, post-order), over nodes that require grad.
  std::vector<VarImpl*> order;
  std::unordered_set<VarImpl*> seen;
  std::vector<std::pair<VarImpl*, size_t>> stack{{p_.get(), 0}};
  seen.insert(p_.get());
  while (!stack.empty()) {
    auto& [v, i] = stack.back();
    if (v->node && v->node->freed)
      throw Error(str("backward: part of this graph (", v->node->name,
                      ") was already freed by an earlier backward(); use retain_graph=true"));
    if (v->node && i < v->node->inputs.size()) {
      VarImpl* c = v->node->inputs[i++].get();
      if (seen.insert(c).second) stack.push_back({c, 0});
    } else {
      order.push_back(v);
      stack.pop_back();
    }
  }
  // Intermediate gradients live only during this backward; leaves accumulate.
  std::vector<Tensor> saved_grad;
  for (VarImpl* v : order)
    if (v->node) v->grad = Tensor();
  accumulate_grad(*p_, g);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    VarImpl* v = *it;
    if (!v->node || !v->grad.defined()) continue;
    if (prof::enabled()) {
      prof::sync();
      auto t0 = std::chrono::steady_clock::now();
      v->node->backward(v->grad);
      prof::sync();
      prof::add("backward", v->node->name,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    } else {
      v->node->backward(v->grad);
    }
    if (v != p_.get()) v->grad = Tensor();  // free intermediate gradients as we go
  }
  if (!retain_graph) {
    for (VarImpl* v : order)
      if (v->node) {
        v->node->freed = true;
        v->node->backward = nullptr;  // releases saved tensors
        v->node->inputs.clear();
      }
    if (p_->node) p_->graph_freed = true;  // a leaf has no graph: backward on it may repeat
  }
}

}  // namespace ctx
