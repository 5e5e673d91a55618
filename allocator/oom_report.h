// OomReport: an out-of-memory failure as data.
//
// CachingAllocator::Allocate returns kResourceExhausted whose message is PyTorch's OOM text
// (docs/pytorch_allocator_rules.md §5) followed by what PyTorch does not say: the largest
// free cached block, the number of free cached fragments, and whether the request would have fit
// in the free cached bytes had they been contiguous. The same facts travel as a status payload,
// so callers never parse the message.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "allocator/pool_id.h"
#include "allocator/types.h"

namespace fragscope {

struct OomReport {
  uint64_t requested_bytes = 0;  // the caller's request
  uint64_t rounded_bytes = 0;    // the block size it needed
  uint64_t segment_bytes = 0;    // the device allocation that failed ("Tried to allocate")
  StreamId stream = 0;
  int32_t device = 0;
  uint64_t device_total_bytes = 0;
  uint64_t device_free_bytes = 0;
  // The memory-fraction cap, when one is set (0 is a cap of 0 bytes: fraction 0).
  std::optional<uint64_t> allowed_bytes;
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
  // Free cached memory at the failure (after the retry ladder released what it could).
  uint64_t free_cached_bytes = 0;
  uint64_t free_cached_fragments = 0;
  uint64_t largest_free_cached_block = 0;
  // Free cached blocks on the request's stream and pool that were large enough but barred by the
  // oversize rules (max_split_size).
  uint64_t oversize_rejected_bytes = 0;
  // Blocks freed but waiting for stream events.
  uint64_t pending_free_bytes = 0;
  bool too_large = false;  // request >= 1 EiB: PyTorch's "more than 1EB" error
  // The pool the request was for ((0, 0): the default pool). The free cached figures above are
  // that pool's: a request never takes another pool's blocks (but for a use_on_oom MemPool's).
  PoolId pool_id;
  // Private pools at the failure (CUDA-graph pools and MemPools, freeable ones included): how
  // many, how many of them are graph pools, the device memory their segments hold, and their
  // free cached blocks (PyTorch's "allocated in private pools", which its message counts as
  // allocated: memory no request of another pool can use).
  uint32_t private_pool_count = 0;
  uint32_t graph_pool_count = 0;
  uint64_t private_pool_reserved_bytes = 0;
  uint64_t private_pool_free_bytes = 0;

  // The request would have fit in the free cached bytes had they been one contiguous block.
  bool would_fit_in_free_cached() const { return rounded_bytes <= free_cached_bytes; }
  // ... in the free cached bytes plus the device's free memory (perfect packing).
  bool would_fit_with_device_free() const {
    return rounded_bytes <= free_cached_bytes + device_free_bytes;
  }
};

// PyTorch's message for `report`, then fragscope's extra sentence.
std::string FormatOomMessage(const OomReport& report);

// A kResourceExhausted status carrying `report` as payload.
absl::Status MakeOomStatus(const OomReport& report);

// The report inside a status made by MakeOomStatus, if any.
std::optional<OomReport> GetOomReport(const absl::Status& status);

}  // namespace fragscope
