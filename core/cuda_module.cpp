// core/cuda_module.cpp — dlopen of libctxlab_cuda.so on the first use of Device::CUDA (see
// core/cuda_module.h). The library binds to the ctx:: symbols of the object that holds ctxlab's
// code: the running executable (the CLI, the tests: their symbols are exported) or, for the Python
// module ctxlab/_ctxlab*.so, the module itself (its own link of the library NEEDs the module:
// python/CMakeLists.txt). Found next to that object (/proc/self/exe's directory: the build tree;
// the module's directory: BUILD/python/ctxlab, the installed wheel), else by name through that
// object's RUNPATH (the installed CLI: $ORIGIN/../lib; a program linking the installed package:
// its prefix's lib/, cmake/ctxlabConfig.cmake.in) and LD_LIBRARY_PATH; entry point
// `ctxlab_cuda_entry` resolved with dlsym.
#include "core/cuda_module.h"

#ifdef CTXLAB_WITH_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>

#include "core/error.h"

namespace ctx {

namespace {
std::atomic<const CudaModule*> g_module{nullptr};
void* g_handle = nullptr;  // the dlopen handle, set with g_module under g_mu
std::mutex g_mu;

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

// The shared object holding this code ("" when it is the executable itself), from the dynamic
// linker's map of loaded objects (l_name: the path it was opened by; empty for the executable).
std::string host_shared_object() {
  Dl_info info;
  link_map* map = nullptr;
  if (!dladdr1(reinterpret_cast<void*>(&cuda_module_loaded), &info, reinterpret_cast<void**>(&map),
               RTLD_DL_LINKMAP) || !map || !map->l_name)
    return std::string();
  return std::string(map->l_name);
}

std::string executable_dir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return dir_of(n > 0 ? std::string(buf, (size_t)n) : std::string());
}

const CudaModule* load() {
  const std::string host = host_shared_object();
  std::string path = (host.empty() ? executable_dir() : dir_of(host)) + "/libctxlab_cuda.so";
  // RTLD_NOW: an unresolved symbol is reported here, not at its first call mid-run.
  void* h = nullptr;
  if (access(path.c_str(), F_OK) == 0) {
    h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  } else {
    const std::string next_to_host = path;
    path = "libctxlab_cuda.so";
    h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h)
      throw Error(str("--device cuda: cannot load libctxlab_cuda.so: not at ", next_to_host,
                      ", and by name (RUNPATH, LD_LIBRARY_PATH): ", dlerror()));
  }
  if (!h) throw Error(str("--device cuda: cannot load ", path, ": ", dlerror()));
  auto entry = reinterpret_cast<CudaModuleEntry>(dlsym(h, "ctxlab_cuda_entry"));
  if (!entry) throw Error(str("--device cuda: cannot load ", path, ": ", dlerror()));
  const CudaModule* m = entry();
  CTX_CHECK(m && m->abi == kCudaModuleAbi, "--device cuda: cannot load ", path, ": interface version ",
            m ? m->abi : -1, ", this executable needs ", kCudaModuleAbi, " (rebuild both)");
  g_handle = h;
  return m;
}
}  // namespace

const CudaModule& cuda_module() {
  if (const CudaModule* m = g_module.load(std::memory_order_acquire)) return *m;
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_module.load(std::memory_order_relaxed)) g_module.store(load(), std::memory_order_release);
  return *g_module.load(std::memory_order_relaxed);
}

bool cuda_module_loaded() { return g_module.load(std::memory_order_acquire) != nullptr; }

void* cuda_module_symbol(const char* name) {
  cuda_module();  // loads the library (throws when it cannot)
  std::lock_guard<std::mutex> lk(g_mu);
  return dlsym(g_handle, name);
}

}  // namespace ctx
#endif  // CTXLAB_WITH_CUDA
