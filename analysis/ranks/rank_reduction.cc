#include "analysis/ranks/rank_reduction.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/str_format.h"
#include "analysis/ranks/rank_summary_json.h"
#include "analysis/sources/open_trace.h"

namespace fragscope {

namespace {

// Runs `item(i)` for i in [0, n) on `threads` threads (0: one per core), each thread taking the
// next index; after the first error the threads stop at their next item. Returns the error of the
// lowest index that failed, with its index.
absl::Status ForEachInParallel(size_t n, int threads,
                               const std::function<absl::Status(size_t)>& item, size_t* failed_at) {
  std::vector<absl::Status> errors(n);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  const auto work = [&] {
    for (size_t i = next.fetch_add(1); i < n && !failed.load(); i = next.fetch_add(1)) {
      errors[i] = item(i);
      if (!errors[i].ok()) failed.store(true);
    }
  };
  size_t count = threads > 0 ? static_cast<size_t>(threads)
                             : std::max(1u, std::thread::hardware_concurrency());
  count = std::max<size_t>(1, std::min(count, n));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < count; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < n; ++i) {
    if (!errors[i].ok()) {
      *failed_at = i;
      return errors[i];
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<RankSummary>> SummarizeRanks(const std::vector<std::string>& paths,
                                                        const AnalysisOptions& options,
                                                        const RankReductionOptions& reduction) {
  std::vector<std::optional<RankSummary>> summaries(paths.size());
  std::mutex progress_mu;
  size_t done = 0;
  size_t failed_at = 0;
  const absl::Status status = ForEachInParallel(
      paths.size(), reduction.threads,
      [&](size_t i) -> absl::Status {
        absl::StatusOr<TraceOpener> opener = TraceOpener::Create(paths[i], {options.device});
        if (!opener.ok()) return opener.status();
        absl::StatusOr<RankSummary> summary =
            SummarizeTrace(*opener, options, RankHint{i, reduction.flag_rank});
        if (!summary.ok()) return summary.status();
        summaries[i] = *std::move(summary);
        if (reduction.progress) {
          std::lock_guard<std::mutex> lock(progress_mu);
          reduction.progress(++done, paths.size());
        }
        return absl::OkStatus();
      },
      &failed_at);
  if (!status.ok()) {
    // Replay errors may not say which file (a bad settings string): add it once.
    const std::string message(status.message());
    if (message.find(paths[failed_at]) != std::string::npos) return status;
    return absl::Status(status.code(), absl::StrFormat("%s: %s", paths[failed_at], message));
  }
  std::vector<RankSummary> out;
  out.reserve(paths.size());
  for (std::optional<RankSummary>& s : summaries) out.push_back(*std::move(s));
  return out;
}

absl::StatusOr<std::vector<RankSummary>> ReadRankSummaries(const std::vector<std::string>& paths,
                                                           int threads) {
  std::vector<std::optional<RankSummary>> summaries(paths.size());
  size_t failed_at = 0;
  const absl::Status status = ForEachInParallel(
      paths.size(), threads,
      [&](size_t i) -> absl::Status {
        absl::StatusOr<RankSummary> summary = ReadRankSummaryFile(paths[i]);
        if (!summary.ok()) return summary.status();
        summaries[i] = *std::move(summary);
        return absl::OkStatus();
      },
      &failed_at);
  if (!status.ok()) return status;
  std::vector<RankSummary> out;
  out.reserve(paths.size());
  for (std::optional<RankSummary>& s : summaries) out.push_back(*std::move(s));
  return out;
}

absl::StatusOr<CrossRankReport> AnalyzeRanks(const std::vector<std::string>& paths,
                                             const AnalysisOptions& options,
                                             const RankReductionOptions& reduction) {
  absl::StatusOr<std::vector<RankSummary>> summaries = SummarizeRanks(paths, options, reduction);
  if (!summaries.ok()) return summaries.status();
  absl::StatusOr<CrossRankReport> report = BuildCrossRankReport(*std::move(summaries));
  if (!report.ok() || !report->worst.has_value()) return report;
  const RankSummary& worst = report->ranks[*report->worst];
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(worst.path, {options.device});
  if (!opener.ok()) return opener.status();
  absl::StatusOr<RankReport> full = AnalyzeTrace(*opener, options);
  if (!full.ok()) return full.status();
  full->info.rank = worst.rank;  // a snapshot's, from its name or position
  report->worst_report = *std::move(full);
  return report;
}

}  // namespace fragscope
