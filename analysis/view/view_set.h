// ViewSet: everything `fragscope view` serves or writes — one trace, the ranks of one job (a rank
// selector and the cross-rank summary), or two traces side by side (`diff`); analysis/view/
// README.md, "Views of several traces".
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/sources/open_trace.h"
#include "analysis/view/view_files.h"
#include "analysis/view/view_server.h"
#include "estimator/json_document.h"

namespace fragscope {

struct ViewSetSource {
  std::string id;  // "" (one trace), "s0", "s1", ... (ranks), "a", "b" (diff)
  TraceOpener opener;
};

struct ViewSet {
  std::map<std::string, std::string> files;  // relative path -> content
  estimator::OrderedJson meta;               // data/meta.js
  std::vector<ViewSetSource> sources;        // for the server's replays
  uint64_t events = 0;                       // over every trace
  size_t tiles = 0;
};

// The view of one trace.
absl::StatusOr<ViewSet> BuildTraceViewSet(const TraceOpener& opener,
                                          const ViewBuildOptions& options);

// The view of the ranks of one job: the cross-rank report (cross_rank.h, as `fragscope analyze`
// builds it from the traces) and each rank's own view, in rank order. Only the worst rank's view
// carries the sweep (as `analyze` sweeps only it); the finest level of each rank is bounded so
// the whole set keeps at most kMaxSetBuckets buckets. Errors name the trace.
absl::StatusOr<ViewSet> BuildRankViewSet(const std::vector<std::string>& paths,
                                         const ViewBuildOptions& options);
inline constexpr size_t kMaxSetBuckets = size_t{1} << 21;

// Two traces side by side: each one's view (no sweep, as `fragscope diff`) and their comparison
// (report_comparison.h: peaks, OOMs, each marker phase aligned by text).
absl::StatusOr<ViewSet> BuildDiffViewSet(const TraceOpener& a, const TraceOpener& b,
                                         const ViewBuildOptions& options);

// The server's /api/layout for `set`: the layout of source `source` after `event`.
HttpAnswer ViewSetLayoutAnswer(const ViewSet& set, const AnalysisOptions& analysis,
                               const std::string& source, uint64_t event);

}  // namespace fragscope
