// AllocatorOptions: every tunable of the caching allocator, parsed from a string in
// PYTORCH_CUDA_ALLOC_CONF syntax ("key:value,key:[a:b,c:d]").
//
// The struct is immutable configuration handed to CachingAllocator; the algorithms never read
// global state (house style rule 14). Defaults reproduce PyTorch's defaults, so a
// default-constructed AllocatorOptions makes the same decisions as PyTorch's native allocator.
//
// Validation follows PyTorch (shared/reference/pytorch_allocator.md §7): the same limits, and an
// error naming the key and the value for anything invalid or unknown.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "allocator/types.h"

namespace fragscope {

// Where a free block is searched for. kBestFit is PyTorch's policy and the default.
enum class PlacementPolicy : uint8_t {
  kBestFit = 0,  // smallest fitting block on the stream, oldest segment, lowest address (PyTorch)
};

struct AllocatorOptions {
  // Blocks of at least this size are never split, and serve only requests within
  // max_non_split_rounding_bytes of their size. kUnlimitedBytes = off (PyTorch's default).
  uint64_t max_split_size_bytes = kUnlimitedBytes;
  // Tolerance for serving a request >= max_split_size from a larger oversize block.
  uint64_t max_non_split_rounding_bytes = kDefaultLargeSegmentBytes;
  // Segment size for requests in (1 MiB, 10 MiB), and the expandable large-pool page.
  uint64_t large_segment_size_bytes = kDefaultLargeSegmentBytes;
  // Divisions per power-of-two interval, indexed by clamp(log2(size) - 20, 0, 15); 0 or 1 = off.
  std::array<uint32_t, kRoundupPower2Intervals> roundup_power2_divisions{};
  // Reclaim unused cached large blocks once reserved exceeds this fraction of the allowed
  // maximum. 0 = off; only effective with per_process_memory_fraction < 1.
  double garbage_collection_threshold = 0.0;
  // Cap on reserved memory as a fraction of device capacity; 1.0 = no cap.
  double per_process_memory_fraction = 1.0;
  bool expandable_segments = false;
  // Accepted for compatibility; fragscope never drops its lock around device malloc.
  bool release_lock_on_cudamalloc = false;
  PlacementPolicy placement = PlacementPolicy::kBestFit;
  // "native" or "cudaMallocAsync". fragscope only implements native; the value is recorded.
  std::string backend = "native";

  // Host (pinned) allocator keys: validated like PyTorch and recorded, otherwise unused.
  bool pinned_use_cuda_host_register = false;
  uint32_t pinned_num_register_threads = 1;
  bool pinned_use_background_threads = false;

  // The string these options were parsed from ("" for defaults).
  std::string source;

  bool max_split_size_set() const { return max_split_size_bytes != kUnlimitedBytes; }
};

// Parses a PYTORCH_CUDA_ALLOC_CONF-syntax string. An empty string gives the defaults.
// Errors are kInvalidArgument and name the key and value, e.g.
// "max_split_size_mb: value 2 is too small, must be >= 20".
absl::StatusOr<AllocatorOptions> ParseAllocatorOptions(std::string_view conf);

// The canonical PYTORCH_CUDA_ALLOC_CONF string for `options` (only non-default keys, fixed
// order). ParseAllocatorOptions(FormatAllocatorOptions(o)) reproduces o (except `source`).
std::string FormatAllocatorOptions(const AllocatorOptions& options);

}  // namespace fragscope
