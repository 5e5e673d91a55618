#include "analysis/sources/pickle/pickle_arena.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <string>

#include "absl/strings/str_format.h"
#include "allocator/check.h"

namespace fragscope::pickle::internal {
namespace {

// Below this many entries, a dict's duplicate keys are found by a linear scan.
constexpr size_t kSmallDictEntries = 8;

absl::Status TooMany(std::string_view what, size_t offset) {
  return absl::ResourceExhaustedError(
      absl::StrFormat("pickle: more than 2^32 %s at offset %d", what, offset));
}

}  // namespace

absl::StatusOr<Slot> PickleArena::NewLeaf(PickleKind kind, std::string_view bytes, size_t offset) {
  const auto key = std::make_pair(static_cast<uint8_t>(kind), bytes);
  if (auto it = interned_.find(key); it != interned_.end()) return Slot{kind, it->second, 0};
  if (leaves_.size() >= std::numeric_limits<uint32_t>::max()) return TooMany("strings", offset);
  const auto index = static_cast<uint32_t>(leaves_.size());
  if (kind == PickleKind::kString) {
    leaves_.push_back(PickleValue::String(std::string(bytes)));
  } else if (kind == PickleKind::kBytes) {
    leaves_.push_back(PickleValue::Bytes(std::string(bytes)));
  } else {
    leaves_.push_back(PickleValue::IntFromLittleEndian(bytes));
  }
  interned_.emplace(key, index);
  return Slot{kind, index, 0};
}

absl::StatusOr<Slot> PickleArena::NewContainer(PickleKind kind, std::vector<Slot> items,
                                               size_t offset) {
  if (containers_.size() >= std::numeric_limits<uint32_t>::max()) {
    return TooMany("containers", offset);
  }
  containers_.push_back(Container{kind, StreamRole::kPlain, false, 0, offset, std::move(items)});
  return Slot{kind, static_cast<uint32_t>(containers_.size() - 1), 0};
}

absl::StatusOr<PickleValue> PickleArena::Finalize(const Slot& root, size_t max_depth) {
  max_depth_ = max_depth;
  state_.assign(containers_.size(), State::kNew);
  done_.clear();
  interned_.clear();  // its keys point into the pickle, which the caller may release next
  size_t height = 0;
  return Convert(root, 0, &height);
}

absl::StatusOr<PickleValue> PickleArena::Convert(const Slot& slot, size_t depth, size_t* height) {
  *height = 0;
  switch (slot.kind) {
    case PickleKind::kNone:
      return PickleValue::None();
    case PickleKind::kBool:
      return PickleValue::Bool(slot.bits != 0);
    case PickleKind::kInt:
      return PickleValue::Int(static_cast<int64_t>(slot.bits));
    case PickleKind::kFloat:
      return PickleValue::Float(std::bit_cast<double>(slot.bits));
    case PickleKind::kBigInt:
    case PickleKind::kString:
    case PickleKind::kBytes:
      return leaves_[slot.ref];
    case PickleKind::kList:
    case PickleKind::kTuple:
    case PickleKind::kDict:
      break;
  }
  return ConvertContainer(slot.ref, depth, height);
}

absl::StatusOr<PickleValue> PickleArena::ConvertContainer(uint32_t index, size_t depth,
                                                          size_t* height) {
  Container& c = containers_[index];  // stable: no container is added while converting
  const auto too_deep = [&] {
    return absl::ResourceExhaustedError(
        absl::StrFormat("pickle: containers nest deeper than %d (the %s created at offset %d)",
                        max_depth_, PickleKindName(c.kind), c.offset));
  };
  if (c.role == StreamRole::kConsumed) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "pickle: the %s created at offset %d was streamed, and is referenced again outside its "
        "list",
        PickleKindName(c.kind), c.offset));
  }
  if (state_[index] == State::kActive) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pickle: the %s created at offset %d contains itself", PickleKindName(c.kind), c.offset));
  }
  if (state_[index] == State::kNew) {
    if (depth >= max_depth_) return too_deep();
    state_[index] = State::kActive;
    std::vector<PickleValue> values;
    values.reserve(c.items.size());
    size_t max_child = 0;
    for (const Slot& item : c.items) {
      size_t child_height = 0;
      FRAGSCOPE_ASSIGN_OR_RETURN(PickleValue v, Convert(item, depth + 1, &child_height));
      max_child = std::max(max_child, child_height);
      values.push_back(std::move(v));
    }
    PickleValue value;
    if (c.kind == PickleKind::kDict) {
      value = ConvertDict(c, std::move(values));
    } else if (c.kind == PickleKind::kList) {
      value = PickleValue::List(std::move(values));
    } else {
      value = PickleValue::Tuple(std::move(values));
    }
    std::vector<Slot>().swap(c.items);
    done_[index] = Done{std::move(value), max_child + 1};
    state_[index] = State::kDone;
  }
  const Done& done = done_.at(index);
  *height = done.height;
  if (depth + done.height > max_depth_) return too_deep();
  return done.value;
}

PickleValue PickleArena::ConvertDict(const Container& c, std::vector<PickleValue> flat) const {
  PickleValue::Entries entries;
  entries.reserve(flat.size() / 2);
  std::vector<KeyId> ids;
  absl::flat_hash_map<KeyId, size_t> position;
  const bool small = c.items.size() <= 2 * kSmallDictEntries;
  for (size_t i = 0; i + 1 < flat.size(); i += 2) {
    const KeyId id = KeyOf(c.items[i]);
    size_t at = entries.size();
    if (small) {
      at = static_cast<size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin());
    } else if (auto [it, inserted] = position.emplace(id, entries.size()); !inserted) {
      at = it->second;
    }
    if (at == entries.size()) {
      if (small) ids.push_back(id);
      entries.emplace_back(std::move(flat[i]), std::move(flat[i + 1]));
    } else {
      entries[at].second = std::move(flat[i + 1]);
    }
  }
  return PickleValue::Dict(std::move(entries));
}

PickleArena::KeyId PickleArena::KeyOf(const Slot& key) {
  switch (key.kind) {
    case PickleKind::kNone:
      return {0, 0};
    case PickleKind::kBool:
    case PickleKind::kInt:
      return {1, key.bits};
    case PickleKind::kFloat: {
      // An integral float equals the int of the same value, as hash(1.0) == hash(1).
      const double d = std::bit_cast<double>(key.bits);
      if (d >= -9.2e18 && d <= 9.2e18 && d == static_cast<double>(static_cast<int64_t>(d))) {
        return {1, static_cast<uint64_t>(static_cast<int64_t>(d))};
      }
      return {2, key.bits};
    }
    default:  // interned leaves: equal content, equal index
      return {static_cast<uint8_t>(3 + static_cast<uint8_t>(key.kind)), key.ref};
  }
}

}  // namespace fragscope::pickle::internal
