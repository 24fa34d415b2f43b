// train/cli/main.cpp — the `ctxlab` binary: parses the verb and hands over to train/cli_*.cpp.
// Verbs are those of MODEL_SPEC §6. Every error is one line on stderr and a non-zero exit.
// `--plugin PATH` (any verb, any position, repeatable) loads user encodings first (train/cli/plugin.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <unistd.h>

#include "core/settings.h"
#include "train/cli/cli.h"
#include "train/dist/distributed.h"
#include "train/cli/plugin.h"
#include "train/io/fileio.h"  // escape_control

namespace {

void print_help() {
  std::printf(
      "ctxlab — train small transformer LMs and study positional encodings.\n"
      "\n"
      "usage: ctxlab <verb> [options]     (ctxlab <verb> --help for the verb's options)\n"
      "\n"
      "verbs:\n");
  for (const auto& v : ctx::cli::verbs())
    std::printf("  %-10s %s\n", v.name, v.summary);
  std::printf(
      "\n"
      "examples:\n"
      "  ctxlab train --preset small --steps 1000 --lr 3e-3 --warmup 50 --out runs/small   # the README's main job\n"
      "  ctxlab eval --checkpoint runs/small/model.safetensors --lengths 64,128,256\n"
      "  ctxlab train --preset small --posenc rope --lr 3e-3 --warmup 50 --out runs/rope   # extrapolates:\n"
      "  ctxlab eval --checkpoint runs/rope/model.safetensors --lengths 256,512,1024\n"
      "  ctxlab sample --checkpoint runs/small/model.safetensors --prompt \"It is a truth\"\n"
      "\n"
      "every verb also takes --plugin PATH.so (repeatable): load a shared library that registers\n"
      "positional encodings by name, then use them with --posenc NAME (docs/extending.md).\n"
      "\n"
      "environment (docs/settings.md):\n"
      "%s",
      ctx::settings_help().c_str());
}

// libgomp reads its wait policy when it loads, before main. Its default (spin ~300k
// iterations at every barrier) made steps up to 10x slower whenever another process shares the
// two cores; never spinning (PASSIVE) costs ~7% on a quiet machine, where each barrier then
// wakes its threads through the kernel. So unless the user chose a policy we restart once with
// GOMP_SPINCOUNT=1000: a short spin, then sleep (measured both ways: docs/threading.md).
void ensure_thread_env(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT") || ctx::setting_env("CTXLAB_NO_REEXEC"))
    return;
  setenv("GOMP_SPINCOUNT", "1000", 1);
  setenv("CTXLAB_NO_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);  // only returns on failure: then carry on as we are
}

}  // namespace

int main(int argc, char** argv) {
  ensure_thread_env(argv);
  try {
    for (const std::string& p : ctx::take_plugin_args(argc, argv, 1)) ctx::load_plugin(p);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ctxlab: error: %s\n", ctx::escape_control(e.what()).c_str());
    return 1;
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_help();
    return argc < 2 ? 1 : 0;
  }
  std::string verb = argv[1];
  for (const auto& v : ctx::cli::verbs()) {
    if (verb != v.name) continue;
    try {
      ctx::check_setting_flags();  // CTXLAB_FUSED_ATTENTION=off: an error now, not at the first step
      const int rc = v.run(argc - 1, argv + 1);
      ctx::dist::finalize();  // before the CUDA runtime's exit handlers (NCCL), when MPI was started
      return rc;
    } catch (const std::exception& e) {
      if (ctx::dist::size() > 1) {  // one rank failing ends the whole MPI job, not a hang
        std::fprintf(stderr, "ctxlab %s: error (rank %d of %d): %s\n", v.name, ctx::dist::rank(),
                     ctx::dist::size(), ctx::escape_control(e.what()).c_str());
        // a wait past --dist-timeout: 124, as timeout(1) (docs/reliability.md)
        ctx::dist::abort_job(dynamic_cast<const ctx::dist::TimeoutError*>(&e) ? ctx::dist::kTimeoutExitCode : 1);
      }
      // every message is one line, and whatever it echoes from files or options reaches the
      // terminal with its control characters escaped
      std::fprintf(stderr, "ctxlab %s: error: %s\n", v.name, ctx::escape_control(e.what()).c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "ctxlab: unknown verb '%s' (run 'ctxlab --help' for the list)\n",
               ctx::escape_control(verb).c_str());
  return 2;
}
