// ActiveBlockMap: the allocator's map from a block's address to its Block, for every allocated
// block and every freed block still waiting for stream events (PyTorch's active_blocks).
//
// Every Free looks its pointer up here, and every Allocate inserts one: the map is on the hot
// path twice per malloc+free pair. absl::flat_hash_map cost ~200 instructions per pair there
// (seeded hashing, SSE group probing, separate control bytes). This is the simplest map that
// fits the keys: open addressing over one array of (address, block) slots, linear probing,
// Fibonacci hashing of the address, at most half full, and backward-shift deletion (Knuth's
// Algorithm R), so there are no tombstones and probe runs stay short under churn. A lookup is
// one multiply and, almost always, one cache line.
//
// Invariants: capacity is a power of two >= kMinCapacity; 2 * size <= capacity; key 0 marks an
// empty slot (0 is never a block address: Allocate(0) returns 0 without a block); every key
// sits in the probe run that starts at its home slot with no empty slot in between.
// Not thread-safe: used under the allocator lock.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/check.h"
#include "allocator/types.h"

namespace fragscope {

struct Block;

class ActiveBlockMap {
 public:
  ActiveBlockMap() : slots_(kMinCapacity) {}

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The block at `ptr`, or nullptr.
  Block* Find(DevicePtr ptr) const {
    for (size_t i = Home(ptr);; i = (i + 1) & mask()) {
      const Slot& slot = slots_[i];
      if (slot.key == ptr) return slot.block;
      if (slot.key == 0) return nullptr;
    }
  }

  // Starts loading the slot where a lookup or insertion of `ptr` begins.
  void Prefetch(DevicePtr ptr) const { __builtin_prefetch(&slots_[Home(ptr)]); }

  // REQUIRES: ptr != 0 and ptr is not in the map.
  void Insert(DevicePtr ptr, Block* block) {
    FRAGSCOPE_DCHECK(ptr != 0 && Find(ptr) == nullptr);
    if (2 * (size_ + 1) > slots_.size()) Grow();
    Place(ptr, block);
    ++size_;
  }

  // Removes `ptr`; returns whether it was there.
  bool Erase(DevicePtr ptr) {
    size_t i = Home(ptr);
    for (;; i = (i + 1) & mask()) {
      if (slots_[i].key == ptr) break;
      if (slots_[i].key == 0) return false;
    }
    // Backward shift: pull later members of the probe run into the hole when the hole lies
    // between their home and their slot, so no lookup ever stops early at it.
    for (size_t j = i;;) {
      j = (j + 1) & mask();
      if (slots_[j].key == 0) break;
      const size_t home = Home(slots_[j].key);
      if (((j - home) & mask()) >= ((j - i) & mask())) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --size_;
    return true;
  }

  // Calls fn(ptr, block) for every entry, in no particular order.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const Slot& slot : slots_) {
      if (slot.key != 0) fn(slot.key, slot.block);
    }
  }

 private:
  struct Slot {
    DevicePtr key = 0;
    Block* block = nullptr;
  };
  static constexpr size_t kMinCapacity = 64;

  size_t mask() const { return slots_.size() - 1; }
  // Fibonacci hashing: the top bits of address * 2^64/phi. Block addresses are multiples of
  // 512, so their low bits carry nothing; the multiply folds the high bits down.
  size_t Home(DevicePtr ptr) const {
    return static_cast<size_t>((ptr * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void Place(DevicePtr ptr, Block* block) {
    size_t i = Home(ptr);
    while (slots_[i].key != 0) i = (i + 1) & mask();
    slots_[i] = Slot{ptr, block};
  }
  void Grow() {
    std::vector<Slot> old(2 * slots_.size());
    old.swap(slots_);
    shift_ = 64 - std::countr_zero(slots_.size());
    for (const Slot& slot : old) {
      if (slot.key != 0) Place(slot.key, slot.block);
    }
  }

  std::vector<Slot> slots_;
  int shift_ = 64 - std::countr_zero(kMinCapacity);
  size_t size_ = 0;
};

}  // namespace fragscope
