// Size policy: how a request is rounded, which pool serves it, and how big a new segment is.
//
// Pure functions of (size, options), PyTorch's round_size / get_pool / get_allocation_size
// (shared/reference/pytorch_allocator.md §1). Worked examples:
//   1 B            -> 512 B block, small pool, 2 MiB segment
//   1 MiB          -> 1 MiB block, small pool (two fit one 2 MiB segment)
//   1 MiB + 1 B    -> 1 MiB + 512 B block, large pool, 20 MiB segment
//   11 MiB + 1 B   -> 11 MiB + 512 B block, 12 MiB segment (the 1 MiB - 512 B tail is not split)
//   84 MiB with roundup_power2_divisions:4 -> 96 MiB
#pragma once

#include <cstdint>

#include "allocator/allocator_options.h"
#include "allocator/types.h"

namespace fragscope {

// Rounds `size` up to a power-of-two division: a power of two is returned unchanged, otherwise
// size is rounded up to a multiple of PowerOf2Floor(size) / divisions (or to 2 * floor if that
// step is 0). REQUIRES: size > 0, divisions > 0.
uint64_t RoundupPower2NextDivision(uint64_t size, uint64_t divisions);

// The block size a request of `size` bytes occupies (PyTorch's round_size).
uint64_t RoundSize(uint64_t size, const AllocatorOptions& options);

// The pool that serves a block of `rounded_size` bytes.
inline PoolKind PoolFor(uint64_t rounded_size) {
  return rounded_size <= kSmallSizeBytes ? PoolKind::kSmall : PoolKind::kLarge;
}

// The size of the segment to allocate when no cached block fits a block of `rounded_size`
// (PyTorch's get_allocation_size).
uint64_t SegmentSizeFor(uint64_t rounded_size, const AllocatorOptions& options);

// Whether a free block of `block_size` bytes in `pool`, chosen for a request of `rounded_size`,
// is split (PyTorch's should_split). Small pool, or any pool with expandable_segments on: the
// remainder is at least 512 B. Large pool: the request is below max_split_size and more than
// 1 MiB would remain.
bool ShouldSplit(uint64_t block_size, uint64_t rounded_size, PoolKind pool,
                 const AllocatorOptions& options);

// Whether an oversize rule forbids serving `rounded_size` from a free block of `block_size`
// (PyTorch's get_free_block rejections): a block >= max_split_size never serves a request below
// it, and serves a request >= max_split_size only if it is less than
// request + max_non_split_rounding bytes.
bool OversizeRuleRejects(uint64_t block_size, uint64_t rounded_size,
                         const AllocatorOptions& options);

}  // namespace fragscope
