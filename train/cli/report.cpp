// train/cli/report.cpp — `ctxlab report RUN_DIR... --out report.html` (see report.h).
#include "train/run_dir.h"  // check_output_file
#include "train/cli/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/cli/cli_common.h"
#include "train/cli/html_page.h"
#include "train/cli/study_report.h"
#include "train/io/fileio.h"
#include "train/io/safetensors.h"

namespace ctx {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// One curve: (x, y) points and its label.
struct Series {
  std::string label;
  std::vector<std::pair<double, double>> pts;
};

struct Run {
  std::string dir, name;
  Series train_loss, val_loss, val_bpb, lr, tok_s;
  std::vector<Series> ppl, bpb;  // one per eval file
  std::map<std::string, std::string> settings;  // flattened config / train options / tokenizer
  int64_t step = -1;
};

// The __metadata__ of a safetensors file, reading its header only (checkpoints can be large).
std::map<std::string, std::string> safetensors_metadata(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  CTX_CHECK(f, "report: cannot open ", path);
  unsigned char len8[8];
  CTX_CHECK(f.read((char*)len8, 8), "report: ", path, ": shorter than the 8-byte safetensors header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len8[i];
  CTX_CHECK(n <= kSafetensorsMaxHeader, "report: ", path, ": header length ", n, " is absurd; not a safetensors file?");
  std::string h((size_t)n, '\0');
  CTX_CHECK(f.read(h.data(), (std::streamsize)n), "report: ", path, ": file ended inside the header");
  json j;
  try {
    j = json::parse(h);
  } catch (const std::exception& e) {
    throw Error(str("report: ", path, ": header is not valid JSON: ", e.what()));
  }
  std::map<std::string, std::string> m;
  if (j.is_object() && j.contains("__metadata__") && j["__metadata__"].is_object())
    for (auto& kv : j["__metadata__"].items())
      if (kv.value().is_string()) m[kv.key()] = kv.value().get<std::string>();
  return m;
}

// {"a": {"b": 1}} -> {"prefix.a.b": "1"}
void flatten(const json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto& kv : j.items()) flatten(kv.value(), prefix.empty() ? kv.key() : prefix + "." + kv.key(), out);
  } else {
    out[prefix] = j.is_string() ? j.get<std::string>() : j.dump();
  }
}

double number(const json& v, const std::string& where, const char* key) {
  CTX_CHECK(v.contains(key) && v[key].is_number(), where, ": \"", key, "\" missing or not a number");
  return v[key].get<double>();
}

void read_metrics_jsonl(Run& r, const std::string& path) {
  std::ifstream in(path);
  std::string line;
  int64_t ln = 0;
  while (std::getline(in, line)) {
    ++ln;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = str(path, ":", ln);
    json j;
    try {
      j = json::parse(line);
    } catch (const std::exception&) {
      // A run killed mid-write leaves a cut last line; anything else is a damaged file.
      if (in.peek() == EOF) break;
      throw Error(str("report: ", where, ": not a JSON object (", brief(line), ")"));
    }
    CTX_CHECK(j.is_object(), "report: ", where, ": not a JSON object (", brief(line), ")");
    const double step = number(j, "report: " + where, "step");
    if (j.contains("val_loss")) {
      r.val_loss.pts.emplace_back(step, number(j, "report: " + where, "val_loss"));
      if (j.contains("val_bpb")) r.val_bpb.pts.emplace_back(step, number(j, "report: " + where, "val_bpb"));
    } else if (j.contains("loss")) {
      r.train_loss.pts.emplace_back(step, number(j, "report: " + where, "loss"));
      if (j.contains("lr")) r.lr.pts.emplace_back(step, number(j, "report: " + where, "lr"));
      if (j.contains("tok_s")) r.tok_s.pts.emplace_back(step, number(j, "report: " + where, "tok_s"));
    }
  }
}

