// train/io/hf_checkpoint.cpp — ctxlab <-> Hugging Face GPT-2 / Llama checkpoint directories
// (see hf_checkpoint.h; the field-by-field mapping is docs/huggingface.md).
#include "train/io/hf_checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "core/device_table.h"  // to_host
#include "train/io/fileio.h"
#include "train/io/hf_tokenizer.h"
#include "train/io/limits.h"
#include "train/io/safetensors.h"

namespace ctx {
namespace {

using json = nlohmann::json;

// ---- tensor layout ----------------------------------------------------------------------------

// One transformers tensor and where it lives in ctxlab.
struct TensorMap {
  enum Kind {
    kCopy,       // the same tensor
    kTranspose,  // GPT-2 Conv1D: HF [in, out] = ctxlab Linear [out, in] transposed
    kPart,       // rows [part*D, (part+1)*D) of ctxlab's fused qkv (Llama q/k/v_proj)
    kConstant,   // a tensor ctxlab does not have: every element `value` (Llama's up_proj)
  } kind;
  std::string hf, ctx;
  int part = 0;          // kPart: 0 q, 1 k, 2 v
  bool permute = false;  // kPart: rows from interleaved rope pairs (2k, 2k+1) to halves (k, k+d/2)
  float value = 0;       // kConstant
  Shape shape;           // kConstant
  TensorMap(Kind k, std::string h, std::string c) : kind(k), hf(std::move(h)), ctx(std::move(c)) {}
};

std::vector<TensorMap> tensor_maps(const ModelConfig& c, const std::string& layout) {
  std::vector<TensorMap> m;
  auto add = [&](TensorMap::Kind k, const std::string& hf, const std::string& cx) { m.emplace_back(k, hf, cx); };
  if (layout == "gpt2") {
    add(TensorMap::kCopy, "transformer.wte.weight", "wte.weight");
    add(TensorMap::kCopy, "transformer.wpe.weight", "wpe.weight");
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string h = "transformer.h." + std::to_string(l) + ".", b = "blocks." + std::to_string(l) + ".";
      for (const char* p : {"weight", "bias"}) {
        add(TensorMap::kCopy, h + "ln_1." + p, b + "norm1." + p);
        add(TensorMap::kCopy, h + "ln_2." + p, b + "norm2." + p);
      }
      const std::pair<const char*, const char*> linears[] = {
          {"attn.c_attn", "attn.qkv"}, {"attn.c_proj", "attn.proj"}, {"mlp.c_fc", "mlp.fc"}, {"mlp.c_proj", "mlp.proj"}};
      for (const auto& [hn, cn] : linears) {
        add(TensorMap::kTranspose, h + hn + ".weight", b + cn + ".weight");
        add(TensorMap::kCopy, h + hn + ".bias", b + cn + ".bias");
      }
    }
    add(TensorMap::kCopy, "transformer.ln_f.weight", "norm_f.weight");
    add(TensorMap::kCopy, "transformer.ln_f.bias", "norm_f.bias");
  } else {
    const bool interleaved = c.posenc.value("pairing", std::string("half")) == "interleaved";
    add(TensorMap::kCopy, "model.embed_tokens.weight", "wte.weight");
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string h = "model.layers." + std::to_string(l) + ".", b = "blocks." + std::to_string(l) + ".";
      add(TensorMap::kCopy, h + "input_layernorm.weight", b + "norm1.weight");
      add(TensorMap::kCopy, h + "post_attention_layernorm.weight", b + "norm2.weight");
      const char* qkv[] = {"q_proj", "k_proj", "v_proj"};
      for (int part = 0; part < 3; ++part)
        for (const char* p : {"weight", "bias"}) {
          TensorMap t{TensorMap::kPart, h + "self_attn." + qkv[part] + "." + p, b + "attn.qkv." + p};
          t.part = part;
          t.permute = interleaved && part < 2;
          m.push_back(t);
        }
      for (const char* p : {"weight", "bias"}) {
        add(TensorMap::kCopy, h + "self_attn.o_proj." + p, b + "attn.proj." + p);
        add(TensorMap::kCopy, h + "mlp.gate_proj." + p, b + "mlp.fc." + p);
        add(TensorMap::kCopy, h + "mlp.down_proj." + p, b + "mlp.proj." + p);
      }
      // up_proj(x) = 0 x + 1 = 1 exactly, so down(act(gate(x)) * up(x)) = proj(gelu(fc(x))).
      TensorMap w{TensorMap::kConstant, h + "mlp.up_proj.weight", ""}, bb{TensorMap::kConstant, h + "mlp.up_proj.bias", ""};
      w.shape = {c.ff_dim(), c.d_model};
      bb.shape = {c.ff_dim()};
      bb.value = 1.0f;
      m.push_back(w);
      m.push_back(bb);
    }
    add(TensorMap::kCopy, "model.norm.weight", "norm_f.weight");
  }
  if (!c.tie_embeddings) add(TensorMap::kCopy, "lm_head.weight", "lm_head.weight");
  return m;
}

