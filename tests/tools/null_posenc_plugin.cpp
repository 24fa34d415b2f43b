// tests/tools/null_posenc_plugin.cpp — a broken --plugin for tests/python/reliability_checks.py:
// its factory returns nullptr. The CLI must refuse it in one line, not crash.
#include "posenc/posenc.h"

namespace {
std::unique_ptr<ctx::PositionalEncoding> make_null(const ctx::ModelConfig&, const nlohmann::json&,
                                                   const std::string&) {
  return nullptr;
}
const ctx::PosencRegistrar kNull("nullfactory", make_null);
}  // namespace
