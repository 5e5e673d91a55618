#include "analysis/sources/pickle/pickle_value.h"

#include <algorithm>
#include <bit>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/check.h"

namespace fragscope::pickle {
namespace {

// True when the two's-complement little-endian `le` fits in int64; stores it in `out`.
bool FitsInt64(std::string_view le, int64_t* out) {
  if (le.empty()) {
    *out = 0;
    return true;
  }
  const bool negative = (static_cast<uint8_t>(le.back()) & 0x80) != 0;
  const uint8_t fill = negative ? 0xff : 0x00;
  if (le.size() > 8) {
    for (size_t i = 8; i < le.size(); ++i) {
      if (static_cast<uint8_t>(le[i]) != fill) return false;
    }
    // The sign of the low 8 bytes must agree with the extension bytes.
    if (((static_cast<uint8_t>(le[7]) & 0x80) != 0) != negative) return false;
  }
  uint64_t bits = negative ? ~uint64_t{0} : 0;
  const size_t n = std::min<size_t>(le.size(), 8);
  for (size_t i = 0; i < n; ++i) {
    bits &= ~(uint64_t{0xff} << (8 * i));
    bits |= uint64_t{static_cast<uint8_t>(le[i])} << (8 * i);
  }
  *out = static_cast<int64_t>(bits);
  return true;
}

// Containers compared equal are remembered by identity, so comparing two DAGs with shared
// subtrees costs one visit per pair of nodes, not one per path.
bool StructurallyEqual(const PickleValue& a, const PickleValue& b,
                       absl::flat_hash_set<std::pair<const void*, const void*>>* equal_pairs) {
  if (a.kind() != b.kind()) return false;
  if (a.identity() != nullptr && a.identity() == b.identity()) return true;
  switch (a.kind()) {
    case PickleKind::kNone:
      return true;
    case PickleKind::kBool:
      return a.bool_value() == b.bool_value();
    case PickleKind::kInt:
      return a.int_value() == b.int_value();
    case PickleKind::kFloat:
      return std::bit_cast<uint64_t>(a.float_value()) == std::bit_cast<uint64_t>(b.float_value());
    case PickleKind::kBigInt:
    case PickleKind::kString:
    case PickleKind::kBytes:
      return a.string_value() == b.string_value();
    case PickleKind::kList:
    case PickleKind::kTuple:
    case PickleKind::kDict:
      break;
  }
  const auto key = std::make_pair(a.identity(), b.identity());
  if (equal_pairs->contains(key)) return true;
  if (a.kind() == PickleKind::kDict) {
    if (a.entries().size() != b.entries().size()) return false;
    for (size_t i = 0; i < a.entries().size(); ++i) {
      if (!StructurallyEqual(a.entries()[i].first, b.entries()[i].first, equal_pairs) ||
          !StructurallyEqual(a.entries()[i].second, b.entries()[i].second, equal_pairs)) {
        return false;
      }
    }
  } else {
    if (a.items().size() != b.items().size()) return false;
    for (size_t i = 0; i < a.items().size(); ++i) {
      if (!StructurallyEqual(a.items()[i], b.items()[i], equal_pairs)) return false;
    }
  }
  equal_pairs->insert(key);
  return true;
}

}  // namespace

std::string_view PickleKindName(PickleKind kind) {
  switch (kind) {
    case PickleKind::kNone:
      return "NoneType";
    case PickleKind::kBool:
      return "bool";
    case PickleKind::kInt:
    case PickleKind::kBigInt:
      return "int";
    case PickleKind::kFloat:
      return "float";
    case PickleKind::kString:
      return "str";
    case PickleKind::kBytes:
      return "bytes";
    case PickleKind::kList:
      return "list";
    case PickleKind::kTuple:
      return "tuple";
    case PickleKind::kDict:
      return "dict";
  }
  return "?";
}

PickleValue PickleValue::Bool(bool value) { return PickleValue(PickleKind::kBool, value); }
PickleValue PickleValue::Int(int64_t value) { return PickleValue(PickleKind::kInt, value); }
PickleValue PickleValue::Float(double value) { return PickleValue(PickleKind::kFloat, value); }

PickleValue PickleValue::IntFromLittleEndian(std::string_view le_bytes) {
  int64_t small = 0;
  if (FitsInt64(le_bytes, &small)) return Int(small);
  return PickleValue(PickleKind::kBigInt, std::make_shared<const std::string>(le_bytes));
}

PickleValue PickleValue::String(std::string utf8) {
  return PickleValue(PickleKind::kString, std::make_shared<const std::string>(std::move(utf8)));
}
PickleValue PickleValue::Bytes(std::string bytes) {
  return PickleValue(PickleKind::kBytes, std::make_shared<const std::string>(std::move(bytes)));
}
PickleValue PickleValue::List(Items items) {
  return PickleValue(PickleKind::kList, std::make_shared<const Items>(std::move(items)));
}
PickleValue PickleValue::Tuple(Items items) {
  return PickleValue(PickleKind::kTuple, std::make_shared<const Items>(std::move(items)));
}
PickleValue PickleValue::Dict(Entries entries) {
  return PickleValue(PickleKind::kDict, std::make_shared<const Entries>(std::move(entries)));
}

bool PickleValue::bool_value() const {
  FRAGSCOPE_DCHECK(kind_ == PickleKind::kBool);
  return std::get<bool>(storage_);
}
int64_t PickleValue::int_value() const {
  FRAGSCOPE_DCHECK(kind_ == PickleKind::kInt);
  return std::get<int64_t>(storage_);
}
double PickleValue::float_value() const {
  FRAGSCOPE_DCHECK(kind_ == PickleKind::kFloat);
  return std::get<double>(storage_);
}
const std::string& PickleValue::string_value() const {
  return *std::get<std::shared_ptr<const std::string>>(storage_);
}
const PickleValue::Items& PickleValue::items() const {
  return *std::get<std::shared_ptr<const Items>>(storage_);
}
const PickleValue::Entries& PickleValue::entries() const {
  return *std::get<std::shared_ptr<const Entries>>(storage_);
}

const PickleValue* PickleValue::Find(std::string_view key) const {
  if (kind_ != PickleKind::kDict) return nullptr;
  for (const auto& [k, v] : entries()) {
    if (k.kind_ == PickleKind::kString && k.string_value() == key) return &v;
  }
  return nullptr;
}

const void* PickleValue::identity() const {
  return std::visit(
      [](const auto& s) -> const void* {
        if constexpr (requires { s.get(); }) {
          return s.get();
        } else {
          return nullptr;
        }
      },
      storage_);
}

long PickleValue::use_count() const {
  return std::visit(
      [](const auto& s) -> long {
        if constexpr (requires { s.use_count(); }) {
          return s.use_count();
        } else {
          return 0;
        }
      },
      storage_);
}

bool operator==(const PickleValue& a, const PickleValue& b) {
  absl::flat_hash_set<std::pair<const void*, const void*>> equal_pairs;
  return StructurallyEqual(a, b, &equal_pairs);
}

std::string PickleRef::Path() const {
  std::vector<const PickleRef*> chain;
  for (const PickleRef* r = this; r != nullptr; r = r->parent_) chain.push_back(r);
  std::string path;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const PickleRef& r = **it;
    if (r.step_ == Step::kKey) {
      if (!path.empty()) path.push_back('.');
      path.append(r.key_);
    } else if (r.step_ == Step::kIndex) {
      absl::StrAppend(&path, "[", r.index_, "]");
    }
  }
  return path.empty() ? "<root>" : path;
}

