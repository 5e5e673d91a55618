// AddressMap<Value>: a hash map keyed by device address, for the lookups on the hot paths: the
// allocator's map from an active block's address to its Block, for the blocks its segment table
// does not find (active_block_index.h), and the replay's map of a trace's live blocks
// (analysis/replay/replay.h).
//
// For the blocks it holds, a free looks the pointer up and an allocation inserts it: the map is
// on the hot path twice per malloc+free pair. absl::flat_hash_map cost ~200 instructions per pair
// there (seeded hashing, SSE group probing, separate control bytes). This is the simplest map
// that fits the keys: open addressing over one array of (address, value) slots, linear probing,
// Fibonacci hashing of the address, at most half full, and backward-shift deletion (Knuth's
// Algorithm R), so there are no tombstones and probe runs stay short under churn. A lookup is one
// multiply and, almost always, one cache line.
//
// Key 0 marks an empty slot. With kZeroKey false (the allocator: 0 is never a block address,
// Allocate(0) returns 0 without a block) key 0 must never be stored; with kZeroKey true (a trace's
// addresses, which the replay does not choose) it lives in a slot of its own.
//
// Invariants: capacity is a power of two >= kMinCapacity; 2 * size <= capacity; every key sits in
// the probe run that starts at its home slot with no empty slot in between. Pointers to values
// stay valid until the next insertion or erasure. Not thread-safe: used under the allocator lock
// (or by the one thread of a replay).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "allocator/check.h"
#include "allocator/huge_pages.h"
#include "allocator/types.h"

namespace fragscope {

template <typename Value, bool kZeroKey = false>
class AddressMap {
 public:
  AddressMap() : slots_(kMinCapacity) {}

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The value at `ptr`, or nullptr.
  Value* Find(DevicePtr ptr) { return const_cast<Value*>(std::as_const(*this).Find(ptr)); }
  const Value* Find(DevicePtr ptr) const {
    if (kZeroKey && ptr == 0) return zero_.has_value() ? &*zero_ : nullptr;
    // (The probe of IndexOf, repeated: returning the index instead costs ~5 instructions per
    // replayed event.)
    for (size_t i = Home(ptr);; i = (i + 1) & mask()) {
      if (slots_[i].key == ptr) return &slots_[i].value;
      if (slots_[i].key == 0) return nullptr;
    }
  }
  // The value at `ptr`, or Value{} (nullptr for pointers): the allocator's lookup.
  Value Get(DevicePtr ptr) const {
    const Value* value = Find(ptr);
    return value != nullptr ? *value : Value{};
  }

  // Starts loading the slot where a lookup or insertion of `ptr` begins.
  void Prefetch(DevicePtr ptr) const { __builtin_prefetch(&slots_[Home(ptr)]); }

  // REQUIRES: `ptr` is not in the map (and is not 0 unless kZeroKey).
  void Insert(DevicePtr ptr, Value value) {
    FRAGSCOPE_DCHECK(Find(ptr) == nullptr);
    InsertNew(ptr, std::move(value));
  }
  // Inserts `value` at `ptr` unless the key is there: the value at `ptr`, and whether it was
  // inserted.
  std::pair<Value*, bool> TryEmplace(DevicePtr ptr, Value value) {
    if (kZeroKey && ptr == 0) {
      if (zero_.has_value()) return {&*zero_, false};
      return {InsertNew(ptr, std::move(value)), true};
    }
    // One probe: the empty slot that ends it is where the key goes, unless the map must grow.
    size_t i = Home(ptr);
    for (; slots_[i].key != 0; i = (i + 1) & mask()) {
      if (slots_[i].key == ptr) return {&slots_[i].value, false};
    }
    if (2 * (size_ + 1) > mask_ + 1) return {InsertNew(ptr, std::move(value)), true};
    ++size_;
    slots_[i] = Slot{ptr, std::move(value)};
    return {&slots_[i].value, true};
  }

