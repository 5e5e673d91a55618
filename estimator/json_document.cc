#include "estimator/json_document.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_format.h"

namespace fragscope::estimator {

OrderedJson JsonNumber(double value, int significant_digits) {
  // 2^53: every integer below it is exactly representable as a double.
  constexpr double kExactIntegers = 9007199254740992.0;
  const auto is_integer = [&](double v) {
    return v == std::trunc(v) && std::fabs(v) < kExactIntegers;
  };
  if (!std::isfinite(value)) return nullptr;
  if (is_integer(value)) return static_cast<int64_t>(value);
  const double rounded =
      std::strtod(absl::StrFormat("%.*g", significant_digits, value).c_str(), nullptr);
  if (is_integer(rounded)) return static_cast<int64_t>(rounded);
  return rounded;
}

std::string DumpJson(const OrderedJson& document, int indent) {
  std::string text =
      document.dump(indent, ' ', /*ensure_ascii=*/false, OrderedJson::error_handler_t::replace);
  if (indent >= 0) text.push_back('\n');
  return text;
}

}  // namespace fragscope::estimator
