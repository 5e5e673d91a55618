// Several traces (one per rank, or the devices of one snapshot): each analyzed in turn, the
// ranks checked to be one job's, and the worst named.
#include "analysis/analyzer.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "allocator/format_size.h"
#include "analysis/sources/open_trace.h"

namespace fragscope {

absl::StatusOr<AnalysisReport> AnalyzeTraces(const std::vector<std::string>& paths,
                                             const AnalysisOptions& options) {
  if (paths.empty()) return absl::InvalidArgumentError("no trace given");
  std::vector<TraceOpener> openers;
  std::map<int32_t, std::string> rank_paths;
  std::optional<int32_t> world_size;
  std::string world_size_path;
  AnalysisReport report;
  for (const std::string& path : paths) {
    absl::StatusOr<TraceOpener> opener =
        TraceOpener::Create(path, {.device = options.device, .every_device = paths.size() == 1});
    if (!opener.ok()) return opener.status();
    if (const std::vector<int> devices = opener->Devices();
        paths.size() == 1 && options.device < 0 && devices.size() > 1) {
      // One snapshot, several devices' traces: each device is a report of its own.
      report.per_device = true;
      for (const int device : devices) {
        absl::StatusOr<TraceOpener> one = opener->ForDevice(device);
        if (!one.ok()) return one.status();
        openers.push_back(*std::move(one));
      }
      continue;
    }
    if (paths.size() > 1) {
      absl::StatusOr<std::unique_ptr<TraceSource>> probe = opener->Open();
      if (!probe.ok()) return probe.status();
      const TraceInfo& info = (*probe)->info();
      if (info.format != TraceFormat::kFslog) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: several traces are analyzed as the ranks of one job, which needs .fslog logs "
            "(they record the rank); analyze %s traces one at a time",
            path, TraceFormatName(info.format)));
      }
      auto [it, inserted] = rank_paths.emplace(info.rank, path);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "not the ranks of one job: %s and %s both claim rank %d; give one log per rank",
            it->second, path, info.rank));
      }
      if (world_size.has_value() && *world_size != info.world_size) {
        return absl::InvalidArgumentError(
            absl::StrFormat("not the ranks of one job: %s has world size %d but %s has %d",
                            world_size_path, *world_size, path, info.world_size));
      }
      world_size = info.world_size;
      world_size_path = path;
    }
    openers.push_back(std::move(*opener));
  }
  for (const TraceOpener& opener : openers) {
    absl::StatusOr<RankReport> rank = AnalyzeTrace(opener, options);
    if (!rank.ok()) return rank.status();
    report.ranks.push_back(std::move(*rank));
  }
  if (report.ranks.size() > 1) {
    // Worst: the first to run out of memory (wall clock); else the highest peak reserved. Ties
    // go to the lowest rank, whatever the order of the paths, and are said.
    const auto first_oom_time = [&](const RankReport& r) {
      return r.info.start_wall_ns + static_cast<int64_t>(r.ooms.front().time_ns);
    };
    std::vector<size_t> tied;  // the ranks (indices) that share the worst key
    const auto consider = [&](size_t i, auto key_of) {
      if (tied.empty() || key_of(report.ranks[i]) < key_of(report.ranks[tied.front()])) {
        tied = {i};
      } else if (key_of(report.ranks[i]) == key_of(report.ranks[tied.front()])) {
        tied.push_back(i);
      }
    };
    for (size_t i = 0; i < report.ranks.size(); ++i) {
      if (!report.ranks[i].ooms.empty()) consider(i, first_oom_time);
    }
    const bool oom = !tied.empty();
    if (!oom) {
      for (size_t i = 0; i < report.ranks.size(); ++i) {
        consider(i, [](const RankReport& r) {
          return ~uint64_t{0} - r.metrics.peak_reserved_bytes;  // most reserved first
        });
      }
    }
    // A snapshot's devices are told apart by device, ranks by rank.
    const auto id = [&](const RankReport& r) {
      return report.per_device ? r.info.device : r.info.rank;
    };
    const char* unit = report.per_device ? "device" : "rank";
    std::sort(tied.begin(), tied.end(),
              [&](size_t a, size_t b) { return id(report.ranks[a]) < id(report.ranks[b]); });
    const RankReport& worst = report.ranks[tied.front()];
    report.worst = tied.front();
    if (tied.size() == 1) {
      report.worst_reason =
          oom ? absl::StrFormat("%s %d ran out of memory first (event %d)", unit, id(worst),
                                worst.ooms.front().event_index)
              : absl::StrFormat("no %s ran out of memory; %s %d reserved the most (%s peak)", unit,
                                unit, id(worst), FormatSize(worst.metrics.peak_reserved_bytes));
    } else {
      std::vector<std::string> ids;
      for (size_t i : tied) ids.push_back(absl::StrCat(id(report.ranks[i])));
      const std::string who = absl::StrJoin(ids, ", ");
      report.worst_reason =
          oom ? absl::StrFormat(
                    "%ss %s ran out of memory at the same moment (event %d; %s %d "
                    "shown)",
                    unit, who, worst.ooms.front().event_index, unit, id(worst))
              : absl::StrFormat(
                    "no %s ran out of memory; %ss %s reserved the most (%s peak; "
                    "%s %d shown)",
                    unit, unit, who, FormatSize(worst.metrics.peak_reserved_bytes), unit,
                    id(worst));
    }
  }
  return report;
}

}  // namespace fragscope
