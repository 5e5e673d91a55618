// Block split and merge: the surgery on a segment's list of blocks that cuts a block in two
// (an allocation keeps the front, the remainder stays free) and joins a free block with a free
// neighbour (a free, a mapping of expandable pages). When to split is the size policy's
// (ShouldSplit, size_policy.h), when to merge the allocator's (PyTorch's try_merge_blocks:
// CachingAllocator::FreeBlockLocked, TryMergeLocked). Inline: both run on the hot path (a warm
// allocation splits, its free merges).
#pragma once

#include <cstdint>

#include "allocator/block.h"
#include "allocator/block_arena.h"
#include "allocator/check.h"

namespace fragscope {

// Splits `block` so that its first `size` bytes become a new block, which is returned; `block`
// keeps the remainder at the higher address (PyTorch's alloc_found_block layout). Segment head is
// updated. The new block goes into `home` (the segment's home group, or nullptr) or beside
// `block`: BlockArena::NewNear.
// REQUIRES: 0 < size < block->size; block is not in any pool set (its key changes).
inline Block* SplitFront(Block* block, uint64_t size, BlockArena& arena, Block* home) {
  FRAGSCOPE_DCHECK(size > 0 && size < block->size);
  Block* front = arena.NewNear(block, home);
  front->ptr = block->ptr;
  front->size = size;
  front->stream = block->stream;
  front->segment = block->segment;
  front->pool = block->pool;
  front->in_private_pool = block->in_private_pool;
  front->mapped = block->mapped;
  front->expandable = block->expandable;
  front->prev = block->prev;
  front->next = block;
  if (front->prev != nullptr) {
    front->prev->next = front;
  } else {
    block->segment->head = front;
  }
  block->prev = front;
  block->ptr += size;
  block->size -= size;
  return front;
}

// Merges `src` into its neighbour `dst`: dst grows to cover both, src is unlinked and returned
// to the arena. Returns the bytes absorbed.
// REQUIRES: src is dst->prev or dst->next; neither is in any pool set.
inline uint64_t MergeInto(Block* dst, Block* src, BlockArena& arena) {
  const uint64_t absorbed = src->size;
  if (dst->prev == src) {
    FRAGSCOPE_DCHECK(src->end() == dst->ptr);
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev != nullptr) {
      dst->prev->next = dst;
    } else {
      dst->segment->head = dst;
    }
  } else {
    FRAGSCOPE_DCHECK(dst->next == src && dst->end() == src->ptr);
    dst->next = src->next;
    if (dst->next != nullptr) dst->next->prev = dst;
  }
  dst->size += absorbed;
  arena.Delete(src);
  return absorbed;
}

}  // namespace fragscope
