#include "fslog/asymmetric_lock.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace fragscope {
namespace {

// Plain (non-atomic) data touched only under the lock: a broken lock shows up as a wrong total,
// as an overlap seen by `inside`, and as a data race under ThreadSanitizer.
struct Shared {
  uint64_t value = 0;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};

  void Touch() {
    if (inside.fetch_add(1, std::memory_order_relaxed) != 0) overlaps.fetch_add(1);
    ++value;
    inside.fetch_sub(1, std::memory_order_relaxed);
  }
};

// Param: whether membarrier may be used (else the fast side fences).
class AsymmetricLockModeTest : public ::testing::TestWithParam<bool> {};

TEST_P(AsymmetricLockModeTest, FastAndSlowSidesExcludeEachOther) {
  AsymmetricLock lock(GetParam());
  std::printf("[ membarrier %s ]\n", lock.uses_membarrier() ? "in use" : "not used: fenced");
  Shared shared;
  constexpr uint64_t kSlow = 2000;
  constexpr int kSlowThreads = 3;
  std::atomic<int> slow_done{0};
  uint64_t fast_count = 0;
  uint64_t fallbacks = 0;
  // The fast side runs for as long as the slow sides do, so that they really contend.
  std::thread fast([&] {
    for (; slow_done.load(std::memory_order_relaxed) < kSlowThreads || fast_count < 1000;
         ++fast_count) {
      if (lock.TryFastLock()) {
        shared.Touch();
        lock.FastUnlock();
      } else {
        ++fallbacks;
        lock.SlowLock();
        shared.Touch();
        lock.SlowUnlock();
      }
    }
  });
  std::vector<std::thread> slow;
  for (int t = 0; t < kSlowThreads; ++t) {
    slow.emplace_back([&] {
      for (uint64_t i = 0; i < kSlow; ++i) {
        lock.SlowLock();
        shared.Touch();
        lock.SlowUnlock();
      }
      slow_done.fetch_add(1);
    });
  }
  fast.join();
  for (auto& thread : slow) thread.join();
  EXPECT_EQ(shared.value, fast_count + kSlowThreads * kSlow);
  EXPECT_EQ(shared.overlaps.load(), 0);
  std::printf("[ fast side: %lu acquisitions, %lu fell back to the slow side ]\n", fast_count,
              fallbacks);
}

TEST_P(AsymmetricLockModeTest, BoundedSlowAcquisitionGivesUpWhileTheFastSideHolds) {
  AsymmetricLock lock(GetParam());
  ASSERT_TRUE(lock.TryFastLock());
  bool got = true;
  std::thread([&] { got = lock.TrySlowLockFor(10000); }).join();
  EXPECT_FALSE(got);
  lock.FastUnlock();
  std::thread([&] { got = lock.TrySlowLockFor(10000); }).join();
  EXPECT_TRUE(got);
  // A slow holder makes the fast side back off.
  EXPECT_FALSE(lock.TryFastLock());
  lock.SlowUnlock();
  EXPECT_TRUE(lock.TryFastLock());
  lock.FastUnlock();
}

INSTANTIATE_TEST_SUITE_P(Modes, AsymmetricLockModeTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Membarrier" : "Fenced"; });

}  // namespace
}  // namespace fragscope
