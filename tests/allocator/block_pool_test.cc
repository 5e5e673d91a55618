// BlockPool (allocator/block_pool.h) against a std::set of (stream, size, ptr): random inserts,
// erases, re-keys and best-fit lookups on several streams, some of them numbers as large as a
// cudaStream_t pointer, with the whole order compared after every step.
#include "allocator/block_pool.h"

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

}  // namespace
}  // namespace fragscope
