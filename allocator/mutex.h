// Mutex: a small non-recursive lock with Abseil's thread-safety annotations, for the allocator's
// one-lock-per-device design.
//
// Why not absl::Mutex: Debian's Abseil keeps deadlock detection on, which costs ~40 ns per
// lock/unlock (GraphCycles lookups, measured in bench/allocator_benchmark.cc); that alone is
// most of the 100 ns budget of a warm malloc+free pair. Why not std::mutex: pthread_mutex_lock
// and unlock are ~100 instructions per pair (type checks, elision tests) around the one atomic
// that matters. This is the classic three-state futex lock (Drepper, "Futexes Are Tricky",
// mutex 3) over C++20 atomic wait/notify, which Linux implements with a futex:
//   0 unlocked, 1 locked without waiters, 2 locked and maybe waiters.
// Uncontended Lock and Unlock are one atomic read-modify-write each. A contended Lock spins
// briefly (allocator critical sections are ~100 ns), then sleeps.
//
// Every fragscope lock is this one (the hooks' registries too), also because it is header-only
// atomics that ThreadSanitizer instruments: the system Abseil is not built with TSan, so TSan
// cannot see absl::Mutex's happens-before edges and reports races on data it guards.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"

namespace fragscope {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    uint32_t expected = kUnlocked;
    if (ABSL_PREDICT_TRUE(state_.compare_exchange_strong(
            expected, kLocked, std::memory_order_acquire, std::memory_order_relaxed))) {
      return;
    }
    LockSlow();
  }

  void Unlock() ABSL_UNLOCK_FUNCTION() {
    if (ABSL_PREDICT_FALSE(state_.exchange(kUnlocked, std::memory_order_release) == kContended)) {
      state_.notify_one();
    }
  }

 private:
  static constexpr uint32_t kUnlocked = 0;
  static constexpr uint32_t kLocked = 1;
  static constexpr uint32_t kContended = 2;

  ABSL_ATTRIBUTE_NOINLINE void LockSlow() {
    for (int spin = 0; spin < 100; ++spin) {
      uint32_t expected = kUnlocked;
      if (state_.load(std::memory_order_relaxed) == kUnlocked &&
          state_.compare_exchange_weak(expected, kLocked, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        return;
      }
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    // Announce a waiter (state 2) and sleep until the holder's Unlock wakes us; whoever takes
    // the lock from here on keeps state 2, so its Unlock wakes the next sleeper.
    while (state_.exchange(kContended, std::memory_order_acquire) != kUnlocked) {
      state_.wait(kContended, std::memory_order_relaxed);
    }
  }

  std::atomic<uint32_t> state_{kUnlocked};
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

}  // namespace fragscope