// A CSV with a header row: column name -> values per row (numbers; "" for missing).
std::vector<std::map<std::string, double>> read_csv(const std::string& path) {
  std::ifstream in(path);
  CTX_CHECK(in, "report: cannot open ", path);
  std::string line;
  std::vector<std::string> cols;
  std::vector<std::map<std::string, double>> rows;
  auto split = [](const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    std::string c;
    while (std::getline(ss, c, ',')) v.push_back(c);
    return v;
  };
  int64_t ln = 0;
  while (std::getline(in, line)) {
    ++ln;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    auto v = split(line);
    if (cols.empty()) {
      cols = v;
      continue;
    }
    std::map<std::string, double> row;
    for (size_t i = 0; i < v.size() && i < cols.size(); ++i) {
      char* end = nullptr;
      const double x = std::strtod(v[i].c_str(), &end);
      CTX_CHECK(end && *end == '\0' && !v[i].empty(), "report: ", path, ":", ln, ": column ", cols[i], " is ",
                quoted_str(v[i]), ", expected a number");
      row[cols[i]] = x;
    }
    rows.push_back(row);
  }
  return rows;
}

void read_train_csvs(Run& r) {
  if (fs::exists(r.dir + "/train.csv"))
    for (auto& row : read_csv(r.dir + "/train.csv")) {
      if (!row.count("step") || !row.count("loss")) continue;
      r.train_loss.pts.emplace_back(row["step"], row["loss"]);
      if (row.count("lr")) r.lr.pts.emplace_back(row["step"], row["lr"]);
      if (row.count("tok_s")) r.tok_s.pts.emplace_back(row["step"], row["tok_s"]);
    }
  if (fs::exists(r.dir + "/val.csv"))
    for (auto& row : read_csv(r.dir + "/val.csv"))
      if (row.count("step") && row.count("val_loss")) r.val_loss.pts.emplace_back(row["step"], row["val_loss"]);
}

