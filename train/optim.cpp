// train/optim.cpp — FlatParams, AdamW (per-tensor reference and fused flat path side by side),
// SGD, gradient clipping, warmup + cosine schedule (see optim.h).
#include "train/optim.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/backend.h"
#include "core/device_table.h"  // to_host

namespace ctx {

bool default_decays(const std::string& name, const Tensor& t) {
  if (t.dim() < 2) return false;  // biases, norm weights, per-head vectors
  if (name.rfind("wte.", 0) == 0 || name.rfind("wpe.", 0) == 0 || name.rfind("lm_head.", 0) == 0)
    return false;
  if (name.rfind("pe.", 0) == 0 || name.find(".pe.") != std::string::npos) return false;
  return true;
}

// ---- FlatParams ----

bool FlatParams::supported(const nn::NamedParams& params, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (params.empty()) return no("no parameters");
  std::unordered_set<const VarImpl*> seen;
  const DType dt = params[0].second.dtype();
  for (auto& [name, p] : params) {
    if (!p.defined() || !p.data().defined()) return no("parameter '" + name + "' is undefined");
    if (p.device() != params[0].second.device())
      return no("parameter '" + name + "' is on " + device_name(p.device()) + ", the first on " +
                device_name(params[0].second.device()));
    if (!backend_of(p.data()).has(Fused::FlatAdamW))
      return no("backend " + backend_of(p.data()).name() + " has no flat AdamW");
    if (!is_float(p.dtype()) || p.dtype() != dt)
      return no("parameter '" + name + "' is " + p.data().str() + ", not " + dtype_name(dt));
    if (!seen.insert(p.impl().get()).second) return no("parameter '" + name + "' is listed twice");
  }
  return true;
}

FlatParams::FlatParams(const nn::NamedParams& params) {
  std::string why;
  CTX_CHECK(supported(params, &why), "FlatParams: ", why);
  dtype = params[0].second.dtype();
  device = params[0].second.device();
  const int64_t align = 64 / (int64_t)dtype_size(dtype);  // elements per 64 bytes
  for (auto& [name, p] : params) {
    ranges.push_back({name, p.impl(), total, p.data().numel()});
    total += (p.data().numel() + align - 1) / align * align;
  }
  values = Tensor::zeros({total}, dtype, device);
  grads = Tensor::zeros({total}, dtype, device);
  for (size_t i = 0; i < ranges.size(); ++i) {
    VarImpl& v = *ranges[i].var;
    Tensor view = range_of(values, i);
    view.copy_from(v.data);
    v.data = view;
    v.grad_slot = range_of(grads, i);
    if (v.grad.defined()) {  // a gradient accumulated before the flattening moves into the slot
      v.grad_slot.copy_from(v.grad);
      v.grad = v.grad_slot;
    }
  }
}

FlatParams::~FlatParams() {
  for (auto& r : ranges)
    if (r.var->grad_slot.storage() == grads.storage()) r.var->grad_slot = Tensor();
}

Tensor FlatParams::range_of(const Tensor& flat, size_t i) const {
  const Range& r = ranges[i];
  return flat.slice0(r.offset, r.offset + r.numel).view(r.var->data.shape());
}

bool FlatParams::is_view(size_t i) const {
  const Tensor& d = ranges[i].var->data;
  return d.storage() == values.storage() && d.offset() == ranges[i].offset;
}

bool FlatParams::grad_is_view(size_t i) const {
  const Tensor& g = ranges[i].var->grad;
  return g.defined() && g.storage() == grads.storage() && g.offset() == ranges[i].offset;
}

void FlatParams::sync() {
  for (size_t i = 0; i < ranges.size(); ++i) {
    VarImpl& v = *ranges[i].var;
    if (!is_view(i)) {
      CTX_CHECK(v.data.defined() && v.data.numel() == ranges[i].numel && v.data.dtype() == dtype &&
                    v.data.device() == device,
                "optimizer: parameter '", ranges[i].name, "' was replaced by ", v.data.str(),
                ", which does not fit its ", dtype_name(dtype), " range of ", ranges[i].numel,
                " elements");
      Tensor view = values.slice0(ranges[i].offset, ranges[i].offset + ranges[i].numel).view(v.data.shape());
      view.copy_from(v.data);
      v.data = view;
    }
    if (v.grad_slot.storage() != grads.storage() || v.grad_slot.offset() != ranges[i].offset)
      v.grad_slot = range_of(grads, i);
    if (v.grad.defined() && !grad_is_view(i)) {
      v.grad_slot.copy_from(v.grad);
      v.grad = v.grad_slot;
    }
  }
}

// ---- Optimizer ----

double Optimizer::clip_and_step(double lr, double max_norm) {
  return std::sqrt(to_host(clip_and_step_deferred(lr, max_norm)).item());
}

Tensor Optimizer::clip_and_step_deferred(double lr, double max_norm) {
  const double norm = clip_grad_norm(params_, max_norm);
  step(lr);
  return Tensor::full({1}, norm * norm, DType::F64);
}

void Optimizer::zero_grad() {
  for (auto& np : params_) np.second.zero_grad();
}

// ---- AdamW ----

static std::vector<bool> decays_of(const nn::NamedParams& params) {
  std::vector<bool> d;
  for (auto& [name, p] : params) d.push_back(default_decays(name, p.data()));
  return d;
}

AdamW::AdamW(const nn::NamedParams& params, const AdamWOptions& opt)
    : Optimizer(params), decay_(decays_of(params)), opt_(opt), bounds_(params, decay_) {
  const auto published = bounds_.published();  // (Module::to's exact bounds, before the flat copy)
  if (opt.fused && FlatParams::supported(params_)) {
    flat_ = std::make_unique<FlatParams>(params_);
    m_flat_ = Tensor::zeros({flat_->total}, flat_->dtype, flat_->device);
    v_flat_ = Tensor::zeros({flat_->total}, flat_->dtype, flat_->device);
    norm_sq_ = Tensor::zeros({1}, DType::F64, flat_->device);
    for (size_t i = 0; i < params_.size(); ++i) {
      m_.push_back(flat_->range_of(m_flat_, i));
      v_.push_back(flat_->range_of(v_flat_, i));
    }
    active_.assign(params_.size(), 0);
    // At most one chunk per kChunk elements plus one per parameter boundary.
    const size_t cap = (size_t)(flat_->total / kChunk) + params_.size() + 1;
    chunks_.reserve(cap);
  } else {
    for (auto& [name, p] : params_) {
      m_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
      v_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
    }
  }
  bounds_.watch_moments(m_, v_);
  bounds_.start_fresh(published);  // m = v = 0: the bounds go on from the values' own
}

// Reference: one backend adamw call per parameter with a gradient.
void AdamW::step(double lr) {
  if (flat_) {
    prepare_fused();
    fused_update(lr, 1.0, Tensor(), 0.0);
    return;
  }
  bounds_.check_still_held();
  ++steps;
  bounds_.advance(hyper(lr));
  for (size_t i = 0; i < params_.size(); ++i) {
    Variable& p = params_[i].second;
    if (!p.grad().defined()) continue;
    backend_of(p.data()).adamw(p.data(), p.grad(), m_[i], v_[i], lr, opt_.beta1, opt_.beta2, opt_.eps,
                               decay_[i] ? opt_.weight_decay : 0.0, steps);
  }
  bounds_.publish();  // stamped after this update's writes
}

// Fast: the squared grad norm over the flat gradient buffer (one reduction, left on the device),
// then one pass that reads each gradient scaled by the clip factor computed from it on the device
// (as clip_grad_norm's in-place scale would have left it). Nothing is read back.
Tensor AdamW::clip_and_step_deferred(double lr, double max_norm) {
  if (!flat_) return Optimizer::clip_and_step_deferred(lr, max_norm);
  prepare_fused();
  backend_of(flat_->grads).sum_squares(flat_->grads, chunks_, norm_sq_);
  fused_update(lr, 1.0, norm_sq_, max_norm);
  return norm_sq_;
}

void AdamW::step_scaled(double lr, double grad_scale) {
  if (!flat_) {
    for (auto& np : params_) {
      Tensor& g = np.second.grad();
      if (g.defined() && grad_scale != 1.0) backend_of(g).unary(UnaryOp::Scale, g, g, grad_scale);
    }
    step(lr);
    return;
  }
  prepare_fused();
  fused_update(lr, grad_scale, Tensor(), 0.0);
}

void AdamW::prepare_fused() {
  flat_->sync();
  bool same = chunks_valid_;
  for (size_t i = 0; i < params_.size(); ++i) {
    char a = params_[i].second.impl()->grad.defined() ? 1 : 0;
    if (a != active_[i]) same = false;
    active_[i] = a;
  }
  if (same) return;
  // Contiguous runs of parameters with a gradient and the same decay setting, cut into pieces of
  // at most kChunk elements. A run takes the padding after each parameter (zero everywhere).
  const size_t cap = chunks_.capacity();
  chunks_.clear();
  const auto& R = flat_->ranges;
  size_t i = 0;
  while (i < R.size()) {
    if (!active_[i]) { ++i; continue; }
    size_t j = i + 1;
    while (j < R.size() && active_[j] && decay_[j] == decay_[i]) ++j;
    const int64_t begin = R[i].offset, end = j < R.size() ? R[j].offset : flat_->total;
    for (int64_t b = begin; b < end; b += kChunk) chunks_.push_back({b, std::min(end, b + kChunk), (bool)decay_[i]});
    i = j;
  }
  CTX_CHECK(chunks_.capacity() == cap, "AdamW: chunk capacity exceeded (the list was reallocated)");
  chunks_valid_ = true;
}

AdamWHyper AdamW::hyper(double lr) const {
  AdamWHyper h;
  h.lr = lr;
  h.beta1 = opt_.beta1;
  h.beta2 = opt_.beta2;
  h.eps = opt_.eps;
  h.weight_decay = opt_.weight_decay;
  h.step = steps;
  return h;
}

void AdamW::use_device_terms() {
  CTX_CHECK(flat_, "AdamW: the step's constants on the device need the fused (flat) update");
  if (!terms_.defined()) terms_ = Tensor::zeros({3}, DType::F64, flat_->device);
}

void AdamW::begin_step(double lr) {
  CTX_CHECK(terms_.defined(), "AdamW::begin_step: use_device_terms() first");
  ++steps;
  const AdamWStepTerms t = adamw_step_terms(hyper(lr));
  const double v[3] = {t.decay, t.bc2_sqrt, t.step_size};
  Backend& be = backend_of(terms_);
  for (int64_t i = 0; i < 3; ++i) {
    Tensor e = terms_.slice0(i, i + 1);
    be.fill(e, v[i]);  // the value travels as the fill kernel's argument: no upload
  }
}

void AdamW::replayed_update(double lr) {
  bounds_.check_still_held();
  bounds_.advance(hyper(lr));
  bounds_.publish();
}

void AdamW::fused_update(double lr, double grad_scale, const Tensor& norm_sq, double max_norm) {
  bounds_.check_still_held();
  if (!terms_.defined()) ++steps;  // (with device terms, begin_step counted this step)
  bounds_.advance(hyper(lr));
  AdamWHyper h = hyper(lr);
  h.grad_scale = grad_scale;
  h.max_norm = max_norm;
  h.terms = terms_;
  FlatParams& f = *flat_;
  backend_of(f.values).adamw_flat(f.values, f.grads, m_flat_, v_flat_, chunks_, h, norm_sq);
  bounds_.publish();  // stamped after this update's write
}

const Tensor* AdamW::flat_grads() const {
  if (!flat_) return nullptr;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].second.grad().defined() && !flat_->grad_is_view(i)) return nullptr;
  return &flat_->grads;
}

