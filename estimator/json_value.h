// A small strict JSON reader (RFC 8259) for model spec files. Abseil 20220623 has no JSON.
//
// Policy: strict. No comments, no trailing commas, no NaN/Infinity, no duplicate object keys, no
// content after the top-level value, nesting at most 64 deep. Errors are kInvalidArgument with
// "line L, column C: ..." so a user can find the mistake in the file. Objects keep key order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fragscope::estimator {

class JsonValue {
 public:
  enum class Kind : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };

  JsonValue() = default;
  static JsonValue Bool(bool value);
  static JsonValue Number(double value);
  static JsonValue String(std::string value);
  static JsonValue Array(std::vector<JsonValue> items);
  // REQUIRES: keys.size() == values.size(); keys distinct.
  static JsonValue Object(std::vector<std::string> keys, std::vector<JsonValue> values);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  // Accessors REQUIRE the matching kind; they return a default value otherwise.
  bool bool_value() const { return bool_; }
  double number() const { return number_; }
  const std::string& string_value() const { return string_; }
  const std::vector<JsonValue>& items() const { return items_; }
  const std::vector<std::string>& keys() const { return keys_; }
  // Member `key` of an object, or nullptr.
  const JsonValue* Find(absl::string_view key) const;

 private:
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<JsonValue> items_;  // array items, or object values parallel to keys_
  std::vector<std::string> keys_;
};

// "null", "boolean", "number", "string", "array", "object".
absl::string_view JsonKindName(JsonValue::Kind kind);

absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

}  // namespace fragscope::estimator