// Within each head of `rows` rows of `cols` floats: interleaved pair rows (2k, 2k+1) go to
// (k, k + dh/2) (to_half), or back. src and dst: [H*dh, cols] (cols = 1 for a bias).
void permute_rows(const float* src, float* dst, int64_t heads, int64_t dh, int64_t cols, bool to_half) {
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t k = 0; k < dh / 2; ++k)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t inter = h * dh + 2 * k + j, half = h * dh + k + j * (dh / 2);
        const int64_t s = to_half ? inter : half, d = to_half ? half : inter;
        std::memcpy(dst + d * cols, src + s * cols, (size_t)cols * sizeof(float));
      }
}

Tensor transposed(const Tensor& t) {  // [r, c] -> [c, r]
  const int64_t r = t.size(0), c = t.size(1);
  Tensor o = Tensor::zeros({c, r});
  const float* s = t.host<float>();
  float* d = o.host<float>();
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) d[j * r + i] = s[i * c + j];
  return o;
}

// The HF shape of a mapped tensor, given the ctxlab parameter's shape.
Shape hf_shape(const TensorMap& m, const Shape& ctx_shape) {
  if (m.kind == TensorMap::kConstant) return m.shape;
  if (m.kind == TensorMap::kTranspose) return {ctx_shape[1], ctx_shape[0]};
  if (m.kind == TensorMap::kPart) {
    Shape s = ctx_shape;
    s[0] /= 3;
    return s;
  }
  return ctx_shape;
}

// ---- config mapping ---------------------------------------------------------------------------

double num_or(const json& sc, const char* key, double def) {
  return sc.contains(key) && sc[key].is_number() ? sc[key].get<double>() : def;
}

// ctxlab's posenc.scaling -> transformers' rope_scaling (null when none).
json rope_scaling_to_hf(const ModelConfig& c, const std::string& source) {
  const json sc = c.posenc.value("scaling", json());
  if (sc.is_null()) return nullptr;
  const std::string type = sc.value("type", std::string());
  const int64_t L = sc.value("original_context", c.context);
  const double s = num_or(sc, "factor", 1.0);
  if (type == "pi") return {{"rope_type", "linear"}, {"factor", s}};
  if (type == "dynamic-ntk") {  // transformers' dynamic takes L from max_position_embeddings
    CTX_CHECK(L == c.context, source, ": field 'posenc.scaling.original_context' (", L, ") differs from field "
              "'context' (", c.context, "), which does not map: transformers' dynamic rope scales from "
              "max_position_embeddings = context");
    return {{"rope_type", "dynamic"}, {"factor", s}};
  }
  if (type == "yarn") {
    json j = {{"rope_type", "yarn"}, {"factor", s}, {"original_max_position_embeddings", L},
              {"beta_fast", num_or(sc, "beta_fast", 32.0)}, {"beta_slow", num_or(sc, "beta_slow", 1.0)},
              {"truncate", true}};
    if (sc.contains("attention_factor") && !sc["attention_factor"].is_null()) j["attention_factor"] = sc["attention_factor"];
    return j;
  }
  if (type == "llama3")
    return {{"rope_type", "llama3"}, {"factor", s}, {"low_freq_factor", num_or(sc, "low_freq_factor", 1.0)},
            {"high_freq_factor", num_or(sc, "high_freq_factor", 4.0)}, {"original_max_position_embeddings", L}};
  if (type == "longrope") {
    json j = {{"rope_type", "longrope"}, {"short_factor", sc["short_factor"]}, {"long_factor", sc["long_factor"]},
              {"factor", num_or(sc, "factor", (double)c.context / (double)L)}, {"original_max_position_embeddings", L}};
    if (sc.contains("attention_factor") && !sc["attention_factor"].is_null()) j["attention_factor"] = sc["attention_factor"];
    return j;
  }
  throw Error(str(source, ": field 'posenc.scaling.type' is ", quoted_str(type), ", which does not map to a "
                  "transformers rope type (ctxlab maps pi -> linear, dynamic-ntk -> dynamic, yarn, llama3, "
                  "longrope); export the checkpoint without that scaling"));
}

