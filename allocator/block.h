// Block and Segment: the data the caching allocator manages, and the pure split/merge surgery.
//
// A Segment is one device allocation (cudaMalloc). It is carved into Blocks that tile it exactly,
// in address order, linked by prev/next:
//
//   segment.base                                             segment.base + segment.size
//   |<- Block (allocated) ->|<- Block (free) ->|<- Block (allocated) ->|
//   head                     prev/next links ...                      tail
//
// An expandable segment (expandable_segments:True) is one virtual-address reservation per
// (pool, stream) instead: its blocks tile the whole reservation, and the ones not backed by
// physical pages are `mapped == false`. Mapping and unmapping happen in whole pages of
// `page_bytes`; an unmapped block always starts and ends on a page boundary.
//
// Invariants (checked by CachingAllocator::CheckInvariants):
//  - The blocks of a segment tile [base, base + size) without gaps or overlap.
//  - Two free blocks of one segment are never adjacent when both are mapped or both unmapped:
//    freeing, mapping and unmapping merge with such neighbours. (Exception: a block waiting for
//    stream events is not free yet and does not merge.)
//  - Every block of a segment has the segment's stream, pool and expandable flag.
//  - Unmapped blocks exist only in expandable segments, and are never allocated.
//
// Note [Block ownership]: Blocks are owned by a BlockArena (an object free list), never
// allocated with new/delete on the hot path. A Block is in exactly one of: its pool's free set
// (free), the allocator's active map (allocated, or freed but waiting for stream events).
#pragma once

#include <cstdint>
#include <deque>
#include <type_traits>
#include <vector>

#include "allocator/check.h"
#include "allocator/types.h"

namespace fragscope {

struct Segment {
  DevicePtr base = 0;
  uint64_t size = 0;
  StreamId stream = 0;
  PoolKind pool = PoolKind::kSmall;
  // Monotonic creation number (for reports: segment age).
  uint64_t id = 0;
  // The lowest-address block. Invariant: head->ptr == base && head->prev == nullptr.
  struct Block* head = nullptr;
  // An expandable segment: [base, base + size) is a virtual-address reservation mapped in
  // pages of page_bytes (2 MiB small pool, large_segment_size large pool).
  bool expandable = false;
  uint64_t page_bytes = 0;
};

// One cache line: a free in a large pool reads the block and both neighbours, each a likely cache
// miss, and a Block straddling two lines would double them.
struct alignas(64) Block {
  DevicePtr ptr = 0;
  uint64_t size = 0;
  StreamId stream = 0;
  Segment* segment = nullptr;
  Block* prev = nullptr;  // lower-address neighbour in the same segment
  Block* next = nullptr;  // higher-address neighbour in the same segment
  PoolKind pool = PoolKind::kSmall;
  bool allocated = false;
  // False only for virtual addresses of an expandable segment with no memory behind them.
  bool mapped = true;
  // Allocated and used on other streams (record_stream): the allocator's stream-use table holds
  // those streams until the free turns them into events.
  bool used_on_other_streams = false;
  // segment->expandable, copied in: every allocation and free reports it (the stats keep no
  // inactive_split figures for expandable segments), and with many segments reading it from the
  // Segment was a cache miss per operation (bench/RESULTS.md, session 23).
  bool expandable = false;
  // Outstanding stream events that must complete before the block may be reused: at most one per
  // stream that used the block (CachingAllocator::RecordStream bounds those: kMaxStreamUses).
  int16_t event_count = 0;

  // While the block is active (allocated, or freed and waiting for events): the caller's
  // request. While it is free in a pool: the pool's GC clock when it became free (PyTorch's
  // gc_count_base). Never both, so they share a word (keeping Block to one cache line).
  uint64_t requested_size() const { return requested_or_gc_stamp_; }
  void set_requested_size(uint64_t bytes) { requested_or_gc_stamp_ = bytes; }
  uint64_t gc_count_base() const { return requested_or_gc_stamp_; }
  void set_gc_count_base(uint64_t clock) { requested_or_gc_stamp_ = clock; }

  bool IsSplit() const { return prev != nullptr || next != nullptr; }
  bool IsExpandable() const { return expandable; }
  // Free for merging and reuse: not allocated, not waiting for events (PyTorch's merge test).
  bool IsFree() const { return !allocated && event_count == 0; }
  DevicePtr end() const { return ptr + size; }

 private:
  uint64_t requested_or_gc_stamp_ = 0;
};

// Plain data, so that recycling one (BlockArena::Delete) is a handful of stores.
static_assert(std::is_trivially_copyable_v<Block> && sizeof(Block) == 64);

// An object pool of Blocks: allocation and release are O(1) and touch no global allocator after
// warm-up. Not thread-safe (used under the allocator lock).
class BlockArena {
 public:
  BlockArena() = default;
  BlockArena(const BlockArena&) = delete;
  BlockArena& operator=(const BlockArena&) = delete;

  Block* New() {
    Block* block;
    if (free_.empty()) {
      block = &storage_.emplace_back();
    } else {
      block = free_.back();
      free_.pop_back();
    }
    return block;
  }

  // REQUIRES: block came from New() and is linked nowhere.
  void Delete(Block* block) {
    *block = Block{};
    free_.push_back(block);
  }

  size_t live_count() const { return storage_.size() - free_.size(); }

 private:
  std::deque<Block> storage_;  // stable addresses
  std::vector<Block*> free_;
};

// Splits `block` so that its first `size` bytes become a new block, which is returned; `block`
// keeps the remainder at the higher address (PyTorch's alloc_found_block layout). Segment head is
// updated.
// REQUIRES: 0 < size < block->size; block is not in any pool set (its key changes).
inline Block* SplitFront(Block* block, uint64_t size, BlockArena& arena) {
  FRAGSCOPE_DCHECK(size > 0 && size < block->size);
  Block* front = arena.New();
  front->ptr = block->ptr;
  front->size = size;
  front->stream = block->stream;
  front->segment = block->segment;
  front->pool = block->pool;
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
