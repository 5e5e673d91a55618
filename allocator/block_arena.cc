#include "allocator/block_arena.h"

#include <algorithm>
#include <cstring>

namespace fragscope {

BlockArena::~BlockArena() {
  for (void* chunk : chunks_) FreeHugePages(chunk);
}

Block* BlockArena::TakeOverflowSlot() {
  if (overflow_ == nullptr || MaskOf(overflow_) == kFullMask) overflow_ = TakeEmptyGroup();
  return TakeSlot(overflow_);
}

Block* BlockArena::TakeEmptyGroup() {
  if (!empty_groups_.empty()) {
    Block* group = empty_groups_.back();
    empty_groups_.pop_back();
    return group;
  }
  if (next_fresh_group_ == kGroupsPerChunk) {
    void* chunk = AllocateHugePages(kHugePageBytes);
    std::memset(chunk, 0, kGroupsPerChunk);  // the header: every group empty
    chunks_.push_back(chunk);
    next_fresh_group_ = kHeaderGroups;
  }
  auto* base = static_cast<char*>(chunks_.back());
  return reinterpret_cast<Block*>(base + kGroupBytes * next_fresh_group_++);
}

bool BlockArena::CheckInvariants() const {
  size_t live = 0;
  size_t empty_handed_out = 0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const auto* header = static_cast<const uint8_t*>(chunks_[c]);
    const size_t handed_out = c + 1 == chunks_.size() ? next_fresh_group_ : kGroupsPerChunk;
    for (size_t g = 0; g < kGroupsPerChunk; ++g) {
      if (g < kHeaderGroups || g >= handed_out) {
        if (g >= kHeaderGroups && header[g] != 0) return false;  // a fresh group is empty
        continue;
      }
      live += static_cast<size_t>(std::popcount(header[g]));
      const auto* group =
          reinterpret_cast<const Block*>(static_cast<const char*>(chunks_[c]) + kGroupBytes * g);
      if (header[g] == 0 && group != overflow_) ++empty_handed_out;
    }
  }
  std::vector<Block*> listed = empty_groups_;
  std::sort(listed.begin(), listed.end());
  if (std::adjacent_find(listed.begin(), listed.end()) != listed.end()) return false;
  for (const Block* group : listed) {
    if (MaskOf(group) != 0 || group == overflow_) return false;
  }
  // Listed groups are distinct and empty: with the count equal, every empty one is listed.
  return live == live_count_ && empty_handed_out == listed.size();
}

}  // namespace fragscope
