// AsymmetricLock. See asymmetric_lock.h.
#include "fslog/asymmetric_lock.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__linux__)
#include <linux/membarrier.h>
#endif

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace fragscope {
namespace {

void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Registers the process for private expedited membarriers; false where unsupported.
bool RegisterMembarrier() {
#if defined(__linux__) && defined(SYS_membarrier)
  const long supported = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (supported < 0 || !(supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return false;
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#else
  return false;
#endif
}

bool MembarrierAvailable() {
  static const bool available = RegisterMembarrier();  // once per process
  return available;
}

}  // namespace

AsymmetricLock::AsymmetricLock(bool allow_membarrier)
    : use_membarrier_(allow_membarrier && MembarrierAvailable()) {}

void AsymmetricLock::FenceFastSide() {
#if defined(__linux__) && defined(SYS_membarrier)
  if (use_membarrier_) {
    // Cannot fail once registered; if it somehow did, the fast side would be unfenced, so stop.
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) __builtin_trap();
    return;
  }
#endif
  SeqCstFence();
}

void AsymmetricLock::SlowLock() {
  for (int spins = 0; slow_lock_.exchange(true, std::memory_order_acquire); ++spins) {
    if (spins < 100) {
      CpuRelax();
    } else {
      sched_yield();
    }
  }
  slow_pending_.store(true, std::memory_order_relaxed);
  FenceFastSide();
  for (int spins = 0; fast_active_.load(std::memory_order_acquire); ++spins) {
    if (spins < 1000) {
      CpuRelax();
    } else {
      sched_yield();  // the fast side was preempted inside its critical section
    }
  }
}

void AsymmetricLock::SlowUnlock() {
  slow_pending_.store(false, std::memory_order_release);
  slow_lock_.store(false, std::memory_order_release);
}

bool AsymmetricLock::TrySlowLockFor(int attempts) {
  int i = 0;
  while (slow_lock_.exchange(true, std::memory_order_acquire)) {
    if (++i >= attempts) return false;
    CpuRelax();
  }
  slow_pending_.store(true, std::memory_order_relaxed);
  FenceFastSide();
  for (i = 0; fast_active_.load(std::memory_order_acquire); ++i) {
    if (i >= attempts) {
      SlowUnlock();
      return false;
    }
    CpuRelax();
  }
  return true;
}

}  // namespace fragscope
