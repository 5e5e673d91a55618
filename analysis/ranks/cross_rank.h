// CrossRankReport: many ranks' summaries (rank_summary.h) side by side, with the ranks that stand
// out named and explained in words, the ranks grouped by pipeline stage and tensor-parallel group
// when the logs record the sizes, and the worst rank picked for the full explanation.
//
// Note [Outlier ranks]
// A rank is an outlier on a metric when it is far from the median of the ranks it is compared
// with, in a robust measure: its distance from the median is at least kOutlierMads times the
// median absolute deviation (MAD, scaled by 1.4826 to match a standard deviation on normal data),
// and at least a floor (kMinOutlierFraction of the median and kMinOutlierBytes, or
// kMinOutlierUtilization for utilization), so that identical ranks (MAD 0) with a few bytes of
// difference are not outliers. Metrics: peak reserved and peak allocated (high), memory outside
// PyTorch (high; ranks that record it), utilization (low). Ranks are compared within their
// pipeline stage when stages are known and each holds at least kMinComparedRanks ranks (stages
// legitimately differ: the last holds the loss and its logits); otherwise all together; fewer
// than kMinComparedRanks ranks name no outlier.
// Outliers are few by definition: when more than kMaxGroupOutliers ranks (or 5 % of the set, if
// more) pass the rule on one metric, they are a group (a second mode: with most ranks alike the
// MAD is 0 and the floor alone decides), said in a note, and only ranks beyond the group's 95th
// percentile by the floor again are named.
// For peak reserved and allocated, the excess is split by phase (PhaseRise: how much each marker
// phase raised the rank's peak, against the median rise of that phase over the ranks compared),
// so the sentence says where it arose: "rank 7 reserves 4.1 GiB more than the median (20.3 GiB
// against 16.2 GiB), all of it in the optimizer phase".
//
// Note [Pipeline stages and tensor-parallel groups]
// From the sizes the logs record (FRAGSCOPE_PP_SIZE, FRAGSCOPE_TP_SIZE) and the world size, with
// the rank order of Megatron-LM (default order tp-cp-ep-dp-pp) and torchtitan (mesh pp, dp, cp,
// tp): pipeline stage = rank / (world_size / pp_size), tensor-parallel group = rank / tp_size.
// Grouped only when every rank records the same sizes and they divide the world size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/ranks/rank_summary.h"
#include "analysis/report/report.h"

namespace fragscope {

inline constexpr double kOutlierMads = 3.5;
inline constexpr double kMadScale = 1.4826;
inline constexpr double kMinOutlierFraction = 0.05;
inline constexpr uint64_t kMinOutlierBytes = uint64_t{64} << 20;
inline constexpr double kMinOutlierUtilization = 0.05;
inline constexpr size_t kMinComparedRanks = 3;
inline constexpr size_t kMaxGroupOutliers = 3;

enum class OutlierMetric : uint8_t { kPeakReserved, kPeakAllocated, kOutsidePyTorch, kUtilization };
// "peak_reserved", "peak_allocated", "outside_pytorch", "utilization".
std::string_view OutlierMetricName(OutlierMetric metric);

struct RankOutlier {
  size_t index = 0;  // into CrossRankReport::ranks
  int32_t rank = 0;
  OutlierMetric metric = OutlierMetric::kPeakReserved;
  double value = 0;   // bytes, or a fraction for utilization
  double median = 0;  // of the ranks compared with
  // Distance from the median in scaled MADs; infinity when the others do not vary (MAD 0).
  double mads = 0;
  std::string compared_with;  // "all ranks", "pipeline stage 1"
  // Peak reserved / allocated: the phase holding most of the excess, its share of the excess.
  std::string phase;
  uint64_t phase_excess_bytes = 0;
  double phase_share = 0;
  std::string sentence;
};

struct RankGroup {
  int32_t index = 0;  // the stage or group number
  int32_t first_rank = 0;
  int32_t last_rank = 0;
  size_t ranks = 0;  // of them with a summary
  uint64_t median_peak_reserved_bytes = 0;
  uint64_t max_peak_reserved_bytes = 0;
  int32_t max_rank = 0;
  size_t oom_ranks = 0;
};

struct CrossRankReport {
  std::vector<RankSummary> ranks;      // by rank
  int32_t world_size = 0;              // 0: not recorded
  std::vector<int32_t> missing_ranks;  // below world_size, without a summary (the first 100)
  size_t missing_rank_count = 0;
  uint64_t median_peak_allocated_bytes = 0;
  uint64_t median_peak_reserved_bytes = 0;
  std::optional<uint64_t> median_outside_pytorch_bytes;
  double median_utilization = 0;
  std::vector<RankOutlier> outliers;  // by rank, then metric
  int32_t pp_size = 0;                // 0: ranks not grouped
  int32_t tp_size = 0;
  std::vector<RankGroup> stages;
  std::vector<RankGroup> tp_groups;
  std::optional<size_t> worst;  // into ranks
  std::string worst_reason;
  std::vector<std::string> notes;  // where ranks came from, grouping, missing ranks
  // `fragscope analyze`: the worst rank's full analysis (replayed again, with the sweep).
  std::optional<RankReport> worst_report;
};

// Errors (the ranks of one job are expected): two summaries of one rank, different world sizes.
absl::StatusOr<CrossRankReport> BuildCrossRankReport(std::vector<RankSummary> ranks);

// The outliers a rendering shows when it shows at most `max`: those furthest from their median
// (relative to it), in rank order; indices into report.outliers.
std::vector<size_t> LeadingOutliers(const CrossRankReport& report, size_t max);
inline constexpr size_t kOutliersShown = 20;

}  // namespace fragscope