// transformers' rope parameters -> ctxlab's posenc.scaling (null when the type is "default"),
// keys equal to ctxlab's defaults left out. `where` names config.json.
json rope_scaling_from_hf(const json& rp, int64_t context, const std::string& where) {
  if (rp.is_null() || !rp.is_object()) return nullptr;
  const std::string type = rp.value("rope_type", rp.value("type", std::string("default")));
  if (type == "default") return nullptr;
  auto number = [&](const char* key) {
    CTX_CHECK(rp.contains(key) && rp[key].is_number(), where, ": field 'rope_scaling.", key,
              "' must be a number for rope_type ", quoted_str(type));
    return rp[key].get<double>();
  };
  auto original = [&](json& j) {
    if (rp.contains("original_max_position_embeddings") && rp["original_max_position_embeddings"].is_number_integer() &&
        rp["original_max_position_embeddings"].get<int64_t>() != context)
      j["original_context"] = rp["original_max_position_embeddings"];
  };
  auto optional = [&](json& j, const char* key, const char* ctx_key, double def) {
    if (rp.contains(key) && rp[key].is_number() && rp[key].get<double>() != def) j[ctx_key] = rp[key];
  };
  json j;
  if (type == "linear") {
    j = {{"type", "pi"}, {"factor", number("factor")}};
  } else if (type == "dynamic") {
    j = {{"type", "dynamic-ntk"}, {"factor", number("factor")}};
    original(j);
  } else if (type == "yarn") {
    for (const char* k : {"mscale", "mscale_all_dim"})
      CTX_CHECK(!rp.contains(k) || rp[k].is_null(), where, ": field 'rope_scaling.", k,
                "' (DeepSeek's yarn attention factor) does not map: ctxlab's yarn takes attention_factor only");
    CTX_CHECK(rp.value("truncate", true) == true, where, ": field 'rope_scaling.truncate' is false, which does "
              "not map: ctxlab's yarn rounds the correction range (truncate true)");
    j = {{"type", "yarn"}, {"factor", number("factor")}};
    original(j);
    optional(j, "beta_fast", "beta_fast", 32.0);
    optional(j, "beta_slow", "beta_slow", 1.0);
    if (rp.contains("attention_factor") && !rp["attention_factor"].is_null()) j["attention_factor"] = rp["attention_factor"];
  } else if (type == "llama3") {
    j = {{"type", "llama3"}, {"factor", number("factor")}};
    optional(j, "low_freq_factor", "low_freq_factor", 1.0);
    optional(j, "high_freq_factor", "high_freq_factor", 4.0);
    original(j);
  } else if (type == "longrope") {
    j = {{"type", "longrope"}, {"short_factor", rp.value("short_factor", json())},
         {"long_factor", rp.value("long_factor", json())}};
    if (rp.contains("factor") && rp["factor"].is_number()) j["factor"] = rp["factor"];
    if (rp.contains("attention_factor") && !rp["attention_factor"].is_null()) j["attention_factor"] = rp["attention_factor"];
    original(j);
  } else {
    throw Error(str(where, ": field 'rope_scaling.rope_type' is ", quoted_str(type), ", which ctxlab has no "
                    "encoding for (it reads default, linear, dynamic, yarn, llama3, longrope)"));
  }
  return j;
}

