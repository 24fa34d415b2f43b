// train/cli/html_page.cpp — the HTML page parts shared by the reports (see html_page.h).
#include "train/cli/html_page.h"

#include <fstream>
#include <iterator>

#include "core/error.h"

#ifndef CTXLAB_DYGRAPHS_DIR
#define CTXLAB_DYGRAPHS_DIR "/usr/share/javascript/dygraphs"
#endif

namespace ctx {

using json = nlohmann::json;

namespace {

std::string read_library(const std::string& name) {
  const std::string path = std::string(CTXLAB_DYGRAPHS_DIR) + "/" + name;
  std::ifstream in(path, std::ios::binary);
  CTX_CHECK(in, "report: cannot read the charting library ", path, " (install libjs-dygraphs: scripts/setup.sh)");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Inlined, the source-map comment would point next to the page; "</script" would end the tag.
  for (size_t p; (p = s.find("//# sourceMappingURL=")) != std::string::npos;) s.erase(p, s.find('\n', p) - p);
  for (size_t p; (p = s.find("/*# sourceMappingURL=")) != std::string::npos;) s.erase(p, s.find("*/", p) + 2 - p);
  for (size_t p = 0; (p = s.find("</script", p)) != std::string::npos; p += 3) s.replace(p, 2, "<\\/");
  return s;
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// JSON safe inside <script>: no "</script>" or "<!--" can appear.
std::string script_json(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace), o;
  for (char c : s) {
    if (c == '<') o += "\\u003c";
    else o += c;
  }
  return o;
}

// The page up to its first heading: the styles, the error recorder and the charting library.
void page_head(std::ostringstream& h, const std::string& title, size_t n_charts) {
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" << html_escape(title)
    << "</title>\n<style>\n" << read_library("dygraph.min.css") << "\n"
    << "body{font-family:sans-serif;margin:1.5em;max-width:1100px}h1{font-size:1.4em}h2{font-size:1.15em;"
       "margin-top:1.6em}table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #bbb;padding:3px 8px;"
       "text-align:left}th{background:#eee}.chart{width:1000px;height:340px;margin:.5em 0 1.5em}"
       ".legend{font-size:.85em}#errors{color:#b00}\n</style>\n"
       // Errors of the page itself land in the DOM (#errors, data-errors) as well as the console.
       "<script>\n(function(){var n=0;function rec(m){n++;var s=document.getElementById('status');"
       "if(s)s.setAttribute('data-errors',String(n));var u=document.getElementById('errors');"
       "if(u){var li=document.createElement('li');li.textContent=String(m);u.appendChild(li);}else{"
       "(window.__early=window.__early||[]).push(String(m));}}\nwindow.addEventListener('error',function(e){"
       "rec('error: '+e.message);});var ce=console.error;console.error=function(){rec('console.error: '+"
       "Array.prototype.join.call(arguments,' '));return ce.apply(console,arguments);};window.__rec=rec;})();\n"
       "</script>\n<script>\n"
    << read_library("dygraph.min.js") << "\n</script>\n</head><body>\n"
    << "<h1>" << html_escape(title) << "</h1>\n"
    << "<div id=\"status\" data-charts=\"" << n_charts << "\" data-rendered=\"0\" data-errors=\"0\"></div>\n"
    << "<ul id=\"errors\"></ul>\n";
}

// Rendering: one Dygraph per chart; once drawn, the chart's data-points attribute holds the number
// of non-null values dygraphs holds, and #status data-rendered counts the charts drawn.
void page_script(std::ostringstream& h, const json& charts) {
  h << "<script>\nconst CHARTS = " << script_json(charts) << ";\n"
    << "(function(){var st=document.getElementById('status');(window.__early||[]).forEach(window.__rec);"
       "var done=0;\nCHARTS.forEach(function(c){var div=document.getElementById('chart-'+c.id);\n"
       "var g=new Dygraph(div,c.rows,{labels:c.labels,xlabel:c.xlabel,ylabel:c.ylabel,"
       "logscale:c.logy,customBars:!!c.bars,connectSeparatedPoints:true,drawPoints:c.rows.length<40,legend:'always',"
       "labelsSeparateLines:false,axes:{x:{logscale:c.logx},y:{axisLabelWidth:70}},animatedZooms:false});\n"
       "g.ready(function(){var n=0;for(var i=0;i<g.numRows();i++)for(var j=1;j<g.numColumns();j++){"
       "var v=g.getValue(i,j);if(Array.isArray(v))v=v[1];if(v!==null&&!isNaN(v))n++;}div.setAttribute('data-points',String(n));"
       "done++;st.setAttribute('data-rendered',String(done));});});})();\n</script>\n</body></html>\n";
}

void chart_div(std::ostringstream& h, const json& c) {
  h << "<h2>" << html_escape(c["title"].get<std::string>()) << "</h2>\n<div class=\"chart\" id=\"chart-"
    << c["id"].get<std::string>() << "\" data-points=\"-1\"></div>\n";
}

}  // namespace ctx
