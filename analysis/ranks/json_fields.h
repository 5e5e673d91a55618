// JsonFields: typed, checked reading of a JSON object's fields (nlohmann/json), for the documents
// fragscope reads back (rank_summary_json.h). The first problem is kept, naming the document, the
// key path and what was found; later reads return defaults, so a reader reads every field and
// checks status() once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"

namespace fragscope {

class JsonFields {
 public:
  // `object` must outlive this; `path` is the key path of the object itself ("" at the top).
  // A non-object records an error at once.
  JsonFields(const nlohmann::json& object, std::string name, std::string path = "");

  uint64_t Uint(std::string_view key);
  int64_t Int(std::string_view key);
  int32_t Int32(std::string_view key);
  double Double(std::string_view key);
  bool Bool(std::string_view key);
  std::string String(std::string_view key);
  // null, or an unsigned integer.
  std::optional<uint64_t> OptionalUint(std::string_view key);
  // The array or object at `key` (nullptr, with an error, when it is not one); its elements'
  // paths are KeyPath(key) + "[i]" / "." + name. `max_size`: more elements is an error.
  const nlohmann::json* Array(std::string_view key, size_t max_size);
  const nlohmann::json* Object(std::string_view key);
  // Whether `key` holds null (an absent key is an error, and false).
  bool IsNull(std::string_view key);

  std::string KeyPath(std::string_view key) const;
  const std::string& name() const { return name_; }
  // Records a problem with `key` (the first one is kept).
  void Fail(std::string_view key, std::string_view what);
  const absl::Status& status() const { return status_; }
  // Absorbs another reader's problem (a nested object's).
  void Merge(const JsonFields& nested);

 private:
  const nlohmann::json* Get(std::string_view key);
  void Expected(std::string_view key, std::string_view expected, const nlohmann::json& got);

  const nlohmann::json& object_;
  std::string name_;
  std::string path_;
  absl::Status status_;
};

}  // namespace fragscope
