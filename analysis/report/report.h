// AnalysisReport: everything `fragscope analyze` found, as plain data. The terminal summary
// (text_report.h), the JSON file (json_report.h, schema in REPORT_SCHEMA.md) and the HTML file
// (html_report.h) are three renderings of it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/explain/job_verdict.h"
#include "analysis/explain/model_gap.h"
#include "analysis/explain/oom_explainer.h"
#include "analysis/explain/segment_map.h"
#include "analysis/explain/sweep.h"
#include "analysis/metrics/metrics.h"
#include "analysis/metrics/phase_figures.h"
#include "analysis/report/report_comparison.h"
#include "analysis/sources/settings_check.h"
#include "analysis/sources/trace_event.h"

namespace fragscope {

// Bumped when a JSON field changes meaning or disappears; additions keep the version.
inline constexpr int kReportSchemaVersion = 2;

// The analysis of one trace (one rank of a job).
struct RankReport {
  TraceInfo info;  // initial_segments cleared
  uint64_t capacity_bytes = 0;
  std::string capacity_source;
  std::optional<uint64_t> allowed_bytes;
  std::string options;  // the allocator settings replayed, PYTORCH_CUDA_ALLOC_CONF syntax
  // The settings the user says the job ran with against those the trace records (--conf, else
  // the environment's; nullopt when neither is given).
  std::optional<SettingsCheck> settings_check;
  MemoryMetrics metrics;
  std::string memory_summary;  // torch.cuda.memory_summary() of the replay's final stats
  std::vector<OomExplanation> ooms;
  uint64_t oom_count = 0;  // all OOMs, explained or not (ooms holds the first 1000)
  std::optional<uint64_t> at_index;
  std::optional<LayoutSummary> at_layout;  // --at EVENT
  LayoutSummary final_layout;              // numbers only (maps cleared)
  std::vector<SweepResult> sweep;
  JobVerdict verdict;  // with the recommended sweep row
  std::optional<ModelGap> model_gap;
  std::string model_gap_where;  // "at the first OOM (event 812)", ...
  // Each marker phase's figures, in order (phase_figures.h).
  std::vector<PhaseFigures> phases;
  // The JSON of the trace's model record (Note [Model records]), "" when it has none.
  std::string model_record;
  // `analyze --predict`: this trace (a) beside the prediction of its recorded job (b).
  std::optional<ReportComparison> prediction;
  std::vector<std::string> warnings;
  double replay_seconds = 0.0;
  double sweep_seconds = 0.0;
};

struct AnalysisReport {
  // One report per rank's trace, or, when per_device, per device of one snapshot (a snapshot
  // records a trace per device; RankReport::info.device says which).
  std::vector<RankReport> ranks;
  bool per_device = false;
  std::optional<size_t> worst;  // index into ranks when there are several
  std::string worst_reason;
};

}  // namespace fragscope
