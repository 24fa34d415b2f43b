// train/cli/study_spec.cpp — reading and checking a study file (see study_spec.h).
#include "train/cli/study_spec.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/error.h"
#include "train/io/fileio.h"

namespace ctx::cli {
namespace {

using json = nlohmann::ordered_json;

// Names become directory names: letters, digits, '-', '_', '.', not starting with '.'.
void check_name(const std::string& name, const std::string& where) {
  const bool ok = !name.empty() && name.size() <= 64 && name[0] != '.' &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                           c == '_' || c == '.';
                  });
  CTX_CHECK(ok, where, ": the name ", quoted_str(name), " must be 1-64 letters, digits, '-', '_' or '.' "
            "(not starting with '.'): it names a directory, e.g. \"rope_yarn\"");
}

const std::set<std::string>& eval_reserved() {
  static const std::set<std::string> r = {"checkpoint", "data", "lengths", "json", "csv", "task", "depths", "trials",
                                          "seed", "per-position", "per-position-csv", "rope-scaling", "tokenizer",
                                          "help"};
  return r;
}

const json& field(const json& j, const char* key, const std::string& where) {
  CTX_CHECK(j.contains(key), where, ": missing \"", key, "\"");
  return j.at(key);
}

int64_t positive_int(const json& v, const std::string& where) {
  CTX_CHECK(v.is_number_integer() && v.get<int64_t>() >= 1, where, ": expected an integer >= 1, got ", v.dump());
  return v.get<int64_t>();
}

// {"option": value} of a child verb's options; `reserved` are set by the study itself.
OptionArgs option_args(const json& j, const std::string& where, const std::set<std::string>& reserved) {
  CTX_CHECK(j.is_object(), where, ": expected an object of options, e.g. {\"lr\": 0.003, \"warmup\": 10}, got ",
            brief(j.dump()));
  OptionArgs out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const std::string w = where + "." + k;
    const bool name_ok = !k.empty() && k[0] != '-' && std::all_of(k.begin(), k.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    });
    CTX_CHECK(name_ok, w, ": an option name is lower-case letters, digits and '-', without the leading --");
    CTX_CHECK(!reserved.count(k), w, ": set by the study itself (its own field or the grid); remove it");
    const json& v = it.value();
    if (v.is_boolean()) {
      if (v.get<bool>()) out.emplace_back(k, "");
    } else if (v.is_number()) {
      out.emplace_back(k, v.dump());
    } else {
      CTX_CHECK(v.is_string(), w, ": expected a number, a string or a boolean, got ", brief(v.dump()));
      out.emplace_back(k, v.get<std::string>());
    }
  }
  return out;
}

template <class F>
void each_key(const json& j, const std::string& where, F f) {
  CTX_CHECK(j.is_object() && !j.empty(), where, ": expected a non-empty object of NAME: VALUE");
  for (auto it = j.begin(); it != j.end(); ++it) {
    check_name(it.key(), where);
    f(it.key(), it.value(), where + "." + it.key());
  }
}

// {"type": "bpe" | "unigram", "vocab": N}: the study's "tokenizer", or one of its "tokenizers".
void parse_tokenizer(const json& j, const std::string& where, std::string& type, int64_t& vocab) {
  CTX_CHECK(j.is_object(), where, ": expected {\"type\": \"bpe\" | \"unigram\", \"vocab\": N}");
  for (auto it = j.begin(); it != j.end(); ++it)
    CTX_CHECK(it.key() == "type" || it.key() == "vocab", where, ": unknown key \"", it.key(), "\" (type, vocab)");
  const json& t = field(j, "type", where);
  CTX_CHECK(t.is_string() && (t == "bpe" || t == "unigram"), where, ".type: expected \"bpe\" or \"unigram\", got ",
            t.dump());
  type = t.get<std::string>();
  vocab = positive_int(field(j, "vocab", where), where + ".vocab");
}

// An encoding's "tokenizer": the name of one of the study's "tokenizers".
std::string encoding_tokenizer(const json& v, const std::string& where, const StudySpec& s) {
  std::string names;
  for (const auto& t : s.tokenizers) names += (names.empty() ? "" : ", ") + t.name;
  CTX_CHECK(!s.tokenizers.empty(), where, ": names a tokenizer, and the study has no \"tokenizers\"; add one, "
            "e.g. \"tokenizers\": {\"bpe4k\": {\"type\": \"bpe\", \"vocab\": 4000}}");
  CTX_CHECK(v.is_string(), where, ": expected the name of one of the study's \"tokenizers\" (", names, "), got ",
            brief(v.dump()));
  const std::string n = v.get<std::string>();
  CTX_CHECK(std::any_of(s.tokenizers.begin(), s.tokenizers.end(), [&](const StudySpec::Tokenizer& t) { return t.name == n; }),
            where, ": ", v.dump(), " is not one of the study's \"tokenizers\" (", names, ")");
  return n;
}

