// train/cli/cli.h — the verbs of the `ctxlab` binary (MODEL_SPEC §6), one function per verb.
#pragma once
#include <vector>

namespace ctx::cli {

struct Verb {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);  // argv[0] is the verb
};
const std::vector<Verb>& verbs();

}  // namespace ctx::cli
