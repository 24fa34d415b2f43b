// python/src/bind_model.cpp — ctxlab.Model (ctx::nn::GPT) built from a JSON config or loaded from a
// checkpoint, its parameters, forward / loss, save; the optimizers (ctx::AdamW, ctx::SGD); the
// config helpers (presets, validation). Configs cross as JSON text (the Python side uses dicts).
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "bindings.h"

namespace ctxpy {

namespace {

// token ids from any integer array (copied; i32 and i64 are what the model takes)
ctx::Tensor tokens_of(const HostArray& a, const char* what) {
  ctx::Tensor t = tensor_from_array(a, what);
  if (t.dtype() != ctx::DType::I32 && t.dtype() != ctx::DType::I64)
    throw ctx::Error(ctx::str(what, ": token ids must be an int32 or int64 array, got ", dtype_py_name(t.dtype())));
  return t;
}

std::string config_json(const ctx::ModelConfig& c) { return ctx::config_to_json(c).dump(); }

// The model's state for Python: what load_checkpoint gives besides the model.
struct Loaded {
  std::unique_ptr<ctx::nn::GPT> model;
  int64_t step = 0;
  std::map<std::string, std::string> metadata;
  std::shared_ptr<const ctx::Tokenizer> tokenizer;
};

}  // namespace

void bind_model(nb::module_& m) {
  m.def("preset_names", &ctx::preset_names, "Names of the built-in model presets.");
  m.def("preset_config", [](const std::string& name) { return config_json(ctx::preset_config(name)); },
        nb::arg("name"), "The preset's config as JSON text (every key, d_ff resolved).");
  m.def("normalize_config", [](const std::string& text, const std::string& source) {
        return config_json(ctx::config_from_string(text, source));
      }, nb::arg("json_text"), nb::arg("source") = "config",
      "Validates a JSON config (errors name `source` and the field) and returns it with every key.");
  m.def("encodings", &ctx::posenc_types, "Names of every registered positional encoding (the posenc registry).");

  nb::class_<ctx::nn::GPT>(m, "GPT", "The decoder-only GPT of MODEL_SPEC (ctx::nn::GPT).")
      .def("__init__", [](ctx::nn::GPT* self, const std::string& config_json_text, const std::string& dtype,
                          const std::string& source) {
            ctx::ModelConfig cfg = ctx::config_from_string(config_json_text, source);
            new (self) ctx::nn::GPT(cfg, parse_dtype(dtype, "Model dtype"), source);
          }, nb::arg("config_json"), nb::arg("dtype") = "float32", nb::arg("source") = "config")
      .def("init_weights", &ctx::nn::GPT::init_weights, nb::arg("seed"), "MODEL_SPEC §4 init, deterministic in seed.")
      .def_prop_ro("config_json", [](const ctx::nn::GPT& g) { return config_json(g.cfg); })
      .def_prop_ro("dtype", [](const ctx::nn::GPT& g) { return std::string(dtype_py_name(g.dtype)); })
      .def_prop_ro("encoding", [](const ctx::nn::GPT& g) { return g.pe->type(); })
      .def("named_parameters", [](const ctx::nn::GPT& g) { return g.named_parameters(); },
           "(name, Variable) in registration order, MODEL_SPEC §4 names.")
      .def("forward", [](ctx::nn::GPT& g, const HostArray& tokens, int64_t pos0, bool use_memory) {
            ctx::Tensor t = tokens_of(tokens, "Model.forward");
            nb::gil_scoped_release release;
            return g.forward(t, pos0, use_memory);
          }, nb::arg("tokens"), nb::arg("pos0") = 0, nb::arg("use_memory") = false,
          "tokens [B, T] int -> logits Variable [B, T, V].")
      .def("loss", [](ctx::nn::GPT& g, const HostArray& inputs, const HostArray& targets, bool use_memory) {
            ctx::Tensor x = tokens_of(inputs, "Model.loss inputs"), y = tokens_of(targets, "Model.loss targets");
            nb::gil_scoped_release release;
            return g.loss(x, y, use_memory);
          }, nb::arg("inputs"), nb::arg("targets"), nb::arg("use_memory") = false,
          "Mean cross-entropy (nats) of forward(inputs) against targets [B, T], a scalar Variable.")
      .def("token_losses", [](ctx::nn::GPT& g, const HostArray& inputs, const HostArray& targets) {
            ctx::Tensor x = tokens_of(inputs, "Model.token_losses inputs"), y = tokens_of(targets, "Model.token_losses targets");
            nb::gil_scoped_release release;
            ctx::NoGradGuard ng;
            return g.token_losses(x, y);
          }, nb::arg("inputs"), nb::arg("targets"), "Per-position cross-entropy [B, T] (no graph).")
      .def("zero_grad", [](ctx::nn::GPT& g) { g.zero_grad(); })
      .def("train", [](ctx::nn::GPT& g, bool on) { g.train(on); }, nb::arg("mode") = true)
      .def("eval", [](ctx::nn::GPT& g) { g.eval(); })
      .def_prop_ro("training", [](const ctx::nn::GPT& g) { return g.is_training(); })
      .def("to", [](ctx::nn::GPT& g, const std::string& device) { g.to(parse_device(device, "Model.to")); },
           nb::arg("device"))
      .def("reset_memory", &ctx::nn::GPT::reset_memory)
      .def("set_attention_window", &ctx::nn::GPT::set_attention_window, nb::arg("window"), nb::arg("sinks") = 0)
      .def("save", [](ctx::nn::GPT& g, const std::string& path, int64_t step,
                      const std::map<std::string, std::string>& metadata) {
            ctx::save_checkpoint(path, g, step, metadata);
          }, nb::arg("path"), nb::arg("step") = 0, nb::arg("metadata") = std::map<std::string, std::string>{},
          "Writes a ctxlab/1 safetensors checkpoint (MODEL_SPEC §5).");

  nb::class_<Loaded>(m, "LoadedCheckpoint")
      .def_prop_ro("step", [](const Loaded& l) { return l.step; })
      .def_prop_ro("metadata", [](const Loaded& l) { return l.metadata; })
      .def_prop_ro("tokenizer", [](const Loaded& l) {
            return std::const_pointer_cast<ctx::Tokenizer>(l.tokenizer ? l.tokenizer : ctx::byte_tokenizer());
          })
      .def("take_model", [](Loaded& l) {
            if (!l.model) throw ctx::Error("LoadedCheckpoint.take_model: the model was already taken");
            return std::move(l.model);
          });
  m.def("load_checkpoint", [](const std::string& path, const std::string& dtype, const std::string& posenc_override,
                              int64_t context) {
        nlohmann::json over = posenc_override.empty() ? nlohmann::json() : nlohmann::json::parse(posenc_override);
        ctx::LoadedModel lm = ctx::load_checkpoint(path, parse_dtype(dtype, "load_checkpoint dtype"), over, context);
        auto out = std::make_unique<Loaded>();
        out->model = std::move(lm.model);
        out->step = lm.step;
        out->metadata = std::move(lm.metadata);
        out->tokenizer = lm.tokenizer;
        return out;
      }, nb::arg("path"), nb::arg("dtype") = "float32", nb::arg("posenc_override_json") = "",
      nb::arg("context") = -1, "Loads a checkpoint (errors name the file and the tensor).");

  nb::class_<ctx::Optimizer>(m, "Optimizer", "Base of the optimizers (ctx::Optimizer).")
      .def("step", [](ctx::Optimizer& o, double lr) {
            nb::gil_scoped_release release;
            o.step(lr);
          }, nb::arg("lr"))
      .def("clip_and_step", [](ctx::Optimizer& o, double lr, double max_norm) {
            nb::gil_scoped_release release;
            return o.clip_and_step(lr, max_norm);
          }, nb::arg("lr"), nb::arg("max_norm"), "Clips the global grad norm, steps; returns the norm before clipping.")
      .def("zero_grad", &ctx::Optimizer::zero_grad)
      .def_ro("steps", &ctx::Optimizer::steps)
      .def("state", &ctx::Optimizer::state, "(name, Tensor) of every state tensor (checkpoint names).");
  nb::class_<ctx::AdamW, ctx::Optimizer>(m, "AdamW")
      .def("__init__", [](ctx::AdamW* self, const ctx::nn::NamedParams& params, double lr, double beta1, double beta2,
                          double eps, double weight_decay, bool fused) {
            ctx::AdamWOptions o;
            o.lr = lr, o.beta1 = beta1, o.beta2 = beta2, o.eps = eps, o.weight_decay = weight_decay, o.fused = fused;
            new (self) ctx::AdamW(params, o);
          }, nb::arg("named_parameters"), nb::arg("lr") = 1e-3, nb::arg("beta1") = 0.9, nb::arg("beta2") = 0.999,
          nb::arg("eps") = 1e-8, nb::arg("weight_decay") = 1e-2, nb::arg("fused") = true)
      .def_prop_ro("fused", &ctx::AdamW::fused);
  nb::class_<ctx::SGD, ctx::Optimizer>(m, "SGD")
      .def(nb::init<const ctx::nn::NamedParams&, double, double>(), nb::arg("named_parameters"),
           nb::arg("momentum") = 0.0, nb::arg("weight_decay") = 0.0);
  m.def("clip_grad_norm", &ctx::clip_grad_norm, nb::arg("named_parameters"), nb::arg("max_norm"),
        "Global L2 norm of the gradients, scaled down to max_norm when above (0: no clipping).");
  m.def("lr_warmup_cosine", &ctx::lr_warmup_cosine, nb::arg("step"), nb::arg("warmup"), nb::arg("total"),
        nb::arg("lr"), nb::arg("min_lr"));
}

}  // namespace ctxpy
