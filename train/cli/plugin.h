// train/cli/plugin.h — user code loaded at run time: `ctxlab --plugin lib.so` (any verb) or
// ctx::load_plugin in a program. A plugin is a shared library whose static registrars
// (ctx::PosencRegistrar) add encodings by name when it is loaded; its ctx:: symbols resolve from
// the executable, which links the whole library with exported symbols (CMake: ctxlab_link_lib
// EXPORTS in the tree, ctxlab::ctxlab / ctxlab::plugin from the installed package).
// docs/extending.md ("The plugin route").
#pragma once
#include <string>
#include <vector>

namespace ctx {

// Loads `path` (dlopen, every symbol bound now; never unloaded). Returns the encoding names it
// registered. One-line errors naming the file: cannot load (missing file, not a shared library,
// a symbol this executable does not have — dlerror's words), registers an existing name, or
// registers no encoding at all.
std::vector<std::string> load_plugin(const std::string& path);

// The paths of the plugins loaded so far, as given, in load order (each once): `ctxlab study`
// passes them on to its child processes.
const std::vector<std::string>& loaded_plugin_paths();

// Removes every `--plugin PATH` / `--plugin=PATH` from argv[first..argc) (argc and argv updated,
// order of the rest kept) and returns the paths in order. `--plugin` without a path: an error.
std::vector<std::string> take_plugin_args(int& argc, char** argv, int first);

}  // namespace ctx
