#include "analysis/ranks/json_fields.h"

#include <limits>

#include "absl/strings/str_format.h"

namespace fragscope {

JsonFields::JsonFields(const nlohmann::json& object, std::string name, std::string path)
    : object_(object), name_(std::move(name)), path_(std::move(path)) {
  if (!object_.is_object()) {
    status_ = absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s: expected an object, got %s", name_,
        path_.empty() ? "the document" : "key '" + path_ + "'", object_.type_name()));
  }
}

std::string JsonFields::KeyPath(std::string_view key) const {
  return path_.empty() ? std::string(key) : absl::StrFormat("%s.%s", path_, key);
}

void JsonFields::Fail(std::string_view key, std::string_view what) {
  if (!status_.ok()) return;
  status_ =
      absl::InvalidArgumentError(absl::StrFormat("%s: key '%s': %s", name_, KeyPath(key), what));
}

void JsonFields::Merge(const JsonFields& nested) {
  if (status_.ok() && !nested.status().ok()) status_ = nested.status();
}

void JsonFields::Expected(std::string_view key, std::string_view expected,
                          const nlohmann::json& got) {
  std::string shown = got.dump();
  if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
  Fail(key, absl::StrFormat("expected %s, got %s %s", expected, got.type_name(), shown));
}

const nlohmann::json* JsonFields::Get(std::string_view key) {
  if (!status_.ok()) return nullptr;
  const auto it = object_.find(key);
  if (it == object_.end()) {
    Fail(key, "missing");
    return nullptr;
  }
  return &*it;
}

uint64_t JsonFields::Uint(std::string_view key) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return 0;
  if (!v->is_number_unsigned()) {
    Expected(key, "an unsigned integer", *v);
    return 0;
  }
  return v->get<uint64_t>();
}

int64_t JsonFields::Int(std::string_view key) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      Expected(key, "a 64-bit integer", *v);
      return 0;
    }
    return static_cast<int64_t>(u);
  }
  if (!v->is_number_integer()) {
    Expected(key, "an integer", *v);
    return 0;
  }
  return v->get<int64_t>();
}

int32_t JsonFields::Int32(std::string_view key) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return 0;
  const int64_t value = Int(key);
  if (status_.ok() && (value < std::numeric_limits<int32_t>::min() ||
                       value > std::numeric_limits<int32_t>::max())) {
    Expected(key, "a 32-bit integer", *v);
    return 0;
  }
  return static_cast<int32_t>(value);
}

double JsonFields::Double(std::string_view key) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return 0.0;
  if (!v->is_number()) {
    Expected(key, "a number", *v);
    return 0.0;
  }
  return v->get<double>();
}

bool JsonFields::Bool(std::string_view key) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return false;
  if (!v->is_boolean()) {
    Expected(key, "true or false", *v);
    return false;
  }
  return v->get<bool>();
}

std::string JsonFields::String(std::string_view key) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return "";
  if (!v->is_string()) {
    Expected(key, "a string", *v);
    return "";
  }
  return v->get<std::string>();
}

std::optional<uint64_t> JsonFields::OptionalUint(std::string_view key) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_number_unsigned()) {
    Expected(key, "an unsigned integer or null", *v);
    return std::nullopt;
  }
  return v->get<uint64_t>();
}

const nlohmann::json* JsonFields::Array(std::string_view key, size_t max_size) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return nullptr;
  if (!v->is_array()) {
    Expected(key, "an array", *v);
    return nullptr;
  }
  if (v->size() > max_size) {
    Fail(key, absl::StrFormat("%d elements, at most %d expected", v->size(), max_size));
    return nullptr;
  }
  return v;
}

const nlohmann::json* JsonFields::Object(std::string_view key) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return nullptr;
  if (!v->is_object()) {
    Expected(key, "an object", *v);
    return nullptr;
  }
  return v;
}

bool JsonFields::IsNull(std::string_view key) {
  const nlohmann::json* v = Get(key);
  return v != nullptr && v->is_null();
}

}  // namespace fragscope
