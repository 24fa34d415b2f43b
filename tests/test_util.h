// tests/test_util.h — helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include <set>
#include <vector>

#include "autograd/variable.h"
#include "core/error.h"
#include "train/config.h"

namespace ctx::testing_util {

// A two-layer, two-head, d = 16 model config (vocab 17, context 24) with the given encoding.
inline ModelConfig tiny_cfg(const nlohmann::json& posenc) {
  ModelConfig c;
  c.vocab_size = 17;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.d_ff = 32;
  c.context = 24;
  c.posenc = posenc;
  return c;
}

// Does the autograd graph of v contain an op named `name` (which fast path ran)?
inline bool graph_has_op(const Variable& v, const std::string& name) {
  std::set<const VarImpl*> seen;
  std::vector<const VarImpl*> todo = {v.impl().get()};
  while (!todo.empty()) {
    const VarImpl* x = todo.back();
    todo.pop_back();
    if (!x || !seen.insert(x).second || !x->node) continue;
    if (x->node->name == name) return true;
    for (const auto& in : x->node->inputs) todo.push_back(in.get());
  }
  return false;
}

// Runs fn, which must throw ctx::Error whose one-line message contains every needle.
inline void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "message is not one line: " << m;
    for (const auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << "'" << n << "' not in: " << m;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ctx::Error, got another exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected ctx::Error, nothing was thrown";
}

}  // namespace ctx::testing_util
