// Mutex (allocator/mutex.h): mutual exclusion under contention, which exercises the spin and
// futex-sleep paths; run under TSan by scripts/sanitize.sh thread.
#include "allocator/mutex.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace fragscope {
namespace {

TEST(MutexTest, UncontendedLockUnlock) {
  Mutex mu;
  for (int i = 0; i < 3; ++i) {
    MutexLock lock(&mu);
  }
  mu.Lock();
  mu.Unlock();
}

// Eight threads do read-modify-write on shared plain data under the lock, with a critical
// section long enough that waiters spin out and sleep. A lost update or a data race (TSan)
// would show.
TEST(MutexTest, ContendedIncrementsAreNotLost) {
  Mutex mu;
  int64_t counter = 0;
  int64_t shadow = 0;
  constexpr int kThreads = 8;
  constexpr int kIterations = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIterations; ++i) {
        MutexLock lock(&mu);
        const int64_t seen = counter;
        if (i % 64 == 0) std::this_thread::yield();  // hold the lock across a reschedule
        counter = seen + 1;
        shadow += 2;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(counter, int64_t{kThreads} * kIterations);
  EXPECT_EQ(shadow, 2 * counter);
}

}  // namespace
}  // namespace fragscope
