// train/cli/study_report.cpp — the HTML page of a study (see study_report.h): perplexity against
// length with the 95% band over seeds, the per-position loss at each length with its band, and a
// depth x length heatmap of each task's accuracy per cell. Drawn from OUT/summary.json.
#include "train/cli/study_report.h"

#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "train/cli/html_page.h"
#include "train/io/fileio.h"

namespace ctx::cli {
namespace {

using json = nlohmann::json;

json band(double lo, double mid, double hi) { return json::array({lo, mid, hi}); }

// rows [x, [lo, mid, hi] per cell] over the union of xs; null where a cell has no point.
json band_rows(const std::vector<std::string>& cells, const std::map<std::pair<double, std::string>, json>& pts) {
  std::set<double> xs;
  for (const auto& kv : pts) xs.insert(kv.first.first);
  json rows = json::array();
  for (double x : xs) {
    json row = json::array({x});
    for (const std::string& c : cells) {
      auto it = pts.find({x, c});
      row.push_back(it == pts.end() ? json(nullptr) : it->second);
    }
    rows.push_back(row);
  }
  return rows;
}

// A cell as tables and legends show it: its label (summary.json "labels", e.g. a fine-tune cell's
// "rope + pi s=4 ft 300@4L"), else its name.
std::string shown(const json& s, const std::string& cell) {
  return s.contains("labels") && s["labels"].contains(cell) ? s["labels"][cell].get<std::string>() : cell;
}

json labels(const json& s, const std::string& x, const std::vector<std::string>& cells) {
  json l = json::array({x});
  for (const std::string& c : cells) l.push_back(shown(s, c));
  return l;
}

json ppl_chart(const json& s, const std::vector<std::string>& cells) {
  std::map<std::pair<double, std::string>, json> pts;
  for (const json& r : s.at("ppl"))
    pts[{r.at("length").get<double>(), r.at("cell").get<std::string>()}] =
        band(r["ppl"]["lo"].get<double>(), r["ppl"]["mean"].get<double>(), r["ppl"]["hi"].get<double>());
  return {{"id", "ppl"}, {"title", "Perplexity vs context length (mean over seeds, 95% t band)"},
          {"xlabel", "context length"}, {"ylabel", "perplexity"}, {"labels", labels(s, "context length", cells)},
          {"logx", true}, {"logy", true}, {"bars", true}, {"rows", band_rows(cells, pts)}};
}

// One chart per evaluated length: loss at each position bucket (its midpoint).
void position_charts(const json& s, const std::vector<std::string>& cells, json& charts) {
  std::map<int64_t, std::map<std::pair<double, std::string>, json>> by_len;
  for (const json& p : s.at("positions")) {
    const double mid = 0.5 * (p.at("begin").get<double>() + p.at("end").get<double>() - 1);
    by_len[p.at("length").get<int64_t>()][{mid, p.at("cell").get<std::string>()}] =
        band(p["loss"]["lo"].get<double>(), p["loss"]["mean"].get<double>(), p["loss"]["hi"].get<double>());
  }
  for (const auto& [L, pts] : by_len)
    charts.push_back({{"id", str("pos", L)},
                      {"title", str("Loss at each position, windows of ", L, " (mean over seeds, 95% t band)")},
                      {"xlabel", "position in the window"}, {"ylabel", "loss (nats / token)"},
                      {"labels", labels(s, "position", cells)}, {"logx", false}, {"logy", false}, {"bars", true},
                      {"rows", band_rows(cells, pts)}});
}

// The heatmaps: per task and cell, rows = depth, columns = length, colour = mean accuracy.
void task_heatmaps(std::ostringstream& h, const json& s, const std::vector<std::string>& cells) {
  std::map<std::string, std::map<std::string, std::map<double, std::map<int64_t, const json*>>>> grid;
  std::set<int64_t> lengths;
  for (const json& t : s.at("tasks")) {
    grid[t.at("task").get<std::string>()][t.at("cell").get<std::string>()][t.at("depth").get<double>()]
        [t.at("length").get<int64_t>()] = &t;
    lengths.insert(t.at("length").get<int64_t>());
  }
  int n = 0;
  for (const auto& [task, by_cell] : grid) {
    h << "<h2>Task " << html_escape(task) << ": accuracy by needle depth (rows) and length (columns)</h2>\n"
      << "<p>Mean exact-match accuracy over the seeds [95% t interval]; colour from white (0) to green (1).</p>\n"
      << "<div style=\"display:flex;flex-wrap:wrap;gap:1.5em\">\n";
    for (const std::string& c : cells) {
      auto it = by_cell.find(c);
      if (it == by_cell.end()) continue;
      h << "<div><b>" << html_escape(shown(s, c)) << "</b>\n<table class=\"heatmap\" data-task=\"" << html_escape(task)
        << "\" data-cell=\"" << html_escape(c) << "\"><tr><th>depth</th>";
      for (int64_t L : lengths) h << "<th>" << L << "</th>";
      h << "</tr>\n";
      for (const auto& [depth, by_len] : it->second) {
        char d[32];
        std::snprintf(d, sizeof d, "%g", depth);
        h << "<tr><th>" << d << "</th>";
        for (int64_t L : lengths) {
          auto cit = by_len.find(L);
          if (cit == by_len.end()) {
            h << "<td>—</td>";
            continue;
          }
          const json& a = cit->second->at("accuracy");
          const double m = a["mean"].get<double>();
          const int g = (int)std::lround(255 - 120 * m), rb = (int)std::lround(255 - 255 * m);
          char cell[200];
          std::snprintf(cell, sizeof cell, "<td style=\"background:rgb(%d,%d,%d)\" title=\"[%.2f, %.2f], tokens %.2f\">%.2f</td>",
                        rb, g, rb, a["lo"].get<double>(), a["hi"].get<double>(),
                        cit->second->at("token_accuracy").get<double>(), m);
          h << cell;
          ++n;
        }
        h << "</tr>\n";
      }
      h << "</table></div>\n";
    }
    h << "</div>\n";
  }
  h << "<div id=\"heatmaps\" data-cells=\"" << n << "\"></div>\n";
}

}  // namespace

void write_study_report(const std::string& study_dir, const std::string& out, const std::string& title) {
  const std::string sp = study_dir + "/summary.json";
  const std::string text = read_file(sp, "study summary (run `ctxlab study` to the end first)");
  const json s = parse_json_strict<json>(text.data(), text.data() + text.size(), sp);
  CTX_CHECK(s.contains("cells") && s.contains("ppl") && s.contains("tasks") && s.contains("positions"), sp,
            ": not a study summary (cells, ppl, tasks, positions expected)");
  const std::vector<std::string> cells = s["cells"].get<std::vector<std::string>>();
  json charts = json::array({ppl_chart(s, cells)});
  position_charts(s, cells, charts);
  std::ostringstream h;
  page_head(h, title, charts.size());
  h << "<p>Study <code>" << html_escape(study_dir) << "</code>: " << cells.size() << " cells, seeds "
    << html_escape(s["seeds"].dump()) << ". The tables: <code>summary.md</code>; the numbers: "
    << "<code>summary.json</code>, <code>ppl.csv</code>, <code>tasks.csv</code>, <code>positions.csv</code>.</p>\n";
  for (const json& c : charts) chart_div(h, c);
  task_heatmaps(h, s, cells);
  h << "<p style=\"font-size:.8em;color:#666\">ctxlab study; charts: dygraphs (inlined, works offline). "
       "Bands: the 95% t interval over seeds. Drag to zoom, double-click to reset.</p>\n";
  page_script(h, charts);
  const std::string page = h.str();
  write_file_atomic(out, {{page.data(), page.size()}}, "study report");
}

}  // namespace ctx::cli
