// train/cli/plugin.cpp — dlopen of --plugin libraries (see plugin.h).
#include "train/cli/plugin.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "core/error.h"
#include "posenc/posenc.h"
#include "nn/config.h"  // preset_config

namespace ctx {

namespace {

// The plugins loaded so far (their dlopen handles) and the types each registered: a plugin given
// twice is loaded once (dlopen hands back the same handle and runs no constructor again).
std::map<void*, std::vector<std::string>>& loaded_plugins() {
  static std::map<void*, std::vector<std::string>> m;
  return m;
}

std::vector<std::string>& plugin_paths() {
  static std::vector<std::string> v;
  return v;
}

}  // namespace

const std::vector<std::string>& loaded_plugin_paths() { return plugin_paths(); }

std::vector<std::string> load_plugin(const std::string& path) {
  const std::vector<std::string> before = posenc_types();  // the built-ins registered first
  posenc_take_duplicates();
  // A bare name would be searched in the library path; a plugin is a file the user names.
  const std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  // Already loaded (the same file given twice, or by another path): nothing more to do.
  if (void* again = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) {
    auto it = loaded_plugins().find(again);
    dlclose(again);  // RTLD_NOLOAD took a reference
    if (it != loaded_plugins().end()) return it->second;
  }
  // RTLD_NOW: a symbol the executable lacks is an error here, not a crash mid-run.
  void* h = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    std::string why = e ? e : "unknown error";
    // dlerror starts with the file name already; keep the message to one line naming it once
    if (why.compare(0, file.size() + 2, file + ": ") == 0) why = why.substr(file.size() + 2);
    throw Error(str("--plugin ", path, ": cannot load: ", why));
  }
  const std::vector<std::string> dup = posenc_take_duplicates();
  if (!dup.empty())
    throw Error(str("--plugin ", path, ": registers posenc type '", dup[0],
                    "', which is already registered (choose another name)"));
  std::vector<std::string> added;
  for (const std::string& t : posenc_types())
    if (std::find(before.begin(), before.end(), t) == before.end()) added.push_back(t);
  CTX_CHECK(!added.empty(), "--plugin ", path,
            ": loaded, but it registered no positional encoding (expected a static "
            "ctx::PosencRegistrar; docs/extending.md)");
  // a factory that returns nullptr is refused now, not when a model names it (make_posenc
  // refuses it then too)
  posenc_probe(added, preset_config("tiny"), str("--plugin ", path));
  loaded_plugins()[h] = added;
  plugin_paths().push_back(path);
  return added;
}

std::vector<std::string> take_plugin_args(int& argc, char** argv, int first) {
  std::vector<std::string> paths;
  int out = first;
  for (int i = first; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--plugin")) {
      CTX_CHECK(i + 1 < argc && argv[i + 1][0] != '\0', "--plugin needs a path to a shared library (e.g. --plugin ./libfire.so)");
      paths.push_back(argv[++i]);
    } else if (!std::strncmp(argv[i], "--plugin=", 9)) {
      CTX_CHECK(argv[i][9] != '\0', "--plugin needs a path to a shared library (e.g. --plugin=./libfire.so)");
      paths.push_back(argv[i] + 9);
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  argv[argc] = nullptr;
  return paths;
}

}  // namespace ctx
