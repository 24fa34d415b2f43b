// core/cuda_module.cpp — dlopen of libctxlab_cuda.so on the first use of Device::CUDA (see
// core/cuda_module.h): found next to the running executable (/proc/self/exe; the build tree),
// else by name through the executable's RUNPATH (the installed CLI: $ORIGIN/../lib; a program
// linking the installed package: its prefix's lib/, cmake/ctxlabConfig.cmake.in) and
// LD_LIBRARY_PATH; entry point `ctxlab_cuda_entry` resolved with dlsym.
#include "core/cuda_module.h"

#ifdef CTXLAB_WITH_CUDA
#include <dlfcn.h>
#include <limits.h>
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

std::string module_path() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string exe = n > 0 ? std::string(buf, (size_t)n) : std::string();
  const size_t slash = exe.rfind('/');
  return (slash == std::string::npos ? std::string(".") : exe.substr(0, slash)) + "/libctxlab_cuda.so";
}

const CudaModule* load() {
  std::string path = module_path();
  // RTLD_NOW: an unresolved symbol is reported here, not at its first call mid-run.
  void* h = nullptr;
  if (access(path.c_str(), F_OK) == 0) {
    h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  } else {
    const std::string next_to_exe = path;
    path = "libctxlab_cuda.so";
    h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h)
      throw Error(str("--device cuda: cannot load libctxlab_cuda.so: not at ", next_to_exe,
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
