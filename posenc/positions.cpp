// posenc/positions.cpp — explicit and randomized positions (POSENC_SPEC §7.3): the checked
// Positions table ([rows, T], rows 1 or B), the randomized sampler (Ruoss et al. 2023: T distinct
// positions from {0..M-1}, sorted, one draw shared by the batch) and the "randomized" config key.
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/rng.h"
#include "posenc/posenc.h"

namespace ctx {

Positions make_positions(std::vector<int64_t> p, int64_t rows, int64_t T, const std::string& what) {
  CTX_CHECK(rows >= 1 && T >= 1 && (int64_t)p.size() == rows * T, what, ": positions must be [B, T] with B >= 1 "
            "and T >= 1, got ", p.size(), " values for [", rows, ", ", T, "]");
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t v = p[(size_t)(b * T + t)];
      CTX_CHECK(v >= 0 && v < kMaxExplicitPosition, what, ": position ", v, " at [", b, ", ", t,
                "] is out of range; expected 0 <= p < 2^24 = ", kMaxExplicitPosition, " (exact in float32)");
      CTX_CHECK(t == 0 || v > p[(size_t)(b * T + t - 1)], what, ": row ", b, " must be strictly increasing, but p[",
                b, ", ", t, "] = ", v, " follows p[", b, ", ", t - 1, "] = ", p[(size_t)(b * T + t - 1)]);
    }
  bool same = true;
  for (int64_t b = 1; b < rows && same; ++b)
    same = std::equal(p.begin(), p.begin() + T, p.begin() + b * T);
  Positions out;
  out.rows = same ? 1 : rows;
  out.T = T;
  if (same) p.resize((size_t)T);
  out.p = std::move(p);
  return out;
}

Positions randomized_positions(Rng& rng, int64_t M, int64_t T) {
  CTX_CHECK(T >= 1 && M >= T, "randomized positions: cannot draw ", T, " distinct positions from {0..", M - 1, "}");
  // Floyd's sampling: T distinct values, each subset equally likely, T draws whatever M.
  std::unordered_set<int64_t> seen;
  std::vector<int64_t> p;
  p.reserve((size_t)T);
  for (int64_t j = M - T; j < M; ++j) {
    const int64_t r = (int64_t)rng.below((uint64_t)(j + 1));
    const int64_t v = seen.count(r) ? j : r;
    seen.insert(v);
    p.push_back(v);
  }
  std::sort(p.begin(), p.end());
  Positions out;
  out.rows = 1;
  out.T = T;
  out.p = std::move(p);
  return out;
}

int64_t posenc_randomized(const nlohmann::json& posenc, int64_t context, const std::string& source) {
  if (!posenc.is_object() || !posenc.contains("randomized") || posenc["randomized"].is_null()) return 0;
  const nlohmann::json& v = posenc["randomized"];
  const bool integral = v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                                  std::floor(v.get<double>()) == v.get<double>());
  CTX_CHECK(integral && v.get<double>() >= (double)context && v.get<double>() <= (double)kMaxExplicitPosition,
            source, ": field 'posenc.randomized' must be an integer M with context (", context, ") <= M <= 2^24 "
            "(positions are drawn from 0..M-1; null = off), got ", v.dump());
  return (int64_t)v.get<double>();
}

}  // namespace ctx