// Reads integer / number / string / bool fields of config.json with one-line errors.
struct Fields {
  const json& j;
  std::string where;
  int64_t integer(const char* key) const {
    CTX_CHECK(j.contains(key), where, ": field '", key, "' is missing");
    CTX_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() >= 1, where, ": field '", key,
              "' must be a positive integer, got ", j[key].dump());
    return j[key].get<int64_t>();
  }
  int64_t integer(const char* key, int64_t def) const {
    return j.contains(key) && !j[key].is_null() ? integer(key) : def;
  }
  double number(const char* key, double def) const {
    if (!j.contains(key) || j[key].is_null()) return def;
    CTX_CHECK(j[key].is_number(), where, ": field '", key, "' must be a number, got ", j[key].dump());
    return j[key].get<double>();
  }
  bool boolean(const char* key, bool def) const {
    if (!j.contains(key) || j[key].is_null()) return def;
    CTX_CHECK(j[key].is_boolean(), where, ": field '", key, "' must be true or false, got ", j[key].dump());
    return j[key].get<bool>();
  }
  std::string string(const char* key, const std::string& def) const {
    if (!j.contains(key) || j[key].is_null()) return def;
    CTX_CHECK(j[key].is_string(), where, ": field '", key, "' must be a string, got ", j[key].dump());
    return j[key].get<std::string>();
  }
  // A field that must hold one of `ok` for the model to be ctxlab's (`why` says what ctxlab has).
  void expect(const char* key, const json& def, const std::vector<json>& ok, const std::string& why) const {
    const json v = j.contains(key) && !j[key].is_null() ? j[key] : def;
    for (const auto& o : ok)
      if (v == o) return;
    throw Error(str(where, ": field '", key, "' is ", v.dump(), ", which does not map to ctxlab: ", why));
  }
};

const std::vector<json> kGeluTanh = {"gelu_new", "gelu_pytorch_tanh"};

ModelConfig gpt2_config(const Fields& f) {
  f.expect("activation_function", "gelu_new", kGeluTanh, "its MLP activation is gelu_tanh (gelu_new)");
  f.expect("scale_attn_weights", true, {true}, "attention scores are scaled by 1/sqrt(head_dim)");
  f.expect("scale_attn_by_inverse_layer_idx", false, {false}, "attention scores are not scaled by layer");
  f.expect("add_cross_attention", false, {false}, "the model is decoder-only");
  ModelConfig c;
  c.vocab_size = f.integer("vocab_size");
  c.d_model = f.integer("n_embd");
  c.n_layers = f.integer("n_layer");
  c.n_heads = f.integer("n_head");
  c.d_ff = f.integer("n_inner", 4 * c.d_model);
  c.context = f.integer("n_positions");
  c.norm = "layernorm";
  c.norm_eps = f.number("layer_norm_epsilon", 1e-5);
  c.tie_embeddings = f.boolean("tie_word_embeddings", true);
  c.dropout = f.number("resid_pdrop", 0.1);
  c.posenc = {{"type", "learned"}};
  return c;
}

