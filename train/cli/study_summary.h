// train/cli/study_summary.h — the summary of a finished study (`ctxlab study`): the eval JSON of
// every (cell, seed) read back and reduced over the seeds to a mean with its 95% t interval
// (train/stats.h); at each length, which cells are significantly worse than the best (Welch's
// t-test on the per-seed losses, p < 0.05). Written as OUT/summary.md (tables), OUT/summary.json,
// and OUT/ppl.csv, tasks.csv, positions.csv (one row per cell and point, for plots and reports).
#pragma once
#include <cstdint>
#include <string>

#include "train/cli/study_spec.h"

namespace ctx::cli {

// Where eval writes the results of one seed, in OUT/eval/CELL/.
std::string study_ppl_file(uint64_t seed);
std::string study_task_file(uint64_t seed, const std::string& task);

// Reads OUT/eval/**, writes the summary files (errors name the eval file and field that is off).
void write_study_summary(const StudySpec& s, const std::string& out);

}  // namespace ctx::cli
