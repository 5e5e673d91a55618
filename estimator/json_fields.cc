#include "estimator/json_fields.h"

#include <cmath>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "estimator/json_value.h"
#include "estimator/status_macros.h"

namespace fragscope::estimator {

using Json = nlohmann::json;

std::string QuotedExcerpt(absl::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size() && i < 40; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
  }
  absl::StrAppend(&out, text.size() > 40 ? "...\"" : "\"");
  return out;
}

std::string DescribeJson(const Json& value) {
  if (value.is_number()) return absl::StrCat(value.get<double>());
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_string()) {
    return absl::StrCat(QuotedExcerpt(value.get_ref<const std::string&>()), " (a string)");
  }
  return absl::StrCat("a JSON ", JsonKindName(value));
}

const Json* FindKey(const Json& object, absl::string_view key) {
  const auto it = object.find(std::string_view(key.data(), key.size()));
  return it == object.end() ? nullptr : &*it;
}

const Json* FindNonNull(const Json& object, absl::string_view key) {
  const Json* value = FindKey(object, key);
  return value == nullptr || value->is_null() ? nullptr : value;
}

absl::StatusOr<int64_t> ReadJsonInteger(const Json& value, absl::string_view key) {
  constexpr double kMaxExact = 9007199254740992.0;  // 2^53
  const double number = value.is_number() ? value.get<double>() : -1;
  if (number < 0 || number != std::floor(number) || number > kMaxExact) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected a non-negative integer, got ", DescribeJson(value)));
  }
  return static_cast<int64_t>(number);
}

absl::StatusOr<bool> ReadJsonBool(const Json& value, absl::string_view key) {
  if (!value.is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected true or false, got ", DescribeJson(value)));
  }
  return value.get<bool>();
}

absl::StatusOr<std::string> ReadJsonString(const Json& value, absl::string_view key) {
  if (!value.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected a string, got ", DescribeJson(value)));
  }
  return value.get<std::string>();
}

namespace {

// Reads one value into a member of its type; the enumerations are strings.
absl::Status ReadInto(const Json& value, absl::string_view key, int64_t& field) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(field, ReadJsonInteger(value, key));
  return absl::OkStatus();
}

absl::Status ReadInto(const Json& value, absl::string_view key, bool& field) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(field, ReadJsonBool(value, key));
  return absl::OkStatus();
}

absl::Status ReadInto(const Json& value, absl::string_view key, std::string& field) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(field, ReadJsonString(value, key));
  return absl::OkStatus();
}

absl::Status ReadInto(const Json& value, absl::string_view key, NormKind& field) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const std::string text, ReadJsonString(value, key));
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(field, ParseNormKind(text, key));
  return absl::OkStatus();
}

absl::Status ReadInto(const Json& value, absl::string_view key, PositionKind& field) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const std::string text, ReadJsonString(value, key));
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(field, ParsePositionKind(text, key));
  return absl::OkStatus();
}

absl::Status ReadInto(const Json& value, absl::string_view key, QkNorm& field) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const std::string text, ReadJsonString(value, key));
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(field, ParseQkNorm(text, key));
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadSpecKeys(const Json& object, absl::Span<const SpecKey> keys, ModelSpec& spec) {
  for (const SpecKey& k : keys) {
    const Json* value = FindNonNull(object, k.key);
    if (value == nullptr) continue;
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
        std::visit([&](auto member) { return ReadInto(*value, k.key, spec.*member); }, k.member));
  }
  return absl::OkStatus();
}

}  // namespace fragscope::estimator