// eval*.json (ctxlab eval --json) and eval*.csv (--csv): perplexity and bits per byte per length.
void read_evals(Run& r) {
  std::vector<fs::path> files;
  for (auto& e : fs::directory_iterator(r.dir)) {
    const std::string fn = e.path().filename().string(), ext = e.path().extension().string();
    if (e.is_regular_file() && fn.rfind("eval", 0) == 0 && (ext == ".json" || ext == ".csv")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (auto& p : files) {
    const std::string stem = p.stem().string();
    const std::string label = stem == "eval" ? r.name : r.name + " " + stem.substr(4 + (stem.size() > 4 && (stem[4] == '_' || stem[4] == '-')));
    Series ppl{label, {}}, bpb{label, {}};
    if (p.extension() == ".json") {
      json j;
      try {
        j = json::parse(read_file(p.string(), "eval results"));
      } catch (const nlohmann::json::exception& e) {
        throw Error(str("report: ", p.string(), ": not valid JSON: ", e.what()));
      }
      CTX_CHECK(j.is_object() && j.contains("results") && j["results"].is_array(), "report: ", p.string(),
                ": expected the output of `ctxlab eval --json` (an object with a \"results\" array)");
      for (auto& e : j["results"]) {
        const double len = number(e, "report: " + p.string(), "length");
        ppl.pts.emplace_back(len, number(e, "report: " + p.string(), "ppl"));
        if (e.contains("bits_per_byte")) bpb.pts.emplace_back(len, number(e, "report: " + p.string(), "bits_per_byte"));
      }
    } else {
      for (auto& row : read_csv(p.string())) {
        CTX_CHECK(row.count("length") && row.count("ppl"), "report: ", p.string(),
                  ": expected the output of `ctxlab eval --csv` (columns length, ..., ppl)");
        ppl.pts.emplace_back(row["length"], row["ppl"]);
        if (row.count("bits_per_byte")) bpb.pts.emplace_back(row["length"], row["bits_per_byte"]);
      }
    }
    std::sort(ppl.pts.begin(), ppl.pts.end());
    std::sort(bpb.pts.begin(), bpb.pts.end());
    if (!ppl.pts.empty()) r.ppl.push_back(ppl);
    if (!bpb.pts.empty()) r.bpb.push_back(bpb);
  }
}

Run read_run(const std::string& dir) {
  CTX_CHECK(fs::is_directory(dir), "report: ", dir, " is not a directory (expected a run directory written by "
            "ctxlab train / finetune)");
  Run r;
  r.dir = dir;
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  r.name = fs::path(d).filename().string();
  if (r.name.empty() || r.name == ".") r.name = fs::absolute(d).lexically_normal().filename().string();
  const bool has_jsonl = fs::exists(dir + "/metrics.jsonl");
  if (has_jsonl) read_metrics_jsonl(r, dir + "/metrics.jsonl");
  else read_train_csvs(r);
  const std::string ck = dir + "/model.safetensors";
  if (fs::exists(ck)) {
    auto meta = safetensors_metadata(ck);
    auto put = [&](const char* key, const std::string& prefix) {
      auto it = meta.find(key);
      if (it == meta.end()) return;
      try {
        flatten(json::parse(it->second), prefix, r.settings);
      } catch (const json::exception& e) {
        throw Error(str("report: ", ck, ": __metadata__.", key, " is not valid JSON: ", e.what()));
      }
    };
    put("config", "config");
    put("train_options", "train");
    put("tokenizer", "tokenizer");
    if (!meta.count("tokenizer") && meta.count("config")) r.settings["tokenizer.type"] = "bytes";
    r.settings.erase("train.out");  // the directory itself: always differs, shown in the run table
    if (meta.count("step")) r.step = std::atoll(meta["step"].c_str());
  }
  read_evals(r);
  CTX_CHECK(!r.train_loss.pts.empty() || !r.val_loss.pts.empty() || !r.ppl.empty() || fs::exists(ck), "report: ",
            dir, ": not a run directory (no metrics.jsonl, train.csv, val.csv, model.safetensors or eval*.json)");
  for (Series* s : {&r.train_loss, &r.val_loss, &r.val_bpb, &r.lr, &r.tok_s}) s->label = r.name;
  return r;
}

// Dygraphs data: rows [x, y_1, ..., y_n] over the union of the x values, null where a series has
// no point at that x.
json dygraph_rows(const std::vector<const Series*>& series) {
  std::set<double> xs;
  for (auto* s : series)
    for (auto& p : s->pts) xs.insert(p.first);
  std::map<double, size_t> row_of;
  json rows = json::array();
  for (double x : xs) {
    row_of[x] = rows.size();
    json row = json::array({x});
    for (size_t i = 0; i < series.size(); ++i) row.push_back(nullptr);
    rows.push_back(row);
  }
  for (size_t i = 0; i < series.size(); ++i)
    for (auto& p : series[i]->pts)
      if (std::isfinite(p.second)) rows[row_of[p.first]][i + 1] = p.second;
  return rows;
}

std::string fmt_num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

// Labels must be unique (dygraphs keys series by label): runs of the same name fall back to
// their paths.
void unique_run_names(std::vector<Run>& runs) {
  std::map<std::string, int> seen;
  for (auto& r : runs) seen[r.name]++;
  for (auto& r : runs)
    if (seen[r.name] > 1) {
      r.name = r.dir;
      for (Series* s : {&r.train_loss, &r.val_loss, &r.val_bpb, &r.lr, &r.tok_s}) s->label = r.name;
    }
}

// One chart (id, title, axes, series) appended to `charts`, only when some series has data.
void add_chart(json& charts, const std::string& id, const std::string& ttl, const std::string& xl,
               const std::string& yl, const std::vector<const Series*>& all, bool logx, bool logy) {
  std::vector<const Series*> s;
  for (auto* p : all)
    if (!p->pts.empty()) s.push_back(p);
  if (s.empty()) return;
  json labels = json::array({xl});
  for (auto* p : s) labels.push_back(p->label);
  // dygraphs needs unique labels: eval files of different runs could share one.
  std::map<std::string, int> n;
  for (size_t i = 1; i < labels.size(); ++i) {
    std::string l = labels[i];
    if (n[l]++) labels[i] = l + " (" + std::to_string(n[l]) + ")";
  }
  charts.push_back({{"id", id}, {"title", ttl}, {"xlabel", xl}, {"ylabel", yl}, {"labels", labels},
                    {"logx", logx}, {"logy", logy}, {"rows", dygraph_rows(s)}});
}

// The charts of the runs' training curves and eval results.
json run_charts(const std::vector<Run>& runs) {
  json charts = json::array();
  auto collect = [&](const Series Run::*member) {
    std::vector<const Series*> v;
    for (auto& r : runs) v.push_back(&(r.*member));
    return v;
  };
  auto collect_evals = [&](std::vector<Series> Run::*member) {
    std::vector<const Series*> v;
    for (auto& r : runs)
      for (auto& s : r.*member) v.push_back(&s);
    return v;
  };
  add_chart(charts, "train_loss", "Training loss (nats / token)", "step", "loss", collect(&Run::train_loss), false,
            false);
  add_chart(charts, "val_loss", "Validation loss (nats / token)", "step", "validation loss", collect(&Run::val_loss),
            false, false);
  add_chart(charts, "val_bpb", "Validation bits per byte (comparable across tokenizers)", "step", "bits per byte",
            collect(&Run::val_bpb), false, false);
  add_chart(charts, "lr", "Learning rate", "step", "learning rate", collect(&Run::lr), false, false);
  add_chart(charts, "tok_s", "Throughput (tokens / s)", "step", "tokens / s", collect(&Run::tok_s), false, false);
  add_chart(charts, "ppl", "Perplexity vs context length (ctxlab eval)", "context length", "perplexity",
            collect_evals(&Run::ppl), true, true);
  add_chart(charts, "bpb", "Bits per byte vs context length (comparable across tokenizers)", "context length",
            "bits per byte", collect_evals(&Run::bpb), true, false);
  return charts;
}

// The rows of the config keys whose values differ between the runs ("—" where a run lacks the
// key), and their number.
std::pair<std::string, int> config_diff(const std::vector<Run>& runs) {
  std::set<std::string> keys;
  for (auto& r : runs)
    for (auto& kv : r.settings) keys.insert(kv.first);
  std::ostringstream diff;
  int ndiff = 0;
  for (auto& k : keys) {
    std::set<std::string> vals;
    for (auto& r : runs) vals.insert(r.settings.count(k) ? r.settings.at(k) : "\x01");
    if (vals.size() < 2) continue;
    ++ndiff;
    diff << "<tr><td><code>" << html_escape(k) << "</code></td>";
    for (auto& r : runs) diff << "<td>" << (r.settings.count(k) ? html_escape(r.settings.at(k)) : "—") << "</td>";
    diff << "</tr>\n";
  }
  return {diff.str(), ndiff};
}

// The table of runs: directory, step, last losses, median tokens/s, tokenizer.
void runs_table(std::ostringstream& h, std::vector<Run>& runs) {
  h << "<h2>Runs</h2>\n<table><tr><th>run</th><th>directory</th><th>step</th><th>last train loss</th>"
       "<th>last val loss</th><th>median tokens/s</th><th>tokenizer</th></tr>\n";
  for (auto& r : runs) {
    auto last = [](const Series& s) { return s.pts.empty() ? std::string("—") : fmt_num(s.pts.back().second); };
    std::string med = "—";
    if (!r.tok_s.pts.empty()) {
      std::vector<double> v;
      for (auto& p : r.tok_s.pts) v.push_back(p.second);
      std::nth_element(v.begin(), v.begin() + (ptrdiff_t)(v.size() / 2), v.end());
      med = fmt_num(v[v.size() / 2]);
    }
    std::string tk = r.settings.count("tokenizer.type") ? r.settings["tokenizer.type"] : "—";
    if (r.settings.count("tokenizer.vocab_size")) tk += " (" + r.settings["tokenizer.vocab_size"] + ")";
    h << "<tr><td>" << html_escape(r.name) << "</td><td><code>" << html_escape(r.dir) << "</code></td><td>"
      << (r.step >= 0 ? std::to_string(r.step) : "—") << "</td><td>" << last(r.train_loss) << "</td><td>"
      << last(r.val_loss) << "</td><td>" << med << "</td><td>" << html_escape(tk) << "</td></tr>\n";
  }
  h << "</table>\n";
}

// The config differences between the runs, a table when there are any.
void config_section(std::ostringstream& h, const std::vector<Run>& runs) {
  const auto [diff, ndiff] = config_diff(runs);
  h << "<h2>Config differences</h2>\n";
  if (runs.size() < 2) {
    h << "<p>One run: nothing to compare.</p>\n";
  } else if (ndiff == 0) {
    h << "<p>The runs' configs, training options and tokenizers are identical.</p>\n";
  } else {
    h << "<table id=\"config-diff\" data-rows=\"" << ndiff << "\"><tr><th>key</th>";
    for (auto& r : runs) h << "<th>" << html_escape(r.name) << "</th>";
    h << "</tr>\n" << diff << "</table>\n";
  }
}

}  // namespace

void write_report(const std::vector<std::string>& run_dirs, const std::string& out, const std::string& title) {
  CTX_CHECK(!run_dirs.empty(), "report: give at least one run directory (e.g. ctxlab report runs/a runs/b --out report.html)");
  std::vector<Run> runs;
  for (auto& d : run_dirs) runs.push_back(read_run(d));
  unique_run_names(runs);
  const json charts = run_charts(runs);

  std::ostringstream h;
  page_head(h, title, charts.size());
  runs_table(h, runs);
  for (auto& c : charts) chart_div(h, c);
  if (charts.empty()) h << "<p>No metrics or eval results in these runs: nothing to chart.</p>\n";
  config_section(h, runs);
  h << "<p style=\"font-size:.8em;color:#666\">ctxlab report; charts: dygraphs (inlined, works offline). "
       "Drag to zoom, double-click to reset.</p>\n";
  page_script(h, charts);
  const std::string page = h.str();
  write_file_atomic(out, {{page.data(), page.size()}}, "report");
}

namespace cli {

int run_report(int argc, char** argv) {
  cxxopts::Options o("ctxlab report",
                     "One self-contained HTML page comparing training runs: train / validation loss,\n"
                     "learning rate and tokens/s per step, perplexity and bits per byte against the context\n"
                     "length (eval*.json / eval*.csv in a run directory, from ctxlab eval --json/--csv), and\n"
                     "the config keys that differ. Charts use dygraphs, inlined: the page opens offline.\n"
                     "\n"
                     "examples:\n"
                     "  ctxlab eval --checkpoint runs/a/model.safetensors --lengths 256,512 --json runs/a/eval.json\n"
                     "  ctxlab report runs/a runs/b --out report.html\n"
                     "  ctxlab report --study runs/study --out study.html   # a `ctxlab study` directory");
  o.add_options()("out", "the HTML file to write, e.g. report.html", cxxopts::value<std::string>())(
      "title", "page title", cxxopts::value<std::string>()->default_value("ctxlab report"))(
      "runs", "run directories", cxxopts::value<std::vector<std::string>>())(
      "study", "instead of runs: the page of a finished `ctxlab study` directory (CI bands, task heatmaps)",
      cxxopts::value<std::string>())("h,help", "this help");
  o.parse_positional({"runs"});
  o.positional_help("RUN_DIR...");
  auto r = parse_or_help(o, argc, argv);
  if (!r) return 0;
  require(*r, "out", o);
  if (r->count("study")) {
    CTX_CHECK(!r->count("runs"), "ctxlab report: give run directories or --study DIR, not both");
    const std::string out = (*r)["out"].as<std::string>();
    check_output_file(out, "--out");
    const std::string title = r->count("title") && (*r)["title"].as<std::string>() != "ctxlab report"
                                  ? (*r)["title"].as<std::string>() : "ctxlab study: " + (*r)["study"].as<std::string>();
    write_study_report((*r)["study"].as<std::string>(), out, title);
    std::printf("report: study %s -> %s\n", (*r)["study"].as<std::string>().c_str(), out.c_str());
    return 0;
  }
  CTX_CHECK(r->count("runs"), "ctxlab report: give at least one run directory (e.g. ctxlab report runs/a runs/b "
            "--out report.html)");
  const std::string out = (*r)["out"].as<std::string>();
  check_output_file(out, "--out");
  const auto dirs = (*r)["runs"].as<std::vector<std::string>>();
  write_report(dirs, out, (*r)["title"].as<std::string>());
  std::printf("report: %zu run%s -> %s\n", dirs.size(), dirs.size() == 1 ? "" : "s", out.c_str());
  return 0;
}

}  // namespace cli

}  // namespace ctx
