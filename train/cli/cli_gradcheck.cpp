// train/cli/cli_gradcheck.cpp — `ctxlab gradcheck`: a finite-difference check of one positional
// encoding's gradients through a whole (tiny, f64) model (MODEL_SPEC §6, POSENC_SPEC).
//
//   ctxlab gradcheck --encoding NAME [--param KEY=VALUE | --param JSON ...] [--seed N]
//                    [--heads H] [--head-dim d] [--seq T] [--layers N] [--batch B]
//                    [--eps E] [--atol A] [--rtol R] [--max-elements K] [--only-posenc]
//
// The model is a GPT of MODEL_SPEC §3 in f64: d_model = H*d, vocab 11, d_ff = 4*d_model, with
// context T-1 where the encoding accepts sequences longer than its context (so extrapolation
// paths — rope scaling, hierarchical, far branches — run) and T otherwise (learned, tupe).
// Weights are N(0, 0.5) (norm weights 1 + N(0, 0.1), kerple r1/r2 U(0.2, 1.5)) so that every
// position term moves the loss by more than the tolerance. f = mean cross-entropy on a random
// [B, T] batch; each parameter is an input of ctx::gradcheck (autograd/gradcheck.h), bound to
// the model by an identity node so that the model's own graph carries the gradient back.
// q, k and v are not separate leaves: they enter through blocks.{l}.attn.qkv.{weight,bias}.
// --device cuda runs the model (forward and backward, in f64) on the CUDA backend: the
// finite-difference inputs stay on the host, the identity node that binds each one to the model
// copies it to the device (its backward copies the gradient back), and the loss comes back the
// same way, so gradcheck perturbs and reads host tensors only.
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "autograd/gradcheck.h"
#include "core/threads.h"
#include "core/device_table.h"  // to_host
#include "core/rng.h"
#include "nn/gpt.h"
#include "train/cli/cli.h"
#include "train/cli/cli_common.h"

namespace ctx::cli {
namespace {

// --param values: `KEY=VALUE` (VALUE parsed as JSON when it is JSON — numbers, true/false,
// objects — else taken as a string) or a JSON object merged into the posenc config.
void apply_param(nlohmann::json& pe, const std::string& s) {
  if (!s.empty() && s[0] == '{') {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(s);
    } catch (const std::exception& e) {
      throw Error(str("--param '", s, "': not valid JSON: ", e.what()));
    }
    CTX_CHECK(j.is_object(), "--param '", s, "': expected a JSON object or KEY=VALUE");
    for (auto& kv : j.items()) pe[kv.key()] = kv.value();
    return;
  }
  const size_t eq = s.find('=');
  CTX_CHECK(eq != std::string::npos && eq > 0, "--param '", s,
            "': expected KEY=VALUE (e.g. max_relative_position=2) or a JSON object");
  const std::string key = s.substr(0, eq), val = s.substr(eq + 1);
  CTX_CHECK(key != "type", "--param: give the encoding with --encoding, not type=");
  nlohmann::json v;
  try {
    v = nlohmann::json::parse(val);
  } catch (const std::exception&) {
    v = val;  // a bare word: a string (e.g. variant=power)
  }
  pe[key] = v;
}

// Pulls every `--param X` / `--param=X` out of argv (cxxopts would split a vector option at
// the commas inside JSON).
std::vector<std::string> take_params(int& argc, char** argv) {
  std::vector<std::string> out;
  int w = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--param")) {
      CTX_CHECK(i + 1 < argc, "--param needs a value (KEY=VALUE or a JSON object)");
      out.emplace_back(argv[++i]);
    } else if (!std::strncmp(argv[i], "--param=", 8)) {
      out.emplace_back(argv[i] + 8);
    } else {
      argv[w++] = argv[i];
    }
  }
  argc = w;
  return out;
}

Tensor random_tokens(int64_t B, int64_t T, int64_t V, Rng& rng) {
  Tensor t = Tensor::empty({B, T}, DType::I64);
  for (int64_t i = 0; i < B * T; ++i) t.host<int64_t>()[i] = (int64_t)rng.below((uint64_t)V);
  return t;
}

