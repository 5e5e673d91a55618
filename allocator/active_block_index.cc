#include "allocator/active_block_index.h"

namespace fragscope {

ActiveBlockIndex::ActiveBlockIndex() : root_(size_t{1} << kRootBits) {}

ActiveBlockIndex::~ActiveBlockIndex() = default;

template <typename Set>
void ActiveBlockIndex::ForEachWholeGranule(DevicePtr base, uint64_t bytes, bool create, Set set) {
  constexpr uint64_t kGranule = uint64_t{1} << kGranuleShift;
  const DevicePtr end = base + bytes;
  if (end < base || (end >> kAddressBits) != 0) return;  // beyond the table: all in the map
  for (uint64_t granule = (base + kGranule - 1) >> kGranuleShift;
       (granule + 1) << kGranuleShift <= end; ++granule) {
    std::unique_ptr<Leaf>& leaf = root_[granule >> kLeafBits];
    if (leaf == nullptr) {
      if (!create) continue;
      leaf = std::make_unique<Leaf>();
    }
    set(leaf->home[granule & ((uint64_t{1} << kLeafBits) - 1)]);
  }
}

void ActiveBlockIndex::AddSegment(DevicePtr base, uint64_t bytes, const Block* head) {
  Block* group = BlockArena::GroupOf(head);
  ForEachWholeGranule(base, bytes, /*create=*/true, [group](Block*& home) {
    FRAGSCOPE_DCHECK(home == nullptr);  // segments never overlap
    home = group;
  });
}

void ActiveBlockIndex::RemoveSegment(DevicePtr base, uint64_t bytes) {
  ForEachWholeGranule(base, bytes, /*create=*/false, [](Block*& home) { home = nullptr; });
}

bool ActiveBlockIndex::CheckInvariants() const {
  bool ok = overflow_.size() <= size_;
  overflow_.ForEach([&](DevicePtr ptr, const Block* block) {
    ok = ok && block->ptr == ptr && !block->IsFree() && !IsDirect(block, HomeGroup(ptr));
  });
  return ok;
}

}  // namespace fragscope
