// Many ranks' traces reduced to summaries in parallel, and the cross-rank report built from
// them: `fragscope analyze` over several traces, `fragscope summarize`.
//
// Each thread takes the next trace, replays it (SummarizeTrace) and keeps only its summary, so
// memory is one replay's state per thread plus the summaries (a few KiB each), whatever the
// number of ranks. Traces are given to threads in order, so a thread never waits for another.
// The scale-out beyond one machine is the cluster's launcher: `fragscope summarize` on each node
// (a Slurm array, a torchrun step), then `fragscope merge` of the summaries.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/analyzer.h"
#include "analysis/ranks/cross_rank.h"
#include "analysis/ranks/rank_summary.h"

namespace fragscope {

struct RankReductionOptions {
  int threads = 0;                   // 0: one per core
  std::optional<int32_t> flag_rank;  // --rank, for a single trace
  // Called after each trace, from the thread that summarized it (serialized): done, total.
  std::function<void(size_t done, size_t total)> progress;
};

// The summaries of `paths`, in the order given. Errors: a trace that failed (of those read, the
// first in the order given), naming its file; the other threads stop at their next trace.
absl::StatusOr<std::vector<RankSummary>> SummarizeRanks(const std::vector<std::string>& paths,
                                                        const AnalysisOptions& options,
                                                        const RankReductionOptions& reduction);

// The summaries in `paths` (rank_summary_json.h), read in parallel, in the order given. Errors:
// the first file (in that order) that cannot be read or is not a summary.
absl::StatusOr<std::vector<RankSummary>> ReadRankSummaries(const std::vector<std::string>& paths,
                                                           int threads);

// SummarizeRanks, BuildCrossRankReport, then the worst rank's full analysis (AnalyzeTrace: its
// replay again, with the sweep and --model / --at as `options` say).
absl::StatusOr<CrossRankReport> AnalyzeRanks(const std::vector<std::string>& paths,
                                             const AnalysisOptions& options,
                                             const RankReductionOptions& reduction);

}  // namespace fragscope
