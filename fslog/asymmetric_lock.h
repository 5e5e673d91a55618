// AsymmetricLock: mutual exclusion with a nearly free side for one thread at a time (the "fast"
// side: the event-log writer's OnEvent, already serialized by the allocator's lock) and an
// expensive side for everyone else (the "slow" side: markers, flushes, the background tick, the
// fatal-signal handler).
//
// Why: any locked instruction (xchg, lock cmpxchg) or mfence drains the store buffer. On the hot
// path, right after the previous event's 80-byte record was stored, that drain measured ~20-35 ns
// per event on a KVM Xeon, 3-4x the cost of everything else OnEvent does besides reading the clock.
//
// How (the asymmetric Dekker protocol, as in userspace RCU and folly's hazard pointers):
//   fast side:  fast_active_ = true; compiler barrier; if (slow_pending_) back off;
//               ... critical section ...; fast_active_ = false (release)
//   slow side:  take slow_lock_ (a spin lock among slow sides); slow_pending_ = true;
//               membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED); wait until !fast_active_
// membarrier() makes every running thread of the process execute a full memory barrier, which is
// the fence the fast side skipped: either the fast side's store of fast_active_ is visible to the
// slow side's load after the membarrier, or the slow side's store of slow_pending_ is visible to
// the fast side's load. On x86 (TSO) the fast side's loads and stores in the critical section stay
// after its flag load; acquire/release on the flags covers weaker hardware.
// Where membarrier is unavailable (kernel < 4.14, a seccomp filter), the fast side executes a real
// seq_cst fence instead: correct, just not faster than a spin lock.
//
// A slow acquisition costs a membarrier system call (IPIs to the CPUs running the process's
// threads: microseconds), so the slow side suits things done a few thousand times a second at most.
#pragma once

#include <atomic>

#include "absl/base/thread_annotations.h"

#if defined(__SANITIZE_THREAD__)
#define FRAGSCOPE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FRAGSCOPE_TSAN 1
#endif
#endif

namespace fragscope {

#ifdef FRAGSCOPE_TSAN
inline std::atomic<int> g_tsan_fence_word{0};
#endif

// A sequentially consistent fence. ThreadSanitizer does not model atomic_thread_fence (GCC
// rejects it under -fsanitize=thread), so TSan builds use a seq_cst read-modify-write of one shared
// word instead, which orders the same way for the Dekker-style handshakes that use this.
inline void SeqCstFence() {
#ifdef FRAGSCOPE_TSAN
  g_tsan_fence_word.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

class ABSL_LOCKABLE AsymmetricLock {
 public:
  // `allow_membarrier` false forces the fenced fast side (for tests).
  explicit AsymmetricLock(bool allow_membarrier = true);
  AsymmetricLock(const AsymmetricLock&) = delete;
  AsymmetricLock& operator=(const AsymmetricLock&) = delete;

  // Fast side. Returns false, holding nothing, if a slow side holds or is acquiring the lock; the
  // caller then uses SlowLock(). REQUIRES: fast-side calls never overlap (one thread at a time).
  bool TryFastLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    fast_active_.store(true, std::memory_order_relaxed);
    if (use_membarrier_) {
      std::atomic_signal_fence(std::memory_order_seq_cst);  // membarrier supplies the rest
    } else {
      SeqCstFence();
    }
    if (slow_pending_.load(std::memory_order_acquire)) [[unlikely]] {
      fast_active_.store(false, std::memory_order_release);
      return false;
    }
    return true;
  }
  void FastUnlock() ABSL_UNLOCK_FUNCTION() { fast_active_.store(false, std::memory_order_release); }

  // Slow side: any thread, any number of them (they queue on a spin lock that yields).
  void SlowLock() ABSL_EXCLUSIVE_LOCK_FUNCTION();
  void SlowUnlock() ABSL_UNLOCK_FUNCTION();

  // For a signal handler: a slow acquisition that gives up after about `attempts` spins on either
  // wait (the interrupted thread may hold the lock). Async-signal-safe. On false nothing is held.
  bool TrySlowLockFor(int attempts) ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true);

  // Whether the process uses membarrier (else the fast side fences).
  bool uses_membarrier() const { return use_membarrier_; }

 private:
  // Makes the fast side's flag store visible (membarrier), or a plain fence without it.
  void FenceFastSide();

  // Both written/read by the fast side on every acquisition: kept on one cache line.
  alignas(64) std::atomic<bool> fast_active_{false};
  std::atomic<bool> slow_pending_{false};
  bool use_membarrier_ = false;
  // Exclusion among slow sides.
  alignas(64) std::atomic<bool> slow_lock_{false};
};

// Holds the slow side of an AsymmetricLock for a scope.
class ABSL_SCOPED_LOCKABLE SlowLockHolder {
 public:
  explicit SlowLockHolder(AsymmetricLock* lock) ABSL_EXCLUSIVE_LOCK_FUNCTION(lock) : lock_(lock) {
    lock_->SlowLock();
  }
  SlowLockHolder(const SlowLockHolder&) = delete;
  SlowLockHolder& operator=(const SlowLockHolder&) = delete;
  ~SlowLockHolder() ABSL_UNLOCK_FUNCTION() { lock_->SlowUnlock(); }

 private:
  AsymmetricLock* lock_;
};

}  // namespace fragscope
