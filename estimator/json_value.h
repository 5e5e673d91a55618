// Strict JSON (RFC 8259) for model spec files, read with nlohmann/json into an nlohmann::json.
//
// Policy: strict. No comments, no trailing commas, no NaN/Infinity or out-of-range numbers, no
// invalid UTF-8, no duplicate object keys (an error naming the key), no content after the
// top-level value, nesting at most 64 deep. Syntax errors are kInvalidArgument with
// "line L, column C (offset O): ..." so a user can find the mistake in the file; any text they
// quote from the input is a short escaped excerpt. Linear in the input: objects are std::maps
// (a key is found, and a duplicate detected, in O(log n)).
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace fragscope::estimator {

// "null", "boolean", "number", "string", "array", "object" (nlohmann's own names, except that
// every number kind is "number" and binary values never occur).
absl::string_view JsonKindName(const nlohmann::json& value);

absl::StatusOr<nlohmann::json> ParseJson(absl::string_view text);

}  // namespace fragscope::estimator
