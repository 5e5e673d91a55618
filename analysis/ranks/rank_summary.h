// RankSummary: one rank's allocator behaviour in a few hundred bytes, the unit of the cross-rank
// report (cross_rank.h). `fragscope summarize` writes it as JSON where a rank's log was written
// (schema: CROSS_RANK_SCHEMA.md, rank_summary_json.h), and `fragscope merge` or `analyze` over
// many logs builds the report from many of them.
//
// SummarizeTrace replays the trace once with the metrics, the OOM explanations and the phase
// peaks (phase_peaks.h), and keeps only their figures: memory O(live blocks) while it runs, as
// any replay (analysis/README.md), and O(phases + warnings) after. No sweep.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/analyzer.h"
#include "analysis/metrics/phase_peaks.h"
#include "analysis/sources/open_trace.h"

namespace fragscope {

// Where a rank's number came from (rank_inputs.h, AssignRank).
enum class RankSource : uint8_t {
  kLogHeader,   // the .fslog header (the launcher's RANK)
  kFileName,    // "rank7" in the file name, as launchers name snapshots
  kOrderGiven,  // the file's position among those given
  kFlag,        // --rank
};
std::string_view RankSourceName(RankSource source);  // "log header", "file name", ...
std::optional<RankSource> RankSourceFromName(std::string_view name);

// The rank's first OOM, as far as the summary keeps it.
struct OomBrief {
  uint64_t event_index = 0;
  uint64_t time_ns = 0;   // since the trace's first event
  int64_t wall_ns = 0;    // Unix time (0 unknown)
  bool in_trace = false;  // the job failed here (else only the replay did)
  std::string cause;      // OomCauseName
  std::string rule;       // PolicyRuleName ("" unless allocator_policy)
  std::string phase;      // the marker phase of the failing allocation
  uint64_t requested_bytes = 0;
  std::string headline;
  std::vector<std::string> evidence;
};

struct RankSummary {
  static constexpr size_t kMaxWarnings = 20;

  std::string path;
  std::string format;  // TraceFormatName
  int32_t rank = 0;
  RankSource rank_source = RankSource::kLogHeader;
  int32_t local_rank = -1;  // -1: not recorded
  int32_t world_size = 0;   // 0: not recorded
  int32_t pp_size = 0;      // 0: not recorded
  int32_t tp_size = 0;
  std::string host;
  int32_t device = 0;
  std::string device_name;
  int64_t pid = 0;
  int64_t start_wall_ns = 0;
  uint64_t capacity_bytes = 0;
  std::string capacity_source;

  uint64_t events = 0;
  uint64_t allocations = 0;
  uint64_t frees = 0;
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_active_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  double utilization = 0.0;  // peak active / peak reserved (METRICS.md)
  // Device memory held outside the allocator: at the job's first OOM with device figures, else
  // at the log's open (.fslog 2.3); nullopt when the trace records neither.
  std::optional<uint64_t> outside_pytorch_bytes;
  std::string outside_source;  // "OOM at event 812", "log open"

  uint64_t oom_count = 0;
  std::vector<std::pair<std::string, uint64_t>> oom_causes;  // cause name, count (explained)
  std::optional<OomBrief> first_oom;
  std::vector<PhaseRise> phases;  // PhasePeakCollector's

  std::vector<std::string> warnings;  // the first kMaxWarnings
  uint64_t warning_count = 0;
  double replay_seconds = 0.0;
};

// How SummarizeTrace numbers a trace that records no rank (rank_inputs.h).
struct RankHint {
  size_t position = 0;               // among the traces given
  std::optional<int32_t> flag_rank;  // --rank
};

// Replays the trace under `options` (capacity, cap, --conf; its sweep, model and --at are not
// used). Errors: those of the replay (settings that do not parse, an unreadable trace).
absl::StatusOr<RankSummary> SummarizeTrace(const TraceOpener& opener,
                                           const AnalysisOptions& options, const RankHint& hint);

}  // namespace fragscope
