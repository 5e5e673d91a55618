#include "analysis/view/view_set.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "analysis/ranks/cross_rank_report.h"
#include "analysis/ranks/rank_reduction.h"
#include "analysis/report/comparison_render.h"
#include "analysis/report/report_comparison.h"

namespace fragscope {
namespace {

using estimator::OrderedJson;

std::string FileName(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

// Adds one trace's view to the set, as source `id`; returns its entry of meta["sources"].
OrderedJson AddSource(ViewSet& set, const std::string& id, const TraceOpener& opener,
                      ViewBuild build, const std::string& dir) {
  set.files.merge(build.files);  // the page's assets are the same in every build
  set.sources.push_back({.id = id, .opener = opener});
  set.events += build.events;
  set.tiles += build.tiles;
  return {{"id", id}, {"dir", dir}, {"title", FileName(opener.path())}, {"events", build.events}};
}

OrderedJson SetMeta(const char* kind, const std::string& title, bool api) {
  OrderedJson meta;
  meta["format"] = "fragscope.view/1";
  meta["kind"] = kind;
  meta["title"] = title;
  meta["api"] = api;
  return meta;
}

// The largest power of two <= n (n >= 1).
size_t FloorPowerOfTwo(size_t n) {
  size_t p = 1;
  while (p <= n / 2) p *= 2;
  return p;
}

}  // namespace

absl::StatusOr<ViewSet> BuildTraceViewSet(const TraceOpener& opener,
                                          const ViewBuildOptions& options) {
  absl::StatusOr<ViewBuild> build = BuildViewFiles(opener, options);
  if (!build.ok()) return build.status();
  ViewSet set;
  set.meta = build->meta;
  AddSource(set, "", opener, *std::move(build), "data/");
  return set;
}

absl::StatusOr<ViewSet> BuildRankViewSet(const std::vector<std::string>& paths,
                                         const ViewBuildOptions& options) {
  absl::StatusOr<std::vector<RankSummary>> summaries =
      SummarizeRanks(paths, options.analysis, {.threads = options.analysis.threads});
  if (!summaries.ok()) return summaries.status();
  absl::StatusOr<CrossRankReport> report = BuildCrossRankReport(*std::move(summaries));
  if (!report.ok()) return report.status();
  const size_t n = report->ranks.size();

  // Each rank's view, in parallel (one replay state and one rank's files per thread).
  ViewBuildOptions each = options;
  each.max_finest_buckets =
      std::clamp<size_t>(FloorPowerOfTwo(kMaxSetBuckets / n), 4096, options.max_finest_buckets);
  std::vector<std::optional<absl::StatusOr<ViewBuild>>> builds(n);
  std::vector<std::optional<TraceOpener>> openers(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      const RankSummary& rank = report->ranks[i];
      absl::StatusOr<TraceOpener> opener =
          TraceOpener::Create(rank.path, {options.analysis.device});
      if (!opener.ok()) {
        builds[i] = opener.status();
        continue;
      }
      ViewBuildOptions mine = each;
      mine.analysis.run_sweep = options.analysis.run_sweep && report->worst == i;
      mine.analysis.threads = 1;
      builds[i] = BuildViewFiles(
          *opener, mine, {.id = absl::StrCat("s", i), .dir = absl::StrCat("data/s", i, "/")});
      openers[i] = *std::move(opener);
    }
  };
  const size_t threads = std::min<size_t>(
      n, options.analysis.threads > 0 ? static_cast<size_t>(options.analysis.threads)
                                      : std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();

  ViewSet set;
  OrderedJson sources = OrderedJson::array();
  for (size_t i = 0; i < n; ++i) {
    if (!builds[i]->ok()) return builds[i]->status();
    OrderedJson entry = AddSource(set, absl::StrCat("s", i), *openers[i], **std::move(builds[i]),
                                  absl::StrCat("data/s", i, "/"));
    entry["rank"] = report->ranks[i].rank;
    sources.push_back(std::move(entry));
  }
  set.meta = SetMeta("ranks", absl::StrCat(n, " ranks"), options.api);
  set.meta["sources"] = std::move(sources);
  set.meta["cross_rank"] = CrossRankJson(*report);
  set.files["data/meta.js"] = ViewMetaScript(set.meta);
  return set;
}

absl::StatusOr<ViewSet> BuildDiffViewSet(const TraceOpener& a, const TraceOpener& b,
                                         const ViewBuildOptions& options) {
  ViewBuildOptions each = options;
  each.analysis.run_sweep = false;  // as `fragscope diff`: the difference, not the settings
  absl::StatusOr<ViewBuild> build_a = BuildViewFiles(a, each, {.id = "a", .dir = "data/a/"});
  if (!build_a.ok()) return build_a.status();
  absl::StatusOr<ViewBuild> build_b = BuildViewFiles(b, each, {.id = "b", .dir = "data/b/"});
  if (!build_b.ok()) return build_b.status();
  const ReportComparison comparison =
      CompareReports(build_a->report, FileName(a.path()), build_b->report, FileName(b.path()));
  ViewSet set;
  OrderedJson sources = OrderedJson::array();
  sources.push_back(AddSource(set, "a", a, *std::move(build_a), "data/a/"));
  sources.push_back(AddSource(set, "b", b, *std::move(build_b), "data/b/"));
  set.meta = SetMeta("diff", absl::StrCat(FileName(a.path()), " against ", FileName(b.path())),
                     options.api);
  set.meta["sources"] = std::move(sources);
  set.meta["comparison"] = ComparisonJson(comparison);
  set.files["data/meta.js"] = ViewMetaScript(set.meta);
  return set;
}

HttpAnswer ViewSetLayoutAnswer(const ViewSet& set, const AnalysisOptions& analysis,
                               const std::string& source, uint64_t event) {
  for (const ViewSetSource& s : set.sources) {
    if (s.id == source) return ViewLayoutAnswer(s.opener, analysis, event);
  }
  OrderedJson error;
  error["error"] = absl::StrCat("no trace \"", source, "\" in this view");
  return {.status = 404, .body = ViewScriptJson(error)};
}

}  // namespace fragscope
