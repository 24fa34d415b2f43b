// tests/bad_plugin.cpp — a plugin that cannot load: it needs a ctx:: function that no ctxlab
// executable defines, so `ctxlab --plugin libbad_plugin.so` must fail at load time with one line
// naming the file (tests/plugin_cli.cmake).
namespace ctx {
int function_ctxlab_does_not_have(int);
}
extern "C" int bad_plugin_entry(int x) { return ctx::function_ctxlab_does_not_have(x); }