std::vector<std::pair<std::string, Tensor>> AdamW::state() {
  std::vector<std::pair<std::string, Tensor>> s;
  for (size_t i = 0; i < params_.size(); ++i) s.emplace_back("exp_avg." + params_[i].first, m_[i]);
  for (size_t i = 0; i < params_.size(); ++i) s.emplace_back("exp_avg_sq." + params_[i].first, v_[i]);
  return s;
}

static void load_into(Tensor& dst, const std::map<std::string, Tensor>& s, const std::string& key,
                      const std::string& source) {
  auto it = s.find(key);
  CTX_CHECK(it != s.end(), source, ": optimizer state tensor '", key, "' is missing");
  CTX_CHECK(it->second.shape() == dst.shape(), source, ": optimizer state tensor '", key,
            "' has shape ", shape_str(it->second.shape()), ", expected ", shape_str(dst.shape()));
  // into the existing tensor (views of the flat buffers stay views), on its device
  dst.copy_from(dst.device() == it->second.device() ? it->second : to_device_like(it->second, dst));
}

void AdamW::load_state(const std::map<std::string, Tensor>& s, const std::string& source) {
  for (size_t i = 0; i < params_.size(); ++i) {
    load_into(m_[i], s, "exp_avg." + params_[i].first, source);
    load_into(v_[i], s, "exp_avg_sq." + params_[i].first, source);
  }
}