ModelConfig llama_config(const Fields& f) {
  f.expect("mlp_bias", false, {true}, "ctxlab's MLP is proj(gelu_tanh(fc(x))), not gated; a Llama MLP "
           "down(act(gate(x)) * up(x)) equals it only when up(x) = 1, which needs mlp_bias true with up_proj "
           "weight 0 and bias 1 (as `ctxlab export` writes); SwiGLU checkpoints cannot be imported");
  f.expect("hidden_act", "silu", kGeluTanh, "its MLP activation is gelu_tanh (gelu_pytorch_tanh)");
  f.expect("partial_rotary_factor", 1.0, {1.0, 1}, "rope rotates the whole head");
  f.expect("pretraining_tp", 1, {1}, "one tensor-parallel slice");
  ModelConfig c;
  c.vocab_size = f.integer("vocab_size");
  c.d_model = f.integer("hidden_size");
  c.n_layers = f.integer("num_hidden_layers");
  c.n_heads = f.integer("num_attention_heads");
  c.d_ff = f.integer("intermediate_size");
  c.context = f.integer("max_position_embeddings");
  CTX_CHECK(c.d_model % c.n_heads == 0, f.where, ": field 'hidden_size' (", c.d_model,
            ") must be divisible by field 'num_attention_heads' (", c.n_heads, ")");
  const int64_t hd = f.integer("head_dim", c.d_model / c.n_heads);
  CTX_CHECK(hd == c.d_model / c.n_heads, f.where, ": field 'head_dim' is ", hd, ", which does not map to ctxlab: "
            "head_dim is hidden_size / num_attention_heads = ", c.d_model / c.n_heads);
  const int64_t kv = f.integer("num_key_value_heads", c.n_heads);
  CTX_CHECK(c.n_heads % kv == 0, f.where, ": field 'num_key_value_heads' (", kv,
            ") must divide field 'num_attention_heads' (", c.n_heads, ")");
  c.norm = "rmsnorm";
  c.norm_eps = f.number("rms_norm_eps", 1e-6);
  c.tie_embeddings = f.boolean("tie_word_embeddings", false);
  c.dropout = 0.0;
  // transformers 5 writes rope_parameters {rope_type, rope_theta, ...}; 4.x rope_theta + rope_scaling.
  const json rp = f.j.contains("rope_parameters") && f.j["rope_parameters"].is_object() ? f.j["rope_parameters"]
                  : f.j.value("rope_scaling", json());
  double base = f.number("rope_theta", 10000.0);
  if (rp.is_object() && rp.contains("rope_theta")) {
    CTX_CHECK(rp["rope_theta"].is_number(), f.where, ": field 'rope_parameters.rope_theta' must be a number");
    base = rp["rope_theta"].get<double>();
  }
  c.posenc = {{"type", "rope"}};
  if (base != 10000.0) c.posenc["base"] = base;
  json sc = rope_scaling_from_hf(rp, c.context, f.where);
  if (!sc.is_null()) c.posenc["scaling"] = sc;
  return c;
}

std::string layout_of(const json& j, const std::string& where) {
  const std::string mt = j.value("model_type", std::string());
  if (mt == "gpt2") return "gpt2";
  if (mt == "llama") return "llama";
  throw Error(str(where, ": field 'model_type' is ", j.contains("model_type") ? j["model_type"].dump() : "missing",
                  "; ctxlab imports \"gpt2\" (GPT2LMHeadModel) and \"llama\" (LlamaForCausalLM)"));
}

}  // namespace

std::string hf_layout_for(const ModelConfig& c, const std::string& source) {
  const std::string type = c.posenc.value("type", std::string());
  if (type == "learned") {
    CTX_CHECK(!c.posenc.value("hierarchical", false), source, ": field 'posenc.hierarchical' is true, which "
              "does not map: GPT-2 adds wpe[t] for t < n_positions only");
    CTX_CHECK(c.norm == "layernorm", source, ": field 'norm' is ", quoted_str(c.norm), ", which does not map: a "
              "learned-position model exports as GPT-2, whose norms are LayerNorm with bias");
    return "gpt2";
  }
  if (type == "rope") {
    CTX_CHECK(c.norm == "rmsnorm", source, ": field 'norm' is ", quoted_str(c.norm), ", which does not map: a rope "
              "model exports as Llama, whose norms are RMSNorm (no mean subtraction, no bias); train with "
              "\"norm\": \"rmsnorm\"");
    CTX_CHECK(c.head_dim() % 2 == 0, source, ": head_dim ", c.head_dim(), " is odd; rope needs it even");
    return "llama";
  }
  throw Error(str(source, ": field 'posenc.type' is ", quoted_str(type), ", which does not map to a transformers "
                  "layout: ctxlab exports learned (GPT-2, with \"norm\": \"layernorm\") and rope (Llama, with "
                  "\"norm\": \"rmsnorm\")"));
}