bool is_norm_weight(const std::string& n) {
  return n.find("norm") != std::string::npos && n.size() > 7 &&
         n.compare(n.size() - 7, 7, ".weight") == 0;
}

std::string fmt_err(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3e", x);
  return b;
}

cxxopts::Options gradcheck_options() {
  cxxopts::Options o(
      "ctxlab gradcheck",
      "Finite-difference check of a positional encoding's gradients through a tiny f64 GPT.\n"
      "\n"
      "What it checks: the model is MODEL_SPEC §3 in f64 with d_model = heads * head-dim,\n"
      "vocab 11, d_ff = 4 d_model, weights N(0, 0.5) so that position terms matter. Its context is\n"
      "seq - 1 where the encoding allows sequences longer than the context (the extrapolation\n"
      "paths run), seq otherwise (learned, tupe). The function is the mean cross-entropy on a random\n"
      "[batch, seq] batch; every parameter — the model's and each of the encoding's (pe.*, wpe.*,\n"
      "blocks.{l}.attn.pe.*), listed separately — is perturbed element by element by +-eps and\n"
      "the central difference is compared with the backward pass. q, k, v enter through\n"
      "blocks.{l}.attn.qkv.weight/bias.\n"
      "\n"
      "An element passes if |analytic - numeric| <= atol + rtol * |numeric| (PyTorch's rule and\n"
      "defaults: eps 1e-6, atol 1e-5, rtol 1e-3). Exit status 1 if any tensor fails; the failing\n"
      "tensor's worst element (flat index, analytic, numeric) is printed under the table.\n"
      "\n"
      "Examples:\n"
      "  ctxlab gradcheck --encoding kerple --param variant=power\n"
      "  ctxlab gradcheck --encoding rope --param 'scaling={\"type\":\"yarn\",\"factor\":4}' --seq 9\n"
      "  ctxlab gradcheck --encoding t5 --param num_buckets=4 --param max_distance=5 --only-posenc\n"
      "  ctxlab gradcheck --encoding '{\"type\":\"shaw\",\"max_relative_position\":2}'\n");
  o.add_options()("encoding", "posenc type (e.g. rope, alibi, shaw) or a full posenc JSON object",
                  cxxopts::value<std::string>())(
      "param", "an encoding parameter, KEY=VALUE (VALUE is JSON or a bare string) or a JSON "
               "object; repeatable", cxxopts::value<std::string>())(
      "seed", "seed of the weights and tokens", cxxopts::value<uint64_t>()->default_value("0"))(
      "heads", "attention heads H", cxxopts::value<int64_t>()->default_value("2"))(
      "head-dim", "head dimension d (even for the rotary family)", cxxopts::value<int64_t>()->default_value("4"))(
      "seq", "sequence length T", cxxopts::value<int64_t>()->default_value("6"))(
      "layers", "transformer blocks", cxxopts::value<int64_t>()->default_value("1"))(
      "batch", "sequences in the batch", cxxopts::value<int64_t>()->default_value("2"))(
      "eps", "finite-difference step", cxxopts::value<double>()->default_value("1e-6"))(
      "atol", "absolute tolerance", cxxopts::value<double>()->default_value("1e-5"))(
      "rtol", "relative tolerance", cxxopts::value<double>()->default_value("1e-3"))(
      "max-elements", "check at most this many elements per tensor, spread evenly (-1: all)",
      cxxopts::value<int64_t>()->default_value("-1"))(
      "only-posenc", "check only the encoding's parameters (the others are held constant)")(
      "window", "sliding-window attention of W keys (POSENC_SPEC §6; 0 = off)",
      cxxopts::value<int64_t>()->default_value("0"))(
      "sinks", "with --window: attention sinks, the first S keys stay visible (§6)",
      cxxopts::value<int64_t>()->default_value("0"))(
      "positions", "explicit positions (POSENC_SPEC §7.3): --seq strictly increasing integers, comma-separated, "
      "shared by every row (e.g. 0,3,4,9,10,17), or one list per row separated by ';' (--batch lists, e.g. "
      "'0,2,5;1,4,6' for --seq 3 --batch 2; '/' works as ';'); the gradients through gapped positions",
      cxxopts::value<std::string>())(
      "h,help", "this help");
  add_device_option(o, "where the f64 model runs (the finite differences are taken on the host)");
  return o;
}