SGD::SGD(const nn::NamedParams& params, double momentum, double wd)
    : Optimizer(params), momentum_(momentum), wd_(wd) {
  for (auto& [name, p] : params_) {
    buf_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
    decay_.push_back(default_decays(name, p.data()));
  }
}

void SGD::step(double lr) {
  ++steps;
  // PyTorch SGD: g += wd p; buf = momentum buf + g (buf = g at the first step); p -= lr buf
  for (size_t i = 0; i < params_.size(); ++i) {
    Variable& p = params_[i].second;
    if (!p.grad().defined()) continue;
    Backend& be = backend_of(p.data());
    Tensor g = p.grad();
    if (decay_[i] && wd_ != 0) {
      Tensor t = Tensor::empty(g.shape(), g.dtype(), g.device());
      be.unary(UnaryOp::Scale, p.data(), t, wd_);
      be.binary(BinaryOp::Add, g, t, t);
      g = t;
    }
    if (momentum_ != 0) {
      if (steps == 1) {
        buf_[i].copy_from(g);
      } else {
        be.unary(UnaryOp::Scale, buf_[i], buf_[i], momentum_);
        be.binary(BinaryOp::Add, buf_[i], g, buf_[i]);
      }
      g = buf_[i];
    }
    Tensor upd = Tensor::empty(g.shape(), g.dtype(), g.device());
    be.unary(UnaryOp::Scale, g, upd, lr);
    be.binary(BinaryOp::Sub, p.data(), upd, p.data());
  }
}