void parse_train(const json& j, const std::string& where, StudySpec& s) {
  CTX_CHECK(j.is_object(), where, ": expected {\"preset\": ..., \"steps\": N, \"args\": {...}}");
  for (auto it = j.begin(); it != j.end(); ++it)
    CTX_CHECK(it.key() == "preset" || it.key() == "context" || it.key() == "steps" || it.key() == "set" ||
              it.key() == "args", where, ": unknown key \"", it.key(), "\" (preset, context, steps, set, args)");
  if (j.contains("set")) {  // model config fields over the preset's (MODEL_SPEC §2), e.g. {"d_model": 128}
    const json& m = j["set"];
    const std::string w = where + ".set";
    CTX_CHECK(m.is_object() && !m.empty(), w, ": expected an object of config fields, e.g. {\"d_model\": 128, "
              "\"n_layers\": 4}");
    for (auto it = m.begin(); it != m.end(); ++it) {
      const std::string& k = it.key();
      CTX_CHECK(!k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
                  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
                }), w, ".", k, ": a config field is lower-case letters, digits and '_' (MODEL_SPEC §2)");
      CTX_CHECK(k != "context" && k != "posenc", w, ".", k, ": set by the study itself (train.context, "
                "\"encodings\"); remove it");
      CTX_CHECK(it.value().is_primitive() && !it.value().is_null(), w, ".", k,
                ": expected a number, a string or a boolean, got ", brief(it.value().dump()));
      s.model_set.emplace_back(k, it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
    }
  }
  if (j.contains("preset")) {
    CTX_CHECK(j["preset"].is_string(), where, ".preset: expected a preset name, e.g. \"tiny\"");
    s.preset = j["preset"].get<std::string>();
  }
  if (j.contains("context")) s.context = positive_int(j["context"], where + ".context");
  s.steps = positive_int(field(j, "steps", where), where + ".steps");
  if (j.contains("args"))
    s.train_args = option_args(j["args"], where + ".args",
                               {"data", "val-fraction", "out", "seed", "posenc", "preset", "config", "context",
                                "set", "steps", "tokenizer", "resume", "force", "quiet", "no-plot", "stop-after"});
}

void parse_tasks(const json& j, const std::string& where, StudySpec& s) {
  each_key(j, where, [&](const std::string& name, const json& t, const std::string& w) {
    CTX_CHECK(name == "passkey" || name == "kv-recall" || name == "copy", w,
              ": unknown task (passkey | kv-recall | copy)");
    CTX_CHECK(t.is_object(), w, ": expected {\"depths\": [0, 0.5, 1], \"trials\": N, \"args\": {...}}");
    StudyTask task;
    task.name = name;
    for (auto it = t.begin(); it != t.end(); ++it)
      CTX_CHECK(it.key() == "depths" || it.key() == "trials" || it.key() == "args", w, ": unknown key \"",
                it.key(), "\" (depths, trials, args)");
    const json& d = field(t, "depths", w);
    CTX_CHECK(d.is_array() && !d.empty(), w, ".depths: expected a non-empty array of numbers in [0, 1]");
    for (const json& x : d) {
      CTX_CHECK(x.is_number() && x.get<double>() >= 0 && x.get<double>() <= 1, w,
                ".depths: expected numbers in [0, 1], got ", x.dump());
      task.depths += (task.depths.empty() ? "" : ",") + x.dump();
    }
    if (t.contains("trials")) task.trials = positive_int(t["trials"], w + ".trials");
    if (t.contains("args")) {
      task.args = option_args(t["args"], w + ".args", {});
      for (const auto& a : task.args)
        CTX_CHECK(a.first == "task-digits" || a.first == "task-pairs" || a.first == "task-span", w, ".args.",
                  a.first, ": a task takes task-digits, task-pairs or task-span");
    }
    s.tasks.push_back(task);
  });
}

