// train/optim.cpp — FlatParams, AdamW (per-tensor reference and fused flat path side by side),
// SGD, gradient clipping, warmup + cosine schedule (see optim.h).
#include "train/optim.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "core/backend.h"

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
    if (p.device() != Device::CPU) return no("parameter '" + name + "' is not on the CPU");
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
  const int64_t align = 64 / (int64_t)dtype_size(dtype);  // elements per 64 bytes
  for (auto& [name, p] : params) {
    ranges.push_back({name, p.impl(), total, p.data().numel()});
    total += (p.data().numel() + align - 1) / align * align;
  }
  values = Tensor::zeros({total}, dtype);
  grads = Tensor::zeros({total}, dtype);
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
                    v.data.device() == Device::CPU,
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
  double norm = clip_grad_norm(params_, max_norm);
  step(lr);
  return norm;
}

void Optimizer::zero_grad() {
  for (auto& np : params_) np.second.zero_grad();
}

// ---- AdamW ----

AdamW::AdamW(const nn::NamedParams& params, const AdamWOptions& opt) : Optimizer(params), opt_(opt) {
  for (auto& [name, p] : params_) decay_.push_back(default_decays(name, p.data()));
  if (opt.fused && FlatParams::supported(params_)) {
    flat_ = std::make_unique<FlatParams>(params_);
    m_flat_ = Tensor::zeros({flat_->total}, flat_->dtype);
    v_flat_ = Tensor::zeros({flat_->total}, flat_->dtype);
    for (size_t i = 0; i < params_.size(); ++i) {
      m_.push_back(flat_->range_of(m_flat_, i));
      v_.push_back(flat_->range_of(v_flat_, i));
    }
    active_.assign(params_.size(), 0);
    // At most one chunk per kChunk elements plus one per parameter boundary.
    const size_t cap = (size_t)(flat_->total / kChunk) + params_.size() + 1;
    chunks_.reserve(cap);
    partial_.assign(cap, 0.0);
  } else {
    for (auto& [name, p] : params_) {
      m_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
      v_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
    }
  }
}

// Reference: one backend adamw call per parameter with a gradient.
void AdamW::step(double lr) {
  if (flat_) {
    prepare_fused();
    fused_update(lr, 1.0);
    return;
  }
  ++steps;
  for (size_t i = 0; i < params_.size(); ++i) {
    Variable& p = params_[i].second;
    if (!p.grad().defined()) continue;
    backend_of(p.data()).adamw(p.data(), p.grad(), m_[i], v_[i], lr, opt_.beta1, opt_.beta2, opt_.eps,
                               decay_[i] ? opt_.weight_decay : 0.0, steps);
  }
}

// Fast: the grad norm over the flat gradient buffer, then one pass that reads each gradient
// scaled by the clip factor (as clip_grad_norm's in-place scale would have left it).
double AdamW::clip_and_step(double lr, double max_norm) {
  if (!flat_) return Optimizer::clip_and_step(lr, max_norm);
  prepare_fused();
  const double norm = std::sqrt(fused_grad_sq_sum());
  double scale = 1.0;
  if (max_norm > 0 && norm > max_norm) scale = max_norm / (norm + 1e-6);  // as clip_grad_norm
  fused_update(lr, scale);
  return norm;
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
  fused_update(lr, grad_scale);
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
  CTX_CHECK(chunks_.size() <= partial_.size(), "AdamW: chunk capacity exceeded");
  chunks_valid_ = true;
}

template <class T>
static double grad_sq_sum(const T* g, const std::vector<AdamW::Chunk>& chunks, double* partial) {
  const int64_t nc = (int64_t)chunks.size();
#pragma omp parallel for schedule(static) if (nc > 4)
  for (int64_t c = 0; c < nc; ++c) {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = chunks[c].begin; i < chunks[c].end; ++i) s += (double)g[i] * (double)g[i];
    partial[c] = s;
  }
  double total = 0;  // fixed order: the same sum for any thread count
  for (int64_t c = 0; c < nc; ++c) total += partial[c];
  return total;
}

double AdamW::fused_grad_sq_sum() {
  if (flat_->dtype == DType::F32)
    return grad_sq_sum(flat_->grads.data<float>(), chunks_, partial_.data());
  return grad_sq_sum(flat_->grads.data<double>(), chunks_, partial_.data());
}

