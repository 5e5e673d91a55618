// Reading typed fields of a JSON object into a ModelSpec: shared by fragscope's own spec schema
// (model_spec_json.h) and the Hugging Face config reader (hf_config.h).
//
// Errors are kInvalidArgument naming the key and quoting the value: "hidden_size: expected a
// non-negative integer, got -5", "norm: expected a string, got 3". A null integer or boolean
// counts as absent (Hugging Face configs write null for "the class default").
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"

#include "estimator/model_spec.h"

namespace fragscope::estimator {

// A text from the file for a message: quoted, at most 40 bytes of it, non-printable bytes escaped.
std::string QuotedExcerpt(absl::string_view text);

// A value for a message: numbers and booleans as written, a string as a short excerpt.
std::string DescribeJson(const nlohmann::json& value);

// Member `key` of `object`, or nullptr.
const nlohmann::json* FindKey(const nlohmann::json& object, absl::string_view key);

// Member `key` of `object`, or nullptr when absent or null.
const nlohmann::json* FindNonNull(const nlohmann::json& object, absl::string_view key);

absl::StatusOr<int64_t> ReadJsonInteger(const nlohmann::json& value, absl::string_view key);
absl::StatusOr<bool> ReadJsonBool(const nlohmann::json& value, absl::string_view key);
absl::StatusOr<std::string> ReadJsonString(const nlohmann::json& value, absl::string_view key);

// A key of a spec file and the ModelSpec member it sets.
struct SpecKey {
  const char* key;
  std::variant<int64_t ModelSpec::*, bool ModelSpec::*, NormKind ModelSpec::*,
               PositionKind ModelSpec::*, QkNorm ModelSpec::*, std::string ModelSpec::*>
      member;
};

// Reads the keys `object` has into `spec`, in the order listed (the first bad one is reported);
// absent and null keys leave their member as it is.
absl::Status ReadSpecKeys(const nlohmann::json& object, absl::Span<const SpecKey> keys,
                          ModelSpec& spec);

}  // namespace fragscope::estimator