// The posenc config of --encoding (a type name or a JSON object) with every --param applied.
nlohmann::json encoding_config(const std::string& enc, const std::vector<std::string>& params) {
  nlohmann::json pe;
  if (!enc.empty() && enc[0] == '{') {
    try {
      pe = nlohmann::json::parse(enc);
    } catch (const std::exception& e) {
      throw Error(str("--encoding: not valid JSON: ", e.what()));
    }
    CTX_CHECK(pe.is_object() && pe.contains("type"), "--encoding: a JSON encoding needs a \"type\"");
  } else {
    pe = {{"type", enc}};
  }
  for (auto& p : params) apply_param(pe, p);
  return pe;
}

// --positions "0,3,4;1,2,6" (or "0,3,4/1,2,6"): one row for the whole batch or `B` rows of `T`
// integers each.
Positions parse_positions(const std::string& text, int64_t B, int64_t T) {
  std::vector<int64_t> p;
  int64_t rows = 1;
  std::string num;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? (text[i] == '/' ? ';' : text[i]) : ';';
    if (c == ',' || c == ';') {
      size_t used = 0;
      int64_t v = -1;
      try {
        v = std::stoll(num, &used);
      } catch (const std::logic_error&) {
      }
      CTX_CHECK(!num.empty() && used == num.size(), "--positions: '", num, "' is not an integer (expected e.g. "
                "0,3,4,9 or '0,2,5;1,4,6')");
      p.push_back(v);
      num.clear();
      if (c == ';' && i < text.size()) ++rows;
    } else {
      num += c;
    }
  }
  CTX_CHECK((rows == 1 || rows == B) && (int64_t)p.size() == rows * T, "--positions: expected ", T,
            " integers (--seq) shared by every row, or ", B, " rows (--batch) of ", T, " separated by ';', got ",
            p.size(), " in ", rows, " row(s)");
  if (rows == 1 && B > 1)
    for (int64_t b = 1; b < B; ++b) p.insert(p.end(), p.begin(), p.begin() + T);
  return make_positions(std::move(p), B, T, "--positions");
}

// The model's shape and the check's tolerances, from the options (checked).
struct GradcheckSpec {
  nlohmann::json pe;
  int64_t H = 0, d = 0, T = 0, nl = 0, B = 0;
  GradcheckOptions gopt;
  uint64_t seed = 0;
  bool only_pe = false;
  std::optional<Positions> positions;  // --positions

  ModelConfig config(int64_t context) const {
    nlohmann::json j = {{"vocab_size", 11},   {"d_model", H * d}, {"n_layers", nl},
                        {"n_heads", H},       {"d_ff", 4 * H * d}, {"context", context},
                        {"posenc", pe}};
    return config_from_json(j, "gradcheck");
  }
};

