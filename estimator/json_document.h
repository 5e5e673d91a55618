// Writing JSON with nlohmann/json: every document fragscope writes is an nlohmann::ordered_json
// (keys in the order they are set), rendered by DumpJson, and its fractional figures go through
// JsonNumber, so that all outputs share one layout and one number rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace fragscope::estimator {

using OrderedJson = nlohmann::ordered_json;

// A whole number below 2^53 as an integer, exactly (it prints without a fraction: "0", not
// "0.0"); any other `value` rounded to `significant_digits` (as printf's %.Ng rounds), an
// integer again if the rounding made it whole.
// NaN and infinities, which JSON cannot carry, become null.
OrderedJson JsonNumber(double value, int significant_digits);

// The value, or null.
template <typename T>
OrderedJson JsonOrNull(const std::optional<T>& value) {
  return value.has_value() ? OrderedJson(*value) : OrderedJson(nullptr);
}

// `indent` spaces per level with a newline after the document; indent < 0: one line, no spaces
// and no newline. Strings are UTF-8 as given, with invalid bytes replaced by U+FFFD (JSON text
// must be UTF-8; trace paths and marker names need not be).
std::string DumpJson(const OrderedJson& document, int indent = 2);

}  // namespace fragscope::estimator
