// train/value_bounds.h — host-side bounds on the parameters that ask for one
// (VarImpl::wants_value_bound: FIRE's L_multiplier), carried through AdamW's updates without
// reading the device, so that code deciding on such a value (posenc/fire.cpp: is every query below
// FIRE's threshold?) needs no device -> host copy inside a training step (docs/posenc.md, "FIRE's
// threshold without a host copy").
//
// The bound. An AdamW update moves each element by
//   step_size * m / (sqrt(v) / bc2_sqrt + eps),   so   |move| <= step_size * bc2_sqrt * |m| / sqrt(v)
// (adamw_step_terms: step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t); eps only helps).
// From an anchor where the moments were read (m0, v0; r0 = max |m0| / sqrt(v0)), after j moment
// updates by any gradients g_1..g_j (clipped, scaled, whatever they are), Cauchy-Schwarz on
//   m_j = beta1^j m0 + (1 - beta1) sum beta1^(j-i) g_i,   v_j = beta2^j v0 + (1 - beta2) sum beta2^(j-i) g_i^2
// gives |m_j| / sqrt(v_j) <= R_j = sqrt(gamma^j r0^2 + (1 - beta1)^2 / (1 - beta2) sum_{i<j} gamma^i),
// gamma = beta1^2 / beta2. A step without a gradient leaves the parameter and its moments alone, so
// after k steps the moments have seen j <= k updates; R_j^2 is monotone in j, and max(R_1, R_k)
// bounds them all. The interval [lo, hi] of the anchor's values then grows per step as
//   [d lo - U, d hi + U] (d = 1 - lr wd where the parameter decays), kept as a hull (every value
// since the anchor), with an allowance for rounding: R times (1 + 8u / (1 - beta2) + 8u / (1 - beta1)
// + 32u) and 4u max(|lo|, |hi|) a step (u: the dtype's unit roundoff), ample for the few roundings
// of an update and the geometric decay of the moments' own rounding errors.
//
// Who keeps it: AdamW (train/optim.cpp). Its constructor carries a bound already published on the
// leaf (Module::to's exact one) with r0 = 0, its moments being zero; anchor() reads each tracked
// parameter and its two moments (three small copies) at the trainer's reports and before its
// first step; every update widens the bound and publishes it on the leaf (publish_value_bound),
// stamped with the storage's write count. A write by anyone else, to the parameter (a checkpoint
// load, a user's copy: known_value_bound then fails) or to its moments (a loaded state), retires
// it, and nothing is promised until the next anchor. A loop of one's own (the Python API's
// optimizers) is never re-anchored: its bounds widen from the constructor's until a decision
// they cannot settle takes the safe path (FIRE's per-pair bias, KERPLE's clamp).
#pragma once
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "nn/module.h"

namespace ctx {

// The bound of one parameter since its anchor: what the host may assume of its values.
struct AdamWDrift {
  double lo = 0, hi = 0;  // every value the parameter held since the anchor lies in [lo, hi]
  double r0sq = 0;        // (max |m| / sqrt(v))^2 at the anchor
  int64_t k = 0;          // steps since the anchor
  double gk = 1, sk = 0;  // gamma^k and sum_{i<k} gamma^i
  // Starts from the anchor's values p and moments m, v (equal sizes, host doubles). False, and
  // nothing to promise, where a value is not finite, v < 0, or m != 0 where v == 0.
  bool anchor(const std::vector<double>& p, const std::vector<double>& m, const std::vector<double>& v);
  // One more step of AdamW with hyper-parameters h (h.step: its 1-based count), on a parameter
  // that decays or not, stored with unit roundoff u. Widens [lo, hi]; false when the bound
  // stopped being finite.
  bool advance(const AdamWHyper& h, bool decays, double u);
  // The largest |m| / sqrt(v) the moments can have reached after at most k updates: max(R_1, R_k).
  double ratio_bound(double beta1, double beta2) const;
};

// AdamW's tracked parameters: those of its list that want a bound.
class AdamWBounds {
 public:
  AdamWBounds(const nn::NamedParams& params, const std::vector<bool>& decay);
  // The optimizer's moments of each parameter (m[i], v[i]): a bound is kept only while they, too,
  // were written by no one but the optimizer since it last published (a state loaded into them, a
  // user's write: the ratio the bound assumed may no longer hold).
  void watch_moments(const std::vector<Tensor>& m, const std::vector<Tensor>& v);
  // Reads each tracked parameter and its moments m[i], v[i] (host copies) and restarts its bound
  // there; published at once.
  void anchor(const std::vector<Tensor>& m, const std::vector<Tensor>& v);
  // The bounds published on the tracked leaves now (nullopt where none holds), and a start from
  // them with moments still zero, published on the leaves' data then: AdamW's constructor carries
  // Module::to's exact bounds across the flat buffer's copy of the values, without a copy to the
  // host (a fresh optimizer has m = v = 0, so r0 = 0).
  std::vector<std::optional<std::pair<double, double>>> published() const;
  void start_fresh(const std::vector<std::optional<std::pair<double, double>>>& from);
  // Call before the optimizer writes the parameters (or advances without writing): a tracked bound
  // that someone else's write retired (to the parameter or its moments) stops being kept.
  void check_still_held();
  // The step with hyper-parameters h: widens every kept bound.
  void advance(const AdamWHyper& h);
  // Publishes every kept bound on its leaf, stamped now (after the optimizer's own write).
  void publish();
  // The tracked parameters whose bound is kept (tests).
  int64_t kept() const;

 private:
  struct Tracked {
    VarPtr var;
    bool decays = false;
    bool kept = false;
    AdamWDrift drift;
    Tensor m, v;                          // its moments (watch_moments)
    uint64_t m_writes = 0, v_writes = 0;  // their Storage::writes when last published
  };
  std::vector<Tracked> tracked_;
  std::vector<size_t> index_;  // tracked_[t] is parameter index_[t] of the optimizer's list
};

}  // namespace ctx