// "length": an integer, or "kL" (k times train.context), e.g. "4L".
void parse_ft_length(const json& v, const std::string& w, const StudySpec& s, StudySpec::Finetune& f) {
  if (v.is_string()) {
    const std::string t = v.get<std::string>();
    const bool ok = t.size() >= 2 && t.size() <= 6 && t.back() == 'L' &&
                    std::all_of(t.begin(), t.end() - 1, [](char c) { return c >= '0' && c <= '9'; }) && t[0] != '0';
    CTX_CHECK(ok, w, ": expected an integer >= 1 or \"kL\" (k times train.context, e.g. \"4L\"), got ", v.dump());
    CTX_CHECK(s.context > 0, w, ": ", v.dump(), " needs train.context (the L it multiplies)");
    f.length_mult = std::stoll(t.substr(0, t.size() - 1));
    f.length = f.length_mult * s.context;
  } else {
    f.length = positive_int(v, w);
  }
}

// "scaling": a type name or {"type": ..., "factor": N | "len/L", ...} as finetune --rope-scaling takes it.
void parse_ft_scaling(const json& sc, const std::string& w, const StudySpec& s, StudySpec::Finetune& f) {
  CTX_CHECK((sc.is_string() && !sc.get<std::string>().empty()) || (sc.is_object() && sc.contains("type") &&
            sc["type"].is_string()), w, ": expected a RoPE scaling as finetune --rope-scaling takes it, e.g. \"pi\" "
            "or {\"type\": \"yarn\", \"factor\": \"len/L\"}, got ", brief(sc.dump()));
  f.scaling_type = sc.is_string() ? sc.get<std::string>() : sc["type"].get<std::string>();
  json v = sc.is_string() ? json{{"type", f.scaling_type}} : sc;
  if (v.contains("factor") && v["factor"].is_string()) {
    CTX_CHECK(v["factor"] == "len/L", w, ".factor: a number, or \"len/L\" (the fine-tuning length / train.context); got ",
              v["factor"].dump());
    v.erase("factor");
  } else if (v.contains("factor")) {
    CTX_CHECK(v["factor"].is_number() && v["factor"].get<double>() > 0, w, ".factor: expected a number > 0 or "
              "\"len/L\", got ", v["factor"].dump());
    f.factor = v["factor"].get<double>();
    v.erase("factor");  // given as finetune --factor
  }
  if (f.factor == 0) {
    static const std::set<std::string> by_length = {"pi", "ntk", "dynamic-ntk", "yarn"};
    f.factor_default = by_length.count(f.scaling_type) > 0;  // finetune's default: length / L
    CTX_CHECK(!f.factor_default || s.context > 0, w, ": the factor \"len/L\" (the default of ", f.scaling_type,
              ") needs train.context (the L it divides by), or give \"factor\": N");
    if (f.factor_default) f.factor = (double)f.length / (double)s.context;
  }
  f.scaling = v.size() == 1 ? f.scaling_type : v.dump();
}

// The "encodings" list of a variant or a fine-tune: names of the study's encodings.
std::vector<std::string> encoding_list(const json& e, const std::string& w, const StudySpec& s) {
  CTX_CHECK(e.is_array() && !e.empty(), w, ": expected a non-empty array of encoding names, e.g. [\"rope\"]");
  std::vector<std::string> out;
  for (const json& x : e) {
    const bool known = x.is_string() && std::any_of(s.encodings.begin(), s.encodings.end(),
                                                    [&](const StudySpec::Encoding& en) { return en.name == x.get<std::string>(); });
    CTX_CHECK(known, w, ": ", x.dump(), " is not one of the study's \"encodings\"");
    out.push_back(x.get<std::string>());
  }
  return out;
}

// The encodings a RoPE scaling is given to (`names`, from `w`) must all be rotary.
void check_rotary(const std::vector<std::string>& names, const std::string& w, const StudySpec& s, const char* what) {
  for (const std::string& n : names)
    CTX_CHECK(std::any_of(s.encodings.begin(), s.encodings.end(),
                          [&](const StudySpec::Encoding& en) { return en.name == n && is_rotary(en.posenc); }),
              w, ": ", what, " applies to rotary (rope) encodings only; ", quoted_str(n), " is not one");
}

// A cell ENC+NAME must be one thing: a scaling, a variant or a fine-tune.
void check_unused(const std::string& name, const std::string& w, const StudySpec& s) {
  for (const auto& x : s.scalings)
    CTX_CHECK(x.name != name, w, ": the name is also a scaling's (a cell ENC+NAME would be both); rename one");
  for (const auto& x : s.variants)
    CTX_CHECK(x.name != name, w, ": the name is also a variant's (a cell ENC+NAME would be both); rename one");
}

