// DebugString: Python's repr() of a PickleValue. Declared in pickle_value.h.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/sources/pickle/pickle_value.h"

namespace fragscope::pickle {
namespace {

void AppendQuoted(std::string_view s, bool bytes, std::string* out) {
  // Python picks double quotes only when the text has a single quote and no double quote.
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  if (bytes) out->push_back('b');
  out->push_back(quote);
  for (const char c : s) {
    const auto u = static_cast<uint8_t>(c);
    if (c == quote || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c == '\t') {
      out->append("\\t");
    } else if (u < 0x20 || u == 0x7f || (bytes && u >= 0x80)) {
      absl::StrAppendFormat(out, "\\x%02x", u);
    } else {
      out->push_back(c);  // non-ASCII UTF-8 of a str is printed as is
    }
  }
  out->push_back(quote);
}

// repr(float): shortest round-trip digits, exponent form when the decimal point would sit more
// than 16 places right or 4 places left of the first digit (CPython's float_repr_style 'short').
void AppendFloatRepr(double v, std::string* out) {
  if (std::isnan(v)) {
    out->append("nan");
    return;
  }
  if (std::isinf(v)) {
    out->append(v < 0 ? "-inf" : "inf");
    return;
  }
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(result.ptr - buf));
  const bool negative = !sci.empty() && sci.front() == '-';
  if (negative) sci.remove_prefix(1);
  const size_t e_pos = sci.find('e');
  std::string digits(sci.substr(0, e_pos));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exponent = 0;
  std::string_view exp_text = sci.substr(e_pos + 1);
  if (!exp_text.empty() && exp_text.front() == '+') exp_text.remove_prefix(1);
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exponent);
  const int decpt = exponent + 1;  // value = 0.DIGITS * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (negative) out->push_back('-');
  if (decpt <= -4 || decpt > 16) {
    out->push_back(digits[0]);
    if (n > 1) out->append(".").append(digits, 1);
    absl::StrAppendFormat(out, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (decpt <= 0) {
    absl::StrAppend(out, "0.", std::string(static_cast<size_t>(-decpt), '0'), digits);
  } else if (decpt >= n) {
    absl::StrAppend(out, digits, std::string(static_cast<size_t>(decpt - n), '0'), ".0");
  } else {
    const auto split = static_cast<size_t>(decpt);
    out->append(digits, 0, split).append(".").append(digits, split);
  }
}

void AppendRepr(const PickleValue& v, size_t depth_left, std::string* out) {
  switch (v.kind()) {
    case PickleKind::kNone:
      out->append("None");
      return;
    case PickleKind::kBool:
      out->append(v.bool_value() ? "True" : "False");
      return;
    case PickleKind::kInt:
      absl::StrAppend(out, v.int_value());
      return;
    case PickleKind::kBigInt:
      out->append(LittleEndianToDecimal(v.string_value()));
      return;
    case PickleKind::kFloat:
      AppendFloatRepr(v.float_value(), out);
      return;
    case PickleKind::kString:
    case PickleKind::kBytes:
      AppendQuoted(v.string_value(), v.kind() == PickleKind::kBytes, out);
      return;
    default:
      break;
  }
  if (depth_left == 0) {
    out->append("...");
    return;
  }
  if (v.kind() == PickleKind::kDict) {
    out->push_back('{');
    bool first = true;
    for (const auto& [key, value] : v.entries()) {
      if (!first) out->append(", ");
      first = false;
      AppendRepr(key, depth_left - 1, out);
      out->append(": ");
      AppendRepr(value, depth_left - 1, out);
    }
    out->push_back('}');
    return;
  }
  const bool tuple = v.kind() == PickleKind::kTuple;
  out->push_back(tuple ? '(' : '[');
  for (size_t i = 0; i < v.items().size(); ++i) {
    if (i > 0) out->append(", ");
    AppendRepr(v.items()[i], depth_left - 1, out);
  }
  if (tuple && v.items().size() == 1) out->push_back(',');
  out->push_back(tuple ? ')' : ']');
}

}  // namespace

std::string DebugString(const PickleValue& value, size_t max_depth) {
  std::string out;
  AppendRepr(value, max_depth, &out);
  return out;
}

std::string LittleEndianToDecimal(std::string_view le_bytes) {
  if (le_bytes.empty()) return "0";
  // Magnitude as big-endian bytes, then repeated division by 10.
  std::vector<uint8_t> mag(le_bytes.rbegin(), le_bytes.rend());
  const bool negative = (mag.front() & 0x80) != 0;
  if (negative) {  // two's complement: invert and add one
    for (auto& b : mag) b = static_cast<uint8_t>(~b);
    for (size_t i = mag.size(); i-- > 0;) {
      if (++mag[i] != 0) break;
    }
  }
  std::string digits;
  size_t start = 0;
  while (start < mag.size()) {
    unsigned remainder = 0;
    for (size_t i = start; i < mag.size(); ++i) {
      const unsigned cur = remainder * 256 + mag[i];
      mag[i] = static_cast<uint8_t>(cur / 10);
      remainder = cur % 10;
    }
    digits.push_back(static_cast<char>('0' + remainder));
    while (start < mag.size() && mag[start] == 0) ++start;
  }
  if (negative) digits.push_back('-');
  std::reverse(digits.begin(), digits.end());
  return digits;
}

}  // namespace fragscope::pickle