// y = sqrt(x), correctly rounded like std::sqrt, with vector instructions where the build has
// them: std::sqrt's errno branch keeps GCC from vectorizing any loop that calls it.
static void sqrt_n(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  // maskz with a full mask: the same instruction; the unmasked intrinsic trips GCC 12's
  // -Wmaybe-uninitialized inside its own header (_mm512_undefined_ps)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_maskz_sqrt_ps(0xFFFF, _mm512_loadu_ps(x + i)));
#elif defined(__AVX__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#elif defined(__SSE2__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] = std::sqrt(x[i]);
}
static void sqrt_n(const double* x, double* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 8 <= n; i += 8) _mm512_storeu_pd(y + i, _mm512_maskz_sqrt_pd(0xFF, _mm512_loadu_pd(x + i)));
#elif defined(__AVX__)
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(y + i, _mm256_sqrt_pd(_mm256_loadu_pd(x + i)));
#elif defined(__SSE2__)
  for (; i + 2 <= n; i += 2) _mm_storeu_pd(y + i, _mm_sqrt_pd(_mm_loadu_pd(x + i)));
#endif
  for (; i < n; ++i) y[i] = std::sqrt(x[i]);
}

// The element update of ref::adamw (core/cpu/ref_kernels.h), each expression written the same way
// so that both compile to the same arithmetic, split around the square root into two loops that
// vectorize (per block of kBlock elements, in L1); gscale is clip_grad_norm's factor, applied as
// its in-place Scale would (gscale * g, rounded to T).
template <class T>
static void adamw_range(T* p, const T* g, T* m, T* v, int64_t begin, int64_t end, T gs, T decay, T tb1, T tb2,
                        T bc2_sqrt, T teps, T step_size) {
  constexpr int64_t kBlock = 1024;
  T root[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t e = std::min(end, b + kBlock);
    for (int64_t i = b; i < e; ++i) {
      T gi = gs * g[i];
      m[i] = tb1 * m[i] + (T(1) - tb1) * gi;
      v[i] = tb2 * v[i] + (T(1) - tb2) * gi * gi;
    }
    sqrt_n(v + b, root, e - b);
    for (int64_t i = b; i < e; ++i) {
      T denom = root[i - b] / bc2_sqrt + teps;
      p[i] *= decay;
      p[i] -= step_size * m[i] / denom;
    }
  }
}

// Constants as ref::adamw computes them (a parameter without decay gets wd = 0).
template <class T>
static void adamw_flat(T* p, const T* g, T* m, T* v, const std::vector<AdamW::Chunk>& chunks, double lr,
                       double b1, double b2, double eps, double wd, int64_t step, double gscale) {
  const double bc1 = 1.0 - std::pow(b1, (double)step);
  const double bc2 = 1.0 - std::pow(b2, (double)step);
  const T step_size = (T)(lr / bc1);
  const T bc2_sqrt = (T)std::sqrt(bc2);
  const T decay_on = (T)(1.0 - lr * wd), decay_off = (T)(1.0 - lr * 0.0);
  const T tb1 = (T)b1, tb2 = (T)b2, teps = (T)eps;
  const T gs = (T)gscale;
  const int64_t nc = (int64_t)chunks.size();
#pragma omp parallel for schedule(static) if (nc > 4)
  for (int64_t c = 0; c < nc; ++c)
    adamw_range(p, g, m, v, chunks[c].begin, chunks[c].end, gs, chunks[c].decay ? decay_on : decay_off, tb1, tb2,
                bc2_sqrt, teps, step_size);
}

void AdamW::fused_update(double lr, double grad_scale) {
  ++steps;
  FlatParams& f = *flat_;
  if (f.dtype == DType::F32)
    adamw_flat(f.values.data<float>(), f.grads.data<float>(), m_flat_.data<float>(), v_flat_.data<float>(),
               chunks_, lr, opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay, steps, grad_scale);
  else
    adamw_flat(f.values.data<double>(), f.grads.data<double>(), m_flat_.data<double>(),
               v_flat_.data<double>(), chunks_, lr, opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay,
               steps, grad_scale);
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
  dst.copy_from(it->second);  // into the existing tensor: views of the flat buffers stay views
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
    total += (s.device() == Device::CPU ? s : s.to(Device::CPU)).item();
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
