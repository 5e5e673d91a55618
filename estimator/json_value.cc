#include "estimator/json_value.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fragscope::estimator {

absl::string_view JsonKindName(const nlohmann::json& value) {
  if (value.is_null()) return "null";
  if (value.is_boolean()) return "boolean";
  if (value.is_number()) return "number";
  if (value.is_string()) return "string";
  if (value.is_array()) return "array";
  if (value.is_object()) return "object";
  return "binary value";
}

namespace {

using Json = nlohmann::json;
constexpr size_t kMaxDepth = 64;
constexpr size_t kMaxQuoted = 40;  // bytes of a key quoted in an error

// `text` escaped (non-printable bytes as \xNN) and cut at kMaxQuoted bytes.
std::string Excerpt(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < kMaxQuoted; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
  }
  if (text.size() > kMaxQuoted) absl::StrAppend(&out, "... (", text.size(), " bytes)");
  return out;
}

// Builds the document as nlohmann's own DOM parser does, and refuses what the policy refuses.
class StrictDomBuilder final : public nlohmann::json_sax<Json> {
 public:
  explicit StrictDomBuilder(Json* root) : root_(root) {}

  bool null() override { return Put(Json(nullptr)); }
  bool boolean(bool v) override { return Put(Json(v)); }
  bool number_integer(number_integer_t v) override { return Put(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Put(Json(v)); }
  bool number_float(number_float_t v, const string_t& text) override {
    if (!std::isfinite(v)) return Fail(absl::StrCat("number out of range: ", Excerpt(text)));
    return Put(Json(v));
  }
  bool string(string_t& v) override { return Put(Json(std::move(v))); }
  bool binary(binary_t&) override { return Fail("binary values are not JSON"); }
  bool start_object(std::size_t) override { return Open(Json::object()); }
  bool key(string_t& k) override {
    Json& object = *stack_.back();
    auto [it, inserted] = object.emplace(std::move(k), nullptr);
    if (!inserted) return Fail(absl::StrCat("duplicate key \"", Excerpt(it.key()), "\""));
    member_ = &it.value();
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(Json::array()); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    // nlohmann's message; its "last read" token may be long: keep the reason, not the token.
    // "[json.exception.KIND.ID] " and, for a syntax error, "parse error at line L, column C: ".
    std::string_view reason = ex.what();
    if (const size_t id = reason.find("] "); id != std::string_view::npos) {
      reason.remove_prefix(id + 2);
    }
    if (reason.starts_with("parse error")) {
      if (const size_t colon = reason.find(": "); colon != std::string_view::npos) {
        reason.remove_prefix(colon + 2);
      }
    }
    std::string message(reason);
    if (const size_t token = message.find("; last read: '"); token != std::string::npos) {
      const size_t expected = message.rfind("'; expected ");
      message.erase(token, expected != std::string::npos && expected > token ? expected + 1 - token
                                                                             : std::string::npos);
    }
    (void)position;
    return Fail(message.size() > 200 ? message.substr(0, 200) + "..." : message);
  }

  // The error, or empty.
  const std::string& error() const { return error_; }

 private:
  bool Fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }
  Json* Slot() {
    if (stack_.empty()) return root_;
    Json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(nullptr);
      return &top.back();
    }
    return member_;
  }
  bool Put(Json value) {
    *Slot() = std::move(value);
    return true;
  }
  bool Open(Json container) {
    if (stack_.size() >= kMaxDepth) return Fail("nesting deeper than 64 levels");
    Json* slot = Slot();
    *slot = std::move(container);
    stack_.push_back(slot);
    return true;
  }
  bool Close() {
    stack_.pop_back();
    return true;
  }

  Json* root_;
  std::vector<Json*> stack_;  // open containers
  Json* member_ = nullptr;    // the value slot of the object key just read
  std::string error_;
};

// Where a byte offset is, for messages: "line L, column C (offset O)".
std::string Location(absl::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  int64_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return absl::StrFormat("line %d, column %d (offset %d)", line, offset - line_start + 1, offset);
}

// Counts the bytes the parser has read, so that an error the handler finds (a duplicate key)
// has a position too.
struct CountingIterator {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char* at;
  const char** furthest;
  reference operator*() const { return *at; }
  CountingIterator& operator++() {
    *furthest = ++at;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const CountingIterator& o) const { return at == o.at; }
  bool operator!=(const CountingIterator& o) const { return at != o.at; }
};

}  // namespace

absl::StatusOr<nlohmann::json> ParseJson(absl::string_view text) {
  Json root;
  StrictDomBuilder builder(&root);
  const char* furthest = text.data();
  const bool ok = Json::sax_parse(CountingIterator{text.data(), &furthest},
                                  CountingIterator{text.data() + text.size(), &furthest}, &builder,
                                  nlohmann::json::input_format_t::json, /*strict=*/true,
                                  /*ignore_comments=*/false);
  if (!ok) {
    // The parser reads one byte past the token it reports: the offset of the last byte read.
    const size_t read = static_cast<size_t>(furthest - text.data());
    const size_t offset = read > 0 ? read - 1 : 0;
    return absl::InvalidArgumentError(absl::StrCat(
        Location(text, offset), ": ", builder.error().empty() ? "invalid JSON" : builder.error()));
  }
  return root;
}

}  // namespace fragscope::estimator
