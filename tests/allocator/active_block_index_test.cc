// ActiveBlockIndex (allocator/active_block_index.h): blocks found through their segment's home
// group or through the map, and every case that must fall back to the map.
#include "allocator/active_block_index.h"

#include "gtest/gtest.h"

namespace fragscope {
namespace {

constexpr DevicePtr kBase = DevicePtr{0x7f0000000000};  // 2 MiB aligned
constexpr uint64_t k2MiB = uint64_t{2} << 20;

class ActiveBlockIndexTest : public ::testing::Test {
 protected:
  // A block of the arena at `ptr`, allocated (active) unless told otherwise.
  Block* Make(Block* b, DevicePtr ptr, bool allocated = true) {
    b->ptr = ptr;
    b->size = 512;
    b->allocated = allocated;
    return b;
  }
  void Activate(Block* b) { index_.Insert(b, index_.HomeGroup(b->ptr)); }
  BlockArena arena_;
  ActiveBlockIndex index_;
};

TEST_F(ActiveBlockIndexTest, BlocksInTheirSegmentsHomeGroupNeedNoMap) {
  Block* head = Make(arena_.New(), kBase);
  index_.AddSegment(kBase, k2MiB, head);
  Block* second = Make(arena_.NewNear(head, nullptr), kBase + 4096);
  Activate(head);
  Activate(second);
  EXPECT_EQ(index_.size(), 2u);
  EXPECT_EQ(index_.map_size(), 0u);
  EXPECT_EQ(index_.Find(kBase), head);
  EXPECT_EQ(index_.Find(kBase + 4096), second);
  EXPECT_EQ(index_.Find(kBase + 512), nullptr);  // inside a block, not its start
  second->allocated = false;  // freed: it leaves the index (and its pool would take it)
  index_.Erase(second);
  EXPECT_EQ(index_.size(), 1u);
  EXPECT_EQ(index_.Find(kBase + 4096), nullptr);
  EXPECT_TRUE(index_.CheckInvariants());
}

TEST_F(ActiveBlockIndexTest, AFreeBlockOrAPendingOneIsFoundOnlyWhileActive) {
  Block* head = Make(arena_.New(), kBase, /*allocated=*/false);
  index_.AddSegment(kBase, k2MiB, head);
  EXPECT_EQ(index_.Find(kBase), nullptr);  // free in a pool: a double free's address
  head->event_count = 1;                   // freed, waiting for another stream's event
  EXPECT_EQ(index_.Find(kBase), head);
}

TEST_F(ActiveBlockIndexTest, OverflowBlocksAndPartlyCoveredGranulesUseTheMap) {
  Block* head = Make(arena_.New(), kBase);
  index_.AddSegment(kBase, 4 * k2MiB, head);
  // A block of the segment outside its home group (an overflow group).
  Block* elsewhere = Make(arena_.New(), kBase + 3 * k2MiB);
  Activate(elsewhere);
  EXPECT_EQ(index_.map_size(), 1u);
  EXPECT_EQ(index_.Find(kBase + 3 * k2MiB), elsewhere);
  // A segment that starts and ends inside granules owns no granule: its blocks use the map.
  const DevicePtr unaligned = kBase + 8 * k2MiB + 512;
  Block* other = Make(arena_.New(), unaligned);
  index_.AddSegment(unaligned, k2MiB, other);
  Activate(other);
  EXPECT_EQ(index_.map_size(), 2u);
  EXPECT_EQ(index_.Find(unaligned), other);
  // Addresses past the table's 48 bits.
  const DevicePtr high = DevicePtr{1} << 50;
  Block* far = Make(arena_.New(), high);
  index_.AddSegment(high, k2MiB, far);
  Activate(far);
  EXPECT_EQ(index_.map_size(), 3u);
  EXPECT_EQ(index_.Find(high), far);
  EXPECT_TRUE(index_.CheckInvariants());
  index_.Erase(elsewhere);
  index_.Erase(other);
  index_.Erase(far);
  EXPECT_EQ(index_.map_size(), 0u);
  EXPECT_EQ(index_.size(), 0u);
}

// A segment's home group empties (its blocks merged into one living elsewhere) and becomes
// another segment's home: the first segment's addresses still resolve, through the map.
TEST_F(ActiveBlockIndexTest, ARecycledHomeGroupStillResolvesTheOldSegment) {
  Block* s_head = Make(arena_.New(), kBase, /*allocated=*/false);
  index_.AddSegment(kBase, k2MiB, s_head);
  Block* s_other = Make(arena_.New(), kBase + 512);
  Activate(s_other);  // not in the home group: the map
  Block* home = BlockArena::GroupOf(s_head);
  arena_.Delete(s_head);
  Block* t_head = Make(arena_.New(), kBase + 4 * k2MiB);
  ASSERT_EQ(BlockArena::GroupOf(t_head), home);  // the emptied group, recycled
  index_.AddSegment(kBase + 4 * k2MiB, k2MiB, t_head);
  Activate(t_head);
  EXPECT_EQ(index_.Find(kBase + 512), s_other);
  EXPECT_EQ(index_.Find(kBase + 4 * k2MiB), t_head);
  EXPECT_EQ(index_.Find(kBase), nullptr);
  EXPECT_TRUE(index_.CheckInvariants());
}

TEST_F(ActiveBlockIndexTest, ARemovedSegmentsGranulesServeTheNextOne) {
  Block* first = Make(arena_.New(), kBase, /*allocated=*/false);
  index_.AddSegment(kBase, k2MiB, first);
  index_.RemoveSegment(kBase, k2MiB);
  arena_.Delete(first);
  Block* lone = Make(arena_.New(), kBase + k2MiB);  // takes the emptied group
  Block* second = Make(arena_.New(), kBase);
  index_.AddSegment(kBase, k2MiB, second);
  Activate(second);
  EXPECT_EQ(index_.map_size(), 0u);
  EXPECT_EQ(index_.Find(kBase), second);
  (void)lone;
}

}  // namespace
}  // namespace fragscope
