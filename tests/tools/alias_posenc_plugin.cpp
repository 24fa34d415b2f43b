// tests/tools/alias_posenc_plugin.cpp — a working --plugin for tests/python/study_verb_checks.py
// (study_verb_plugin): registers "study-alias", ALiBi under another name (no parameters), so a
// study that names it fails unless every child process loads the plugin too.
#include "posenc/posenc.h"

namespace {
std::unique_ptr<ctx::PositionalEncoding> make_alias(const ctx::ModelConfig& cfg, const nlohmann::json&,
                                                    const std::string& source) {
  ctx::ModelConfig c = cfg;
  c.posenc = {{"type", "alibi"}};
  return ctx::make_posenc(c, source);
}
const ctx::PosencRegistrar kAlias("study-alias", make_alias);
}  // namespace
