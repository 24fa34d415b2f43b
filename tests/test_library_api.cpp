// tests/test_library_api.cpp — the conveniences added for ctxlab as a library (docs/extending.md):
// gradcheck_params (finite differences over parameters living in a model, which are restored
// afterwards, and which catches a wrong backward), the plugin loader's argument handling and its
// one-line errors, duplicate encoding names and factories that return nullptr. The installed package, the example project and
// `ctxlab --plugin` end to end: tests/cli/library.cmake (library_install_example).
#include <gtest/gtest.h>

#include <ctxlab/ctxlab.h>

#include <cstring>

namespace {

using namespace ctx;

// y = w * x with a backward that is right, or off by a factor of 2
Variable scaled(const Variable& w, const Variable& x, bool wrong) {
  Tensor out = mul(w.detach(), x.detach()).data();
  return make_result(out, "scaled", {w, x}, [w, x, wrong](const Tensor& g) {
    if (w.requires_grad()) {
      Tensor gw = sum(mul(Variable(g), x.detach())).data();
      accumulate_grad(*w.impl(), reshape(Variable(gw), w.shape()).data().to(w.dtype()));
      if (wrong) accumulate_grad(*w.impl(), reshape(Variable(gw), w.shape()).data());
    }
  });
}

TEST(GradcheckParams, ChecksParametersInPlaceAndRestoresThem) {
  nn::Module m;
  Variable w = m.register_parameter("w", Tensor::full({1}, 0.7, DType::F64));
  Variable b = m.register_parameter("b", Tensor::full({3}, 0.2, DType::F64));
  Variable x(Tensor::from_vector(std::vector<double>{1.0, -2.0, 0.5}, {3}), false);
  const Tensor w_storage = w.data();
  auto loss = [&] { return sum(square(add(mul(w, x), b))); };
  GradcheckResult r = gradcheck_params(m.named_parameters(), loss);
  EXPECT_TRUE(r.pass) << r.summary();
  ASSERT_EQ(r.tensors.size(), 2u);
  EXPECT_EQ(r.tensors[0].name, "w");
  // restored: the same leaf, storage and value, no gradient
  EXPECT_EQ(w.op_name(), "leaf");
  EXPECT_EQ(w.data().host<double>(), w_storage.host<double>());
  EXPECT_EQ(w.data().at(0), 0.7);
  EXPECT_FALSE(w.grad().defined());
  // `check` holds the others constant
  GradcheckResult only_b = gradcheck_params(m.named_parameters(), loss, [](const std::string& n) { return n == "b"; });
  ASSERT_EQ(only_b.tensors.size(), 1u);
  EXPECT_EQ(only_b.tensors[0].name, "b");
}

TEST(GradcheckParams, CatchesAWrongBackward) {
  nn::Module m;
  Variable w = m.register_parameter("w", Tensor::full({1}, 0.7, DType::F64));
  Variable x(Tensor::from_vector(std::vector<double>{1.0, -2.0, 3.0}, {3}), false);
  EXPECT_TRUE(gradcheck_params(m.named_parameters(), [&] { return scaled(w, x, false); }).pass);
  GradcheckResult bad = gradcheck_params(m.named_parameters(), [&] { return scaled(w, x, true); });
  EXPECT_FALSE(bad.pass) << bad.summary();
  EXPECT_EQ(w.op_name(), "leaf");  // restored after a failure too
}

TEST(Plugin, TakesPluginArgumentsAnywhere) {
  std::vector<std::string> s = {"ctxlab", "--plugin", "a.so", "train", "--steps", "3", "--plugin=b.so", "--quiet"};
  std::vector<char*> argv;
  for (auto& a : s) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = (int)s.size();
  const std::vector<std::string> p = take_plugin_args(argc, argv.data(), 1);
  EXPECT_EQ(p, (std::vector<std::string>{"a.so", "b.so"}));
  ASSERT_EQ(argc, 5);
  EXPECT_STREQ(argv[1], "train");
  EXPECT_STREQ(argv[4], "--quiet");
  EXPECT_EQ(argv[5], nullptr);

  std::vector<std::string> t = {"ctxlab", "train", "--plugin"};
  std::vector<char*> av;
  for (auto& a : t) av.push_back(a.data());
  av.push_back(nullptr);
  int ac = 3;
  EXPECT_THROW(take_plugin_args(ac, av.data(), 1), Error);
}

TEST(Plugin, BadFilesAreOneLineErrorsNamingThem) {
  const std::string missing = ::testing::TempDir() + "no_such_plugin.so";
  try {
    load_plugin(missing);
    FAIL() << "loaded a missing file";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("--plugin " + missing + ": cannot load: ", 0), 0u) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // a file that is not a shared library
  const std::string text = ::testing::TempDir() + "not_a_plugin.so";
  FILE* f = std::fopen(text.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("not an ELF file\n", f);
  std::fclose(f);
  try {
    load_plugin(text);
    FAIL() << "loaded a text file";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--plugin " + text + ": cannot load: ", 0), 0u) << e.what();
  }
}

std::unique_ptr<PositionalEncoding> no_factory(const ModelConfig&, const nlohmann::json&, const std::string&) {
  return nullptr;
}

TEST(Plugin, ARepeatedNameKeepsTheFirstAndIsReported) {
  posenc_types();  // built-ins registered
  posenc_take_duplicates();
  PosencRegistrar again("alibi", no_factory);
  EXPECT_EQ(posenc_take_duplicates(), (std::vector<std::string>{"alibi"}));
  EXPECT_TRUE(posenc_take_duplicates().empty());
  ModelConfig cfg = preset_config("tiny");
  cfg.posenc = {{"type", "alibi"}};
  nn::GPT m(cfg);  // still the built-in (the null factory would crash here)
  EXPECT_EQ(m.pe->type(), "alibi");
}

// Every path that builds an encoding (a model, gradcheck, the library API; not only the CLI's
// plugin probe) refuses a factory that returns nullptr, naming the type, in one line.
TEST(Plugin, AFactoryReturningNullptrIsAnErrorWhereverTheEncodingIsMade) {
  static const PosencRegistrar null_type("test_null_factory", no_factory);
  ModelConfig cfg = preset_config("tiny");
  cfg.posenc = {{"type", "test_null_factory"}};
  for (int via_model = 0; via_model < 2; ++via_model) {
    try {
      if (via_model)
        nn::GPT m(cfg, DType::F32, "cfg.json");
      else
        (void)make_posenc(cfg, "cfg.json");
      FAIL() << "built an encoding from a null factory";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("cfg.json: the factory of posenc type 'test_null_factory' returned no encoding (nullptr)", 0),
                0u) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  try {
    posenc_probe({"test_null_factory"}, preset_config("tiny"), "--plugin x.so");
    FAIL() << "the probe accepted a null factory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'test_null_factory' returned no encoding"), std::string::npos) << e.what();
  }
}

}  // namespace