std::vector<std::pair<std::string, Tensor>> SGD::state() {
  std::vector<std::pair<std::string, Tensor>> s;
  for (size_t i = 0; i < params_.size(); ++i) s.emplace_back("momentum_buffer." + params_[i].first, buf_[i]);
  return s;
}

void SGD::load_state(const std::map<std::string, Tensor>& s, const std::string& source) {
  for (size_t i = 0; i < params_.size(); ++i)
    load_into(buf_[i], s, "momentum_buffer." + params_[i].first, source);
}

double clip_grad_norm(const nn::NamedParams& params, double max_norm) {
  double total = 0;
  for (auto& [name, p] : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    Tensor sq = Tensor::empty(g.shape(), g.dtype(), g.device());
    Backend& be = backend_of(g);
    be.unary(UnaryOp::Square, g, sq);
    Tensor s = Tensor::empty({}, g.dtype(), g.device());
    be.reduce_sum(sq, s);
    total += to_host(s).item();
  }
  double norm = std::sqrt(total);
  if (max_norm > 0 && norm > max_norm) {
    double c = max_norm / (norm + 1e-6);
    for (auto& [name, p] : params) {
      Tensor& g = const_cast<Variable&>(p).grad();
      if (g.defined()) backend_of(g).unary(UnaryOp::Scale, g, g, c);
    }
  }
  return norm;
}

double lr_warmup_cosine(int64_t step, int64_t warmup, int64_t total, double lr, double min_lr) {
  if (warmup > 0 && step < warmup) return lr * (double)(step + 1) / (double)warmup;
  if (step >= total) return min_lr;
  double prog = (double)(step - warmup) / (double)std::max<int64_t>(1, total - warmup);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * prog));
}

}  // namespace ctx
