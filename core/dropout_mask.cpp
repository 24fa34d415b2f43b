// core/dropout_mask.cpp — the recording side of core/dropout_mask.h: which seed-table slot the
// masks drawn while a step is recorded into a CUDA Graph read their seeds from.
#include "core/dropout_mask.h"

#include "core/error.h"

namespace ctx {

namespace {
DropoutSeedRecording* g_recording = nullptr;  // the recording under way (the recording thread's)
}

const uint64_t* dropout_seed_slot(uint64_t seed) {
  DropoutSeedRecording* r = g_recording;
  if (!r) return nullptr;
  CTX_CHECK((int64_t)r->drawn.size() < r->capacity, "dropout: the recorded step draws more than ", r->capacity,
            " dropout masks (the seed table of a CUDA Graph recording)");
  r->drawn.push_back(seed);
  return r->table + (r->drawn.size() - 1);
}

void DropoutSeedRecording::begin(uint64_t* device_table, int64_t cap) {
  CTX_CHECK(!g_recording, "dropout: a step is already being recorded");
  table = device_table;
  capacity = cap;
  drawn.clear();
  g_recording = this;
}

void DropoutSeedRecording::end() {
  if (g_recording == this) g_recording = nullptr;
}

}  // namespace ctx
