// PickleValue: the value tree a pickle decodes to, and PickleRef, typed access with path errors.
//
// A PickleValue is one of the Python values a memory snapshot is made of: None, bool, int, float,
// str, bytes, list, tuple and dict (keys and values in insertion order, keys unique). It is
// immutable and cheap to copy: strings and containers are held by shared_ptr, so a subtree that
// the pickle references many times (PyTorch shares one frames list among all trace entries with
// the same stack) is stored once, and the tree is in fact a DAG. It never has cycles: the reader
// rejects self-referencing containers.
//
// Integers. Python ints are unbounded; snapshot fields fit in int64 (addresses and sizes are
// below 2^63, max_split_size is written as int64(SIZE_MAX) == -1). A decoded integer that does
// not fit in int64 is *not* an error and is not saturated: it becomes a kBigInt that keeps the
// exact two's-complement little-endian bytes of the pickle's LONG1 opcode, so it round-trips
// through the writer unchanged, prints exactly, and PickleRef::Int() on it is an OutOfRange error
// naming the path. Decoding never fails because of a number nobody reads.
//
// Strings are kept as the UTF-8 bytes of the pickle, not validated (Python's own unpickler would
// reject invalid UTF-8; memory_viz would replace it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fragscope::pickle {

enum class PickleKind : uint8_t {
  kNone,
  kBool,
  kInt,     // fits in int64
  kBigInt,  // an int outside int64; see the file comment
  kFloat,
  kString,  // Python str, UTF-8
  kBytes,
  kList,
  kTuple,
  kDict,
};

// Python's name for the kind ("NoneType", "bool", "int", "float", "str", ...); kBigInt is "int".
std::string_view PickleKindName(PickleKind kind);

class PickleValue {
 public:
  using Items = std::vector<PickleValue>;
  using Entry = std::pair<PickleValue, PickleValue>;
  using Entries = std::vector<Entry>;

  PickleValue() = default;  // None

  static PickleValue None() { return PickleValue(); }
  static PickleValue Bool(bool value);
  static PickleValue Int(int64_t value);
  // An integer from its two's-complement little-endian bytes (the payload of LONG1). Returns a
  // kInt when the value fits in int64, else a kBigInt holding `le_bytes` as given.
  static PickleValue IntFromLittleEndian(std::string_view le_bytes);
  static PickleValue Float(double value);
  static PickleValue String(std::string utf8);
  static PickleValue Bytes(std::string bytes);
  static PickleValue List(Items items);
  static PickleValue Tuple(Items items);
  // REQUIRES: no two keys are equal (the reader guarantees it; a writer of such a dict would
  // produce a pickle that Python loads with fewer keys).
  static PickleValue Dict(Entries entries);

  PickleKind kind() const { return kind_; }
  bool is_none() const { return kind_ == PickleKind::kNone; }
  bool is_container() const {
    return kind_ == PickleKind::kList || kind_ == PickleKind::kTuple || kind_ == PickleKind::kDict;
  }

  // Unchecked accessors. REQUIRES: the kind matches (checked in debug builds).
  bool bool_value() const;
  int64_t int_value() const;
  double float_value() const;
  // str, bytes, or the little-endian bytes of a kBigInt.
  const std::string& string_value() const;
  // list or tuple.
  const Items& items() const;
  // dict.
  const Entries& entries() const;

  // The dict value under the str key `key`; nullptr when absent or when this is not a dict.
  // Linear in the dict's size (snapshot dicts have a dozen keys).
  const PickleValue* Find(std::string_view key) const;

  // Identity of the shared storage of a str, bytes, big int or container (equal for copies of one
  // value, so sharing can be preserved); nullptr for scalars.
  const void* identity() const;
  // How many PickleValues share this value's storage (0 for scalars).
  long use_count() const;

  // Structural equality; floats compare by bit pattern, so NaN == NaN and 0.0 != -0.0.
  friend bool operator==(const PickleValue& a, const PickleValue& b);
  friend bool operator!=(const PickleValue& a, const PickleValue& b) { return !(a == b); }

 private:
  using Storage =
      std::variant<std::monostate, bool, int64_t, double, std::shared_ptr<const std::string>,
                   std::shared_ptr<const Items>, std::shared_ptr<const Entries>>;
  PickleValue(PickleKind kind, Storage storage) : kind_(kind), storage_(std::move(storage)) {}

  PickleKind kind_ = PickleKind::kNone;
  Storage storage_;
};

// Python's repr() of the value: {'size': 512, 'frames': [], 'pool': (0, 0)}. Floats print as
// repr(float) does (shortest round trip), big ints in decimal. Nesting below `max_depth` prints as
// "...". Intended for tests and error messages.
std::string DebugString(const PickleValue& value, size_t max_depth = 64);

// Decimal text of an integer given as two's-complement little-endian bytes.
std::string LittleEndianToDecimal(std::string_view le_bytes);

// A value plus the path by which it was reached from the root, so that errors read
// "segments[3].blocks[0].size: expected int, got str". Holds pointers only; the path text is
// built when an error is reported.
// REQUIRES: the root value and every PickleRef a child was obtained from outlive the child.
class PickleRef {
 public:
  explicit PickleRef(const PickleValue& root) : value_(&root) {}

  const PickleValue& value() const { return *value_; }
  PickleKind kind() const { return value_->kind(); }
  // "segments[3].blocks[0]"; "<root>" for the root.
  std::string Path() const;

  // The value of a str key of a dict: an error when this is not a dict or the key is missing.
  absl::StatusOr<PickleRef> Field(std::string_view key) const;
  // Like Field, but std::nullopt when the key is missing (still an error when not a dict).
  absl::StatusOr<std::optional<PickleRef>> OptionalField(std::string_view key) const;
  // Element `index` of a list or tuple.
  absl::StatusOr<PickleRef> Element(size_t index) const;
  // Element count of a list or tuple; an error for other kinds.
  absl::StatusOr<size_t> Length() const;

  absl::StatusOr<bool> Bool() const;
  absl::StatusOr<int64_t> Int() const;
  // An int >= 0.
  absl::StatusOr<uint64_t> UInt() const;
  // A float, or an int (converted, as Python does in arithmetic).
  absl::StatusOr<double> Float() const;
  absl::StatusOr<std::string_view> Str() const;

  // InvalidArgument "<path>: <message>".
  absl::Status Error(std::string_view message) const;
  // "<path>: expected <what>, got <kind>".
  absl::Status TypeError(std::string_view expected) const;

 private:
  enum class Step : uint8_t { kRoot, kKey, kIndex };
  PickleRef(const PickleValue* value, const PickleRef* parent, Step step, std::string_view key,
            size_t index)
      : value_(value), parent_(parent), step_(step), key_(key), index_(index) {}

  const PickleValue* value_;
  const PickleRef* parent_ = nullptr;
  Step step_ = Step::kRoot;
  std::string_view key_;  // points into the tree's key string
  size_t index_ = 0;
};

}  // namespace fragscope::pickle
