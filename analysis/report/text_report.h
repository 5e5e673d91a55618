// The terminal rendering of an AnalysisReport: a summary in the spirit of
// torch.cuda.memory_summary() followed by the explanation of every OOM and the sweep table,
// readable at 100 columns. Metric names match analysis/METRICS.md.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/strings/string_view.h"

#include "analysis/report/report.h"
#include "analysis/sources/settings_check.h"

namespace fragscope {

struct TextReportOptions {
  bool memory_summary = true;  // append PyTorch's memory_summary() table of the replay
  size_t max_ooms = 3;         // OOMs explained in full (the others get one line each)
};

void RenderTextReport(const AnalysisReport& report, const TextReportOptions& options,
                      std::ostream& out);

// One rank, as RenderTextReport prints it.
void RenderRankText(const RankReport& rank, const TextReportOptions& options, std::ostream& out);

// The sweep table alone (also `fragscope sweep`).
// The verdict section (JobVerdict), when the report has an OOM or a model: verdict_text.cc.
void RenderVerdictText(const RankReport& rank, std::ostream& out);
// The estimator's terms beside the live blocks attributed to them (ModelGap), as a table.
// The effective-settings check's lines (settings_check_text.cc).
void RenderSettingsCheckText(const SettingsCheck& check, std::ostream& out);

void RenderModelGapTerms(const ModelGap& gap, std::ostream& out);

void RenderSweepTable(const std::vector<SweepResult>& results,
                      const std::optional<size_t>& recommended, const std::string& reason,
                      std::ostream& out);

// Writes `text` wrapped at 100 columns, the first line prefixed by `indent`, the others by as
// many spaces.
void WriteWrapped(std::ostream& out, const std::string& text, const std::string& indent);

// "1 OOM", "2 OOMs": `count` followed by `noun`, with an "s" unless `count` is 1.
std::string CountOf(uint64_t count, absl::string_view noun);

// "1.23 s", "512 ms", "37 us": a trace time for humans.
std::string FormatDuration(uint64_t ns);

}  // namespace fragscope
