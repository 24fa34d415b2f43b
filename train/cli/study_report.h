// train/cli/study_report.h — a study's HTML page (`ctxlab study` writes OUT/report.html; `ctxlab
// report --study OUT` rewrites it): perplexity vs length and the loss at each position with 95%
// bands over seeds (dygraphs), and each task's depth x length accuracy heatmap per cell.
#pragma once
#include <string>

namespace ctx::cli {

// Reads STUDY_DIR/summary.json (ctxlab study) and writes the page to `out` atomically.
void write_study_report(const std::string& study_dir, const std::string& out, const std::string& title);

}  // namespace ctx::cli
