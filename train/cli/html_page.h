// train/cli/html_page.h — the parts of ctxlab's self-contained HTML pages (`ctxlab report`,
// `ctxlab study`'s report): escaping, the page head with dygraphs inlined (Debian's
// libjs-dygraphs: the page opens offline) and the error recorder that the headless-browser test
// reads (#status data-errors / data-rendered), and the script that draws the charts.
//
// A chart is JSON {"id", "title", "xlabel", "ylabel", "labels": [x, series...], "logx", "logy",
// "rows": [[x, y_1, ...]...], "bars": optional true: then each y is [low, mid, high] (a band)}; its
// <div class="chart" id="chart-ID" data-points="-1"> is the caller's; once drawn, data-points holds
// the number of values it shows.
#pragma once
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace ctx {

std::string html_escape(const std::string& s);
// JSON safe inside <script>: no "</script>" or "<!--" can appear.
std::string script_json(const nlohmann::json& j);
// The page up to its first heading: the styles, the error recorder and the charting library.
void page_head(std::ostringstream& h, const std::string& title, size_t n_charts);
// The chart's heading and <div>.
void chart_div(std::ostringstream& h, const nlohmann::json& chart);
// The drawing script and the end of the page.
void page_script(std::ostringstream& h, const nlohmann::json& charts);

}  // namespace ctx
