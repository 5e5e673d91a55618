#include "analysis/view/view_files.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/report/json_report.h"
#include "analysis/view/view_replay.h"

namespace fragscope {
namespace {

using estimator::OrderedJson;

std::string Script(const char* call, const std::string& arguments) {
  return absl::StrCat("FragscopeView.", call, "(", arguments, ");\n");
}

// The source argument a data script ends with in a view of several traces (none in a view of
// one: its files are those of a single-trace view).
std::string SourceArgument(const ViewSourceName& source) {
  return source.id.empty() ? "" : absl::StrCat(", ", ViewScriptJson(source.id));
}

}  // namespace

absl::StatusOr<ViewBuild> BuildViewFiles(const TraceOpener& opener, const ViewBuildOptions& options,
                                         const ViewSourceName& source) {
  absl::StatusOr<AnalysisReport> analysis = AnalyzeTraces({opener.path()}, options.analysis);
  if (!analysis.ok()) return analysis.status();
  if (analysis->ranks.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(opener.path(), " holds the traces of ",
                                                   analysis->ranks.size(),
                                                   " devices: give --device N"));
  }
  const RankReport& rank = analysis->ranks.front();

  // The moments whose layouts the page gets without a server.
  ViewReplayOptions replay;
  replay.max_finest_buckets = options.max_finest_buckets;
  size_t oom_number = 0;
  for (const OomExplanation& x : rank.ooms) {
    if (oom_number == options.max_oom_layouts) break;
    ++oom_number;
    replay.moments.push_back(
        {.after_event = x.event_index, .why = absl::StrCat("OOM ", oom_number), .at_oom = true});
  }
  if (rank.metrics.events > 0) {
    replay.moments.push_back({.after_event = rank.metrics.at_peak.index, .why = "peak reserved"});
  }
  replay.moments.push_back({.after_event = std::numeric_limits<uint64_t>::max(), .why = "end"});
  absl::StatusOr<ViewReplayResult> view = ReplayForView(opener, options.analysis, replay);
  if (!view.ok()) return view.status();

  ViewBuild build;
  build.events = view->events;
  build.samples = view->samples;
  for (const auto& [name, content] : ViewAssets()) build.files[name] = content;

  OrderedJson levels = OrderedJson::array();
  for (size_t l = 0; l < view->levels.size(); ++l) {
    const ViewLevel& level = view->levels[l];
    const size_t tiles =
        (level.buckets.size() + ViewLevels::kTileBuckets - 1) / ViewLevels::kTileBuckets;
    for (size_t t = 0; t < tiles; ++t) {
      const std::string payload =
          ViewLevels::EncodeTile(level, t * ViewLevels::kTileBuckets, ViewLevels::kTileBuckets);
      build.files[absl::StrCat(source.dir, "L", l, "-", t, ".js")] =
          Script("tile", absl::StrCat(l, ", ", t, ", \"", payload, "\"", SourceArgument(source)));
    }
    build.tiles += tiles;
    levels.push_back({{"width", level.width}, {"buckets", level.buckets.size()}, {"tiles", tiles}});
  }

  OrderedJson layouts = OrderedJson::array();
  for (size_t id = 0; id < view->captures.size(); ++id) {
    const ViewCapture& c = view->captures[id];
    build.files[absl::StrCat(source.dir, "layout-", id, ".js")] = Script(
        "layout",
        absl::StrCat(id, ", ", ViewScriptJson(ViewLayoutJson(c.layout)), SourceArgument(source)));
    layouts.push_back({{"id", id}, {"event", c.layout.index}, {"why", c.moment.why}});
  }

  OrderedJson columns = OrderedJson::array();
  for (const char* column : kViewColumns) columns.push_back(column);
  OrderedJson meta;
  meta["format"] = "fragscope.view/1";
  std::string title = opener.path();
  title = title.substr(title.find_last_of('/') + 1);
  meta["title"] = title;
  meta["events"] = view->events;
  meta["operations"] = view->samples;
  meta["columns"] = std::move(columns);
  meta["tile_buckets"] = ViewLevels::kTileBuckets;
  meta["levels"] = std::move(levels);
  meta["limit_bytes"] = view->limit_bytes;
  meta["capacity_bytes"] = view->capacity_bytes;
  meta["layouts"] = std::move(layouts);
  meta["api"] = options.api;
  meta["report"] = JsonReport(*analysis, {.include_timings = false})["ranks"][0];
  if (!source.id.empty()) meta["source"] = source.id;
  build.files[source.dir + "meta.js"] = ViewMetaScript(meta);
  build.meta = std::move(meta);
  build.report = std::move(analysis->ranks.front());
  return build;
}

std::string ViewMetaScript(const OrderedJson& meta) { return Script("meta", ViewScriptJson(meta)); }

std::string ViewScriptJson(const OrderedJson& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/true, OrderedJson::error_handler_t::replace);
}

HttpAnswer ViewLayoutAnswer(const TraceOpener& opener, const AnalysisOptions& analysis,
                            uint64_t event) {
  absl::StatusOr<ViewReplayResult> view =
      ReplayForView(opener, analysis, {.levels = false, .moments = {{event, "clicked"}}});
  if (!view.ok()) {
    OrderedJson error;
    error["error"] = std::string(view.status().message());
    return {.status = 400, .body = ViewScriptJson(error)};
  }
  return {.body = ViewScriptJson(ViewLayoutJson(view->captures.front().layout))};
}

}  // namespace fragscope
