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
// Note [Block ownership]: Blocks are owned by a BlockArena (block_arena.h: grouped by segment;
// split and merge: block_split_merge.h), never allocated with new/delete on the hot path. A Block
// is in exactly one of: its pool's free set (free), the allocator's active-block index (allocated,
// or freed but waiting for stream events), its pool's unmapped set (expandable segments).
#pragma once

#include <cstdint>
#include <type_traits>

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
  // The private pool (CUDA graph, MemPool) the segment was allocated for; nullptr: the default
  // pool. Its blocks are reused only by allocations routed to that pool.
  struct PrivatePool* owner = nullptr;
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
  // Segment was a cache miss per operation.
  bool expandable = false;
  // segment->owner != nullptr, copied in for the same reason: the free path picks the block's
  // pool from it without reading the Segment when no private pool is involved.
  bool in_private_pool = false;
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
  // Free for merging and reuse: not allocated, not waiting for events, not waiting for a capture
  // to end with its other streams' uses (PyTorch's merge test).
  bool IsFree() const { return !allocated && event_count == 0 && !used_on_other_streams; }
  DevicePtr end() const { return ptr + size; }

 private:
  uint64_t requested_or_gc_stamp_ = 0;
};

// Plain data, so that recycling one (BlockArena::Delete) is a handful of stores.
static_assert(std::is_trivially_copyable_v<Block> && sizeof(Block) == 64);

}  // namespace fragscope
