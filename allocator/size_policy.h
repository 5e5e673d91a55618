// Size policy: how a request is rounded, which pool serves it, and how big a new segment is.
//
// Pure functions of (size, options), PyTorch's round_size / get_pool / get_allocation_size
// (docs/pytorch_allocator_rules.md §1), inline because they run on every allocation
// (RoundupPower2NextDivision, the rare path, is in size_policy.cc). Worked examples:
//   1 B            -> 512 B block, small pool, 2 MiB segment
//   1 MiB          -> 1 MiB block, small pool (two fit one 2 MiB segment)
//   1 MiB + 1 B    -> 1 MiB + 512 B block, large pool, 20 MiB segment
//   11 MiB + 1 B   -> 11 MiB + 512 B block, 12 MiB segment (the 1 MiB - 512 B tail is not split)
//   84 MiB with roundup_power2_divisions:4 -> 96 MiB
#pragma once

#include <cstdint>

#include "allocator/allocator_options.h"
#include "allocator/check.h"
#include "allocator/types.h"

namespace fragscope {

// Rounds `size` up to a power-of-two division: a power of two is returned unchanged, otherwise
// size is rounded up to a multiple of PowerOf2Floor(size) / divisions (or to 2 * floor if that
// step is 0). REQUIRES: size > 0, divisions > 0.
uint64_t RoundupPower2NextDivision(uint64_t size, uint64_t divisions);

// The block size a request of `size` bytes occupies (PyTorch's round_size).
inline uint64_t RoundSize(uint64_t size, const AllocatorOptions& options) {
  if (size < kMinBlockBytes) return kMinBlockBytes;
  const uint64_t divisions = RoundupPower2DivisionsFor(options, size);
  if (divisions > 1 && size > kMinBlockBytes * divisions) {
    return RoundupPower2NextDivision(size, divisions);
  }
  return (size + kMinBlockBytes - 1) / kMinBlockBytes * kMinBlockBytes;
}

// The pool that serves a block of `rounded_size` bytes.
inline PoolKind PoolFor(uint64_t rounded_size) {
  return rounded_size <= kSmallSizeBytes ? PoolKind::kSmall : PoolKind::kLarge;
}

// The size of the segment to allocate when no cached block fits a block of `rounded_size`
// (PyTorch's get_allocation_size).
inline uint64_t SegmentSizeFor(uint64_t rounded_size, const AllocatorOptions& options) {
  if (rounded_size <= kSmallSizeBytes) return kSmallBufferBytes;
  if (rounded_size < kMinLargeAllocBytes) return options.large_segment_size_bytes;
  return (rounded_size + kRoundLargeBytes - 1) / kRoundLargeBytes * kRoundLargeBytes;
}

// Whether a free block of `block_size` bytes in `pool`, chosen for a request of `rounded_size`,
// is split (PyTorch's should_split). Small pool, or any pool with expandable_segments on: the
// remainder is at least 512 B. Large pool: the request is below max_split_size and more than
// 1 MiB would remain. REQUIRES: block_size >= rounded_size.
inline bool ShouldSplit(uint64_t block_size, uint64_t rounded_size, PoolKind pool,
                        const AllocatorOptions& options) {
  FRAGSCOPE_DCHECK(block_size >= rounded_size);
  const uint64_t remaining = block_size - rounded_size;
  if (pool == PoolKind::kSmall || options.expandable_segments) return remaining >= kMinBlockBytes;
  return rounded_size < options.max_split_size_bytes && remaining > kMinLargeSplitRemainderBytes;
}

// Whether an oversize rule forbids serving `rounded_size` from a free block of `block_size`
// (PyTorch's get_free_block rejections): a block >= max_split_size never serves a request below
// it, and serves a request >= max_split_size only if it is less than
// request + max_non_split_rounding bytes.
// The smallest block size that the oversize rules forbid for a request of `rounded_size`: they
// forbid every block at least this large (kUnlimitedBytes: in effect none).
inline uint64_t OversizeRejectionFloor(uint64_t rounded_size, const AllocatorOptions& options) {
  const uint64_t max_split = options.max_split_size_bytes;
  if (rounded_size < max_split) return max_split;
  // Saturating add: a request near 2^64 with a huge tolerance must not wrap.
  return rounded_size > kUnlimitedBytes - options.max_non_split_rounding_bytes
             ? kUnlimitedBytes
             : rounded_size + options.max_non_split_rounding_bytes;
}
inline bool OversizeRuleRejects(uint64_t block_size, uint64_t rounded_size,
                                const AllocatorOptions& options) {
  return block_size >= OversizeRejectionFloor(rounded_size, options);
}

}  // namespace fragscope
