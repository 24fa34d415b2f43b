// nn/module.h — Module: named parameters (registration order), child modules, train/eval.
// Mirrors libtorch: register_parameter / register_module, named_parameters() with dotted
// names ("blocks.0.attn.qkv.weight"), zero_grad(), train()/eval(), to(device).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"

namespace ctx::nn {

using NamedParams = std::vector<std::pair<std::string, Variable>>;

class Module {
 public:
  virtual ~Module() = default;
  Variable register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }
  // All parameters of this module and its children, children in registration order after
  // this module's own, names prefixed by the child path.
  NamedParams named_parameters(const std::string& prefix = "") const;
  std::vector<Variable> parameters() const;
  void zero_grad();
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter of the tree to `dev` (its data, and its gradient when defined; each
  // Variable once, so tied weights stay tied; names and order kept), then each module's other
  // state (move_state). Parameters already on `dev` are not copied. Build optimizers after the
  // move: they hold the parameters' tensors.
  void to(Device dev);

 protected:
  // Moves state that is not a parameter (e.g. Attention's segment memory) to `dev`; called once
  // for every module of the tree by to().
  virtual void move_state(Device dev) { (void)dev; }
  void move_state_tree(Device dev);

  NamedParams params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace ctx::nn
