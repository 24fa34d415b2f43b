// train/value_bounds.cpp — AdamWDrift, AdamWBounds (see value_bounds.h for the bound).
#include "train/value_bounds.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ctx {

bool AdamWDrift::anchor(const std::vector<double>& p, const std::vector<double>& m, const std::vector<double>& v) {
  if (p.empty() || m.size() != p.size() || v.size() != p.size()) return false;
  lo = hi = p[0];
  r0sq = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (!std::isfinite(p[i]) || !std::isfinite(m[i]) || !std::isfinite(v[i]) || v[i] < 0) return false;
    if (m[i] != 0 && v[i] == 0) return false;  // a ratio without bound
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
    if (m[i] != 0) r0sq = std::max(r0sq, m[i] * m[i] / v[i]);
  }
  k = 0;
  gk = 1;
  sk = 0;
  return std::isfinite(r0sq);
}

double AdamWDrift::ratio_bound(double beta1, double beta2) const {
  const double gamma = beta1 * beta1 / beta2, c = (1 - beta1) * (1 - beta1) / (1 - beta2);
  const double r1sq = gamma * r0sq + c;    // after one update (the sum is gamma^0)
  const double rksq = gk * r0sq + c * sk;  // after k
  return std::sqrt(std::max(r1sq, rksq));
}

bool AdamWDrift::advance(const AdamWHyper& h, bool decays, double u) {
  const double gamma = h.beta1 * h.beta1 / h.beta2;
  sk += gk;  // sum_{i<k+1} gamma^i
  gk *= gamma;
  ++k;
  const AdamWStepTerms t = adamw_step_terms(h);
  const double allowance = 1 + 8 * u / (1 - h.beta2) + 8 * u / (1 - h.beta1) + 32 * u;
  const double U = t.step_size * t.bc2_sqrt * ratio_bound(h.beta1, h.beta2) * allowance;
  const double d = decays ? t.decay : 1.0;
  const double a = d * lo, b = d * hi;  // d may be negative for an lr wd above 1
  double nlo = std::min(a, b) - U, nhi = std::max(a, b) + U;
  const double slack = 4 * u * std::max(std::fabs(nlo), std::fabs(nhi)) + std::numeric_limits<double>::denorm_min();
  nlo -= slack;
  nhi += slack;
  lo = std::min(lo, nlo);
  hi = std::max(hi, nhi);
  return std::isfinite(lo) && std::isfinite(hi);
}

namespace {
uint64_t writes_of(const Tensor& t) { return t.defined() ? t.storage()->writes.load(std::memory_order_relaxed) : 0; }

double unit_roundoff(DType t) { return t == DType::F64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24); }

std::vector<double> host_doubles(const Tensor& t) {
  const Tensor h = t.device() == Device::CPU ? t : t.to(Device::CPU);
  std::vector<double> out((size_t)h.numel());
  for (int64_t i = 0; i < h.numel(); ++i) out[(size_t)i] = h.at(i);
  return out;
}
}  // namespace

AdamWBounds::AdamWBounds(const nn::NamedParams& params, const std::vector<bool>& decay) {
  for (size_t i = 0; i < params.size(); ++i) {
    const VarPtr& v = params[i].second.impl();
    if (!v->wants_value_bound) continue;
    Tracked tr;
    tr.var = v;
    tr.decays = decay[i];
    tracked_.push_back(tr);
    index_.push_back(i);
  }
}

void AdamWBounds::watch_moments(const std::vector<Tensor>& m, const std::vector<Tensor>& v) {
  for (size_t t = 0; t < tracked_.size(); ++t) {
    tracked_[t].m = m[index_[t]];
    tracked_[t].v = v[index_[t]];
  }
  publish();  // (restamped: the moments were just made)
}

void AdamWBounds::anchor(const std::vector<Tensor>& m, const std::vector<Tensor>& v) {
  for (size_t t = 0; t < tracked_.size(); ++t) {
    Tracked& tr = tracked_[t];
    const size_t i = index_[t];
    tr.kept = tr.drift.anchor(host_doubles(tr.var->data), host_doubles(m[i]), host_doubles(v[i]));
  }
  publish();
}

std::vector<std::optional<std::pair<double, double>>> AdamWBounds::published() const {
  std::vector<std::optional<std::pair<double, double>>> out;
  for (const Tracked& tr : tracked_) {
    const ValueBound* b = known_value_bound(*tr.var);
    out.push_back(b ? std::optional<std::pair<double, double>>({b->lo, b->hi}) : std::nullopt);
  }
  return out;
}

void AdamWBounds::start_fresh(const std::vector<std::optional<std::pair<double, double>>>& from) {
  for (size_t t = 0; t < tracked_.size(); ++t) {
    Tracked& tr = tracked_[t];
    tr.kept = t < from.size() && from[t].has_value();
    if (!tr.kept) continue;
    tr.drift = AdamWDrift{};
    tr.drift.lo = from[t]->first;
    tr.drift.hi = from[t]->second;
  }
  publish();
}

void AdamWBounds::check_still_held() {
  for (Tracked& tr : tracked_)
    if (tr.kept && (!known_value_bound(*tr.var) || writes_of(tr.m) != tr.m_writes || writes_of(tr.v) != tr.v_writes))
      tr.kept = false;
}

void AdamWBounds::advance(const AdamWHyper& h) {
  for (Tracked& tr : tracked_)
    if (tr.kept) tr.kept = tr.drift.advance(h, tr.decays, unit_roundoff(tr.var->data.dtype()));
}

void AdamWBounds::publish() {
  for (Tracked& tr : tracked_) {
    if (!tr.kept) continue;
    publish_value_bound(*tr.var, tr.drift.lo, tr.drift.hi);
    tr.m_writes = writes_of(tr.m);
    tr.v_writes = writes_of(tr.v);
  }
}

int64_t AdamWBounds::kept() const {
  return std::count_if(tracked_.begin(), tracked_.end(), [](const Tracked& t) { return t.kept; });
}

}  // namespace ctx
