// python/src/bind_train.cpp — the training loop (ctx::train), evaluation (ctx::evaluate),
// sampling (ctx::sample), finite-difference gradient checks (ctx::gradcheck_params) and the
// tokenizers. Options cross as JSON text validated by the library (errors name the option).
// Long calls release the GIL; Python callbacks (progress, the loss of a gradcheck) retake it.
#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <initializer_list>
#include <utility>

#include "bindings.h"
#include "train/sample.h"

namespace ctxpy {

namespace {

// the result structs as dicts: {name: value}
nb::dict dict_of(std::initializer_list<std::pair<const char*, nb::object>> items) {
  nb::dict d;
  for (const auto& [k, v] : items) d[k] = v;
  return d;
}
template <class T>
nb::object o(const T& v) {
  return nb::cast(v);
}

nb::dict train_result(const ctx::TrainResult& r) {
  return dict_of({{"steps", o(r.steps)}, {"final_train_loss", o(r.final_train_loss)},
                  {"final_val_loss", o(r.final_val_loss)}, {"seconds", o(r.seconds)}, {"signal", o(r.signal)}});
}

nb::dict eval_result(const ctx::EvalResult& r) {
  nb::list pos;
  for (const auto& b : r.positions)
    pos.append(dict_of({{"begin", o(b.begin)}, {"end", o(b.end)}, {"count", o(b.count)}, {"loss", o(b.loss)}}));
  return dict_of({{"length", o(r.length)}, {"windows", o(r.windows)}, {"tokens", o(r.tokens)}, {"loss", o(r.loss)},
                  {"ppl", o(r.ppl)}, {"bytes", o(r.bytes)}, {"bpb", o(r.bpb)}, {"positions", pos}});
}

nb::dict gradcheck_result(const ctx::GradcheckResult& r) {
  nb::list ts;
  for (const auto& t : r.tensors)
    ts.append(dict_of({{"name", o(t.name)}, {"max_abs_err", o(t.max_abs_err)}, {"max_rel_err", o(t.max_rel_err)},
                       {"worst_index", o(t.worst_index)}, {"worst_analytic", o(t.worst_analytic)},
                       {"worst_numeric", o(t.worst_numeric)}, {"passed", o(t.pass)}}));
  return dict_of({{"passed", o(r.pass)}, {"summary", o(r.summary())}, {"tensors", ts}});
}

}  // namespace

void bind_train(nb::module_& m) {
  m.def("train", [](ctx::nn::GPT& model, const std::string& options_json, bool force,
                    const std::function<void(int64_t, bool)>& after_step) {
        ctx::TrainOptions o = ctx::train_options_from_json(nlohmann::json::parse(options_json), "ctxlab.train()");
        o.force = force;
        ctx::validate_train_options(o);
        std::function<void(int64_t, bool)> cb;
        if (after_step)
          cb = [&after_step](int64_t step, bool reported) {
            nb::gil_scoped_acquire gil;
            after_step(step, reported);
          };
        ctx::TrainResult r;
        {
          nb::gil_scoped_release release;
          r = ctx::train(model, o, 0, "", -1, cb);
        }
        return train_result(r);
      }, nb::arg("model"), nb::arg("options_json"), nb::arg("force") = false, nb::arg("after_step").none() = nb::none(),
      "ctx::train with TrainOptions from JSON; returns the TrainResult as a dict.");

  m.def("evaluate", [](ctx::nn::GPT& model, const std::vector<int32_t>& tokens, int64_t length, int64_t batch,
                       int64_t max_windows, int64_t window, int64_t sinks, int64_t segment, int64_t position_bucket,
                       const ctx::Tokenizer* tok) {
        ctx::EvalMode mode;
        mode.window = window, mode.sinks = sinks, mode.segment = segment;
        ctx::check_eval_length(model, (int64_t)tokens.size(), length, "ctxlab.evaluate()", mode);
        ctx::EvalResult r;
        {
          nb::gil_scoped_release release;
          r = ctx::evaluate(model, tokens, length, batch, max_windows, "ctxlab.evaluate()", mode, tok, position_bucket);
        }
        return eval_result(r);
      }, nb::arg("model"), nb::arg("tokens"), nb::arg("length"), nb::arg("batch") = 1, nb::arg("max_windows") = 0,
      nb::arg("window") = 0, nb::arg("sinks") = 0, nb::arg("segment") = 0, nb::arg("position_bucket") = 0,
      nb::arg("tokenizer").none() = nb::none(), "Perplexity at a context length (ctx::evaluate) as a dict.");

  m.def("sample", [](ctx::nn::GPT& model, const std::vector<int32_t>& prompt, int64_t max_tokens, double temperature,
                     int64_t top_k, uint64_t seed, int64_t window, int64_t sinks, bool use_cache,
                     const std::function<void(int32_t)>& on_token) {
        ctx::SampleOptions o;
        o.max_tokens = max_tokens, o.temperature = temperature, o.top_k = top_k, o.seed = seed;
        o.window = window, o.sinks = sinks, o.use_cache = use_cache;
        ctx::check_sample_options(o);
        std::function<void(int32_t)> cb;
        if (on_token)
          cb = [&on_token](int32_t t) {
            nb::gil_scoped_acquire gil;
            on_token(t);
          };
        nb::gil_scoped_release release;
        return ctx::sample(model, prompt, o, cb);
      }, nb::arg("model"), nb::arg("prompt"), nb::arg("max_tokens") = 200, nb::arg("temperature") = 0.8,
      nb::arg("top_k") = 40, nb::arg("seed") = 0, nb::arg("window") = 0, nb::arg("sinks") = 0,
      nb::arg("use_cache") = true, nb::arg("on_token").none() = nb::none(),
      "Generates max_tokens token ids after the prompt (ctx::sample).");

  m.def("sample_many", [](ctx::nn::GPT& model, const std::vector<int32_t>& prompt, int64_t num_samples,
                          int64_t max_tokens, double temperature, int64_t top_k, uint64_t seed, int64_t window) {
        ctx::SampleOptions o;
        o.max_tokens = max_tokens, o.temperature = temperature, o.top_k = top_k, o.seed = seed;
        o.window = window, o.num_samples = num_samples;
        ctx::check_sample_options(o);
        nb::gil_scoped_release release;
        return ctx::sample_many(model, prompt, o).tokens;
      }, nb::arg("model"), nb::arg("prompt"), nb::arg("num_samples"), nb::arg("max_tokens") = 200,
      nb::arg("temperature") = 0.8, nb::arg("top_k") = 40, nb::arg("seed") = 0, nb::arg("window") = 0,
      "num_samples continuations decoded together, sample b with seed + b (ctx::sample_many).");

  m.def("gradcheck_params", [](const ctx::nn::NamedParams& params, const std::function<ctx::Variable()>& loss,
                               const std::function<bool(const std::string&)>& check, double eps, double atol,
                               double rtol, uint64_t seed, int64_t max_elements) {
        ctx::GradcheckOptions o;
        o.eps = eps, o.atol = atol, o.rtol = rtol, o.seed = seed, o.max_elements = max_elements;
        return gradcheck_result(ctx::gradcheck_params(params, loss, check, o));
      }, nb::arg("named_parameters"), nb::arg("loss"), nb::arg("check").none() = nb::none(), nb::arg("eps") = 1e-6,
      nb::arg("atol") = 1e-5, nb::arg("rtol") = 1e-3, nb::arg("seed") = 1234, nb::arg("max_elements") = -1,
      "Finite differences against backward for float64 parameters (ctx::gradcheck_params).");

  nb::class_<ctx::Tokenizer>(m, "Tokenizer", "Text <-> token ids (bytes or SentencePiece).")
      .def_prop_ro("type", &ctx::Tokenizer::type)
      .def_prop_ro("vocab_size", &ctx::Tokenizer::vocab_size)
      .def("encode", &ctx::Tokenizer::encode, nb::arg("text"))
      .def("decode", [](const ctx::Tokenizer& t, const std::vector<int32_t>& ids) {
            const std::string s = t.decode(ids);
            return nb::bytes(s.data(), s.size());
          },
           nb::arg("ids"), "The bytes the ids stand for (decode('utf-8', 'replace') for text).")
      .def("describe", &ctx::Tokenizer::describe);
  // (the library hands out shared_ptr<const Tokenizer>; every method bound above is const)
  m.def("byte_tokenizer", [] { return std::const_pointer_cast<ctx::Tokenizer>(ctx::byte_tokenizer()); },
        "The byte tokenizer (vocab 256, id = byte value).");
  m.def("load_tokenizer", [](const std::string& path) {
        return std::const_pointer_cast<ctx::Tokenizer>(ctx::load_tokenizer_file(path));
      }, nb::arg("path"), "Loads a SentencePiece .model file.");
}

}  // namespace ctxpy
