// core/device_table.cpp — the cache behind device_table (core/device_table.h): constant tables
// uploaded once per distinct content and kept on the device, least recently used first out.
#include "core/device_table.h"

#include <cstring>
#include <list>
#include <mutex>
#include <string_view>

namespace ctx {
namespace {

constexpr int64_t kMaxEntries = 256;
constexpr size_t kMaxBytes = size_t(256) << 20;

struct Entry {
  uint64_t hash;
  Tensor dev;  // on its device, Table arena, with a host mirror of the same bytes
};

struct TableCache {
  std::mutex mu;
  std::list<Entry> lru;  // most recently used first
  TableCacheStats st;
};
TableCache& cache() {
  static TableCache* c = new TableCache();  // never destroyed: device blocks outlive statics
  return *c;
}

uint64_t hash_of(const Tensor& h) {
  const std::string_view bytes((const char*)h.raw(), h.nbytes());
  uint64_t x = std::hash<std::string_view>{}(bytes);
  x ^= (uint64_t)h.dtype() * 0x9E3779B97F4A7C15ull;
  for (int64_t d : h.shape()) x = (x ^ (uint64_t)d) * 0x100000001B3ull;
  return x;
}

// The kept copy (not written to: its mirror is there) holds `host`'s values on `dev`.
bool same(const Entry& e, uint64_t hash, const Tensor& host, Device dev) {
  if (e.hash != hash || e.dev.device() != dev || e.dev.dtype() != host.dtype() || e.dev.shape() != host.shape())
    return false;
  return std::memcmp(e.dev.storage()->host_mirror->data, host.raw(), host.nbytes()) == 0;
}

}  // namespace

Tensor device_table(const Tensor& host, const Tensor& like) {
  CTX_CHECK(host.device() == Device::CPU, "device_table: the table ", host.str(), " must be built on the cpu, not ",
            device_name(host.device()));
  if (like.device() == Device::CPU) return host;
  if (host.numel() == 0) return host.to(like.device());
  const Device dev = like.device();
  const uint64_t h = hash_of(host);
  TableCache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  for (auto it = c.lru.begin(); it != c.lru.end();) {
    if (!it->dev.storage()->host_mirror) {  // written to since it was kept: never served again
      c.st.bytes -= it->dev.nbytes();
      it = c.lru.erase(it);
      continue;
    }
    if (same(*it, h, host, dev)) {
      c.st.hits++;
      c.lru.splice(c.lru.begin(), c.lru, it);
      return c.lru.front().dev;
    }
    ++it;
  }
  Tensor d = host.to(dev, Arena::Table);
  d.set_host_mirror(host);
  c.lru.push_front(Entry{h, d});
  c.st.uploads++;
  c.st.bytes += d.nbytes();
  while ((int64_t)c.lru.size() > kMaxEntries || (c.st.bytes > kMaxBytes && c.lru.size() > 1)) {
    c.st.bytes -= c.lru.back().dev.nbytes();
    c.lru.pop_back();
    c.st.evictions++;
  }
  return d;
}

TableCacheStats table_cache_stats() {
  TableCache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  TableCacheStats s = c.st;
  s.entries = (int64_t)c.lru.size();
  return s;
}

void clear_table_cache() {
  TableCache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  c.lru.clear();
  c.st.bytes = 0;
}

}  // namespace ctx
