// train/cli/study_summary.cpp — reducing a study's eval files over the seeds (see study_summary.h).
#include "train/cli/study_summary.h"

#include "train/cli/study_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/io/fileio.h"
#include "train/stats.h"

namespace ctx::cli {
namespace {

using json = nlohmann::json;

// One measured point: its value in each seed.
using Samples = std::vector<double>;

struct Points {
  std::map<std::pair<std::string, int64_t>, Samples> loss, bpb;                      // (cell, length)
  std::map<std::tuple<std::string, int64_t, int64_t, int64_t>, Samples> positions;   // (cell, length, begin, end)
  std::map<std::tuple<std::string, std::string, int64_t, double>, Samples> accuracy, token_accuracy;  // (task, cell, length, depth)
  std::map<std::tuple<std::string, std::string, int64_t, double>, int64_t> trials;
};

json read_json(const std::string& path) {
  const std::string t = read_file(path, "study eval result");
  return parse_json_strict<json>(t.data(), t.data() + t.size(), path);
}

double number(const json& j, const char* key, const std::string& where) {
  CTX_CHECK(j.is_object() && j.contains(key) && j[key].is_number(), where, ": \"", key, "\" missing or not a number");
  return j[key].get<double>();
}

void read_ppl(const std::string& cell, const std::string& path, Points& p) {
  const json j = read_json(path);
  CTX_CHECK(j.contains("results") && j["results"].is_array(), path, ": \"results\" missing (not written by ctxlab eval)");
  for (const json& r : j["results"]) {
    const int64_t L = (int64_t)number(r, "length", path);
    p.loss[{cell, L}].push_back(number(r, "loss", path));
    p.bpb[{cell, L}].push_back(number(r, "bits_per_byte", path));
    if (!r.contains("per_position")) continue;
    for (const json& b : r["per_position"].at("buckets"))
      if (number(b, "count", path) > 0)
        p.positions[{cell, L, (int64_t)number(b, "begin", path), (int64_t)number(b, "end", path)}].push_back(
            number(b, "loss", path));
  }
}

void read_task(const std::string& task, const std::string& cell, const std::string& path, Points& p) {
  const json j = read_json(path);
  CTX_CHECK(j.contains("task_results") && j["task_results"].is_array(), path,
            ": \"task_results\" missing (not written by ctxlab eval --task)");
  for (const json& c : j["task_results"]) {
    const auto key = std::make_tuple(task, cell, (int64_t)number(c, "length", path), number(c, "depth", path));
    p.accuracy[key].push_back(number(c, "accuracy", path));
    p.token_accuracy[key].push_back(number(c, "token_accuracy", path));
    p.trials[key] += (int64_t)number(c, "trials", path);
  }
}

Points read_points(const StudySpec& s, const std::string& out) {
  Points p;
  for (const StudyCell& c : study_cells(s))
    for (uint64_t seed : s.seeds)
      for (const EvalSlice& sl : eval_slices(s, c)) {
        const std::string dir = out + "/eval/" + c.name + "/";
        read_ppl(c.name, dir + study_ppl_file(seed, sl.suffix), p);
        for (const StudyTask& t : s.tasks) read_task(t.name, c.name, dir + study_task_file(seed, t.name, sl.suffix), p);
      }
  return p;
}

// The cells' names.
std::vector<std::string> cell_names(const StudySpec& s) {
  std::vector<std::string> v;
  for (const StudyCell& c : study_cells(s)) v.push_back(c.name);
  return v;
}

// Each cell's label: its name, or for a fine-tune cell e.g. "rope + pi s=4 ft 300@4L".
std::map<std::string, std::string> cell_labels(const StudySpec& s) {
  std::map<std::string, std::string> m;
  for (const StudyCell& c : study_cells(s)) m[c.name] = c.label;
  return m;
}

// An encoding's tokenizer: a "tokenizers" name, "tokenizer" (the study's own), or "bytes".
std::string tokenizer_of(const StudySpec& s, const StudySpec::Encoding& e) {
  return !e.tokenizer.empty() ? e.tokenizer : s.tokenizer_type.empty() ? "bytes" : "tokenizer";
}

// Each cell's tokenizer (tokenizer_of its encoding).
std::map<std::string, std::string> cell_tokenizers(const StudySpec& s) {
  std::map<std::string, std::string> m;
  for (const StudyCell& c : study_cells(s)) m[c.name] = tokenizer_of(s, *c.enc);
  return m;
}

// The tokenizers the encodings use, in their order, described: "bytes", "bpe4k (bpe, vocab 4000)".
std::vector<std::string> tokenizer_list(const StudySpec& s) {
  std::vector<std::string> seen, l;
  for (const auto& e : s.encodings) {
    const std::string n = tokenizer_of(s, e);
    if (std::find(seen.begin(), seen.end(), n) != seen.end()) continue;
    seen.push_back(n);
    std::string d = n;
    if (n == "tokenizer") d = str(n, " (", s.tokenizer_type, ", vocab ", s.tokenizer_vocab, ")");
    for (const auto& t : s.tokenizers)
      if (t.name == n) d = str(n, " (", t.type, ", vocab ", t.vocab, ")");
    l.push_back(d);
  }
  return l;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

json ci_json(const MeanCI& c) { return {{"mean", c.mean}, {"lo", c.lo}, {"hi", c.hi}, {"sd", c.sd}}; }

// Perplexity: per (cell, length) the loss interval, ppl = exp of it, and Welch's p against the
// cell with the lowest mean loss at that length. Fills the JSON, CSV and markdown table.
void summarise_ppl(const StudySpec& s, const Points& p, json& js, std::string& csv, std::string& md) {
  csv = "cell,length,seeds,loss_mean,loss_lo,loss_hi,ppl,ppl_lo,ppl_hi,bits_per_byte,p_vs_best,best,label\n";
  const std::map<std::string, std::string> label = cell_labels(s);
  md += "## Perplexity on the held-out split\n\nMean over the seeds, with the 95% t interval. **Bold**: the lowest "
        "at that length; `~`: not significantly worse than it (Welch's t-test, p >= 0.05); the rest are "
        "significantly worse.\n\n| cell |";
  for (int64_t L : s.lengths) md += str(" ", L, " |");
  md += "\n|---|";
  for (size_t i = 0; i < s.lengths.size(); ++i) md += "---|";
  md += "\n";
  std::map<int64_t, std::string> best;
  for (int64_t L : s.lengths)
    for (const std::string& c : cell_names(s))
      if (best[L].empty() || mean_ci(p.loss.at({c, L})).mean < mean_ci(p.loss.at({best[L], L})).mean) best[L] = c;
  js = json::array();
  for (const std::string& c : cell_names(s)) {
    md += "| " + label.at(c) + " |";
    for (int64_t L : s.lengths) {
      auto it = p.loss.find({c, L});
      CTX_CHECK(it != p.loss.end(), "study: no result for ", c, " at length ", L);
      const MeanCI m = mean_ci(it->second), b = mean_ci(p.bpb.at({c, L}));
      const double pv = welch_p(it->second, p.loss.at({best[L], L}));
      const bool is_best = c == best[L];
      js.push_back({{"cell", c}, {"length", L}, {"seeds", m.n}, {"loss", ci_json(m)},
                    {"ppl", {{"mean", std::exp(m.mean)}, {"lo", std::exp(m.lo)}, {"hi", std::exp(m.hi)}}},
                    {"bits_per_byte", b.mean}, {"p_vs_best", pv}, {"best", is_best}, {"label", label.at(c)}});
      csv += str(c, ",", L, ",", m.n, ",", fmt("%.9g", m.mean), ",", fmt("%.9g", m.lo), ",", fmt("%.9g", m.hi), ",",
                 fmt("%.9g", std::exp(m.mean)), ",", fmt("%.9g", std::exp(m.lo)), ",", fmt("%.9g", std::exp(m.hi)), ",",
                 fmt("%.9g", b.mean), ",", fmt("%.6g", pv), ",", is_best ? 1 : 0, ",", label.at(c), "\n");
      std::string cellv = fmt("%.2f", std::exp(m.mean));
      if (m.n > 1) cellv += " [" + fmt("%.2f", std::exp(m.lo)) + ", " + fmt("%.2f", std::exp(m.hi)) + "]";
      md += " " + (is_best ? "**" + cellv + "**" : pv >= 0.05 ? "~" + cellv : cellv) + " |";
    }
    md += "\n";
  }
}

// Tasks: accuracy per (task, cell, length, depth), averaged over seeds (each seed's accuracy over
// its trials), the interval clipped to [0, 1]; one markdown table per task and cell.
void summarise_tasks(const StudySpec& s, const Points& p, json& js, std::string& csv, std::string& md) {
  csv = "task,cell,length,depth,seeds,trials,accuracy,acc_lo,acc_hi,token_accuracy,label\n";
  js = json::array();
  const std::map<std::string, std::string> label = cell_labels(s);
  for (const StudyTask& t : s.tasks) {
    md += str("\n## Task ", t.name, ": exact-match accuracy\n\nMean over the seeds [95% t interval], ", t.trials,
              " trials per seed and cell, (the answer tokens right, teacher-forced); rows: depth of the needle, "
              "columns: length.\n");
    for (const std::string& c : cell_names(s)) {
      md += str("\n**", label.at(c), "**\n\n| depth |");
      for (int64_t L : s.lengths) md += str(" ", L, " |");
      md += "\n|---|";
      for (size_t i = 0; i < s.lengths.size(); ++i) md += "---|";
      md += "\n";
      std::map<double, std::string> rows;
      for (const auto& [key, acc] : p.accuracy) {
        if (std::get<0>(key) != t.name || std::get<1>(key) != c) continue;
        const MeanCI m = mean_ci(acc);
        const double lo = std::max(0.0, m.lo), hi = std::min(1.0, m.hi);
        const int64_t L = std::get<2>(key), n = p.trials.at(key);
        const double d = std::get<3>(key), tok = mean_ci(p.token_accuracy.at(key)).mean;
        js.push_back({{"task", t.name}, {"cell", c}, {"length", L}, {"depth", d}, {"seeds", m.n}, {"trials", n},
                      {"accuracy", {{"mean", m.mean}, {"lo", lo}, {"hi", hi}}}, {"token_accuracy", tok},
                      {"label", label.at(c)}});
        csv += str(t.name, ",", c, ",", L, ",", fmt("%.6g", d), ",", m.n, ",", n, ",", fmt("%.6g", m.mean), ",",
                   fmt("%.6g", lo), ",", fmt("%.6g", hi), ",", fmt("%.6g", tok), ",", label.at(c), "\n");
        rows[d] += fmt(" %.2f", m.mean) + (m.n > 1 ? " [" + fmt("%.2f", lo) + ", " + fmt("%.2f", hi) + "]" : "") +
                   fmt(" (tok %.2f)", tok) + " |";
      }
      for (const auto& [d, row] : rows) md += "| " + fmt("%.6g", d) + " |" + row + "\n";
    }
  }
}

void summarise_positions(const Points& p, json& js, std::string& csv) {
  csv = "cell,length,begin,end,seeds,loss_mean,loss_lo,loss_hi\n";
  js = json::array();
  for (const auto& [key, loss] : p.positions) {
    const auto& [c, L, b, e] = key;
    const MeanCI m = mean_ci(loss);
    js.push_back({{"cell", c}, {"length", L}, {"begin", b}, {"end", e}, {"loss", ci_json(m)}});
    csv += str(c, ",", L, ",", b, ",", e, ",", m.n, ",", fmt("%.9g", m.mean), ",", fmt("%.9g", m.lo), ",",
               fmt("%.9g", m.hi), "\n");
  }
}

void write(const std::string& path, const std::string& text, const char* what) {
  write_file_atomic(path, {{text.data(), text.size()}}, what);
  std::printf("wrote %s\n", path.c_str());
}

}  // namespace

std::string study_ppl_file(uint64_t seed, const std::string& suffix) { return str("seed", seed, suffix, ".json"); }
std::string study_task_file(uint64_t seed, const std::string& task, const std::string& suffix) {
  return str("seed", seed, suffix, ".", task, ".json");
}

void write_study_summary(const StudySpec& s, const std::string& out) {
  const Points p = read_points(s, out);
  std::string seeds;
  for (uint64_t x : s.seeds) seeds += (seeds.empty() ? "" : ", ") + std::to_string(x);
  std::string md = str("# Study summary\n\n", s.encodings.size(), " encodings, ", s.scalings.size(),
                       " RoPE scalings, ", s.finetunes.size(), " fine-tunes, seeds ", seeds, "; trained on ", out, "/data/train.txt (preset ", s.preset,
                       ", ", s.steps, " steps", s.context > 0 ? str(", context ", s.context) : std::string(),
                       "), evaluated on ", out, "/data/val.txt (held out from training",
                       s.tokenizer_type.empty() && s.tokenizers.empty() ? "" : " and from the tokenizer", ").\n\n");
  json summary = {{"seeds", s.seeds}, {"lengths", s.lengths}, {"cells", cell_names(s)}, {"labels", cell_labels(s)}};
  if (!s.tokenizers.empty()) summary["tokenizers"] = cell_tokenizers(s);  // which cell uses which
  const std::vector<std::string> toks = tokenizer_list(s);
  if (toks.size() > 1) {
    std::string l;
    for (const std::string& t : toks) l += (l.empty() ? "" : ", ") + t;
    md += "The cells use different tokenizers (" + l + "): a length counts each one's tokens and perplexity is "
          "per token, so the bold best compares within a tokenizer only; across them, compare `bits_per_byte` "
          "(ppl.csv, summary.json).\n\n";
  }
  std::string ppl_csv, task_csv, pos_csv;
  summarise_ppl(s, p, summary["ppl"], ppl_csv, md);
  summarise_tasks(s, p, summary["tasks"], task_csv, md);
  summarise_positions(p, summary["positions"], pos_csv);
  write(out + "/ppl.csv", ppl_csv, "study ppl CSV");
  if (!s.tasks.empty()) write(out + "/tasks.csv", task_csv, "study tasks CSV");
  if (!p.positions.empty()) write(out + "/positions.csv", pos_csv, "study positions CSV");
  write(out + "/summary.json", summary.dump(2) + "\n", "study summary JSON");
  write(out + "/summary.md", md, "study summary");
  write_study_report(out, out + "/report.html", "ctxlab study: " + out);
  std::printf("wrote %s/report.html\n", out.c_str());
  std::printf("\n%s", md.c_str());
}

}  // namespace ctx::cli
