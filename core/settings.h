// core/settings.h — every CTXLAB_* environment variable ctxlab reads, in one table: name,
// default, allowed values and meaning. Code reads a variable only through setting_env(), which
// refuses names that are not in the table; `ctxlab --help` prints the table (settings_help) and
// docs/settings.md lists it. Each user reads its variable once and validates the value itself
// (its error names the variable and the allowed values).
#pragma once
#include <string>
#include <vector>

namespace ctx {

struct Setting {
  const char* name;           // "CTXLAB_GEMM"
  const char* default_value;  // what applies when the variable is unset or empty
  const char* values;         // the allowed values
  const char* meaning;        // one line
  const char* read_by;        // the file that reads it
};

const std::vector<Setting>& settings();  // in the order --help prints them

// The variable's value when set and non-empty, else nullptr. Throws ctx::Error for a name that
// is not in the table.
const char* setting_env(const char* name);

// A 0 | 1 switch: its default when unset or empty, else 0 or 1; any other value throws ctx::Error
// naming the variable and the allowed values ("CTXLAB_FUSED_ATTENTION=off: expected 0 or 1").
bool setting_flag(const char* name, bool default_on);
// Reads every 0 | 1 switch of the table that is set, so that a bad value stops the CLI before it
// starts work (main), not at the first use of the switch.
void check_setting_flags();

// The table as help text: one "  NAME  values (default: ...)  meaning" line per variable.
std::string settings_help();

}  // namespace ctx
