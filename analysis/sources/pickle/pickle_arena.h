// PickleArena: the mutable object graph a pickle builds while its opcodes run, and its conversion
// to an immutable PickleValue tree. Internal to the reader (pickle_reader.cc).
//
// Every stack slot, memo entry and container element is a Slot: scalars inline, strings as an
// index into the interned leaves, containers as an index into the containers. Containers stay
// mutable while the opcodes run, so a memo reference to a list sees later APPENDs exactly as in
// Python. Strings are interned by content, so dict keys compare by index in O(1).
//
// Finalize() converts depth first, finalizing each container once and sharing the result wherever
// it is referenced, so the work is linear in the arena size however often a subtree is referenced.
// A container met again while it is being finalized contains itself and is rejected. Each
// container's height is recorded so that the nesting of the result is bounded by max_depth along
// every path, not just along the first one visited.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "analysis/sources/pickle/pickle_value.h"

namespace fragscope::pickle::internal {

// A vector that grows by fixed chunks: no copy and no doubled footprint as it grows (a streamed
// pickle has tens of millions of containers and memo entries), references stay valid, and an
// index is a shift and a mask.
template <typename T>
class ChunkedVector {
 public:
  size_t size() const { return size_; }
  T& operator[](size_t i) { return chunks_[i >> kShift][i & kMask]; }
  const T& operator[](size_t i) const { return chunks_[i >> kShift][i & kMask]; }
  void push_back(T value) {
    if ((size_ & kMask) == 0) chunks_.emplace_back().reserve(kMask + 1);
    chunks_.back().push_back(std::move(value));
    ++size_;
  }
  void clear() {
    std::vector<std::vector<T>>().swap(chunks_);
    size_ = 0;
  }

 private:
  static constexpr size_t kShift = 16;
  static constexpr size_t kMask = (size_t{1} << kShift) - 1;
  std::vector<std::vector<T>> chunks_;
  size_t size_ = 0;
};

struct Slot {
  PickleKind kind = PickleKind::kNone;
  uint32_t ref = 0;   // leaf index (str, bytes, big int) or container index
  uint64_t bits = 0;  // bool, int64, or the bit pattern of a double
};

// What a container is to a streaming read (ReadPickleStreaming); kPlain otherwise.
enum class StreamRole : uint8_t {
  kPlain,
  kOuter,     // the root dict's value under the streamed key
  kInner,     // a list created as an element of the outer list: its elements are streamed
  kElement,   // a container created as an element of an inner list
  kConsumed,  // handed to the consumer and emptied: a later reference is an error
};

struct Container {
  PickleKind kind;  // kList, kTuple or kDict
  StreamRole role = StreamRole::kPlain;
  // A stream consumer read its items (StreamContents::Items): a later change is a layout error.
  bool frozen = false;
  // kInner: the list's ordinal among the inner lists. Any other role: the number a stream
  // consumer noted on it (StreamContents::Note), 0 for none. One field for both keeps a container
  // at 40 bytes (a streamed pickle has tens of millions of them); a kInner list takes no note.
  uint32_t stream_tag = 0;
  size_t offset;            // byte offset of the opcode that created it, for errors
  std::vector<Slot> items;  // a dict holds key, value, key, value, ... in SETITEM order
};
static_assert(sizeof(Container) <= 40);

class PickleArena {
 public:
  // A str, bytes or big int leaf; equal content of one kind yields the same slot. `bytes` must
  // outlive the arena (it points into the pickle). `offset` is only for the error.
  absl::StatusOr<Slot> NewLeaf(PickleKind kind, std::string_view bytes, size_t offset);
  absl::StatusOr<Slot> NewContainer(PickleKind kind, std::vector<Slot> items, size_t offset);
  // REQUIRES: `slot` is a container slot of this arena.
  Container& container(const Slot& slot) { return containers_[slot.ref]; }
  const Container& container(const Slot& slot) const { return containers_[slot.ref]; }
  size_t container_count() const { return containers_.size(); }
  // REQUIRES: `slot` is a str, bytes or big int slot of this arena.
  const PickleValue& leaf(const Slot& slot) const { return leaves_[slot.ref]; }
  // Empties a container handed to a stream consumer; Finalize then refuses to meet it.
  void Consume(const Slot& slot) {
    Container& c = containers_[slot.ref];
    c.role = StreamRole::kConsumed;
    std::vector<Slot>().swap(c.items);
  }
  // After Finalize: the value container `index` became, if it was reached.
  const PickleValue* finalized(uint32_t index) const {
    auto it = done_.find(index);
    return it != done_.end() ? &it->second.value : nullptr;
  }

  // Converts the graph reachable from `root`. Duplicate dict keys resolve as in Python: the first
  // insertion fixes the position, the last value wins. Consumes the arena (finalized() stays).
  // A consumed container is a FailedPrecondition error.
  absl::StatusOr<PickleValue> Finalize(const Slot& root, size_t max_depth);

 private:
  enum class State : uint8_t { kNew, kActive, kDone };
  // A dict key reduced to what Python's == compares: True == 1 == 1.0; strs by interned index.
  struct KeyId {
    uint8_t tag;
    uint64_t value;
    friend bool operator==(const KeyId& a, const KeyId& b) {
      return a.tag == b.tag && a.value == b.value;
    }
    template <typename H>
    friend H AbslHashValue(H h, const KeyId& k) {
      return H::combine(std::move(h), k.tag, k.value);
    }
  };

  absl::StatusOr<PickleValue> Convert(const Slot& slot, size_t depth, size_t* height);
  absl::StatusOr<PickleValue> ConvertContainer(uint32_t index, size_t depth, size_t* height);
  PickleValue ConvertDict(const Container& c, std::vector<PickleValue> flat) const;
  static KeyId KeyOf(const Slot& key);

  std::vector<PickleValue> leaves_;
  absl::flat_hash_map<std::pair<uint8_t, std::string_view>, uint32_t> interned_;
  ChunkedVector<Container> containers_;

  // Finalize state, one entry per container.
  size_t max_depth_ = 0;
  std::vector<State> state_;
  // The converted containers only (a streamed pickle's many consumed ones are never reached).
  struct Done {
    PickleValue value;
    size_t height = 0;
  };
  absl::flat_hash_map<uint32_t, Done> done_;
};

}  // namespace fragscope::pickle::internal
