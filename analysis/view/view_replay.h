// ViewReplay: one replay of a trace as `fragscope analyze` replays it (same device, cap and
// settings: MakeReplayConfig), collecting what the viewer shows: the curves after every operation
// at every zoom (ViewLevels) and the allocator's layout at chosen moments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/analyzer.h"
#include "analysis/explain/segment_map.h"
#include "analysis/sources/open_trace.h"
#include "analysis/view/view_levels.h"
#include "estimator/json_document.h"

namespace fragscope {

// A moment to capture: the layout after every trace event with index <= after_event (the last
// event's layout when the trace ends first); with at_oom, the layout the replay's OOM at event
// after_event is explained from (after the allocator's retry: frees the retry completed are
// free), or, when the replay serves that request, before its event.
struct ViewMoment {
  uint64_t after_event = 0;
  std::string why;  // "OOM 1", "peak reserved", "end", "event 812"
  bool at_oom = false;
};

struct ViewCapture {
  ViewMoment moment;
  LayoutSummary layout;
};

struct ViewReplayOptions {
  bool levels = true;               // sample the curves (false: layouts only, stop after them)
  std::vector<ViewMoment> moments;  // any order
  size_t max_finest_buckets = ViewLevels::kMaxFinestBuckets;
};

struct ViewReplayResult {
  std::vector<ViewLevel> levels;  // finest first; empty without ViewReplayOptions::levels
  uint64_t samples = 0;
  uint64_t events = 0;                // trace events read
  uint64_t limit_bytes = 0;           // the cap, else the device
  uint64_t capacity_bytes = 0;        // the device
  std::vector<ViewCapture> captures;  // in event order (OOMs after the moments before them)
};

absl::StatusOr<ViewReplayResult> ReplayForView(const TraceOpener& opener,
                                               const AnalysisOptions& analysis,
                                               const ViewReplayOptions& options);

// The viewer's layout (analysis/view/README.md, "Data contract"): the report's totals and every
// segment with its blocks, at most `max_blocks` blocks (the largest segments' first).
estimator::OrderedJson ViewLayoutJson(const LayoutSummary& layout, size_t max_blocks = 20000);

}  // namespace fragscope
