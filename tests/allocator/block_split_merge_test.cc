// Block split and merge (allocator/block_split_merge.h): the links, addresses, segment head and
// copied fields a split sets, and a merge with either neighbour undoing it.
#include "allocator/block_split_merge.h"

#include "allocator/block_arena.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

constexpr DevicePtr kBase = DevicePtr{1} << 32;

// One free 20 MiB segment of the large pool on stream 3: its single block, from `arena`.
Block* WholeSegment(BlockArena& arena, Segment& segment) {
  segment = {.base = kBase, .size = 20 * kMiB, .stream = 3, .pool = PoolKind::kLarge};
  Block* head = arena.New();
  head->ptr = kBase;
  head->size = segment.size;
  head->stream = segment.stream;
  head->segment = &segment;
  head->pool = segment.pool;
  segment.head = head;
  return head;
}

TEST(BlockSplitMergeTest, SplitFrontHandsOutTheFrontAndKeepsTheRemainderAbove) {
  BlockArena arena;
  Segment segment;
  Block* block = WholeSegment(arena, segment);
  Block* front = SplitFront(block, 4 * kMiB, arena, /*home=*/nullptr);
  EXPECT_EQ(front->ptr, kBase);
  EXPECT_EQ(front->size, 4 * kMiB);
  EXPECT_EQ(front->stream, StreamId{3});
  EXPECT_EQ(front->segment, &segment);
  EXPECT_EQ(front->pool, PoolKind::kLarge);
  EXPECT_EQ(front->prev, nullptr);
  EXPECT_EQ(front->next, block);
  EXPECT_EQ(segment.head, front);
  EXPECT_EQ(block->ptr, kBase + 4 * kMiB);
  EXPECT_EQ(block->size, 16 * kMiB);
  EXPECT_EQ(block->prev, front);
  EXPECT_TRUE(front->IsSplit() && block->IsSplit());
  // A split of the remainder goes between the two; the segment's head stays.
  Block* middle = SplitFront(block, 2 * kMiB, arena, /*home=*/nullptr);
  EXPECT_EQ(middle->ptr, kBase + 4 * kMiB);
  EXPECT_EQ(front->next, middle);
  EXPECT_EQ(middle->prev, front);
  EXPECT_EQ(middle->next, block);
  EXPECT_EQ(block->ptr, kBase + 6 * kMiB);
  EXPECT_EQ(segment.head, front);
  EXPECT_EQ(BlockArena::GroupOf(middle), BlockArena::GroupOf(front));
  EXPECT_EQ(arena.live_count(), 3u);
}

TEST(BlockSplitMergeTest, MergeIntoAbsorbsEitherNeighbourAndRecyclesIt) {
  BlockArena arena;
  Segment segment;
  Block* high = WholeSegment(arena, segment);
  Block* low = SplitFront(high, 4 * kMiB, arena, /*home=*/nullptr);
  Block* middle = SplitFront(high, 2 * kMiB, arena, /*home=*/nullptr);
  // The higher neighbour: middle grows upward, high is unlinked.
  EXPECT_EQ(MergeInto(middle, high, arena), 14 * kMiB);
  EXPECT_EQ(middle->ptr, kBase + 4 * kMiB);
  EXPECT_EQ(middle->size, 16 * kMiB);
  EXPECT_EQ(middle->next, nullptr);
  // The lower neighbour, the segment's head: middle takes its address and its place as head.
  EXPECT_EQ(MergeInto(middle, low, arena), 4 * kMiB);
  EXPECT_EQ(middle->ptr, kBase);
  EXPECT_EQ(middle->size, 20 * kMiB);
  EXPECT_EQ(middle->prev, nullptr);
  EXPECT_EQ(segment.head, middle);
  EXPECT_FALSE(middle->IsSplit());
  EXPECT_EQ(arena.live_count(), 1u);
  EXPECT_TRUE(arena.CheckInvariants());
}

}  // namespace
}  // namespace fragscope
