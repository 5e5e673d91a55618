#include "analysis/ranks/cross_rank.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "allocator/format_size.h"
#include "analysis/ranks/cross_rank_outliers.h"

namespace fragscope {

std::string_view OutlierMetricName(OutlierMetric metric) {
  switch (metric) {
    case OutlierMetric::kPeakReserved:
      return "peak_reserved";
    case OutlierMetric::kPeakAllocated:
      return "peak_allocated";
    case OutlierMetric::kOutsidePyTorch:
      return "outside_pytorch";
    case OutlierMetric::kUtilization:
      return "utilization";
  }
  return "unknown";
}

namespace {

absl::Status CheckOneJob(const std::vector<RankSummary>& ranks) {
  const RankSummary* sized = nullptr;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0 && ranks[i].rank == ranks[i - 1].rank) {
      const RankSummary& a = ranks[i - 1];
      const RankSummary& b = ranks[i];
      return absl::InvalidArgumentError(absl::StrFormat(
          "not the ranks of one job: %s and %s both claim rank %d (from the %s and the %s)%s; "
          "give one log per rank",
          a.path, b.path, a.rank, RankSourceName(a.rank_source), RankSourceName(b.rank_source),
          a.world_size == 0 && b.world_size == 0 && a.rank_source == RankSource::kLogHeader
              ? " - their logs record no launcher environment (RANK, WORLD_SIZE)"
              : ""));
    }
    if (ranks[i].world_size == 0) continue;
    if (sized != nullptr && sized->world_size != ranks[i].world_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("not the ranks of one job: %s has world size %d but %s has %d",
                          sized->path, sized->world_size, ranks[i].path, ranks[i].world_size));
    }
    sized = &ranks[i];
  }
  return absl::OkStatus();
}

// The size every rank that records one agrees on, if they do and it divides the world size
// (Note [Pipeline stages and tensor-parallel groups]); 0 otherwise, with a note when they differ.
int32_t CommonSize(const std::vector<RankSummary>& ranks, int32_t world_size,
                   int32_t RankSummary::*size, std::string_view what,
                   std::vector<std::string>* notes) {
  int32_t common = 0;
  for (const RankSummary& r : ranks) {
    const int32_t s = r.*size;
    if (s <= 0) continue;
    if (common != 0 && s != common) {
      notes->push_back(
          absl::StrFormat("the logs record different %s sizes (%d, %d): ranks are "
                          "not grouped by them",
                          what, common, s));
      return 0;
    }
    common = s;
  }
  if (common > 0 && (world_size <= 0 || world_size % common != 0)) {
    notes->push_back(absl::StrFormat(
        "%s size %d does not divide the world size (%d): ranks are not grouped by it", what, common,
        world_size));
    return 0;
  }
  return common;
}

std::vector<RankGroup> Groups(const std::vector<RankSummary>& ranks, int32_t ranks_per_group,
                              std::vector<ComparedRanks>* sets, std::string_view name) {
  std::map<int32_t, std::vector<size_t>> members;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i].rank >= 0) members[ranks[i].rank / ranks_per_group].push_back(i);
  }
  std::vector<RankGroup> groups;
  for (const auto& [index, list] : members) {
    RankGroup g;
    g.index = index;
    g.first_rank = index * ranks_per_group;
    g.last_rank = g.first_rank + ranks_per_group - 1;
    g.ranks = list.size();
    std::vector<double> reserved;
    for (size_t i : list) {
      const RankSummary& r = ranks[i];
      reserved.push_back(static_cast<double>(r.peak_reserved_bytes));
      if (r.peak_reserved_bytes > g.max_peak_reserved_bytes || g.max_peak_reserved_bytes == 0) {
        g.max_peak_reserved_bytes = r.peak_reserved_bytes;
        g.max_rank = r.rank;
      }
      if (r.first_oom.has_value()) ++g.oom_ranks;
    }
    g.median_peak_reserved_bytes = static_cast<uint64_t>(Median(std::move(reserved)));
    groups.push_back(g);
    if (sets != nullptr) sets->push_back({list, absl::StrFormat("%s %d", name, index)});
  }
  return groups;
}

// The worst rank: the first to run out of memory (wall clock), else the one that reserved the
// most; ties go to the lowest rank and are said.
void PickWorst(CrossRankReport& report) {
  const auto& ranks = report.ranks;
  if (ranks.size() < 2) return;
  std::vector<size_t> tied;
  const auto consider = [&](size_t i, auto key_of) {
    if (tied.empty() || key_of(ranks[i]) < key_of(ranks[tied.front()])) {
      tied = {i};
    } else if (key_of(ranks[i]) == key_of(ranks[tied.front()])) {
      tied.push_back(i);
    }
  };
  const auto oom_time = [](const RankSummary& r) {
    return r.start_wall_ns + static_cast<int64_t>(r.first_oom->time_ns);
  };
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i].first_oom.has_value()) consider(i, oom_time);
  }
  const bool oom = !tied.empty();
  if (!oom) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      consider(i, [](const RankSummary& r) { return ~uint64_t{0} - r.peak_reserved_bytes; });
    }
  }
  report.worst = tied.front();  // ranks are in rank order: the lowest
  const RankSummary& worst = ranks[tied.front()];
  if (tied.size() == 1) {
    report.worst_reason =
        oom ? absl::StrFormat("rank %d ran out of memory first (event %d)", worst.rank,
                              worst.first_oom->event_index)
            : absl::StrFormat("no rank ran out of memory; rank %d reserved the most (%s peak)",
                              worst.rank, FormatSize(worst.peak_reserved_bytes));
    return;
  }
  std::vector<std::string> who;
  for (size_t i : tied) who.push_back(absl::StrCat(ranks[i].rank));
  report.worst_reason =
      oom ? absl::StrFormat(
                "ranks %s ran out of memory at the same moment (event %d; rank %d shown)",
                absl::StrJoin(who, ", "), worst.first_oom->event_index, worst.rank)
          : absl::StrFormat(
                "no rank ran out of memory; ranks %s reserved the most (%s peak; rank %d shown)",
                absl::StrJoin(who, ", "), FormatSize(worst.peak_reserved_bytes), worst.rank);
}