  // Removes `ptr`; returns whether it was there.
  bool Erase(DevicePtr ptr) {
    if (kZeroKey && ptr == 0) {
      if (!zero_.has_value()) return false;
      EraseZero();
      return true;
    }
    const size_t i = IndexOf(ptr);
    if (i == kAbsent) return false;
    EraseSlot(i);
    return true;
  }
  // Removes the entry whose value Find returned, without probing for it again (a free looks its
  // pointer up, then erases it).
  // REQUIRES: `value` came from Find, with no insertion or erasure since.
  void EraseFound(Value* value) {
    if (kZeroKey && zero_.has_value() && value == &*zero_) {
      EraseZero();
      return;
    }
    // The value is a member of its slot: step back to the slot (standard layout).
    static_assert(std::is_standard_layout_v<Slot>);
    Slot* slot = reinterpret_cast<Slot*>(reinterpret_cast<char*>(value) - offsetof(Slot, value));
    FRAGSCOPE_DCHECK(slot >= slots_.data() && slot < slots_.data() + slots_.size());
    EraseSlot(static_cast<size_t>(slot - slots_.data()));
  }

  // Calls fn(ptr, value) for every entry, in no particular order.
  template <typename Fn>
  void ForEach(Fn fn) const {
    if (kZeroKey && zero_.has_value()) fn(DevicePtr{0}, *zero_);
    for (const Slot& slot : slots_) {
      if (slot.key != 0) fn(slot.key, slot.value);
    }
  }

 private:
  struct Slot {
    DevicePtr key = 0;
    Value value{};
  };
  static constexpr size_t kMinCapacity = 64;
  static constexpr size_t kAbsent = ~size_t{0};

  void EraseZero() {
    zero_.reset();
    --size_;
  }
  // Empties slot i (a member) by backward shift: pulls later members of the probe run into the
  // hole when the hole lies between their home and their slot, so no lookup ever stops early at
  // it.
  void EraseSlot(size_t i) {
    for (size_t j = i;;) {
      j = (j + 1) & mask();
      if (slots_[j].key == 0) break;
      const size_t home = Home(slots_[j].key);
      if (((j - home) & mask()) >= ((j - i) & mask())) {
        slots_[i] = std::move(slots_[j]);
        i = j;
      }
    }
    slots_[i] = Slot{};
    --size_;
  }

  // The slot holding `ptr` (not 0), or kAbsent: Erase's probe.
  size_t IndexOf(DevicePtr ptr) const {
    for (size_t i = Home(ptr);; i = (i + 1) & mask()) {
      if (slots_[i].key == ptr) return i;
      if (slots_[i].key == 0) return kAbsent;
    }
  }

  // (A member: the vector's size is a division by the slot's size, ~4 instructions per probe step
  // for the replay's 48-byte slots.)
  size_t mask() const { return mask_; }
  // Fibonacci hashing: the top bits of address * 2^64/phi. Block addresses are multiples of
  // 512, so their low bits carry nothing; the multiply folds the high bits down.
  size_t Home(DevicePtr ptr) const {
    return static_cast<size_t>((ptr * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  Value* InsertNew(DevicePtr ptr, Value value) {
    ++size_;
    if (kZeroKey && ptr == 0) return &zero_.emplace(std::move(value));
    FRAGSCOPE_DCHECK(ptr != 0);
    if (2 * size_ > mask_ + 1) Grow();
    return Place(ptr, std::move(value));
  }
  Value* Place(DevicePtr ptr, Value value) {
    size_t i = Home(ptr);
    while (slots_[i].key != 0) i = (i + 1) & mask();
    slots_[i] = Slot{ptr, std::move(value)};
    return &slots_[i].value;
  }
  void Grow() {
    decltype(slots_) old(2 * slots_.size());
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    shift_ = 64 - std::countr_zero(slots_.size());
    for (Slot& slot : old) {
      if (slot.key != 0) Place(slot.key, std::move(slot.value));
    }
  }

  // Huge pages once the slots fill 2 MiB (at 64k entries for the allocator's 16-byte slots):
  // every lookup is a random access (huge_pages.h).
  std::vector<Slot, HugePageAllocator<Slot>> slots_;
  size_t mask_ = kMinCapacity - 1;  // slots_.size() - 1
  int shift_ = 64 - std::countr_zero(kMinCapacity);
  size_t size_ = 0;
  std::optional<Value> zero_;  // kZeroKey: the value at key 0
};

}  // namespace fragscope
