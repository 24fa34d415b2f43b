// tests/test_hf.cpp — Hugging Face checkpoints (train/io/hf_checkpoint.h, docs/huggingface.md):
// the committed fixtures written by transformers (tests/data/hf/, make_fixtures.py) import to
// ctxlab models whose logits equal transformers' stored ones; export -> import is bit-exact for
// every layout and rope option; what does not map is refused naming the field; tokenizer files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "autograd/variable.h"
#include "nn/gpt.h"
#include "test_util.h"
#include "train/io/fileio.h"
#include "train/io/hf_checkpoint.h"
#include "train/io/hf_tokenizer.h"
#include "train/io/safetensors.h"
#include "train/io/tokenizer_sp.h"

using namespace ctx;
using testing_util::expect_error;
using testing_util::randn;
using testing_util::rel_err;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(CTXLAB_SOURCE_DIR) + "/tests/data/hf/";

std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "ctxlab_hf_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(d);
  return d;
}

// A copy of a fixture directory with its config.json edited by `edit` (for the refusal tests).
std::string edited_fixture(const std::string& fixture, const std::string& name, const std::function<void(json&)>& edit) {
  const std::string d = fresh_dir(name);
  fs::create_directories(d);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(kFixtures + fixture + "/" + f, d + "/" + f);
  json j = json::parse(read_file(d + "/config.json", "config"));
  edit(j);
  std::ofstream(d + "/config.json") << j.dump(2);
  return d;
}

// Imports a fixture, runs it on the stored input_ids, and compares with transformers' logits.
double fixture_logits_error(const std::string& fixture) {
  LoadedModel lm = import_hf(kFixtures + fixture);
  SafetensorsFile ex = load_safetensors(kFixtures + fixture + "/expected.safetensors");
  lm.model->eval();
  NoGradGuard ng;
  Tensor logits = lm.model->forward(ex.at("input_ids")).data();
  return rel_err(logits, ex.at("logits"));
}

ModelConfig small_cfg(const std::string& norm, const json& posenc, bool tied = true) {
  ModelConfig c = testing_util::two_head_cfg(40, 16, 2, 24, 32, posenc);
  c.norm = norm;
  c.tie_embeddings = tied;
  c.dropout = 0.125;
  c.norm_eps = 1e-6;
  return c;
}

// A model of `c` with every parameter random (biases and norm weights too), so that a tensor
// landing in the wrong place cannot go unnoticed.
std::unique_ptr<nn::GPT> random_model(const ModelConfig& c, uint64_t seed) {
  auto m = std::make_unique<nn::GPT>(c);
  for (auto& [name, p] : m->named_parameters()) p.data().copy_from(randn(p.shape(), seed++, 0.3));
  return m;
}

// name -> parameter (nn::GPT::named_parameters is a list)
std::map<std::string, Variable> params_of(nn::GPT& m) {
  std::map<std::string, Variable> out;
  for (auto& [name, p] : m.named_parameters()) out[name] = p;
  return out;
}

}  // namespace

TEST(HfFixture, Gpt2ImportGivesTransformersLogits) {
  EXPECT_LT(fixture_logits_error("gpt2_tiny"), 1e-5);
  LoadedModel lm = import_hf(kFixtures + "gpt2_tiny");
  EXPECT_EQ(lm.model->cfg.posenc["type"], "learned");
  EXPECT_EQ(lm.model->cfg.norm, "layernorm");
  EXPECT_TRUE(lm.model->cfg.tie_embeddings);
  EXPECT_EQ(lm.model->cfg.ff_dim(), 128);  // n_inner null: 4 * n_embd
}

TEST(HfFixture, LlamaImportGivesTransformersLogits) {
  // grouped-query k/v heads, rope_parameters (transformers 5) with yarn, biases, untied lm_head
  EXPECT_LT(fixture_logits_error("llama_tiny"), 1e-5);
  LoadedModel lm = import_hf(kFixtures + "llama_tiny");
  EXPECT_EQ(lm.model->cfg.posenc,
            json::parse(R"({"type":"rope","base":50000.0,"scaling":{"type":"yarn","factor":2.0,"original_context":16}})"));
  EXPECT_EQ(lm.model->cfg.norm, "rmsnorm");
  EXPECT_FALSE(lm.model->cfg.tie_embeddings);
}