absl::Status PickleRef::Error(std::string_view message) const {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s", Path(), message));
}

absl::Status PickleRef::TypeError(std::string_view expected) const {
  return Error(absl::StrFormat("expected %s, got %s", expected, PickleKindName(kind())));
}

absl::StatusOr<std::optional<PickleRef>> PickleRef::OptionalField(std::string_view key) const {
  if (kind() != PickleKind::kDict) return TypeError("dict");
  for (const auto& [k, v] : value_->entries()) {
    if (k.kind() == PickleKind::kString && k.string_value() == key) {
      return PickleRef(&v, this, Step::kKey, k.string_value(), 0);
    }
  }
  return std::nullopt;
}

absl::StatusOr<PickleRef> PickleRef::Field(std::string_view key) const {
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<PickleRef> field, OptionalField(key));
  if (!field.has_value()) return Error(absl::StrFormat("missing key '%s'", key));
  return *field;
}

absl::StatusOr<size_t> PickleRef::Length() const {
  if (kind() != PickleKind::kList && kind() != PickleKind::kTuple) return TypeError("list");
  return value_->items().size();
}

absl::StatusOr<PickleRef> PickleRef::Element(size_t index) const {
  FRAGSCOPE_ASSIGN_OR_RETURN(const size_t length, Length());
  if (index >= length) {
    return Error(absl::StrCat("index ", index, " out of range (length ", length, ")"));
  }
  return PickleRef(&value_->items()[index], this, Step::kIndex, {}, index);
}

absl::StatusOr<bool> PickleRef::Bool() const {
  if (kind() != PickleKind::kBool) return TypeError("bool");
  return value_->bool_value();
}

absl::StatusOr<int64_t> PickleRef::Int() const {
  if (kind() == PickleKind::kBigInt) {
    return absl::OutOfRangeError(absl::StrCat(
        Path(), ": int ", LittleEndianToDecimal(value_->string_value()), " does not fit in int64"));
  }
  if (kind() != PickleKind::kInt) return TypeError("int");
  return value_->int_value();
}

absl::StatusOr<uint64_t> PickleRef::UInt() const {
  FRAGSCOPE_ASSIGN_OR_RETURN(const int64_t value, Int());
  if (value < 0) return Error(absl::StrCat("expected an int >= 0, got ", value));
  return static_cast<uint64_t>(value);
}

absl::StatusOr<double> PickleRef::Float() const {
  if (kind() == PickleKind::kInt) return static_cast<double>(value_->int_value());
  if (kind() != PickleKind::kFloat) return TypeError("float");
  return value_->float_value();
}

absl::StatusOr<std::string_view> PickleRef::Str() const {
  if (kind() != PickleKind::kString) return TypeError("str");
  return std::string_view(value_->string_value());
}

}  // namespace fragscope::pickle
