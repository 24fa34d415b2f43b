// train/cli/cli_model.cpp — the verbs that work on one model without training it:
//   ctxlab init   --config F | --preset P [--posenc JSON] --seed N --out C
//   ctxlab grads  --checkpoint C --tokens T.npy --out G.safetensors [--positions P.npy]  (MODEL_SPEC §6)
#include <cstdio>
#include <optional>

#include <cxxopts.hpp>

#include "core/device_table.h"  // to_host
#include "train/run_dir.h"  // check_output_file
#include "train/io/checkpoint.h"
#include "train/cli/cli.h"
#include "train/cli/cli_common.h"
#include "train/io/npy.h"
#include "train/io/safetensors.h"

namespace ctx::cli {

int run_init(int argc, char** argv) {
  cxxopts::Options o("ctxlab init", "Write a freshly initialised checkpoint (MODEL_SPEC §4 init).");
  add_config_options(o);
  o.add_options()("seed", "initialisation seed", cxxopts::value<uint64_t>()->default_value("0"))(
      "out", "checkpoint to write (.safetensors)", cxxopts::value<std::string>())("h,help", "this help");
  auto r = parse_or_help(o, argc, argv);
  if (!r) return 0;
  require(*r, "out", o);
  check_output_file((*r)["out"].as<std::string>(), "--out");
  auto [cfg, source] = config_from_options(*r);
  nn::GPT model(cfg, DType::F32, source);
  model.init_weights((*r)["seed"].as<uint64_t>());
  std::string out = (*r)["out"].as<std::string>();
  save_checkpoint(out, model, 0);
  size_t n = 0;
  for (auto& p : model.named_parameters()) n += (size_t)p.second.data().numel();
  std::printf("wrote %s: %zu parameters (%s, posenc %s)\n", out.c_str(), n, source.c_str(),
              model.pe->type().c_str());
  return 0;
}

// --window W [--sinks S] of grads (POSENC_SPEC §6) on the model (checked: one-line errors).
static void set_window_options(const cxxopts::ParseResult& r, nn::GPT& model) {
  const int64_t window = r.count("window") ? r["window"].as<int64_t>() : 0;
  CTX_CHECK(!r.count("window") || window >= 1, "--window must be a positive integer (e.g. 8), got ", window);
  model.set_attention_window(window, r.count("sinks") ? r["sinks"].as<int64_t>() : 0);
}

// --positions P.npy of grads (POSENC_SPEC §7.3): an <i4 / <i8 array [B, T] matching the inputs
// [B, T]; each row strictly increasing, 0 <= p < 2^24 (one-line errors naming the file).
static Positions load_positions(const std::string& path, int64_t B, int64_t T) {
  const Tensor a = load_npy(path);
  CTX_CHECK(a.dtype() == DType::I32 || a.dtype() == DType::I64, path, ": position array has dtype ",
            dtype_name(a.dtype()), ", expected int32 or int64 (<i4 / <i8)");
  CTX_CHECK(a.dim() == 2 && a.size(0) == B && a.size(1) == T, path, ": position array has shape ",
            shape_str(a.shape()), ", expected [B, T] = [", B, ", ", T, "] (one row per sequence of the token array, "
            "T = its columns - 1)");
  std::vector<int64_t> p((size_t)a.numel());
  for (int64_t i = 0; i < a.numel(); ++i) p[(size_t)i] = (int64_t)a.at(i);
  return make_positions(std::move(p), B, T, path);
}

int run_grads(int argc, char** argv) {
  cxxopts::Options o("ctxlab grads",
                     "One forward/backward in eval mode on a token batch, no update.\n"
                     "T.npy holds [B, T+1] int32/int64 ids: inputs = T[:, :-1], targets = T[:, 1:].\n"
                     "Writes one F32 tensor per parameter (same name and shape) holding d(loss)/d(param),\n"
                     "and __metadata__ {\"loss\": \"%.9g\"}.");
  o.add_options()("checkpoint", "model checkpoint (.safetensors)", cxxopts::value<std::string>())(
      "tokens", "token batch (.npy, [B, T+1])", cxxopts::value<std::string>())(
      "out", "gradients to write (.safetensors)", cxxopts::value<std::string>())(
      "dtype", "compute dtype: f32 or f64", cxxopts::value<std::string>()->default_value("f32"))(
      "window", "sliding-window attention: each token sees its last W positions (POSENC_SPEC §6), e.g. 8",
      cxxopts::value<int64_t>())(
      "sinks", "with --window: the first S positions stay visible too (attention sinks, §6), e.g. 2",
      cxxopts::value<int64_t>())(
      "positions", "explicit positions (POSENC_SPEC §7.3): an int32/int64 .npy [B, T], token t of row b sits at "
      "P[b, t] instead of t; each row strictly increasing, 0 <= P < 2^24, e.g. [[0, 3, 4, 9]] for T = 4. "
      "For none, learned, sinusoidal, rope (no scaling, pi, ntk, dynamic-ntk, yarn, llama3, longrope), alibi, "
      "kerple, sandwich, t5, fire; not with --sinks. Rows 0..T-1 give the run without it",
      cxxopts::value<std::string>())(
      "h,help", "this help");
  add_device_option(o, "where the forward / backward run");
  add_precision_options(o);
  auto r = parse_or_help(o, argc, argv);
  if (!r) return 0;
  apply_precision_options(*r);
  require(*r, "checkpoint", o);
  require(*r, "tokens", o);
  require(*r, "out", o);
  std::string dts = (*r)["dtype"].as<std::string>();
  CTX_CHECK(dts == "f32" || dts == "f64", "--dtype must be f32 or f64, got '", dts, "'");
  DType dt = dts == "f32" ? DType::F32 : DType::F64;
  const Device dev = device_option(*r);
  std::string tok_path = (*r)["tokens"].as<std::string>();
  if (r->count("out")) check_output_file((*r)["out"].as<std::string>(), "--out");
  LoadedModel lm = load_checkpoint((*r)["checkpoint"].as<std::string>(), dt);
  nn::GPT& model = *lm.model;
  move_model(model, dev);
  model.eval();
  set_window_options(*r, model);
  Tensor all = load_npy(tok_path);
  CTX_CHECK(all.dtype() == DType::I32 || all.dtype() == DType::I64, tok_path,
            ": token array has dtype ", dtype_name(all.dtype()), ", expected int32 or int64 (<i4 / <i8)");
  CTX_CHECK(all.dim() == 2 && all.size(0) >= 1 && all.size(1) >= 2, tok_path, ": token array has shape ",
            shape_str(all.shape()), ", expected [B, T+1] with B >= 1 and T >= 1");
  model.check_tokens(all, tok_path);
  try {  // the encoding's own message does not know which file the sequence came from
    model.pe->check_length(all.size(1) - 1);
  } catch (const Error& e) {
    throw Error(str(tok_path, ": token array has shape ", shape_str(all.shape()), ": ", e.what()));
  }
  auto [inputs, targets] = split_inputs_targets(all);
  std::optional<Positions> pos;
  if (r->count("positions")) {
    const std::string pp = (*r)["positions"].as<std::string>();
    pos = load_positions(pp, inputs.size(0), inputs.size(1));
    model.check_positions(*pos, inputs.size(0), inputs.size(1), pp);
    try {
      model.pe->check_length(pos->max() + 1);
    } catch (const Error& e) {
      throw Error(str(pp, ": largest position ", pos->max(), ": ", e.what()));
    }
  }
  Variable loss = model.loss(inputs.to(dev), targets.to(dev), false, pos ? &*pos : nullptr);
  loss.backward();
  std::vector<std::pair<std::string, Tensor>> grads;
  for (auto& [name, p] : model.named_parameters()) {
    Tensor g = p.grad().defined() ? p.grad() : Tensor::zeros(p.shape(), p.dtype());
    grads.emplace_back(name, g.dtype() == DType::F32 ? g : g.to(DType::F32));
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", to_host(loss.data()).item());
  std::string out = (*r)["out"].as<std::string>();
  save_safetensors(out, grads, {{"loss", buf}});
  std::printf("loss %s; wrote %zu gradient tensors to %s\n", buf, grads.size(), out.c_str());
  return 0;
}

}  // namespace ctx::cli
