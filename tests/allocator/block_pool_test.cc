// BlockPool (allocator/block_pool.h) against a std::set of (stream, size, ptr): random inserts,
// erases, re-keys and best-fit lookups on several streams, some of them numbers as large as a
// cudaStream_t pointer, with the whole order compared after every step.
#include "allocator/block_pool.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace fragscope {
namespace {

using Key = std::tuple<StreamId, uint64_t, DevicePtr>;

Key KeyOf(const Block* b) { return {b->stream, b->size, b->ptr}; }

Block FreeBlock(DevicePtr ptr, uint64_t size, StreamId stream) {
  Block b;
  b.ptr = ptr;
  b.size = size;
  b.stream = stream;
  return b;
}

std::vector<Key> Order(const BlockPool& pool) {
  std::vector<Key> keys;
  pool.ForEach([&keys](const Block* b) { keys.push_back(KeyOf(b)); });
  return keys;
}

TEST(BlockPoolTest, LowerBoundSeesOnlyItsStream) {
  BlockPool pool(PoolKind::kLarge);
  Block a = FreeBlock(0x1000, 4096, 7);
  Block b = FreeBlock(0x9000, 8192, 3);
  pool.Insert(&a);
  pool.Insert(&b);
  EXPECT_EQ(*pool.LowerBound(7, 4096), &a);
  EXPECT_TRUE(pool.LowerBound(7, 4097).at_end());  // b is larger, but on stream 3
  EXPECT_EQ(*pool.LowerBound(3, 1), &b);
  EXPECT_TRUE(pool.LowerBound(0, 1).at_end());   // the default stream's set is empty
  EXPECT_TRUE(pool.LowerBound(42, 1).at_end());  // a stream the pool never saw
  EXPECT_TRUE(pool.LowerBound(42, 1).at_begin());
  // The whole order: stream first, whatever the insertion order.
  EXPECT_EQ(Order(pool), (std::vector<Key>{KeyOf(&b), KeyOf(&a)}));
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_TRUE(pool.IsOrdered());
}

TEST(BlockPoolTest, WalksBackwardsFromTheEndOfAStream) {
  BlockPool pool(PoolKind::kLarge);
  Block small = FreeBlock(0x1000, 512, 1);
  Block large = FreeBlock(0x2000, 2048, 1);
  Block other = FreeBlock(0x3000, 1024, 2);
  for (Block* b : {&small, &large, &other}) pool.Insert(b);
  auto it = pool.LowerBound(1, 4096);
  ASSERT_TRUE(it.at_end());
  ASSERT_FALSE(it.at_begin());
  --it;
  EXPECT_EQ(*it, &large);
  --it;
  EXPECT_EQ(*it, &small);
  EXPECT_TRUE(it.at_begin());
  pool.Erase(it);
  EXPECT_EQ(*pool.LowerBound(1, 1), &large);
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_TRUE(pool.IsOrdered());
}

TEST(BlockPoolTest, MatchesAnOrderedSetUnderChurn) {
  const StreamId streams[] = {0, 1, 0x7f3a5c001200, 0x7f3a5c000e00};
  std::mt19937_64 rng(11);
  BlockPool pool(PoolKind::kSmall);
  std::deque<Block> storage;  // stable addresses
  std::vector<Block*> in_pool;
  std::set<Key> expected;
  DevicePtr next_ptr = 0x200000;
  auto random_size = [&rng] { return 512 * (1 + rng() % 64); };  // many equal sizes: ties
  for (int step = 0; step < 20000; ++step) {
    const uint64_t choice = rng() % 10;
    if (choice < 4 || in_pool.empty()) {
      Block& b = storage.emplace_back();
      b.ptr = next_ptr;
      b.size = random_size();
      b.stream = streams[rng() % 4];
      next_ptr += 1 << 20;
      pool.Insert(&b);
      in_pool.push_back(&b);
      expected.insert(KeyOf(&b));
    } else if (choice < 7) {
      const size_t i = rng() % in_pool.size();
      Block* b = in_pool[i];
      expected.erase(KeyOf(b));
      if (rng() % 2 == 0) {
        pool.Erase(b);
      } else {
        pool.Erase(pool.Find(b));
      }
      in_pool[i] = in_pool.back();
      in_pool.pop_back();
    } else if (choice < 9) {
      // A split or merge changes a block's size and address in place.
      Block* b = in_pool[rng() % in_pool.size()];
      const uint64_t size = random_size();
      const DevicePtr ptr = b->ptr + 512 * (rng() % 4);
      expected.erase(KeyOf(b));
      pool.Rekey(pool.Find(b), ptr, size, [&] {
        b->ptr = ptr;
        b->size = size;
      });
      expected.insert(KeyOf(b));
    } else {
      const StreamId stream = streams[rng() % 4];
      const uint64_t size = random_size();
      auto want = expected.lower_bound({stream, size, 0});
      BlockPool::iterator got = pool.LowerBound(stream, size);
      if (want == expected.end() || std::get<0>(*want) != stream) {
        ASSERT_TRUE(got.at_end()) << step;
      } else {
        ASSERT_FALSE(got.at_end()) << step;
        ASSERT_EQ(KeyOf(*got), *want) << step;
        ASSERT_EQ(got.key().size, std::get<1>(*want));
      }
    }
    ASSERT_EQ(pool.size(), expected.size());
    if (step % 64 == 0) {
      ASSERT_TRUE(pool.IsOrdered()) << step;
      ASSERT_EQ(Order(pool), std::vector<Key>(expected.begin(), expected.end())) << step;
    }
  }
}

// The running figures (free bytes, largest block, bytes from a size) and the releasable index
// (releasable_blocks.h) against walks of the pool, under churn that makes blocks split and whole
// again through Insert, Erase and Rekey. The index starts after a walk of many blocks found few
// releasable, and from then on a walk for them visits only them.
TEST(BlockPoolTest, RunningFiguresAndReleasableIndexMatchWalksUnderChurn) {
  const StreamId streams[] = {0, 1, 0x7f3a5c001200};
  std::mt19937_64 rng(5);
  BlockPool pool(PoolKind::kLarge);
  std::deque<Block> storage;  // stable addresses
  std::vector<Block*> in_pool;
  Block neighbour;  // what a split block links to
  DevicePtr next_ptr = 0x200000;
  auto random_size = [&rng] { return 512 * (1 + rng() % 4096); };
  auto set_split = [&](Block* b, bool split) { b->prev = split ? &neighbour : nullptr; };
  auto insert = [&](bool split) {
    Block& b = storage.emplace_back();
    b.ptr = next_ptr;
    b.size = random_size();
    b.stream = streams[rng() % 3];
    b.expandable = rng() % 50 == 0;
    set_split(&b, split);
    next_ptr += 1 << 22;
    pool.Insert(&b);
    in_pool.push_back(&b);
  };
  auto releasable_by_walk = [&] {
    std::vector<const Block*> blocks;
    pool.ForEach([&](const Block* b) {
      if (b->expandable || b->prev == nullptr) blocks.push_back(b);
    });
    return blocks;
  };
  auto releasable_by_index = [&] {
    std::vector<const Block*> blocks;
    pool.ForEachReleasable([&](const Block* b) { blocks.push_back(b); });
    return blocks;
  };
  for (int i = 0; i < 2000; ++i) insert(/*split=*/i % 10 != 0);
  EXPECT_EQ(releasable_by_index(), releasable_by_walk());  // walks, then starts the index
  const uint64_t walked = pool.blocks_walked();
  const std::vector<const Block*> releasable = releasable_by_index();
  EXPECT_EQ(pool.blocks_walked() - walked, releasable.size());  // only them
  for (int step = 0; step < 20000; ++step) {
    const uint64_t choice = rng() % 10;
    if (choice < 3 || in_pool.empty()) {
      insert(/*split=*/rng() % 3 != 0);
    } else if (choice < 6) {
      const size_t i = rng() % in_pool.size();
      Block* b = in_pool[i];
      if (rng() % 2 == 0) {
        pool.Erase(b);
      } else {
        pool.Erase(pool.Find(b));
      }
      in_pool[i] = in_pool.back();
      in_pool.pop_back();
    } else {
      // A split or merge: a new key, and the block split or whole.
      Block* b = in_pool[rng() % in_pool.size()];
      const uint64_t size = random_size();
      const DevicePtr ptr = b->ptr + 512 * (rng() % 4);
      const bool split = rng() % 2 == 0;
      pool.Rekey(pool.Find(b), ptr, size, [&] {
        b->ptr = ptr;
        b->size = size;
        set_split(b, split);
      });
    }
    if (step % 64 != 0) continue;
    ASSERT_TRUE(pool.IsOrdered()) << step;  // free_bytes() is the sum of the sizes
    ASSERT_TRUE(pool.IndexesAgree()) << step;
    ASSERT_EQ(releasable_by_index(), releasable_by_walk()) << step;
    uint64_t largest = 0, bytes_from = 0;
    const uint64_t from = random_size();
    for (const Block* b : in_pool) {
      largest = std::max(largest, b->size);
      if (b->stream == 1 && b->size >= from) bytes_from += b->size;
    }
    ASSERT_EQ(pool.LargestSize(), largest) << step;
    ASSERT_EQ(pool.BytesFrom(1, from), bytes_from) << step;
  }
}

TEST(BlockPoolTest, TheReleasableIndexWaitsForAWalkOfManyBlocks) {
  BlockPool pool(PoolKind::kLarge);
  Block whole = FreeBlock(0x1000, 4096, 0);
  Block split = FreeBlock(0x9000, 8192, 0);
  split.next = &whole;  // any neighbour
  pool.Insert(&whole);
  pool.Insert(&split);
  std::vector<const Block*> seen;
  pool.ForEachReleasable([&seen](const Block* b) { seen.push_back(b); });
  EXPECT_EQ(seen, std::vector<const Block*>{&whole});
  pool.ForEachReleasable([](const Block*) {});
  EXPECT_EQ(pool.blocks_walked(), 4u);  // two walks of the whole pool: no index for 2 blocks
  EXPECT_EQ(pool.free_bytes(), 4096u + 8192u);
  EXPECT_EQ(pool.LargestSize(), 8192u);
  EXPECT_EQ(pool.BytesFrom(0, 4097), 8192u);
  EXPECT_EQ(pool.BytesFrom(0, ~uint64_t{0}), 0u);
}

}  // namespace
}  // namespace fragscope
