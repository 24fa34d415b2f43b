// tests/test_util.h — helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace ctx::testing_util {

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