TEST(HfFixture, Gpt2WithoutTransformerPrefixAndMaskBuffers) {
  // openai-community/gpt2's own file: names without "transformer.", plus h.N.attn.bias buffers
  const std::string d = edited_fixture("gpt2_tiny", "noprefix", [](json&) {});
  SafetensorsFile f = load_safetensors(d + "/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const auto& n : f.names) ts.emplace_back(n.substr(std::strlen("transformer.")), f.at(n));
  ts.emplace_back("h.0.attn.bias", Tensor::full({1, 1, 32, 32}, 1.0));
  save_safetensors(d + "/model.safetensors", ts);
  LoadedModel a = import_hf(d), b = import_hf(kFixtures + "gpt2_tiny");
  for (auto& [name, p] : a.model->named_parameters())
    EXPECT_EQ(std::memcmp(p.data().host<float>(), params_of(*b.model).at(name).data().host<float>(),
                          p.data().nbytes()), 0) << name;
}

TEST(HfRoundTrip, ExportThenImportIsBitExact) {
  const json half = {{"type", "rope"}};
  const std::vector<ModelConfig> cfgs = {
      small_cfg("layernorm", {{"type", "learned"}}),
      small_cfg("layernorm", {{"type", "learned"}}, /*tied=*/false),
      small_cfg("rmsnorm", half),
      small_cfg("rmsnorm", json::parse(R"({"type":"rope","base":500000.0,"pairing":"interleaved",
                                           "scaling":{"type":"llama3","factor":8,"high_freq_factor":2}})"), false),
      small_cfg("rmsnorm", json::parse(R"({"type":"rope","scaling":{"type":"yarn","factor":4,"beta_fast":16,
                                           "original_context":16}})")),
      small_cfg("rmsnorm", json::parse(R"({"type":"rope","scaling":{"type":"pi","factor":2}})")),
      small_cfg("rmsnorm", json::parse(R"({"type":"rope","scaling":{"type":"dynamic-ntk","factor":2}})")),
  };
  for (size_t i = 0; i < cfgs.size(); ++i) {
    SCOPED_TRACE(cfgs[i].posenc.dump());
    auto m = random_model(cfgs[i], 100 * i);
    const std::string d = fresh_dir("rt" + std::to_string(i));
    export_hf(*m, nullptr, d, "test model");
    LoadedModel back = import_hf(d);
    EXPECT_EQ(config_to_json(back.model->cfg), config_to_json(cfgs[i]));
    auto ours = params_of(*m);
    auto theirs = params_of(*back.model);
    ASSERT_EQ(ours.size(), theirs.size());
    for (auto& [name, p] : ours) {
      const Tensor& t = theirs.at(name).data();
      ASSERT_EQ(shape_str(t.shape()), shape_str(p.shape())) << name;
      EXPECT_EQ(std::memcmp(t.host<float>(), p.data().host<float>(), t.nbytes()), 0) << name << " differs";
    }
  }
}

TEST(HfRoundTrip, InterleavedPairingIsPermutedToHalfSplit) {
  // transformers' Llama rotates pairs (k, k + d/2): the exported q_proj holds ctxlab's
  // interleaved rows (2k, 2k+1) of each head at (k, k + d/2); v_proj is not permuted.
  ModelConfig c = small_cfg("rmsnorm", {{"type", "rope"}, {"pairing", "interleaved"}});
  auto m = random_model(c, 7);
  const std::string d = fresh_dir("perm");
  export_hf(*m, nullptr, d, "test model");
  SafetensorsFile f = load_safetensors(d + "/model.safetensors");
  const Tensor& qkv = params_of(*m).at("blocks.0.attn.qkv.weight").data();
  const float* src = qkv.host<float>();
  const int64_t D = c.d_model, dh = c.head_dim();
  const float* q = f.at("model.layers.0.self_attn.q_proj.weight").host<float>();
  const float* v = f.at("model.layers.0.self_attn.v_proj.weight").host<float>();
  // head 1, k = 2: ctxlab rows dh + 4 and dh + 5 -> HF rows dh + 2 and dh + 2 + dh/2
  EXPECT_EQ(q[(dh + 2) * D + 3], src[(dh + 4) * D + 3]);
  EXPECT_EQ(q[(dh + 2 + dh / 2) * D + 3], src[(dh + 5) * D + 3]);
  EXPECT_EQ(v[(dh + 5) * D + 3], src[(2 * D + dh + 5) * D + 3]);
  const json cj = json::parse(read_file(d + "/config.json", "config"));
  EXPECT_EQ(cj["ctxlab"]["rope_pairing"], "interleaved");
}

