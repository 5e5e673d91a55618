// Typed events the caching allocator emits, and the observer interface that receives them.
//
// Note [Instrumentation is layered on]: the allocator core never updates statistics or writes
// logs itself. It describes each state change as an AllocatorEvent and hands it to its observers
// (DeviceStats is one, the event-log writer another). An event carries the structural facts an
// observer needs to keep PyTorch's statistics (e.g. whether a block was split off a larger free
// block), so no observer has to look inside the allocator.
//
// Event order is the allocator's decision order; all events of one allocator are delivered under
// its lock, one at a time.
#pragma once

#include <cstdint>
#include <string_view>

#include "allocator/pool_id.h"
#include "allocator/types.h"

namespace fragscope {

// The kinds of event. The numeric values are part of the .fslog format: never renumber.
enum class EventKind : uint8_t {
  kAlloc = 1,           // a block was handed out
  kFreeRequested = 2,   // the user freed a block; it may wait for stream events before reuse
  kFreeCompleted = 3,   // the block went back to the pool (after merging with free neighbours)
  kSegmentAlloc = 4,    // a device allocation (cudaMalloc) became a segment
  kSegmentFree = 5,     // a segment was returned to the device (cudaFree)
  kSegmentMap = 6,      // pages were mapped into an expandable segment
  kSegmentUnmap = 7,    // pages were unmapped from an expandable segment
  kOom = 8,             // an allocation failed after the whole retry ladder
  kEmptyCache = 9,      // empty_cache() (or the OOM retry's full release) ran
  kOptionsChange = 10,  // the allocator's options were replaced (not emitted by the core)
  kMarker = 11,         // a user annotation such as "step 12 / forward" (not emitted by the core)
  // 12 and 13 are the .fslog's state records (fslog/fslog_format.h), which are not events.
  kModel = 14,  // the model the job trains or serves, as JSON (not emitted by the core)
  // A live block's role (fslog/allocation_role.h), said after its allocation: at once by a
  // producer that knows it (the predictor), or later when it becomes known (a gradient, an
  // optimizer state). Not emitted by the core.
  kTag = 15,
};

std::string_view EventKindName(EventKind kind);

// Bit flags in AllocatorEvent::flags.
enum EventFlag : uint8_t {
  // kAlloc: the chosen free block already belonged to a split segment (was inactive_split).
  kEventFlagBlockWasSplit = 1 << 0,
  // kFreeCompleted: after merging, the free block is still part of a split segment.
  kEventFlagResultIsSplit = 1 << 1,
  // kAlloc / kFreeRequested / kSegmentAlloc / kSegmentFree: size >= max_split_size.
  kEventFlagOversize = 1 << 2,
  // Any block or segment event: the block lives in an expandable segment.
  kEventFlagExpandable = 1 << 3,
  // kOom: the request would have fit in the free cached bytes had they been contiguous.
  kEventFlagWouldFitIfContiguous = 1 << 4,
  // kEmptyCache: this release is the OOM retry ladder's last step (counts num_alloc_retries).
  kEventFlagOomRetry = 1 << 5,
  // kAlloc / kFreeRequested / kFreeCompleted of an observed PyTorch allocator (the observe mode):
  // bytes is RoundSize(requested_bytes), inferred; PyTorch's block may be larger by the
  // remainder it did not split (under 1 MiB + 512 B in the large pool).
  kEventFlagSizeInferred = 1 << 6,
  // kEmptyCache only (the bit means kEventFlagBlockWasSplit on kAlloc): no stream events were
  // synchronized, because a capture was underway or one private pool was emptied. PyTorch counts
  // num_sync_all_streams only for a release that synchronized.
  kEventFlagEmptyCacheNoSync = 1 << 0,
};

// One allocator event. Fields not listed for a kind are zero.
struct AllocatorEvent {
  EventKind kind = EventKind::kAlloc;
  PoolKind pool = PoolKind::kSmall;
  uint8_t flags = 0;         // EventFlag bits
  uint8_t merged_count = 0;  // kFreeCompleted: free neighbours absorbed (0..2)
  int32_t device = 0;
  // Block address (alloc/free_*), segment or mapped-range address (segment_*); 0 for kOom.
  DevicePtr ptr = 0;
  // Block size (alloc/free_*), segment or mapped bytes (segment_*), rounded request (kOom).
  uint64_t bytes = 0;
  // The caller's request (alloc/free_*, kOom).
  uint64_t requested_bytes = 0;
  StreamId stream = 0;
  // Base address of the segment that holds ptr (alloc/free_*).
  DevicePtr segment = 0;
  // kAlloc: bytes split off the chosen free block and left free (0 = not split).
  // kFreeCompleted: bytes of the free neighbours absorbed by the merge.
  uint64_t split_bytes = 0;
  // kFreeCompleted: size of the free block after merging.
  uint64_t result_bytes = 0;
  // kOom: device memory free/total as the backend reported them, and the allocator's
  // reserved/allocated bytes at the failure. kEmptyCache: bytes released (in reserved_bytes).
  uint64_t device_free_bytes = 0;
  uint64_t device_total_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t allocated_bytes = 0;
  // The private pool of the block or segment (alloc/free_*/segment_*), of the request (kOom), or
  // that empty_cache(mempool_id) was asked to empty (kEmptyCache); (0, 0): the default pool.
  PoolId pool_id;
};

// Receives an allocator's events.
//
// REQUIRES of implementations: OnEvent is called with the allocator lock held. It must not call
// back into the allocator, must not block on I/O, and should not allocate; a slow observer slows
// every allocation of the device.
class AllocatorObserver {
 public:
  virtual ~AllocatorObserver() = default;
  virtual void OnEvent(const AllocatorEvent& event) = 0;
};

}  // namespace fragscope