void parse_variants(const json& j, const std::string& where, StudySpec& s) {
  each_key(j, where, [&](const std::string& name, const json& v, const std::string& w) {
    CTX_CHECK(v.is_object(), w, ": expected {\"eval\": {eval options}, \"encodings\": [names]}, e.g. "
              "{\"eval\": {\"window\": 128}, \"encodings\": [\"rope\"]}, got ", brief(v.dump()));
    for (auto it = v.begin(); it != v.end(); ++it)
      CTX_CHECK(it.key() == "eval" || it.key() == "encodings", w, ": unknown key \"", it.key(), "\" (eval, encodings)");
    check_unused(name, w, s);
    StudySpec::Variant x;
    x.name = name;
    x.eval_args = option_args(field(v, "eval", w), w + ".eval", eval_reserved());
    CTX_CHECK(!x.eval_args.empty(), w, ".eval: expected at least one eval option, e.g. {\"segmented\": true}");
    x.encodings = encoding_list(field(v, "encodings", w), w + ".encodings", s);
    s.variants.push_back(x);
  });
}

void parse_finetunes(const json& j, const std::string& where, StudySpec& s) {
  each_key(j, where, [&](const std::string& name, const json& v, const std::string& w) {
    CTX_CHECK(v.is_object(), w, ": expected {\"scaling\": {\"type\": \"pi\", \"factor\": \"len/L\"}, "
              "\"length\": \"4L\", \"steps\": N, \"args\": {finetune options}}, got ", brief(v.dump()));
    for (auto it = v.begin(); it != v.end(); ++it)
      CTX_CHECK(it.key() == "scaling" || it.key() == "length" || it.key() == "steps" || it.key() == "args" ||
                it.key() == "encodings", w, ": unknown key \"", it.key(), "\" (scaling, length, steps, args, encodings)");
    check_unused(name, w, s);
    StudySpec::Finetune f;
    f.name = name;
    parse_ft_length(field(v, "length", w), w + ".length", s, f);
    f.steps = positive_int(field(v, "steps", w), w + ".steps");
    if (v.contains("scaling")) parse_ft_scaling(v["scaling"], w + ".scaling", s, f);
    if (v.contains("args"))
      f.args = option_args(v["args"], w + ".args",
                           {"checkpoint", "context", "rope-scaling", "factor", "original-context", "data", "val-data",
                            "val-fraction", "out", "seed", "steps", "tokenizer", "resume", "force", "quiet", "no-plot",
                            "help"});
    if (v.contains("encodings")) f.encodings = encoding_list(v["encodings"], w + ".encodings", s);
    if (!f.scaling.empty()) check_rotary(f.encodings, w + ".encodings", s, "a fine-tune with a \"scaling\"");
    CTX_CHECK(std::any_of(s.encodings.begin(), s.encodings.end(),
                          [&](const StudySpec::Encoding& en) { return finetunes_encoding(f, en); }),
              w, ": applies to no encoding (by default it fine-tunes the rotary ones, and the study has none); "
              "name them in \"encodings\", e.g. [\"alibi\"]");
    s.finetunes.push_back(f);
  });
}

}  // namespace

bool scales_encoding(const StudySpec::Scaling& sc, const StudySpec::Encoding& e) {
  if (sc.encodings.empty()) return is_rotary(e.posenc);
  return std::find(sc.encodings.begin(), sc.encodings.end(), e.name) != sc.encodings.end();
}

bool finetunes_encoding(const StudySpec::Finetune& f, const StudySpec::Encoding& e) {
  if (f.encodings.empty()) return is_rotary(e.posenc);
  return std::find(f.encodings.begin(), f.encodings.end(), e.name) != f.encodings.end();
}

std::string finetune_label(const std::string& enc, const StudySpec::Finetune& f) {
  std::string l = enc;
  if (!f.scaling_type.empty()) {
    l += " + " + f.scaling_type;
    if (f.factor > 0) {
      char b[32];
      std::snprintf(b, sizeof b, "%g", f.factor);
      l += str(" s=", b);
    }
  }
  return l + str(" ft ", f.steps, "@", f.length_mult > 0 ? str(f.length_mult, "L") : std::to_string(f.length));
}