void NoteRankSources(CrossRankReport& report) {
  std::map<RankSource, size_t> counts;
  for (const RankSummary& r : report.ranks) ++counts[r.rank_source];
  std::vector<std::string> parts;
  for (const auto& [source, n] : counts) {
    if (source == RankSource::kLogHeader) continue;
    parts.push_back(absl::StrFormat("%d from %s", n,
                                    source == RankSource::kFileName     ? "their file names"
                                    : source == RankSource::kOrderGiven ? "the order given"
                                                                        : "--rank"));
  }
  if (!parts.empty()) {
    report.notes.push_back(
        absl::StrFormat("ranks of traces that record none (snapshot pickles, RMM CSVs): %s",
                        absl::StrJoin(parts, ", ")));
  }
}

}  // namespace

absl::StatusOr<CrossRankReport> BuildCrossRankReport(std::vector<RankSummary> ranks) {
  std::stable_sort(ranks.begin(), ranks.end(),
                   [](const RankSummary& a, const RankSummary& b) { return a.rank < b.rank; });
  if (absl::Status s = CheckOneJob(ranks); !s.ok()) return s;
  CrossRankReport report;
  report.ranks = std::move(ranks);
  const std::vector<RankSummary>& r = report.ranks;
  for (const RankSummary& s : r) report.world_size = std::max(report.world_size, s.world_size);

  std::vector<double> allocated, reserved, outside, utilization;
  for (const RankSummary& s : r) {
    allocated.push_back(static_cast<double>(s.peak_allocated_bytes));
    reserved.push_back(static_cast<double>(s.peak_reserved_bytes));
    if (s.outside_pytorch_bytes.has_value()) {
      outside.push_back(static_cast<double>(*s.outside_pytorch_bytes));
    }
    if (s.peak_reserved_bytes > 0) utilization.push_back(s.utilization);
  }
  report.median_peak_allocated_bytes = static_cast<uint64_t>(Median(std::move(allocated)));
  report.median_peak_reserved_bytes = static_cast<uint64_t>(Median(std::move(reserved)));
  if (!outside.empty()) {
    report.median_outside_pytorch_bytes = static_cast<uint64_t>(Median(std::move(outside)));
  }
  report.median_utilization = Median(std::move(utilization));

  if (report.world_size > 0) {
    size_t k = 0;
    for (int32_t rank = 0; rank < report.world_size; ++rank) {
      while (k < r.size() && r[k].rank < rank) ++k;
      if (k < r.size() && r[k].rank == rank) continue;
      ++report.missing_rank_count;
      if (report.missing_ranks.size() < 100) report.missing_ranks.push_back(rank);
    }
    if (report.missing_rank_count > 0) {
      std::vector<std::string> shown;
      for (int32_t m : report.missing_ranks) shown.push_back(absl::StrCat(m));
      report.notes.push_back(
          absl::StrFormat("%d of the world's %d ranks have no trace here: %s%s",
                          report.missing_rank_count, report.world_size, absl::StrJoin(shown, ", "),
                          report.missing_rank_count > report.missing_ranks.size() ? ", ..." : ""));
    }
  }

  report.pp_size =
      CommonSize(r, report.world_size, &RankSummary::pp_size, "pipeline-parallel", &report.notes);
  report.tp_size =
      CommonSize(r, report.world_size, &RankSummary::tp_size, "tensor-parallel", &report.notes);
  std::vector<ComparedRanks> stage_sets;
  if (report.pp_size > 0) {
    report.stages = Groups(r, report.world_size / report.pp_size, &stage_sets, "pipeline stage");
  }
  if (report.tp_size > 0) report.tp_groups = Groups(r, report.tp_size, nullptr, "");

  // Compare within stages when each has enough ranks (Note [Outlier ranks]).
  bool by_stage = !stage_sets.empty();
  for (const ComparedRanks& set : stage_sets) by_stage &= set.members.size() >= kMinComparedRanks;
  std::vector<ComparedRanks> sets;
  if (by_stage) {
    sets = std::move(stage_sets);
  } else {
    ComparedRanks all{{}, "all ranks"};
    for (size_t i = 0; i < r.size(); ++i) all.members.push_back(i);
    sets.push_back(std::move(all));
    if (report.pp_size > 0) {
      report.notes.push_back(absl::StrFormat(
          "ranks are compared across pipeline stages: some stage has fewer than %d ranks here",
          kMinComparedRanks));
    }
  }
  report.outliers = FindOutliers(r, sets, &report.notes);
  PickWorst(report);
  NoteRankSources(report);
  return report;
}

std::vector<size_t> LeadingOutliers(const CrossRankReport& report, size_t max) {
  std::vector<size_t> order(report.outliers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (order.size() <= max) return order;
  const auto relative = [&](size_t i) {
    const RankOutlier& o = report.outliers[i];
    return std::fabs(o.value - o.median) / std::max(std::fabs(o.median), 1e-9);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return relative(a) > relative(b); });
  order.resize(max);
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace fragscope
