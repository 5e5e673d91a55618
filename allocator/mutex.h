// Mutex: std::mutex with Abseil's thread-safety annotations.
//
// Why not absl::Mutex: Debian's Abseil keeps deadlock detection on, which costs ~40 ns per
// lock/unlock (GraphCycles lookups, measured in bench/allocator_benchmark.cc); that alone is
// most of the 100 ns budget of a warm malloc+free pair. Turning it off is a process-wide switch
// we may not flip inside a user's training job. std::mutex is a bare futex. The annotations keep
// clang's -Wthread-safety checks of ABSL_GUARDED_BY members working.
#pragma once

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace fragscope {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
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
