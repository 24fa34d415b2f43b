// tests/tools/optim_driver.cpp — runs ctxlab's optimizers (train/optim.h) on given parameters and
// gradients so that tests/python/optim_checks.py can hold them to torch.optim.AdamW / SGD and to
// hand-computed schedules. Not part of the CLI: a test tool, built with the tests.
//
//   ctxlab_optim_driver IN.safetensors OUT.safetensors
//
// IN: tensors "param.<name>" (F32 or F64: the initial values; <name> decides weight decay as in
// the trainer, train/optim.h default_decays) and "coef.<step>.<micro>.<name>" (same shape), and
// __metadata__ "spec", a JSON object:
//   {"optimizer": "adamw" | "sgd", "fused": bool, "steps": S, "accum": A, "lr", "min_lr",
//    "warmup", "max_norm" (<= 0: no clipping), "beta1", "beta2", "eps", "weight_decay",
//    "momentum"}
// Each step does what train/trainer.cpp does: for each micro-batch a, the loss
//   sum_name sum(param * coef.<step>.<a>.<name>) / A        (so d loss / d param = coef / A)
// is backpropagated (gradients accumulate in the parameters), then
//   clip_and_step(lr_warmup_cosine(step, warmup, S, lr, min_lr), max_norm) and zero_grad().
// A parameter with no coef tensor at a step gets no gradient there (it is skipped).
// OUT: "param.<name>" after the S steps, the optimizer's state tensors as named by state(), and
// __metadata__ {"lrs": [...], "norms": [...]} (JSON lists, one entry per step).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/ops.h"
#include "core/threads.h"
#include "train/optim.h"
#include "train/io/safetensors.h"

using namespace ctx;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: ctxlab_optim_driver IN.safetensors OUT.safetensors\n");
    return 2;
  }
  try {
    ctx::init_threading();
    const SafetensorsFile in = load_safetensors(argv[1]);
    auto sp = in.metadata.find("spec");
    CTX_CHECK(sp != in.metadata.end(), argv[1], ": __metadata__.spec missing");
    const nlohmann::json spec = nlohmann::json::parse(sp->second);

    nn::NamedParams params;
    for (const std::string& n : in.names)
      if (n.rfind("param.", 0) == 0)
        params.emplace_back(n.substr(6), Variable(in.tensors.at(n).clone(), true));
    CTX_CHECK(!params.empty(), argv[1], ": no param.* tensors");

    const std::string kind = spec.at("optimizer");
    std::unique_ptr<Optimizer> opt;
    if (kind == "adamw") {
      AdamWOptions o;
      o.lr = spec.at("lr");
      o.beta1 = spec.at("beta1");
      o.beta2 = spec.at("beta2");
      o.eps = spec.at("eps");
      o.weight_decay = spec.at("weight_decay");
      o.fused = spec.at("fused");
      auto a = std::make_unique<AdamW>(params, o);
      CTX_CHECK(a->fused() == o.fused, "optim_driver: fused AdamW asked ", o.fused, ", got ", a->fused());
      opt = std::move(a);
    } else {
      CTX_CHECK(kind == "sgd", "optim_driver: unknown optimizer '", kind, "'");
      opt = std::make_unique<SGD>(params, spec.at("momentum").get<double>(),
                                  spec.at("weight_decay").get<double>());
    }

    const int64_t S = spec.at("steps"), A = spec.at("accum"), warmup = spec.at("warmup");
    const double lr0 = spec.at("lr"), min_lr = spec.at("min_lr"), max_norm = spec.at("max_norm");
    nlohmann::json lrs = nlohmann::json::array(), norms = nlohmann::json::array();
    for (int64_t step = 0; step < S; ++step) {
      for (int64_t a = 0; a < A; ++a) {
        Variable loss;
        for (auto& [name, p] : params) {
          auto it = in.tensors.find("coef." + std::to_string(step) + "." + std::to_string(a) + "." + name);
          if (it == in.tensors.end()) continue;
          Variable term = sum(mul(p, Variable(it->second)));
          loss = loss.defined() ? add(loss, term) : term;
        }
        if (!loss.defined()) continue;
        if (A > 1) loss = scale(loss, 1.0 / (double)A);  // as train/trainer.cpp
        loss.backward();
      }
      const double lr = lr_warmup_cosine(step, warmup, S, lr0, min_lr);
      norms.push_back(opt->clip_and_step(lr, max_norm));
      lrs.push_back(lr);
      opt->zero_grad();
    }

    std::vector<std::pair<std::string, Tensor>> out;
    for (auto& [name, p] : params) out.emplace_back("param." + name, p.data());
    for (auto& [name, t] : opt->state()) out.emplace_back(name, t);
    save_safetensors(argv[2], out, {{"lrs", lrs.dump()}, {"norms", norms.dump()},
                                    {"steps", std::to_string(opt->steps)}});
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optim_driver: %s\n", e.what());
    return 1;
  }
}