json hf_config_json(const ModelConfig& c, const std::string& source) {
  const std::string layout = hf_layout_for(c, source);
  json j;
  if (layout == "gpt2") {
    j = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", c.vocab_size},
         {"n_positions", c.context}, {"n_embd", c.d_model}, {"n_layer", c.n_layers}, {"n_head", c.n_heads},
         {"n_inner", c.ff_dim()}, {"activation_function", "gelu_new"}, {"layer_norm_epsilon", c.norm_eps},
         {"resid_pdrop", c.dropout}, {"embd_pdrop", c.dropout}, {"attn_pdrop", c.dropout},
         {"scale_attn_weights", true}, {"scale_attn_by_inverse_layer_idx", false},
         {"reorder_and_upcast_attn", false}, {"tie_word_embeddings", c.tie_embeddings}};
  } else {
    j = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", c.vocab_size},
         {"hidden_size", c.d_model}, {"intermediate_size", c.ff_dim()}, {"num_hidden_layers", c.n_layers},
         {"num_attention_heads", c.n_heads}, {"num_key_value_heads", c.n_heads}, {"head_dim", c.head_dim()},
         {"hidden_act", "gelu_pytorch_tanh"}, {"max_position_embeddings", c.context},
         {"rms_norm_eps", c.norm_eps}, {"attention_bias", true}, {"mlp_bias", true},
         {"attention_dropout", 0.0}, {"pretraining_tp", 1}, {"tie_word_embeddings", c.tie_embeddings},
         {"rope_theta", num_or(c.posenc, "base", 10000.0)}, {"rope_scaling", rope_scaling_to_hf(c, source)}};
  }
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = nullptr;
  j["torch_dtype"] = "float32";
  j["ctxlab"] = {{"format", "ctxlab/1"}, {"dropout", c.dropout},
                 {"rope_pairing", layout == "llama" ? c.posenc.value("pairing", std::string("half")) : "none"}};
  return j;
}

