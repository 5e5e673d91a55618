#include "allocator/size_policy.h"

#include <bit>

#include "allocator/check.h"

namespace fragscope {

uint64_t RoundupPower2NextDivision(uint64_t size, uint64_t divisions) {
  FRAGSCOPE_DCHECK(size > 0 && divisions > 0);
  if (std::has_single_bit(size)) return size;
  const uint64_t floor = std::bit_floor(size);
  const uint64_t step = floor / divisions;
  if (step == 0) return 2 * floor;
  // Round up to a multiple of step (PyTorch rounds with a mask; step is a power of two here
  // whenever divisions is, which the option parser guarantees).
  return (size + step - 1) / step * step;
}

uint64_t RoundSize(uint64_t size, const AllocatorOptions& options) {
  if (size < kMinBlockBytes) return kMinBlockBytes;
  const uint64_t divisions = RoundupPower2DivisionsFor(options, size);
  if (divisions > 1 && size > kMinBlockBytes * divisions) {
    return RoundupPower2NextDivision(size, divisions);
  }
  return (size + kMinBlockBytes - 1) / kMinBlockBytes * kMinBlockBytes;
}

uint64_t SegmentSizeFor(uint64_t rounded_size, const AllocatorOptions& options) {
  if (rounded_size <= kSmallSizeBytes) return kSmallBufferBytes;
  if (rounded_size < kMinLargeAllocBytes) return options.large_segment_size_bytes;
  return (rounded_size + kRoundLargeBytes - 1) / kRoundLargeBytes * kRoundLargeBytes;
}

bool ShouldSplit(uint64_t block_size, uint64_t rounded_size, PoolKind pool,
                 const AllocatorOptions& options) {
  FRAGSCOPE_DCHECK(block_size >= rounded_size);
  const uint64_t remaining = block_size - rounded_size;
  if (pool == PoolKind::kSmall || options.expandable_segments) return remaining >= kMinBlockBytes;
  return rounded_size < options.max_split_size_bytes && remaining > kMinLargeSplitRemainderBytes;
}

bool OversizeRuleRejects(uint64_t block_size, uint64_t rounded_size,
                         const AllocatorOptions& options) {
  const uint64_t max_split = options.max_split_size_bytes;
  if (rounded_size < max_split) return block_size >= max_split;
  // Saturating add: a request near 2^64 with a huge tolerance must not wrap.
  const uint64_t limit = rounded_size > kUnlimitedBytes - options.max_non_split_rounding_bytes
                             ? kUnlimitedBytes
                             : rounded_size + options.max_non_split_rounding_bytes;
  return block_size >= limit;
}

}  // namespace fragscope
