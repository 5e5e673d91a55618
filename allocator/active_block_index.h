// ActiveBlockIndex: the allocator's active blocks (allocated, or freed and waiting for stream
// events: PyTorch's active_blocks) by address. Every Free starts here.
//
// Note [Finding a block through its segment]
// A hash map from address to Block costs every free two cache misses one after the other with
// many live blocks: the map's slot, then the block. Most blocks are found without it. A segment's
// blocks usually share the arena group of its head (Note [Blocks grouped by segment]), its home
// group; a table from each 2 MiB granule of device address space to the home group of the
// segment covering it finds the block by comparing the addresses of the group's live blocks,
// which load together. The table holds one word per 2 MiB of device memory in use (a few hundred
// KiB for 50 GiB of segments) and stays in cache, where a map of 100k blocks (4 MiB of slots)
// did not.
//
// A block is *direct* when its group is the home group of its address's granule; direct blocks
// are found through the table, the others (blocks in overflow groups, in a granule only partly
// covered by their segment, at addresses of 2^48 or more) through an AddressMap. Whether a
// block is direct cannot change while it is active: a block never moves to another group, and a
// granule's home group is set when its segment is created and cleared when the segment is
// released, which happens only once the segment has no active block. (A home group may empty
// and be recycled, as another segment's home or the overflow group, while its segment lives. It
// stays the granules' home group: the segment's blocks that later land in it are direct, the
// others are in the map, and a scan never matches another segment's block, whose address lies
// in that segment. tests/allocator/active_block_index_test.cc.)
//
// Not thread-safe: used under the allocator lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "allocator/address_map.h"
#include "allocator/block.h"
#include "allocator/block_arena.h"
#include "allocator/types.h"

namespace fragscope {

class ActiveBlockIndex {
 public:
  ActiveBlockIndex();
  ~ActiveBlockIndex();
  ActiveBlockIndex(const ActiveBlockIndex&) = delete;
  ActiveBlockIndex& operator=(const ActiveBlockIndex&) = delete;

  // The segment [base, base + bytes) was created with `head` as its first block: its granules
  // get head's group as their home group.
  void AddSegment(DevicePtr base, uint64_t bytes, const Block* head);
  // The segment [base, base + bytes) is being released: its granules lose their home group.
  // REQUIRES: none of its blocks is active.
  void RemoveSegment(DevicePtr base, uint64_t bytes);

  // The operations below take the home group of the block's address (HomeGroup(ptr), nullptr
  // for none) from the caller, who needs it too: a free for Find and Erase, an allocation for
  // SplitFront and Insert. It is read once per operation.

  // The active block that starts at `ptr`, or nullptr (also for the start of a free block).
  // Either way the block's group (its neighbours, usually) is loading when it returns: a direct
  // block's was read to find it, another's is prefetched.
  // REQUIRES: home == HomeGroup(ptr).
  Block* Find(DevicePtr ptr, const Block* home) const {
    FRAGSCOPE_DCHECK(home == HomeGroup(ptr));
    if (home != nullptr) {
      if (Block* block = BlockArena::FindInGroup(home, ptr); block != nullptr) {
        return block->IsFree() ? nullptr : block;
      }
    }
    Block* block = overflow_.Get(ptr);
    if (block != nullptr) BlockArena::PrefetchGroup(block);
    return block;
  }
  Block* Find(DevicePtr ptr) const { return Find(ptr, HomeGroup(ptr)); }
  // REQUIRES: block has just become active (is not in the index); home == HomeGroup(block->ptr).
  void Insert(Block* block, const Block* home) {
    FRAGSCOPE_DCHECK(home == HomeGroup(block->ptr));
    ++size_;
    if (!IsDirect(block, home)) overflow_.Insert(block->ptr, block);
  }
  // REQUIRES: block is in the index (it is leaving the active state);
  // home == HomeGroup(block->ptr).
  void Erase(const Block* block, const Block* home) {
    FRAGSCOPE_DCHECK(size_ > 0 && home == HomeGroup(block->ptr));
    --size_;
    if (!IsDirect(block, home)) {
      const bool erased = overflow_.Erase(block->ptr);
      FRAGSCOPE_DCHECK(erased);
      (void)erased;
    }
  }
  void Erase(const Block* block) { Erase(block, HomeGroup(block->ptr)); }

  // The home group of ptr's granule (where new blocks of its segment go: SplitFront), or nullptr.
  Block* HomeGroup(DevicePtr ptr) const {
    if ((ptr >> kAddressBits) != 0) [[unlikely]]
      return nullptr;
    const uint64_t granule = ptr >> kGranuleShift;
    const Leaf* leaf = root_[granule >> kLeafBits].get();
    return leaf != nullptr ? leaf->home[granule & ((uint64_t{1} << kLeafBits) - 1)] : nullptr;
  }

  // Active blocks; those found through the map (not direct).
  size_t size() const { return size_; }
  size_t map_size() const { return overflow_.size(); }
  // Whether every block in the map is a non-direct active block at its own address, and no more
  // are there than size(). O(map entries): for the allocator's invariant checker.
  bool CheckInvariants() const;

 private:
  static constexpr int kGranuleShift = 21;  // 2 MiB, the small pool's segment size
  static constexpr int kAddressBits = 48;   // device addresses the table covers
  static constexpr int kLeafBits = 13;      // a leaf: 8192 granules (16 GiB), 64 KiB
  static constexpr int kRootBits = kAddressBits - kGranuleShift - kLeafBits;
  struct Leaf {
    Block* home[size_t{1} << kLeafBits] = {};
  };

  // Whether `block` is found through its home group `home` (HomeGroup of its address).
  static bool IsDirect(const Block* block, const Block* home) {
    return home != nullptr && home == BlockArena::GroupOf(block);
  }
  // Calls set(slot) for the home-group slot of every granule wholly inside [base, base + bytes).
  template <typename Set>
  void ForEachWholeGranule(DevicePtr base, uint64_t bytes, bool create, Set set);

  std::vector<std::unique_ptr<Leaf>> root_;  // 1 << kRootBits leaves, created on first use
  AddressMap<Block*> overflow_;              // the active blocks that are not direct
  size_t size_ = 0;
};

}  // namespace fragscope