std::string study_tokenizer_path(const StudySpec& s, const StudySpec::Encoding& e, const std::string& out) {
  if (!e.tokenizer.empty()) return out + "/tokenizers/" + e.tokenizer + ".model";
  return s.tokenizer_type.empty() ? std::string() : out + "/tokenizer.model";
}

bool is_rotary(const nlohmann::json& posenc) {
  const std::string t = posenc.is_string() ? posenc.get<std::string>() : posenc.value("type", std::string());
  return t == "rope";
}

StudySpec parse_study(const json& j, const std::string& where) {
  CTX_CHECK(j.is_object(), where, ": a study file is one JSON object (docs/evaluation.md, \"ctxlab study\")");
  static const std::set<std::string> keys = {"data", "val_fraction", "tokenizer", "tokenizers", "train", "encodings", "scalings",
                                             "variants", "finetunes", "seeds", "lengths", "tasks", "per_position", "eval"};
  for (auto it = j.begin(); it != j.end(); ++it)
    CTX_CHECK(keys.count(it.key()), where, ": unknown key \"", it.key(),
              "\" (data, val_fraction, tokenizer, tokenizers, train, encodings, scalings, variants, finetunes, seeds, lengths, tasks, "
              "per_position, eval)");
  StudySpec s;
  if (j.contains("data")) {
    CTX_CHECK(j["data"].is_string() && !j["data"].get<std::string>().empty(), where, ".data: expected a file path");
    s.data = j["data"].get<std::string>();
  }
  if (j.contains("val_fraction")) {
    const json& v = j["val_fraction"];
    CTX_CHECK(v.is_number() && v.get<double>() > 0 && v.get<double>() < 1, where,
              ".val_fraction: expected a number in (0, 1), e.g. 0.1, got ", v.dump());
    s.val_fraction = v.get<double>();
  }
  if (j.contains("tokenizer")) parse_tokenizer(j["tokenizer"], where + ".tokenizer", s.tokenizer_type, s.tokenizer_vocab);
  if (j.contains("tokenizers"))
    each_key(j["tokenizers"], where + ".tokenizers", [&](const std::string& n, const json& t, const std::string& w) {
      StudySpec::Tokenizer x;
      x.name = n;
      parse_tokenizer(t, w, x.type, x.vocab);
      s.tokenizers.push_back(x);
    });
  parse_train(field(j, "train", where), where + ".train", s);
  each_key(field(j, "encodings", where), where + ".encodings", [&](const std::string& n, const json& v, const std::string& w) {
    // "rope", {"type": "rope"}, or {"posenc": <either>, "eval": {options of eval for this one}}
    const bool wrapped = v.is_object() && v.contains("posenc");
    const json& pe = wrapped ? v["posenc"] : v;
    CTX_CHECK(pe.is_object() || (pe.is_string() && !pe.get<std::string>().empty()), w,
              ": expected a posenc JSON object or a type name, e.g. {\"type\": \"rope\"} or \"alibi\", or "
              "{\"posenc\": ..., \"eval\": {\"hierarchical\": true}, \"tokenizer\": NAME}");
    StudySpec::Encoding e{n, nlohmann::json::parse(pe.dump()), {}, {}};
    if (wrapped) {
      for (auto it = v.begin(); it != v.end(); ++it)
        CTX_CHECK(it.key() == "posenc" || it.key() == "eval" || it.key() == "tokenizer", w, ": unknown key \"",
                  it.key(), "\" (posenc, eval, tokenizer)");
      if (v.contains("eval")) e.eval_args = option_args(v["eval"], w + ".eval", eval_reserved());
      if (v.contains("tokenizer")) e.tokenizer = encoding_tokenizer(v["tokenizer"], w + ".tokenizer", s);
    }
    s.encodings.push_back(e);
  });
  for (const auto& t : s.tokenizers)
    CTX_CHECK(std::any_of(s.encodings.begin(), s.encodings.end(),
                          [&](const StudySpec::Encoding& e) { return e.tokenizer == t.name; }),
              where, ".tokenizers.", t.name, ": no encoding uses it; name it in an encoding, e.g. \"encodings\": "
              "{\"", t.name, "_rope\": {\"posenc\": \"rope\", \"tokenizer\": \"", t.name, "\"}}");
  if (j.contains("scalings"))
    each_key(j["scalings"], where + ".scalings", [&](const std::string& n, const json& sc, const std::string& w) {
      CTX_CHECK(sc.is_object() || (sc.is_string() && !sc.get<std::string>().empty()), w,
                ": expected a RoPE scaling as eval --rope-scaling takes it, e.g. \"yarn\" or {\"type\": \"pi\", \"factor\": 4}");
      // the study's own keys ("factor": "len/L", "encodings") are taken out of what eval is given
      StudySpec::Scaling x{n, "", false, {}};
      json v = sc;
      if (sc.is_object() && sc.contains("factor") && sc["factor"].is_string()) {
        CTX_CHECK(sc["factor"] == "len/L", w, ".factor: a number, or \"len/L\" (at each length, max(1, length / L)); got ",
                  sc["factor"].dump());
        CTX_CHECK(s.context > 0, w, ".factor \"len/L\" needs train.context (the L the factor divides by)");
        v.erase("factor");
        x.per_length = true;
      }
      if (sc.is_object() && sc.contains("encodings")) {  // e.g. not the randomized rope (POSENC_SPEC §7.3)
        x.encodings = encoding_list(sc["encodings"], w + ".encodings", s);
        check_rotary(x.encodings, w + ".encodings", s, "a scaling");
        v.erase("encodings");
      }
      x.value = v.is_string() ? v.get<std::string>() : v.dump();
      s.scalings.push_back(x);
    });
  if (j.contains("variants")) parse_variants(j["variants"], where + ".variants", s);
  if (j.contains("finetunes")) parse_finetunes(j["finetunes"], where + ".finetunes", s);
  const json& seeds = field(j, "seeds", where);
  CTX_CHECK(seeds.is_array() && !seeds.empty(), where, ".seeds: expected a non-empty array of integers >= 0, e.g. [1, 2, 3]");
  for (const json& x : seeds) {
    CTX_CHECK(x.is_number_unsigned(), where, ".seeds: expected integers >= 0, got ", x.dump());
    const uint64_t v = x.get<uint64_t>();
    CTX_CHECK(std::find(s.seeds.begin(), s.seeds.end(), v) == s.seeds.end(), where, ".seeds: seed ", v, " twice");
    s.seeds.push_back(v);
  }
  const json& lengths = field(j, "lengths", where);
  CTX_CHECK(lengths.is_array() && !lengths.empty(), where, ".lengths: expected a non-empty array, e.g. [64, 128, 256]");
  for (const json& x : lengths) s.lengths.push_back(positive_int(x, where + ".lengths"));
  if (j.contains("tasks")) parse_tasks(j["tasks"], where + ".tasks", s);
  if (j.contains("per_position")) {
    CTX_CHECK(j["per_position"].is_boolean(), where, ".per_position: expected true or false");
    s.per_position = j["per_position"].get<bool>();
  }
  if (j.contains("eval"))
    s.eval_args = option_args(j["eval"], where + ".eval", eval_reserved());
  return s;
}