GradcheckSpec gradcheck_spec(const cxxopts::ParseResult& r, const std::vector<std::string>& params) {
  GradcheckSpec g;
  g.pe = encoding_config(r["encoding"].as<std::string>(), params);
  g.H = r["heads"].as<int64_t>(), g.d = r["head-dim"].as<int64_t>();
  g.T = r["seq"].as<int64_t>(), g.nl = r["layers"].as<int64_t>();
  g.B = r["batch"].as<int64_t>();
  CTX_CHECK(g.H >= 1 && g.H <= 64, "--heads must be in 1..64, got ", g.H);
  CTX_CHECK(g.d >= 1 && g.d <= 64, "--head-dim must be in 1..64, got ", g.d);
  CTX_CHECK(g.T >= 2 && g.T <= 256, "--seq must be in 2..256, got ", g.T);
  CTX_CHECK(g.nl >= 1 && g.nl <= 8, "--layers must be in 1..8, got ", g.nl);
  CTX_CHECK(g.B >= 1 && g.B <= 16, "--batch must be in 1..16, got ", g.B);
  g.gopt.eps = r["eps"].as<double>();
  g.gopt.atol = r["atol"].as<double>();
  g.gopt.rtol = r["rtol"].as<double>();
  g.gopt.max_elements = r["max-elements"].as<int64_t>();
  CTX_CHECK(g.gopt.eps > 0, "--eps must be > 0");
  CTX_CHECK(g.gopt.atol >= 0 && g.gopt.rtol >= 0, "--atol and --rtol must be >= 0");
  CTX_CHECK(g.gopt.max_elements == -1 || g.gopt.max_elements >= 1, "--max-elements must be -1 or >= 1");
  g.seed = r["seed"].as<uint64_t>();
  g.only_pe = r.count("only-posenc") > 0;
  if (r.count("positions")) g.positions = parse_positions(r["positions"].as<std::string>(), g.B, g.T);
  return g;
}

// Context T-1 where the encoding takes sequences longer than its context, else T.
int64_t model_context(const GradcheckSpec& g) {
  const int64_t n = g.positions ? g.positions->max() + 1 : g.T;  // the positions to encode
  int64_t context = g.T - 1;
  ModelConfig c = g.config(context);
  auto probe = make_posenc(c, "gradcheck");  // unknown type / key: the registry's error
  try {
    probe->check_length(n);
  } catch (const Error&) {
    context = n;
  }
  return context;
}

// Weights N(0, 0.5), norm weights 1 + N(0, 0.1), kerple r1/r2 U(0.2, 1.5).
void fill_weights(nn::GPT& m, Rng& rng) {
  for (auto& [name, p] : m.named_parameters()) {
    if (name == "pe.r1" || name == "pe.r2")  // kerple: clear of the clamp at 0.01 (and 2)
      rng.fill_uniform(p.data(), 0.2, 1.5);
    else if (is_norm_weight(name))
      rng.fill_normal(p.data(), 1.0, 0.1);
    else
      rng.fill_normal(p.data(), 0.0, 0.5);
  }
}

// An identity node that also moves its input to device `to` (the gradient moves back).
Variable moved(const Variable& src, Device to) {
  const Tensor d = src.data().device() == to ? src.data() : src.data().to(to);
  return make_result(d, "bind", {src}, [src](const Tensor& g) {
    if (src.requires_grad()) accumulate_grad(*src.impl(), g.device() == src.data().device() ? g : g.to(src.data().device()));
  });
}

// The table of results, a line per failing tensor's worst element, and the count; returns the
// number of failing tensors. `numel`: each checked tensor's elements, by name.
int print_results(const GradcheckSpec& g, const nn::GPT& m, const nn::NamedParams& named,
                  const std::vector<Tensor>& inputs, const GradcheckResult& res,
                  const std::function<bool(const std::string&)>& is_pe) {
  size_t w = 6;
  for (auto& t : res.tensors) w = std::max(w, t.name.size());
  std::printf("%-*s  %-6s  %8s  %11s  %11s  %s\n", (int)w, "tensor", "kind", "checked", "max abs err",
              "max rel err", "result");
  int passed = 0, failed = 0;
  for (auto& t : res.tensors) {
    int64_t n = 0;
    for (size_t i = 0; i < named.size(); ++i)
      if (named[i].first == t.name) n = inputs[i].numel();
    const int64_t checked = g.gopt.max_elements < 0 ? n : std::min(n, g.gopt.max_elements);
    std::printf("%-*s  %-6s  %8lld  %11s  %11s  %s\n", (int)w, t.name.c_str(), is_pe(t.name) ? "posenc" : "model",
                (long long)checked, fmt_err(t.max_abs_err).c_str(), fmt_err(t.max_rel_err).c_str(),
                t.pass ? "PASS" : "FAIL");
    (t.pass ? passed : failed)++;
  }
  bool any_pe = false;
  for (auto& [name, p] : named) any_pe = any_pe || is_pe(name);
  if (!any_pe)
    std::printf("(%s has no parameters: its effect reaches the loss, and is checked, through "
                "blocks.{l}.attn.qkv)\n", m.pe->type().c_str());
  for (auto& t : res.tensors)
    if (!t.pass)
      std::printf("  FAIL %s: worst element %lld: analytic %.9g, numeric %.9g\n", t.name.c_str(),
                  (long long)t.worst_index, t.worst_analytic, t.worst_numeric);
  std::printf("gradcheck %s: %d passed, %d failed\n", m.pe->type().c_str(), passed, failed);
  return failed;
}

}  // namespace

