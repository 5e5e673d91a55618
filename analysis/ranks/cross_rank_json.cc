// The JSON rendering of a CrossRankReport (schema "fragscope.cross_rank", CROSS_RANK_SCHEMA.md).
#include <cmath>

#include <nlohmann/json.hpp>

#include "analysis/ranks/cross_rank_report.h"
#include "analysis/ranks/rank_summary_json.h"
#include "analysis/report/json_report.h"
#include "estimator/json_document.h"

namespace fragscope {
namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json Groups(const std::vector<RankGroup>& groups) {
  ordered_json out = ordered_json::array();
  for (const RankGroup& g : groups) {
    out.push_back(ordered_json{{"index", g.index},
                               {"first_rank", g.first_rank},
                               {"last_rank", g.last_rank},
                               {"ranks", g.ranks},
                               {"median_peak_reserved_bytes", g.median_peak_reserved_bytes},
                               {"max_peak_reserved_bytes", g.max_peak_reserved_bytes},
                               {"max_rank", g.max_rank},
                               {"oom_ranks", g.oom_ranks}});
  }
  return out;
}

}  // namespace

void WriteCrossRankJson(const CrossRankReport& report, std::ostream& out) {
  out << estimator::DumpJson(CrossRankJson(report));
}

ordered_json CrossRankJson(const CrossRankReport& report) {
  ordered_json j;
  j["schema"] = kCrossRankSchema;
  j["schema_version"] = kCrossRankSchemaVersion;
  j["rank_count"] = report.ranks.size();
  j["world_size"] = report.world_size;
  j["missing_rank_count"] = report.missing_rank_count;
  j["missing_ranks"] = report.missing_ranks;
  ordered_json medians;
  medians["peak_allocated_bytes"] = report.median_peak_allocated_bytes;
  medians["peak_reserved_bytes"] = report.median_peak_reserved_bytes;
  medians["outside_pytorch_bytes"] = report.median_outside_pytorch_bytes.has_value()
                                         ? ordered_json(*report.median_outside_pytorch_bytes)
                                         : ordered_json();
  medians["utilization"] = report.median_utilization;
  j["medians"] = std::move(medians);
  ordered_json outliers = ordered_json::array();
  for (const RankOutlier& o : report.outliers) {
    ordered_json x;
    x["rank"] = o.rank;
    x["metric"] = std::string(OutlierMetricName(o.metric));
    x["value"] = o.value;
    x["median"] = o.median;
    x["mads"] = std::isfinite(o.mads) ? ordered_json(o.mads) : ordered_json();
    x["compared_with"] = o.compared_with;
    x["phase"] = o.phase.empty() ? ordered_json() : ordered_json(o.phase);
    x["phase_excess_bytes"] = o.phase_excess_bytes;
    x["phase_share"] = o.phase_share;
    x["sentence"] = o.sentence;
    outliers.push_back(std::move(x));
  }
  j["outliers"] = std::move(outliers);
  j["pp_size"] = report.pp_size;
  j["tp_size"] = report.tp_size;
  j["pipeline_stages"] = Groups(report.stages);
  j["tensor_parallel_groups"] = Groups(report.tp_groups);
  j["worst_rank"] =
      report.worst.has_value() ? ordered_json(report.ranks[*report.worst].rank) : ordered_json();
  j["worst_reason"] = report.worst_reason;
  j["notes"] = report.notes;
  ordered_json ranks = ordered_json::array();
  for (const RankSummary& r : report.ranks) ranks.push_back(RankSummaryToJson(r));
  j["ranks"] = std::move(ranks);
  if (report.worst_report.has_value()) {
    AnalysisReport worst;
    worst.ranks.push_back(*report.worst_report);
    j["worst_report"] = JsonReport(worst, {});
  } else {
    j["worst_report"] = nullptr;
  }
  return j;
}

}  // namespace fragscope
