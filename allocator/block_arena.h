// BlockArena: where the allocator's Block objects live, placed so that the blocks of one segment
// sit side by side in host memory. The split/merge surgery that creates and recycles them through
// it: block_split_merge.h.
//
// Note [Blocks grouped by segment]
// A free reads the freed block and both its neighbours (to merge); an allocation reads the block
// it splits and that block's lower neighbour. With many live blocks each read is a cache miss,
// and the neighbours' misses could start only once the block had arrived (their addresses are in
// it): two misses one after the other, the longest chain of a free. Here Blocks live in groups of
// kGroupBlocks (512 bytes, 8 cache lines). A new segment's head block gets a group of its own
// (New), its home group, and a block split off another (SplitFront) goes into the home group
// while it has room, else into the split block's group (NewNear). So a segment's blocks usually
// share one group, and PrefetchGroup starts loading all of them as soon as one block's address is
// known (from a pool entry; a free finds the block by reading them: active_block_index.h): the
// neighbours arrive with the block. (Preferring the home group matters: blocks split off an
// overflow block would otherwise stay in overflow groups, and a segment's blocks drift there as
// its home-group blocks merge away; with 100k live blocks 14 % of them had, with 1k 66 %.)
//
// Memory: chunks of 2 MiB of huge pages (huge_pages.h), each a header of occupancy masks (one
// byte per group; the first kHeaderGroups groups' worth) followed by the groups. A group that
// empties is recycled, most recently emptied first; a block whose neighbour's group is full goes
// to a shared overflow group. A non-empty group holds at least one live block, so the arena spans
// at most kGroupBlocks times the memory of its live blocks (plus a chunk).
//
// Invariants (CheckInvariants): a slot holds a live Block iff its mask bit is set; live_count()
// is the number of set bits; a group is in empty_groups_ iff its mask is 0, it has been handed
// out, and it is not the overflow group. Not thread-safe: used under the allocator lock.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "allocator/block.h"
#include "allocator/check.h"
#include "allocator/huge_pages.h"

namespace fragscope {

class BlockArena {
 public:
  static constexpr size_t kGroupBlocks = 8;
  static constexpr size_t kGroupBytes = kGroupBlocks * sizeof(Block);
  static constexpr size_t kGroupsPerChunk = kHugePageBytes / kGroupBytes;
  // The masks of a chunk's groups fill its first groups.
  static constexpr size_t kHeaderGroups = kGroupsPerChunk / kGroupBytes;

  BlockArena() = default;
  ~BlockArena();
  BlockArena(const BlockArena&) = delete;
  BlockArena& operator=(const BlockArena&) = delete;

  // A block in a group of its own: the head of a new segment, whose later blocks NewNear puts
  // beside it.
  Block* New() { return TakeSlot(TakeEmptyGroup()); }
  // A block in the group `home` when it holds blocks and has room (the segment's home group),
  // else in `near`'s group when it has room, else in the overflow group. (An empty home group is
  // passed over: it is waiting to be recycled.)
  // REQUIRES: near is live (came from this arena and was not deleted); home is nullptr or a group
  // of this arena.
  Block* NewNear(const Block* near, Block* home) {
    if (home != nullptr) {
      const uint8_t mask = MaskOf(home);
      if (mask != 0 && mask != kFullMask) [[likely]]
        return TakeSlot(home);
    }
    Block* group = GroupOf(near);
    if (MaskOf(group) != kFullMask) [[likely]]
      return TakeSlot(group);
    return TakeOverflowSlot();
  }
  // REQUIRES: block came from New() or NewNear() and is linked nowhere.
  void Delete(Block* block) {
    Block* group = GroupOf(block);
    uint8_t& mask = MaskOf(group);
    const auto bit = static_cast<uint8_t>(1u << (block - group));
    FRAGSCOPE_DCHECK((mask & bit) != 0);
    mask &= static_cast<uint8_t>(~bit);
    --live_count_;
    // The overflow group stays the overflow group when it empties (it is replaced only when full).
    if (mask == 0 && group != overflow_) [[unlikely]]
      empty_groups_.push_back(group);
  }

  // Starts loading `block`'s whole group, the block itself included: with the grouping above,
  // its segment's neighbours, and the free slot a split takes next. kGroupBlocks prefetches and
  // nothing else: no wait for the group's mask in the chunk header, and 8 instructions where
  // prefetching only the live slots took 32 (the lines of free slots cost nothing measurable
  // with 100k live blocks).
  static void PrefetchGroup(const Block* block) {
    const Block* group = GroupOf(block);
    for (size_t i = 0; i < kGroupBlocks; ++i) __builtin_prefetch(group + i);
  }

  // The live block of `group` that starts at `ptr`, or nullptr. Starts loading the whole group
  // first (PrefetchGroup: the neighbours a free reads next), then compares the live blocks'
  // addresses in slot order, stopping at the match. (Measured against a branch-free compare of
  // all eight: the early exit lets the work after it start before every line has arrived, 2-5 %
  // faster with 100k live blocks and on the warm pair.)
  // REQUIRES: group is a group of this arena (GroupOf of one of its blocks, live or not).
  static Block* FindInGroup(const Block* group, DevicePtr ptr) {
    PrefetchGroup(group);
    const unsigned live = MaskOf(group);
    for (unsigned mask = live; mask != 0; mask &= mask - 1) {
      Block* block = const_cast<Block*>(group) + std::countr_zero(mask);
      if (block->ptr == ptr) return block;
    }
    return nullptr;
  }
  // The group that holds `block`.
  static Block* GroupOf(const Block* block) {
    return reinterpret_cast<Block*>(reinterpret_cast<uintptr_t>(block) &
                                    ~uintptr_t{kGroupBytes - 1});
  }

  size_t live_count() const { return live_count_; }
  // Whether the masks, the empty-group list and live_count() agree (the invariants above).
  // O(chunks * groups): for the allocator's invariant checker.
  bool CheckInvariants() const;

 private:
  static constexpr uint8_t kFullMask = (1u << kGroupBlocks) - 1;
  static_assert(kGroupBlocks <= 8, "a group's mask is one byte");
  static_assert(kHugePageBytes % kGroupBytes == 0 &&
                kHeaderGroups * kGroupBytes >= kGroupsPerChunk);

  // The group's occupancy mask in its chunk's header: bit i for group[i].
  static uint8_t& MaskOf(const Block* group) {
    const auto address = reinterpret_cast<uintptr_t>(group);
    auto* header = reinterpret_cast<uint8_t*>(address & ~uintptr_t{kHugePageBytes - 1});
    return header[(address & (kHugePageBytes - 1)) / kGroupBytes];
  }
  // REQUIRES: the group has a free slot.
  Block* TakeSlot(Block* group) {
    uint8_t& mask = MaskOf(group);
    FRAGSCOPE_DCHECK(mask != kFullMask);
    const int slot = std::countr_one(mask);
    mask |= static_cast<uint8_t>(1u << slot);
    ++live_count_;
    return new (group + slot) Block();
  }
  Block* TakeOverflowSlot();
  // An empty group: the most recently emptied, else a fresh one.
  Block* TakeEmptyGroup();

  std::vector<void*> chunks_;                  // from AllocateHugePages, kHugePageBytes each
  size_t next_fresh_group_ = kGroupsPerChunk;  // in chunks_.back(); == kGroupsPerChunk: none left
  std::vector<Block*> empty_groups_;
  Block* overflow_ = nullptr;
  size_t live_count_ = 0;
};

}  // namespace fragscope