TEST(HfExport, RefusesWhatDoesNotMapNamingTheField) {
  struct Case {
    ModelConfig c;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {small_cfg("layernorm", {{"type", "rope"}}), {"field 'norm'", "layernorm", "RMSNorm"}},
      {small_cfg("rmsnorm", {{"type", "learned"}}), {"field 'norm'", "rmsnorm", "GPT-2"}},
      {small_cfg("layernorm", {{"type", "alibi"}}), {"field 'posenc.type'", "alibi"}},
      {small_cfg("layernorm", {{"type", "learned"}, {"hierarchical", true}}), {"posenc.hierarchical"}},
      {small_cfg("rmsnorm", json::parse(R"({"type":"rope","scaling":{"type":"ntk","factor":2}})")),
       {"posenc.scaling.type", "ntk"}},
      {small_cfg("rmsnorm", json::parse(R"({"type":"rope","scaling":{"type":"dynamic-ntk","factor":2,
                                            "original_context":16}})")),
       {"posenc.scaling.original_context", "max_position_embeddings"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    nn::GPT m(cases[i].c);
    const std::string d = fresh_dir("refuse" + std::to_string(i));
    expect_error([&] { export_hf(m, nullptr, d, "model.safetensors"); }, {"model.safetensors"});
    for (const auto& n : cases[i].needles)
      expect_error([&] { export_hf(m, nullptr, d, "model.safetensors"); }, {n});
    EXPECT_FALSE(fs::exists(d)) << "nothing is written for a refused model";
  }
}

TEST(HfImport, RefusesWhatDoesNotMapNamingTheField) {
  auto with = [](const char* key, json v) { return [key, v](json& j) { j[key] = v; }; };
  expect_error([&] { import_hf(edited_fixture("llama_tiny", "swiglu", with("mlp_bias", false))); },
               {"config.json", "field 'mlp_bias'", "not gated", "SwiGLU"});
  expect_error([&] { import_hf(edited_fixture("llama_tiny", "silu", with("hidden_act", "silu"))); },
               {"field 'hidden_act'", "silu", "gelu_tanh"});
  expect_error([&] { import_hf(edited_fixture("gpt2_tiny", "relu", with("activation_function", "relu"))); },
               {"field 'activation_function'", "relu"});
  expect_error([&] { import_hf(edited_fixture("gpt2_tiny", "bert", with("model_type", "bert"))); },
               {"field 'model_type'", "bert", "gpt2", "llama"});
  expect_error([&] { import_hf(edited_fixture("llama_tiny", "ntk", [](json& j) {
                 j["rope_parameters"]["rope_type"] = "proportional";
               })); },
               {"rope_type", "proportional"});
  expect_error([&] { import_hf(edited_fixture("gpt2_tiny", "layers", with("n_layer", 3))); },
               {"model.safetensors", "transformer.h.2.ln_1.weight", "missing"});
  expect_error([&] { import_hf(edited_fixture("gpt2_tiny", "width", with("n_embd", 64))); },
               {"model.safetensors", "has shape", "expected"});
  // up_proj that is not the constant 1: the gated MLP is not ctxlab's
  const std::string d = edited_fixture("llama_tiny", "upproj", [](json&) {});
  SafetensorsFile f = load_safetensors(d + "/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const auto& n : f.names)
    ts.emplace_back(n, n == "model.layers.1.mlp.up_proj.bias" ? Tensor::full({48}, 0.5) : f.at(n));
  save_safetensors(d + "/model.safetensors", ts);
  expect_error([&] { import_hf(d); }, {"model.layers.1.mlp.up_proj.bias", "0.5", "not gated"});
  expect_error([&] { import_hf(fresh_dir("absent")); }, {"not a directory"});
}

TEST(HfTokenizer, BytesAndSentencePieceRoundTrip) {
  // bytes: tokenizer.json is the byte-level table (id = byte value) and reads back as bytes
  ModelConfig c = small_cfg("layernorm", {{"type", "learned"}});
  c.vocab_size = 256;
  auto m = random_model(c, 3);
  const std::string d = fresh_dir("tok_bytes");
  export_hf(*m, nullptr, d, "test model");
  const json tj = json::parse(read_file(d + "/tokenizer.json", "tokenizer"));
  EXPECT_EQ(tj["model"]["vocab"]["a"], 97);
  EXPECT_EQ(tj["model"]["vocab"]["\xc4\x8a"], 10);  // '\n' is U+010A in GPT-2's byte table
  EXPECT_EQ(tj["model"]["vocab"].size(), 256u);
  EXPECT_EQ(json::parse(read_file(d + "/tokenizer_config.json", "cfg"))["tokenizer_class"], "PreTrainedTokenizerFast");
  std::string note;
  LoadedModel back = import_hf(d, &note);
  ASSERT_TRUE(back.tokenizer);
  EXPECT_EQ(back.tokenizer->type(), "bytes");
  // another tokenizer.json (GPT-2's BPE, say) is not guessed at: none recorded, and a note says why
  std::ofstream(d + "/tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {"a": 0}}})";
  EXPECT_FALSE(import_hf(d, &note).tokenizer);
  EXPECT_NE(note.find("tokenizer.json"), std::string::npos) << note;

  // SentencePiece: tokenizer.model holds the model bytes and reads back as the same tokenizer
  const std::string text_path = fresh_dir("sp.txt");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox " + std::to_string(i) + " jumps over the lazy dog\n";
  std::ofstream(text_path) << text;
  SentencePieceTrainOptions o;
  o.data = text_path;
  o.vocab = 300;
  auto sp = std::make_shared<SentencePieceTokenizer>(train_sentencepiece(o), "sp");
  ModelConfig cs = small_cfg("rmsnorm", {{"type", "rope"}});
  cs.vocab_size = sp->vocab_size();
  auto ms = random_model(cs, 5);
  const std::string ds = fresh_dir("tok_sp");
  export_hf(*ms, sp.get(), ds, "test model");
  EXPECT_EQ(read_file(ds + "/tokenizer.model", "sp"), sp->model_bytes());
  EXPECT_FALSE(fs::exists(ds + "/tokenizer.json"));
  LoadedModel bs = import_hf(ds);
  ASSERT_TRUE(bs.tokenizer);
  EXPECT_EQ(bs.tokenizer->fingerprint(), sp->fingerprint());
}
