// BlockArena (allocator/block_arena.h): blocks of a segment share a group, overflow and recycling
// of groups, the group scan, and the arena's invariants under random churn across chunks.
#include "allocator/block_arena.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace fragscope {
namespace {

constexpr size_t kGroup = BlockArena::kGroupBlocks;

TEST(BlockArenaTest, BlocksSplitOffASegmentShareItsGroupUntilItIsFull) {
  BlockArena arena;
  Block* head = arena.New();
  std::vector<Block*> blocks = {head};
  for (size_t i = 1; i < kGroup; ++i) blocks.push_back(arena.NewNear(blocks.back(), nullptr));
  for (Block* b : blocks) EXPECT_EQ(BlockArena::GroupOf(b), BlockArena::GroupOf(head));
  // The group is full: the next one goes to the overflow group, and so does the one after.
  Block* spilled = arena.NewNear(head, nullptr);
  EXPECT_NE(BlockArena::GroupOf(spilled), BlockArena::GroupOf(head));
  EXPECT_EQ(BlockArena::GroupOf(arena.NewNear(head, nullptr)), BlockArena::GroupOf(spilled));
  // A new segment's head gets a group of its own.
  Block* other = arena.New();
  EXPECT_NE(BlockArena::GroupOf(other), BlockArena::GroupOf(head));
  EXPECT_NE(BlockArena::GroupOf(other), BlockArena::GroupOf(spilled));
  EXPECT_EQ(arena.live_count(), kGroup + 3);
  EXPECT_TRUE(arena.CheckInvariants());
}

TEST(BlockArenaTest, AFreedSlotIsReusedByItsGroupAndAnEmptiedGroupByTheNextSegment) {
  BlockArena arena;
  Block* head = arena.New();
  Block* second = arena.NewNear(head, nullptr);
  arena.Delete(second);
  EXPECT_EQ(arena.NewNear(head, nullptr), second);  // the lowest free slot of the group
  Block* lone = arena.New();
  arena.Delete(lone);
  EXPECT_TRUE(arena.CheckInvariants());
  EXPECT_EQ(arena.New(), lone);  // the most recently emptied group
  EXPECT_TRUE(arena.CheckInvariants());
}

TEST(BlockArenaTest, FindInGroupSeesOnlyLiveBlocks) {
  BlockArena arena;
  Block* head = arena.New();
  head->ptr = 0x1000;
  Block* second = arena.NewNear(head, nullptr);
  second->ptr = 0x2000;
  Block* group = BlockArena::GroupOf(head);
  EXPECT_EQ(BlockArena::FindInGroup(group, 0x1000), head);
  EXPECT_EQ(BlockArena::FindInGroup(group, 0x2000), second);
  EXPECT_EQ(BlockArena::FindInGroup(group, 0x3000), nullptr);
  arena.Delete(second);  // its slot still holds 0x2000
  EXPECT_EQ(BlockArena::FindInGroup(group, 0x2000), nullptr);
  arena.Delete(head);
  EXPECT_EQ(BlockArena::FindInGroup(group, 0x1000), nullptr);  // an empty group
}

TEST(BlockArenaTest, AnEmptiedOverflowGroupStaysTheOverflowGroup) {
  BlockArena arena;
  Block* head = arena.New();
  for (size_t i = 1; i < kGroup; ++i) arena.NewNear(head, nullptr);
  Block* spilled = arena.NewNear(head, nullptr);
  arena.Delete(spilled);  // the overflow group is empty, but not listed for new segments
  EXPECT_TRUE(arena.CheckInvariants());
  EXPECT_NE(BlockArena::GroupOf(arena.New()), BlockArena::GroupOf(spilled));
  EXPECT_EQ(arena.NewNear(head, nullptr), spilled);
  EXPECT_TRUE(arena.CheckInvariants());
}

TEST(BlockArenaTest, ABlockSplitOffAnOverflowBlockGoesBackToItsSegmentsHomeGroup) {
  BlockArena arena;
  Block* head = arena.New();
  std::vector<Block*> home_blocks = {head};
  for (size_t i = 1; i < kGroup; ++i) home_blocks.push_back(arena.NewNear(head, nullptr));
  Block* home = BlockArena::GroupOf(head);
  Block* spilled = arena.NewNear(head, home);  // the home group is full
  ASSERT_NE(BlockArena::GroupOf(spilled), home);
  arena.Delete(home_blocks.back());
  // Split off the overflow block: the home group has room again.
  EXPECT_EQ(BlockArena::GroupOf(arena.NewNear(spilled, home)), home);
  // An empty home group (waiting to be recycled) is passed over.
  Block* lone = arena.New();
  Block* lone_home = BlockArena::GroupOf(lone);
  arena.Delete(lone);
  EXPECT_EQ(BlockArena::GroupOf(arena.NewNear(spilled, lone_home)), BlockArena::GroupOf(spilled));
  EXPECT_TRUE(arena.CheckInvariants());
}

// Random New/NewNear/Delete over more blocks than one chunk holds: every live block keeps its
// contents (blocks never move), slots are never handed out twice, and the invariants hold.
TEST(BlockArenaTest, RandomChurnAcrossChunksKeepsBlocksInPlace) {
  BlockArena arena;
  std::mt19937_64 rng(7);
  std::vector<Block*> live;
  uint64_t next_tag = 1;
  auto make = [&](Block* b) {
    b->ptr = next_tag++ * 512;
    b->size = b->ptr;  // a second copy, to see that nothing overwrote the block
    live.push_back(b);
  };
  const size_t per_chunk = kHugePageBytes / sizeof(Block);
  for (int step = 0; step < 300000; ++step) {
    const bool grow = live.size() < per_chunk + per_chunk / 2 ? rng() % 4 != 0 : rng() % 2 == 0;
    if (grow || live.empty()) {
      if (live.empty() || rng() % 3 == 0) {
        make(arena.New());
      } else {  // sometimes with another live block's group as the home group
        Block* home = rng() % 2 == 0 ? BlockArena::GroupOf(live[rng() % live.size()]) : nullptr;
        make(arena.NewNear(live[rng() % live.size()], home));
      }
    } else {
      const size_t i = rng() % live.size();
      arena.Delete(live[i]);
      live[i] = live.back();
      live.pop_back();
    }
    if (step % 50000 == 0) {
      ASSERT_TRUE(arena.CheckInvariants()) << step;
    }
  }
  ASSERT_TRUE(arena.CheckInvariants());
  EXPECT_EQ(arena.live_count(), live.size());
  std::vector<Block*> sorted = live;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  for (const Block* b : live) {
    ASSERT_EQ(b->size, b->ptr);
    EXPECT_EQ(BlockArena::FindInGroup(BlockArena::GroupOf(b), b->ptr), b);
  }
}

}  // namespace
}  // namespace fragscope
