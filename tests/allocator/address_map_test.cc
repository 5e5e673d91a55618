// AddressMap (allocator/address_map.h) against std::unordered_map: random inserts and erases
// over a key set small enough that probe runs collide, wrap around the array's end, and the table
// grows; every key is looked up after every step. Erasures alternate between Erase(key) and
// EraseFound(Find(key)). Both forms: the allocator's AddressMap<Block*> and a map whose keys
// include 0 (the replay's).
#include "allocator/address_map.h"

#include <random>
#include <unordered_map>
#include <vector>

#include "allocator/block.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

TEST(AddressMapTest, InsertFindErase) {
  AddressMap<Block*> map;
  Block a, b;
  EXPECT_EQ(map.Get(0x200), nullptr);
  map.Insert(0x200, &a);
  map.Insert(0x400, &b);
  EXPECT_EQ(map.size(), 2u);
  EXPECT_EQ(map.Get(0x200), &a);
  EXPECT_EQ(map.Get(0x400), &b);
  EXPECT_EQ(map.Get(0x600), nullptr);
  EXPECT_TRUE(map.Erase(0x200));
  EXPECT_FALSE(map.Erase(0x200));
  EXPECT_EQ(map.Get(0x200), nullptr);
  EXPECT_EQ(map.Get(0x400), &b);
  EXPECT_EQ(map.size(), 1u);
}

TEST(AddressMapTest, MatchesUnorderedMapUnderChurn) {
  std::vector<Block> blocks(4096);
  for (uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    AddressMap<Block*> map;
    std::unordered_map<DevicePtr, Block*> expected;
    // 512-aligned addresses like the allocator's, in a range of 4096 distinct keys.
    auto random_key = [&] { return (1 + rng() % 4096) * 512; };
    for (int step = 0; step < 20000; ++step) {
      const DevicePtr key = random_key();
      // Grow towards ~3000 live keys, then churn around that.
      const bool insert = expected.size() < 3000 ? rng() % 4 != 0 : rng() % 2 == 0;
      if (insert && !expected.contains(key)) {
        Block* block = &blocks[key / 512 - 1];
        map.Insert(key, block);
        expected.emplace(key, block);
      } else if (step % 2 == 0) {
        EXPECT_EQ(map.Erase(key), expected.erase(key) == 1);
      } else if (Block** found = map.Find(key); found != nullptr) {  // a free's lookup and erase
        map.EraseFound(found);
        EXPECT_EQ(expected.erase(key), 1u);
      } else {
        EXPECT_FALSE(expected.contains(key));
      }
      ASSERT_EQ(map.size(), expected.size());
      if (step % 97 == 0) {
        for (uint64_t k = 1; k <= 4096; ++k) {
          auto it = expected.find(k * 512);
          ASSERT_EQ(map.Get(k * 512), it == expected.end() ? nullptr : it->second) << k;
        }
      }
    }
    size_t visited = 0;
    map.ForEach([&](DevicePtr key, Block* block) {
      ++visited;
      EXPECT_EQ(expected.at(key), block);
    });
    EXPECT_EQ(visited, expected.size());
  }
}

// Keys 0 .. 4095 * 512 (0 included), values carrying their key, TryEmplace, in-place updates
// through Find, and erasure by key or by what Find returned.
TEST(AddressMapTest, ZeroKeyMapMatchesUnorderedMap) {
  struct Value {
    DevicePtr key = 0;
    int updates = 0;
  };
  std::mt19937_64 rng(7);
  AddressMap<Value, /*kZeroKey=*/true> map;
  std::unordered_map<DevicePtr, int> expected;  // key -> updates
  for (int step = 0; step < 20000; ++step) {
    const DevicePtr key = (rng() % 4096) * 512;
    const int op = static_cast<int>(rng() % 3);
    if (op == 0) {
      auto [value, inserted] = map.TryEmplace(key, Value{key, 0});
      EXPECT_EQ(inserted, expected.emplace(key, 0).second);
      EXPECT_EQ(value->key, key);
    } else if (op == 1) {
      Value* value = map.Find(key);
      ASSERT_EQ(value != nullptr, expected.contains(key)) << key;
      if (value != nullptr) {
        EXPECT_EQ(value->updates, expected[key]);
        ++value->updates;
        ++expected[key];
      }
    } else if (step % 2 == 0) {
      EXPECT_EQ(map.Erase(key), expected.erase(key) == 1) << key;
    } else if (Value* found = map.Find(key); found != nullptr) {  // key 0 included
      map.EraseFound(found);
      EXPECT_EQ(expected.erase(key), 1u) << key;
    } else {
      EXPECT_FALSE(expected.contains(key)) << key;
    }
    ASSERT_EQ(map.size(), expected.size());
  }
  ASSERT_TRUE(expected.contains(0) || map.TryEmplace(0, Value{0, 0}).second);
  expected.emplace(0, 0);
  size_t visited = 0;
  map.ForEach([&](DevicePtr key, const Value& value) {
    ++visited;
    EXPECT_EQ(value.key, key);
    EXPECT_EQ(value.updates, expected.at(key));
  });
  EXPECT_EQ(visited, expected.size());
}

}  // namespace
}  // namespace fragscope
