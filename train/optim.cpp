// train/optim.cpp — AdamW, SGD, gradient clipping, warmup + cosine schedule (see optim.h).
#include "train/optim.h"

#include <cmath>

#include "core/backend.h"

namespace ctx {

bool default_decays(const std::string& name, const Tensor& t) {
  if (t.dim() < 2) return false;  // biases, norm weights, per-head vectors
  if (name.rfind("wte.", 0) == 0 || name.rfind("wpe.", 0) == 0 || name.rfind("lm_head.", 0) == 0)
    return false;
  if (name.rfind("pe.", 0) == 0 || name.find(".pe.") != std::string::npos) return false;
  return true;
}

AdamW::AdamW(const nn::NamedParams& params, const AdamWOptions& opt) : params_(params), opt_(opt) {
  for (auto& [name, p] : params_) {
    m_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
    v_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
    decay_.push_back(default_decays(name, p.data()));
  }
}

void AdamW::step(double lr) {
  ++steps;
  for (size_t i = 0; i < params_.size(); ++i) {
    Variable& p = params_[i].second;
    if (!p.grad().defined()) continue;
    backend_of(p.data()).adamw(p.data(), p.grad(), m_[i], v_[i], lr, opt_.beta1, opt_.beta2, opt_.eps,
                               decay_[i] ? opt_.weight_decay : 0.0, steps);
  }
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
  dst.copy_from(it->second);
}

void AdamW::load_state(const std::map<std::string, Tensor>& s, const std::string& source) {
  for (size_t i = 0; i < params_.size(); ++i) {
    load_into(m_[i], s, "exp_avg." + params_[i].first, source);
    load_into(v_[i], s, "exp_avg_sq." + params_[i].first, source);
  }
}

SGD::SGD(const nn::NamedParams& params, double momentum, double wd)
    : params_(params), momentum_(momentum), wd_(wd) {
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
