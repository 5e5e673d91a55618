// RankSummary as JSON (schema "fragscope.rank_summary", CROSS_RANK_SCHEMA.md): written by
// `fragscope summarize`, read back, checked field by field, by `fragscope merge`.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"
#include "analysis/ranks/rank_summary.h"

namespace fragscope {

inline constexpr char kRankSummarySchema[] = "fragscope.rank_summary";
// Bumped when a field changes meaning or disappears; additions keep the version.
inline constexpr int kRankSummarySchemaVersion = 1;
// A summary is a few KiB; a file larger than this is not one (and is not read whole).
inline constexpr size_t kMaxRankSummaryFileBytes = 1 << 20;

// The summary's fields as a JSON object, without the schema fields (the cross-rank report embeds
// it); RankSummaryDocument adds them.
nlohmann::ordered_json RankSummaryToJson(const RankSummary& summary);
std::string RankSummaryDocument(const RankSummary& summary);

// Reads the object `json` (RankSummaryToJson's fields). Errors name `name` and the key, and what
// was found instead ("s.json: key 'phases[2].reserved_rise_bytes': expected an unsigned integer,
// got string").
absl::StatusOr<RankSummary> RankSummaryFromJson(const nlohmann::json& json,
                                                const std::string& name);
// A whole document: the schema fields checked (another schema, or a newer version, is an
// error), then the summary.
absl::StatusOr<RankSummary> ParseRankSummaryDocument(std::string_view text,
                                                     const std::string& name);
// Errors: the file cannot be read or is larger than kMaxRankSummaryFileBytes, then those above.
absl::StatusOr<RankSummary> ReadRankSummaryFile(const std::string& path);

}  // namespace fragscope
