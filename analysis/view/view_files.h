// The viewer's files for one trace (analysis/view/README.md, "Data contract"): the page, the
// analysis, the curves at every zoom in tiles, and the layouts at the OOMs, the peak and the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "analysis/analyzer.h"
#include "analysis/sources/open_trace.h"
#include "analysis/view/view_levels.h"
#include "analysis/view/view_server.h"
#include "estimator/json_document.h"

namespace fragscope {

struct ViewBuildOptions {
  AnalysisOptions analysis;
  bool api = false;             // served: the page may ask /api/layout for any event
  size_t max_oom_layouts = 20;  // layouts kept for the first explained OOMs
  size_t max_finest_buckets = ViewLevels::kMaxFinestBuckets;
};

// Where a trace's data files go and what their scripts say. A view of one trace: {"", "data/"};
// one trace of a view of several: {"s3", "data/s3/"} (its scripts name the source: the page may
// be loading several traces' files at once).
struct ViewSourceName {
  std::string id;
  std::string dir = "data/";
};

struct ViewBuild {
  std::map<std::string, std::string> files;  // relative path -> content (the page's assets too)
  estimator::OrderedJson meta;               // what <dir>meta.js holds
  RankReport report;                         // the trace's analysis
  uint64_t events = 0;
  uint64_t samples = 0;
  size_t tiles = 0;
};

absl::StatusOr<ViewBuild> BuildViewFiles(const TraceOpener& opener, const ViewBuildOptions& options,
                                         const ViewSourceName& source = {});

// The meta script of `meta` (<dir>meta.js).
std::string ViewMetaScript(const estimator::OrderedJson& meta);

// A data script's payload: JSON as a script argument, ASCII only (no U+2028 surprises, no
// encoding to declare), bytes that are not UTF-8 replaced rather than thrown on.
std::string ViewScriptJson(const estimator::OrderedJson& j);

// The server's /api/layout: the viewer's layout after `event`, replayed as BuildViewFiles does.
HttpAnswer ViewLayoutAnswer(const TraceOpener& opener, const AnalysisOptions& analysis,
                            uint64_t event);

// The page's own files (index.html, its scripts and style), compiled in from
// analysis/view/assets/ (generated view_assets.cc).
const std::map<std::string, std::string>& ViewAssets();

}  // namespace fragscope