int run_gradcheck(int argc, char** argv) {
  std::vector<std::string> params = take_params(argc, argv);
  cxxopts::Options o = gradcheck_options();
  auto r = parse_or_help(o, argc, argv);
  if (!r) return 0;
  require(*r, "encoding", o);
  const Device dev = device_option(*r);
  const GradcheckSpec g = gradcheck_spec(*r, params);
  const int64_t context = model_context(g);
  nn::GPT m(g.config(context), DType::F64, str("gradcheck --encoding ", g.pe.dump()));
  m.init_weights(g.seed);
  m.eval();
  m.set_attention_window((*r)["window"].as<int64_t>(), (*r)["sinks"].as<int64_t>());
  Rng rng(g.seed * 7919 + 17);
  fill_weights(m, rng);
  Tensor x = random_tokens(g.B, g.T, 11, rng), y = random_tokens(g.B, g.T, 11, rng);
  move_model(m, dev);  // after the host-side fill; x and y move in m.loss

  const nn::NamedParams named = m.named_parameters();
  const std::string shared = m.pe->shared_prefix() + ".";
  auto is_pe = [&](const std::string& n) {
    return n.compare(0, shared.size(), shared) == 0 || n.find(".attn.pe.") != std::string::npos;
  };
  std::vector<Tensor> inputs;
  std::vector<std::string> names;
  for (auto& [name, p] : named) {
    inputs.push_back(to_host(p.data()).clone());  // the same values, on the host
    names.push_back(g.only_pe && !is_pe(name) ? "-" : name);
  }
  // Each parameter is rebound to an identity of its gradcheck input: the model's graph then
  // carries the gradient back to the input gradcheck reads.
  GradFn f = [&](const std::vector<Variable>& in) {
    for (size_t i = 0; i < named.size(); ++i) *named[i].second.impl() = *moved(in[i], dev).impl();
    return moved(m.loss(x, y, false, g.positions ? &*g.positions : nullptr), Device::CPU);
  };
  // Tiny shapes: one thread is fastest (and immune to OpenMP spin-waits on a loaded machine).
  const int saved_threads = ctx::num_threads();
  ctx::set_num_threads(1);
  GradcheckResult res = gradcheck(f, inputs, names, g.gopt);
  ctx::set_num_threads(saved_threads);

  std::printf("gradcheck %s: f64 GPT on %s, %lld layer(s), H=%lld, d=%lld, d_model=%lld, context=%lld, "
              "batch %lldx%lld, eps %g, atol %g, rtol %g\n",
              m.pe->type().c_str(), device_name(dev), (long long)g.nl, (long long)g.H, (long long)g.d,
              (long long)(g.H * g.d), (long long)context, (long long)g.B, (long long)g.T, g.gopt.eps, g.gopt.atol,
              g.gopt.rtol);
  std::printf("posenc %s\n", g.pe.dump().c_str());
  if (g.positions) std::printf("explicit positions: %lld row(s), largest %lld\n", (long long)g.positions->rows,
                               (long long)g.positions->max());
  std::printf("\n");
  return print_results(g, m, named, inputs, res, is_pe) ? 1 : 0;
}

}  // namespace ctx::cli
