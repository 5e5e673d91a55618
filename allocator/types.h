// Basic vocabulary of the allocator: device addresses, streams, pools and size constants.
//
// The constants are PyTorch's (c10/core/AllocatorConfig.h, c10/cuda/CUDACachingAllocator.cpp); see
// docs/pytorch_allocator_rules.md §1. They are fixed by PyTorch, not tunable: tunables live
// in AllocatorOptions.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>

namespace fragscope {

// A device virtual address. 0 is never a valid allocation.
using DevicePtr = uint64_t;

// A CUDA stream as its handle value (cudaStream_t reinterpreted). 0 is the legacy default stream.
using StreamId = uint64_t;

inline constexpr uint64_t kKiB = uint64_t{1} << 10;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

// Every block size is a multiple of this, and at least this.
inline constexpr uint64_t kMinBlockBytes = 512;
// Rounded sizes up to and including this go to the small pool.
inline constexpr uint64_t kSmallSizeBytes = 1 * kMiB;
// Small-pool segments are this big.
inline constexpr uint64_t kSmallBufferBytes = 2 * kMiB;
// Default large-pool segment for requests in (kSmallSizeBytes, kMinLargeAllocBytes); the option
// large_segment_size_mb overrides it.
inline constexpr uint64_t kDefaultLargeSegmentBytes = 20 * kMiB;
// Requests of at least this get a segment of their own size rounded up to kRoundLargeBytes.
inline constexpr uint64_t kMinLargeAllocBytes = 10 * kMiB;
inline constexpr uint64_t kRoundLargeBytes = 2 * kMiB;
// A large-pool block is split only if more than this would remain.
inline constexpr uint64_t kMinLargeSplitRemainderBytes = 1 * kMiB;
// Number of roundup_power2_divisions intervals: [1 MiB, 2 MiB), ..., [32 GiB, inf).
inline constexpr int kRoundupPower2Intervals = 16;
// "No limit" for max_split_size (PyTorch's SIZE_MAX).
inline constexpr uint64_t kUnlimitedBytes = std::numeric_limits<uint64_t>::max();

enum class PoolKind : uint8_t { kSmall = 0, kLarge = 1 };

inline constexpr std::string_view PoolKindName(PoolKind pool) {
  return pool == PoolKind::kSmall ? "small" : "large";
}

}  // namespace fragscope