void export_hf(nn::GPT& model, const Tokenizer* tok, const std::string& dir, const std::string& source) {
  const ModelConfig& c = model.cfg;
  const json cj = hf_config_json(c, source);  // refuses what does not map, before writing anything
  const std::string layout = hf_layout_for(c, source);
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : model.named_parameters()) {
    Tensor t = to_host(p.data());
    params[name] = t.dtype() == DType::F32 ? t : t.to(DType::F32);
  }
  std::vector<std::pair<std::string, Tensor>> out;
  for (const TensorMap& m : tensor_maps(c, layout)) {
    if (m.kind == TensorMap::kConstant) {
      out.emplace_back(m.hf, Tensor::full(m.shape, m.value));
      continue;
    }
    const Tensor& t = params.at(m.ctx);
    if (m.kind == TensorMap::kCopy) {
      out.emplace_back(m.hf, t);
    } else if (m.kind == TensorMap::kTranspose) {
      out.emplace_back(m.hf, transposed(t));
    } else {  // kPart: rows part*D .. (part+1)*D of qkv
      Tensor part = t.slice0(m.part * c.d_model, (m.part + 1) * c.d_model).clone();
      if (m.permute) {
        Tensor o = Tensor::zeros(part.shape());
        permute_rows(part.host<float>(), o.host<float>(), c.n_heads, c.head_dim(), part.numel() / c.d_model, true);
        part = o;
      }
      out.emplace_back(m.hf, part);
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  CTX_CHECK(std::filesystem::is_directory(dir), "export: cannot create the directory ", quoted_str(dir),
            ec ? ": " + ec.message() : std::string());
  save_safetensors(dir + "/model.safetensors", out, {{"format", "pt"}});
  const std::string text = cj.dump(2) + "\n";
  write_file_atomic(dir + "/config.json", {{text.data(), text.size()}}, "Hugging Face config");
  write_hf_tokenizer(tok ? *tok : *byte_tokenizer(), c.context, dir);
}

LoadedModel import_hf(const std::string& dir, std::string* tokenizer_note) {
  namespace fs = std::filesystem;
  CTX_CHECK(fs::is_directory(dir), "import: ", quoted_str(dir), " is not a directory (expected a Hugging Face "
            "checkpoint directory with config.json and model.safetensors)");
  const std::string cpath = dir + "/config.json", wpath = dir + "/model.safetensors";
  const json j = json::parse(read_file(cpath, "Hugging Face config"), nullptr, /*allow_exceptions=*/false);
  CTX_CHECK(!j.is_discarded() && j.is_object(), cpath, ": not a JSON object");
  if (!fs::exists(wpath)) {
    const bool sharded = fs::exists(dir + "/model.safetensors.index.json");
    const bool bin = fs::exists(dir + "/pytorch_model.bin");
    throw Error(str(wpath, " is missing", sharded ? " (the checkpoint is sharded: ctxlab reads one file)"
                    : bin ? " (the directory has pytorch_model.bin: convert it to safetensors first)" : ""));
  }
  const std::string layout = layout_of(j, cpath);
  Fields f{j, cpath};
  ModelConfig c = layout == "gpt2" ? gpt2_config(f) : llama_config(f);
  const json extra = j.value("ctxlab", json::object());  // what transformers has no field for
  if (extra.is_object() && extra.contains("dropout") && extra["dropout"].is_number())
    c.dropout = extra["dropout"].get<double>();
  const bool interleaved = extra.is_object() && extra.value("rope_pairing", std::string()) == "interleaved";
  if (interleaved) c.posenc["pairing"] = "interleaved";
  validate_config(c, cpath);
  check_model_fits(c, cpath);

  SafetensorsFile st = load_safetensors(wpath);
  // GPT-2 checkpoints come with and without the "transformer." prefix (openai-community/gpt2 has none).
  std::map<std::string, Tensor> hf;
  for (auto& [name, t] : st.tensors) {
    std::string n = name;
    if (layout == "gpt2" && n.rfind("transformer.", 0) != 0 && n != "lm_head.weight") n = "transformer." + n;
    hf[n] = t.dtype() == DType::F32 ? t : t.to(DType::F32);
  }
  // Grouped-query attention: each k/v head serves n_heads / n_kv query heads; repeat it.
  const int64_t kv = f.integer("num_key_value_heads", c.n_heads), dh = c.head_dim();
  if (layout == "llama" && kv != c.n_heads)
    for (auto& [name, t] : hf) {
      const bool kvp = name.find("self_attn.k_proj.") != std::string::npos ||
                       name.find("self_attn.v_proj.") != std::string::npos;
      if (!kvp || t.size(0) != kv * dh) continue;
      Shape s = t.shape();
      s[0] = c.d_model;
      Tensor o = Tensor::zeros(s);
      const int64_t row = t.numel() / t.size(0), rep = c.n_heads / kv;
      for (int64_t h = 0; h < c.n_heads; ++h)
        std::memcpy(o.host<float>() + h * dh * row, t.host<float>() + (h / rep) * dh * row,
                    (size_t)(dh * row) * sizeof(float));
      t = o;
    }
  const bool attention_bias = layout == "gpt2" || f.boolean("attention_bias", false);

  LoadedModel out;
  out.model = std::make_unique<nn::GPT>(c, DType::F32, cpath);
  std::map<std::string, Variable> params;
  for (auto& [name, p] : out.model->named_parameters()) params[name] = p;
  std::set<std::string> used;
  for (const TensorMap& m : tensor_maps(c, layout)) {
    const Shape want = m.kind == TensorMap::kConstant ? m.shape : hf_shape(m, params.at(m.ctx).shape());
    auto it = hf.find(m.hf);
    const bool is_attn_bias = m.kind == TensorMap::kPart && m.hf.size() > 5 && m.hf.substr(m.hf.size() - 5) == ".bias";
    const bool is_o_bias = m.hf.find("self_attn.o_proj.bias") != std::string::npos;
    if (it == hf.end() && layout == "llama" && !attention_bias && (is_attn_bias || is_o_bias))
      continue;  // attention_bias false: ctxlab's biases stay 0 (nn::GPT starts them at 0)
    CTX_CHECK(it != hf.end(), wpath, ": tensor '", m.hf, "' is missing (config.json needs it with shape ",
              shape_str(want), ")");
    const Tensor& t = it->second;
    used.insert(m.hf);
    CTX_CHECK(t.shape() == want, wpath, ": tensor '", m.hf, "' has shape ", shape_str(t.shape()), ", expected ",
              shape_str(want), " for config.json");
    if (m.kind == TensorMap::kConstant) {
      const float* x = t.host<float>();
      for (int64_t i = 0; i < t.numel(); ++i)
        CTX_CHECK(x[i] == m.value, wpath, ": tensor '", m.hf, "' holds ", x[i], " at flat index ", i,
                  ", which does not map to ctxlab: its MLP is not gated, so up_proj must be the constant map "
                  "to 1 (weight 0, bias 1) as `ctxlab export` writes it");
      continue;
    }
    Tensor dst = params.at(m.ctx).data();
    if (m.kind == TensorMap::kCopy) {
      dst.copy_from(t);
    } else if (m.kind == TensorMap::kTranspose) {
      dst.copy_from(transposed(t));
    } else {
      Tensor rows = dst.slice0(m.part * c.d_model, (m.part + 1) * c.d_model);
      if (m.permute) {
        Tensor o = Tensor::zeros(t.shape());
        permute_rows(t.host<float>(), o.host<float>(), c.n_heads, dh, t.numel() / c.d_model, false);
        rows.copy_from(o);
      } else {
        rows.copy_from(t);
      }
    }
  }
  for (auto& [name, t] : hf) {
    if (used.count(name)) continue;
    // GPT-2's causal-mask buffers; a tied lm_head some writers store anyway (must equal wte)
    const bool mask = layout == "gpt2" && (name.size() > 10 && (name.substr(name.size() - 10) == ".attn.bias" ||
                                                                name.find(".attn.masked_bias") != std::string::npos));
    if (mask) continue;
    if (name == "lm_head.weight" && c.tie_embeddings) {
      const Tensor& w = params.at("wte.weight").data();
      CTX_CHECK(t.shape() == w.shape() && std::memcmp(t.host<float>(), w.host<float>(), w.nbytes()) == 0, wpath,
                ": tensor 'lm_head.weight' differs from the token embedding but config.json has "
                "tie_word_embeddings true");
      continue;
    }
    throw Error(str(wpath, ": unexpected tensor '", name, "' (not part of the ", layout, " layout for config.json)"));
  }
  for (auto& [name, p] : params) {  // MODEL_SPEC §5: a checkpoint's parameters are finite
    const float* x = p.data().host<float>();
    for (int64_t i = 0; i < p.data().numel(); ++i)
      CTX_CHECK(std::isfinite(x[i]), wpath, ": the tensor mapped to '", name, "' holds a non-finite value at flat index ", i);
  }
  out.tokenizer = read_hf_tokenizer(dir, tokenizer_note);
  if (out.tokenizer && out.tokenizer->vocab_size() != c.vocab_size) {
    if (tokenizer_note)
      *tokenizer_note = str(dir, ": the tokenizer has ", out.tokenizer->vocab_size(), " tokens but vocab_size is ",
                            c.vocab_size, "; the checkpoint records no tokenizer");
    out.tokenizer = nullptr;
  }
  return out;
}

}  // namespace ctx
