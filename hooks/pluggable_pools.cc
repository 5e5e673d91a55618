// libfragscope_alloc.so: private pools through the C ABI (fragscope_alloc.h), what PyTorch's
// CUDA-graph capture asks of its allocator: beginAllocateToPool at capture_begin,
// endAllocateToPool at capture_end, releasePool when the graph is reset or deleted. The rules are
// the allocator's (allocator/README.md, "Private pools"); this file names the pool and the
// stream, and turns statuses into the ABI's -1 and fragscope_last_error().
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "allocator/caching_allocator.h"
#include "allocator/pool_id.h"
#include "hooks/fragscope_alloc.h"
#include "hooks/pluggable_allocator.h"
#include "hooks/pluggable_internal.h"
#include "hooks/process_exit.h"

namespace fragscope::hooks {
namespace {

// A private pool's id as the C ABI receives it: not the default pool, and each counter small
// enough for the log's pool word (PackPoolId).
absl::StatusOr<PoolId> CheckedPoolId(uint64_t first, uint64_t second) {
  const PoolId pool{first, second};
  if (pool.is_default()) {
    return absl::InvalidArgumentError("pool (0, 0) is the default pool, not a private pool");
  }
  if (!PoolIdPacks(pool)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pool %s: each counter must be below 2^32 (a log's pool word holds 32 bits of each)",
        FormatPoolId(pool)));
  }
  return pool;
}

// The allocator of a device that must already allocate (ending or releasing a pool there), in the
// registry `registry` pins.
absl::StatusOr<CachingAllocator*> ExistingAllocator(const RegistryPin& registry, int device) {
  if (CachingAllocator* allocator = registry->Find(device)) return allocator;
  return absl::FailedPreconditionError(
      absl::StrFormat("device %d has no allocator yet (no pool was begun there)", device));
}

// 0, or -1 with the status reported as "`function`(device D, pool (a, b)): message".
int Outcome(const char* function, int device, uint64_t first, uint64_t second,
            const absl::Status& status) {
  if (status.ok()) return 0;
  SetLastError(absl::StrFormat("%s(device %d, pool (%d, %d)): %s", function, device, first, second,
                               status.message()));
  return -1;
}

}  // namespace

absl::Status BeginAllocateToPool(int device, PoolId pool, CachingAllocator::StreamFilter filter) {
  const RegistryPin registry;
  absl::StatusOr<CachingAllocator*> allocator = registry->Get(device);
  if (!allocator.ok()) return allocator.status();
  return (*allocator)->BeginAllocateToPool(pool, std::move(filter));
}

absl::Status EndAllocateToPool(int device, PoolId pool) {
  const RegistryPin registry;
  absl::StatusOr<CachingAllocator*> allocator = ExistingAllocator(registry, device);
  if (!allocator.ok()) return allocator.status();
  return (*allocator)->EndAllocateToPool(pool);
}

absl::Status ReleasePool(int device, PoolId pool) {
  const RegistryPin registry;
  absl::StatusOr<CachingAllocator*> allocator = ExistingAllocator(registry, device);
  if (!allocator.ok()) return allocator.status();
  return (*allocator)->ReleasePool(pool);
}

}  // namespace fragscope::hooks

using fragscope::hooks::CheckedPoolId;
using fragscope::hooks::Outcome;
using fragscope::hooks::ReportException;

extern "C" {

int fragscope_begin_allocate_to_pool(int device, uint64_t pool_first, uint64_t pool_second,
                                     cudaStream_t stream) {
  try {
    absl::StatusOr<fragscope::PoolId> pool = CheckedPoolId(pool_first, pool_second);
    if (!pool.ok()) {
      return Outcome("fragscope_begin_allocate_to_pool", device, pool_first, pool_second,
                     pool.status());
    }
    // A capture's filter: the capturing stream (PyTorch asks CUDA whether a request's stream is
    // capturing into this graph; one stream is what a capture without forked streams has).
    const auto capturing = reinterpret_cast<fragscope::StreamId>(stream);
    return Outcome(
        "fragscope_begin_allocate_to_pool", device, pool_first, pool_second,
        fragscope::hooks::BeginAllocateToPool(
            device, *pool, [capturing](fragscope::StreamId s) { return s == capturing; }));
  } catch (...) {
    ReportException("fragscope_begin_allocate_to_pool");
  }
  return -1;
}

int fragscope_end_allocate_to_pool(int device, uint64_t pool_first, uint64_t pool_second) {
  try {
    absl::StatusOr<fragscope::PoolId> pool = CheckedPoolId(pool_first, pool_second);
    return Outcome("fragscope_end_allocate_to_pool", device, pool_first, pool_second,
                   pool.ok() ? fragscope::hooks::EndAllocateToPool(device, *pool) : pool.status());
  } catch (...) {
    ReportException("fragscope_end_allocate_to_pool");
  }
  return -1;
}

int fragscope_release_pool(int device, uint64_t pool_first, uint64_t pool_second) {
  try {
    // A graph deleted while the process exits: its pool's memory goes with the process.
    if (fragscope::hooks::ProcessIsExiting()) return 0;
    absl::StatusOr<fragscope::PoolId> pool = CheckedPoolId(pool_first, pool_second);
    return Outcome("fragscope_release_pool", device, pool_first, pool_second,
                   pool.ok() ? fragscope::hooks::ReleasePool(device, *pool) : pool.status());
  } catch (...) {
    ReportException("fragscope_release_pool");
  }
  return -1;
}

int fragscope_pool_use_count(int device, uint64_t pool_first, uint64_t pool_second) {
  try {
    const fragscope::hooks::RegistryPin registry;
    fragscope::CachingAllocator* allocator = registry->Find(device);
    if (allocator == nullptr) return -1;
    absl::StatusOr<int> count = allocator->PoolUseCount({pool_first, pool_second});
    return count.ok() ? *count : -1;
  } catch (...) {
    ReportException("fragscope_pool_use_count");
  }
  return -1;
}

}  // extern "C"
