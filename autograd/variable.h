// autograd/variable.h — define-by-run autograd: Variable, the graph, backward(), no_grad.
// Each differentiable op computes its result Tensor and, when any input requires a gradient,
// records a Node: its inputs and a backward closure that turns the output gradient into input
// gradients. backward() walks the graph in reverse topological order and then frees it.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ctx {

struct VarImpl;
using VarPtr = std::shared_ptr<VarImpl>;

// A promise about a leaf's values made on the host (VarImpl::value_bound): every element lies in
// [lo, hi] while `storage` (the data's storage when it was made) has been written `writes` times.
struct ValueBound {
  double lo = 0, hi = 0;
  std::weak_ptr<Storage> storage;  // weak: a freed storage's address reused is not the same one
  uint64_t writes = 0;
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor data, bool requires_grad = false);
  static Variable from(VarPtr p) { Variable v; v.p_ = std::move(p); return v; }

  bool defined() const { return p_ != nullptr; }
  const Tensor& data() const;
  Tensor& data();
  const Tensor& grad() const;      // undefined until a backward reaches this variable
  Tensor& grad();
  bool requires_grad() const;
  void set_requires_grad(bool r);
  void zero_grad();                 // drop the gradient (undefined again)
  const Shape& shape() const { return data().shape(); }
  int64_t size(int64_t d) const { return data().size(d); }
  int64_t dim() const { return data().dim(); }
  DType dtype() const { return data().dtype(); }
  Device device() const { return data().device(); }
  std::string op_name() const;      // the op that made it ("leaf" for leaves)
  Variable detach() const;          // same data, no graph

  // Backpropagate from this variable. A non-scalar needs an explicit seed gradient.
  // retain_graph=false frees the graph afterwards; a second backward through it throws.
  void backward(const Tensor& seed = Tensor(), bool retain_graph = false);

  const VarPtr& impl() const { return p_; }

 private:
  VarPtr p_;
};

// The recorded op that produced a non-leaf Variable.
struct Node {
  std::string name;                 // op name, for errors and debugging
  std::vector<VarPtr> inputs;       // only inputs that require grad are kept
  // Given the output gradient, accumulate into inputs (via accumulate_grad).
  std::function<void(const Tensor& grad_out)> backward;
  bool freed = false;
};

struct VarImpl {
  Tensor data;
  Tensor grad;
  bool requires_grad = false;
  std::shared_ptr<Node> node;       // null for leaves
  bool graph_freed = false;         // set on the output of a backward that freed its graph
  // Where this leaf's gradient lives, when preassigned (a view of a flat gradient buffer, see
  // FlatParams in train/optim.h): the first accumulation after zero_grad() copies into it and
  // later ones add to it, instead of adopting the incoming tensor. zero_grad() keeps it.
  Tensor grad_slot;
  // What the host knows of a leaf's values without reading them: code that must decide on a
  // parameter's value while it lives on a device (FIRE's threshold, posenc/fire.cpp) asks for a
  // bound (wants_value_bound, set once by the module that owns the leaf); whoever knows one
  // publishes it (Module::to from the host values it uploads; AdamW, which widens it by each
  // update's largest move, train/value_bounds.h). See known_value_bound below.
  bool wants_value_bound = false;
  ValueBound value_bound;
};

// The leaf's bound when it still holds (its data's storage is the same one and unwritten since),
// else nullptr. A promise covers the values every later read on the data's device sees (in stream
// order), until the next write through a Tensor.
const ValueBound* known_value_bound(const VarImpl& v);
// Promises [lo, hi] for the leaf's current data (stamped with its storage's writes now).
void publish_value_bound(VarImpl& v, double lo, double hi);

// grad(v) += g (on first use: into v.grad_slot if set, else adopting g, or for a leaf a copy of
// g when g is shared). An intermediate's gradient may share storage with another's (add's dy
// passed to both inputs); it is then summed out of place, never written in place while shared.
// g must have v's shape.
void accumulate_grad(VarImpl& v, const Tensor& g);

// For a backward that can write v's gradient in place (a GEMM with beta): the tensor to write,
// and whether to add to it (`accumulate`: v already has a gradient that nobody else holds) or
// overwrite it (v's preassigned grad_slot, first use after zero_grad()). Undefined otherwise
// (no gradient and no slot, or a shared gradient): then the
// backward computes a fresh tensor and accumulate_grad adopts it. After writing, call
// grad_written(v, target). Saves accumulate_grad's copy into the slot (or its add).
Tensor grad_target(const VarImpl& v, bool& accumulate);
void grad_written(VarImpl& v, const Tensor& target);

// Record `node` as the producer of `out` if grad mode is on and some input requires grad.
// Returns true when recorded (the op's backward closure will run later).
bool grad_enabled();
Variable make_result(Tensor out, const std::string& name, std::vector<Variable> inputs,
                     std::function<void(const Tensor& grad_out)> backward_fn);

// RAII: no graph is recorded while one is alive (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
 private:
  bool prev_;
};

}  // namespace ctx
