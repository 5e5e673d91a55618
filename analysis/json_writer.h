// JsonWriter: a small streaming JSON writer for reports (objects, arrays, strings, numbers),
// with RFC 8259 string escaping and stable formatting (two-space indent, keys in the order
// written), so golden-file tests can compare output byte for byte.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace fragscope {

class JsonWriter {
 public:
  explicit JsonWriter(std::ostream& out) : out_(out) {}

  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  // Inside an object: the next value's key.
  void Key(std::string_view key);
  void String(std::string_view value);
  void Uint(uint64_t value);
  void Int(int64_t value);
  // Finite doubles with up to 6 significant digits; NaN and infinities become null.
  void Double(double value);
  void Bool(bool value);
  void Null();

  // Key + value shorthands.
  void Field(std::string_view key, std::string_view value) { Key(key), String(value); }
  void Field(std::string_view key, const char* value) { Key(key), String(value); }
  void Field(std::string_view key, uint64_t value) { Key(key), Uint(value); }
  void Field(std::string_view key, int64_t value) { Key(key), Int(value); }
  void Field(std::string_view key, int value) { Key(key), Int(value); }
  void Field(std::string_view key, double value) { Key(key), Double(value); }
  void Field(std::string_view key, bool value) { Key(key), Bool(value); }
  // null when absent.
  void Field(std::string_view key, const std::optional<uint64_t>& value) {
    Key(key);
    value.has_value() ? Uint(*value) : Null();
  }

 private:
  void BeforeValue();
  void Newline();

  std::ostream& out_;
  // Per open container: whether it has an element yet.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

}  // namespace fragscope