std::vector<StudyCell> study_cells(const StudySpec& s) {
  std::vector<StudyCell> c;
  for (const auto& e : s.encodings) {
    c.push_back({e.name, &e, nullptr, nullptr, nullptr, e.name});
    for (const auto& sc : s.scalings)
      if (scales_encoding(sc, e))
        c.push_back({cell_name(e.name, sc.name), &e, &sc, nullptr, nullptr, cell_name(e.name, sc.name)});
    for (const auto& v : s.variants)
      if (std::find(v.encodings.begin(), v.encodings.end(), e.name) != v.encodings.end())
        c.push_back({cell_name(e.name, v.name), &e, nullptr, nullptr, &v, cell_name(e.name, v.name)});
    for (const auto& f : s.finetunes)
      if (finetunes_encoding(f, e))
        c.push_back({cell_name(e.name, f.name), &e, nullptr, &f, nullptr, finetune_label(e.name, f)});
  }
  return c;
}

std::vector<EvalSlice> eval_slices(const StudySpec& s, const StudyCell& c) {
  if (!c.scaling || !c.scaling->per_length) return {{s.lengths, 0, ""}};
  std::vector<EvalSlice> v;
  for (int64_t L : s.lengths)
    v.push_back({{L}, std::max(1.0, (double)L / (double)s.context), str(".len", L)});
  return v;
}

StudySpec read_study(const std::string& path) {
  const std::string text = read_file(path, "study file");
  return parse_study(parse_json_strict<nlohmann::ordered_json>(text.data(), text.data() + text.size(), path), path);
}

}  // namespace ctx::cli
