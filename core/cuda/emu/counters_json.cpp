// core/cuda/emu/counters_json.cpp — cuemu::write_counters: the counter records (emu_counters.h) as
// a JSON array, one object per launch or library call, the fields named as in LaunchCounters
// (bench/roofline.py --counters reads them).
#include <cstdio>
#include <string>

#include "core/cuda/emu/emu_counters.h"

namespace cuemu {
namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if ((unsigned char)c < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

void write_record(FILE* f, const LaunchCounters& r) {
  static const char* kTypes[kMmaTypes] = {"bf16", "f16", "tf32", "f64"};
  std::fprintf(f, "{\"kernel\": %s, \"site\": %s, \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], ",
               quoted(r.kernel).c_str(), quoted(r.site).c_str(), r.grid[0], r.grid[1], r.grid[2], r.block[0],
               r.block[1], r.block[2]);
  const auto u = [f](const char* name, uint64_t v) { std::fprintf(f, "\"%s\": %llu, ", name, (unsigned long long)v); };
  u("smem_bytes", r.smem_bytes);
  u("ld_requests", r.ld_requests), u("ld_sectors", r.ld_sectors), u("ld_ideal_sectors", r.ld_ideal_sectors);
  u("st_requests", r.st_requests), u("st_sectors", r.st_sectors), u("st_ideal_sectors", r.st_ideal_sectors);
  u("atom_requests", r.atom_requests), u("atom_sectors", r.atom_sectors);
  u("atom_ideal_sectors", r.atom_ideal_sectors);
  u("bytes_read", r.bytes_read), u("bytes_written", r.bytes_written);
  u("dram_read_bytes", r.dram_read_bytes), u("dram_write_bytes", r.dram_write_bytes);
  u("shared_requests", r.shared_requests), u("shared_wavefronts", r.shared_wavefronts);
  u("shared_ideal_wavefronts", r.shared_ideal_wavefronts);
  std::fprintf(f, "\"mma\": {");
  for (int t = 0; t < kMmaTypes; ++t)
    std::fprintf(f, "%s\"%s\": %llu", t ? ", " : "", kTypes[t], (unsigned long long)r.mma[t]);
  std::fprintf(f, "}, \"tensor_flops\": {");
  for (int t = 0; t < kMmaTypes; ++t) std::fprintf(f, "%s\"%s\": %.17g", t ? ", " : "", kTypes[t], r.tensor_flops[t]);
  std::fprintf(f, "}, \"fp32_flops\": %.17g}", r.fp32_flops);
}

}  // namespace

bool write_counters(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  const std::vector<LaunchCounters> recs = counter_records();
  std::fprintf(f, "[\n");
  for (size_t i = 0; i < recs.size(); ++i) {
    write_record(f, recs[i]);
    std::fprintf(f, i + 1 < recs.size() ? ",\n" : "\n");
  }
  std::fprintf(f, "]\n");
  return std::fclose(f) == 0;
}

}  // namespace cuemu
