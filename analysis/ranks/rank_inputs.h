// The inputs of a many-rank analysis: which files (directories and glob patterns expanded), and
// which rank each file is.
//
// Ranks: an .fslog header records its rank (the launcher's RANK). A PyTorch snapshot pickle or an
// RMM CSV records none: the rank is read from the file name as launchers write it
// (torchtitan's "rank{r}_memory_snapshot.pickle", "oom_rank{N}.pickle": the last "rank" followed
// by digits, optionally after "_" or "-"), else it is the file's position among the files given
// (after expansion, 0 first), and the report says which (RankSource).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/ranks/rank_summary.h"
#include "analysis/sources/trace_event.h"

namespace fragscope {

// The files named by `args`, in order: a directory stands for its trace files (names ending in
// .fslog, .fslog.zst, .pickle or .pkl, in natural order: rank2 before rank10), a pattern with *, ?
// or [ that names no file stands for the files it matches (glob(3), natural order), anything else
// for itself. Errors: a directory with no trace file, a pattern that matches nothing.
absl::StatusOr<std::vector<std::string>> ExpandTraceInputs(const std::vector<std::string>& args);

// The same for summaries (`fragscope merge`): a directory stands for its *.json files.
absl::StatusOr<std::vector<std::string>> ExpandSummaryInputs(const std::vector<std::string>& args);

// Natural order: runs of digits compare as numbers.
bool NaturalLess(std::string_view a, std::string_view b);

// The rank in a file name ("oom_rank12.pickle" -> 12), if any.
std::optional<int32_t> RankFromFileName(std::string_view path);

// The rank of a trace and where it came from: --rank, the header (.fslog), the file name, or the
// position among the traces given.
std::pair<int32_t, RankSource> AssignRank(const std::string& path, TraceFormat format,
                                          int32_t header_rank, const RankHint& hint);

}  // namespace fragscope
