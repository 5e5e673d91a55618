// CachingAllocator: expandable segments (expandable_segments:True), PyTorch 2.11's
// try_allocate_expandable_block / find_expandable_block / map_block / unmap_block.
//
// One virtual-address reservation per (pool, stream), 9/8 of the device's memory, mapped in pages
// of 2 MiB (small pool) or large_segment_size (large pool). Its blocks tile the whole
// reservation; unmapped ones live in the pool's unmapped set. A request that no free block fits
// maps just enough pages (the rounded request, less a free block it can extend, rounded up to
// pages) at the lowest address where free and unmapped space together fit it, so pieces merge
// again when freed. EmptyCache and the OOM retry unmap every whole page inside a free block; a
// segment with nothing mapped left is released.
//
// Statistics, as PyTorch keeps them: maps and unmaps add to and subtract from reserved bytes
// and count as num_device_alloc / num_device_free, but not in `segment`; expandable blocks keep
// no inactive_split statistics (kEventFlagExpandable): docs/pytorch_allocator_rules.md §3 and
// §4, checked against an oracle trace recorded from PyTorch 2.11
// (tests/data/oracle/micro_expandable.*).
#include <algorithm>

#include "absl/strings/str_format.h"
#include "allocator/backend_error.h"
#include "allocator/block_split_merge.h"
#include "allocator/caching_allocator.h"

namespace fragscope {
namespace {

uint64_t RoundUp(uint64_t bytes, uint64_t page) { return (bytes + page - 1) / page * page; }

}  // namespace

Block* CachingAllocator::AllocateExpandableLocked(PoolKind pool, StreamId stream, uint64_t rounded,
                                                  absl::Status* error) {
  Block* block = FindExpandableBlockLocked(pool, stream, rounded, error);
  if (block == nullptr) return nullptr;
  if (!block->mapped) {
    block = MapBlockLocked(block, std::min(block->size, rounded), error);
    if (block == nullptr) return nullptr;
  }
  // The block is free and mapped, followed by unmapped space: grow it page run by page run.
  // Pages mapped before a failure stay mapped (free, reserved), as in PyTorch.
  while (block->size < rounded) {
    Block* next = block->next;
    FRAGSCOPE_CHECK(next != nullptr && !next->mapped);
    block = MapBlockLocked(next, std::min(rounded - block->size, next->size), error);
    if (block == nullptr) return nullptr;
  }
  PoolOf(pool).Erase(block);
  return block;
}

Block* CachingAllocator::FindExpandableBlockLocked(PoolKind pool, StreamId stream, uint64_t rounded,
                                                   absl::Status* error) {
  BlockPool& blocks = PoolOf(pool);
  auto has_room = [rounded](const Block* b) {
    uint64_t bytes = 0;
    for (; bytes < rounded && b != nullptr && b->IsFree(); b = b->next) bytes += b->size;
    return bytes >= rounded;
  };
  Block* found = blocks.FindUnmapped(stream, [&](Block* unmapped) -> Block* {
    Block* start =
        unmapped->prev != nullptr && unmapped->prev->IsFree() ? unmapped->prev : unmapped;
    return has_room(start) ? start : nullptr;
  });
  if (found != nullptr) return found;

  // A new segment: reserve 9/8 of the device's memory, nothing mapped yet.
  if (!backend_.SupportsVirtualMemory()) {
    *error = absl::FailedPreconditionError(absl::StrFormat(
        "expandable_segments:True needs virtual memory support, which %s lacks", backend_.name()));
    return nullptr;
  }
  const uint64_t page =
      pool == PoolKind::kSmall ? kSmallBufferBytes : options_.large_segment_size_bytes;
  const uint64_t total = backend_.MemInfo().total_bytes;
  const uint64_t pages = (total + total / 8 + page - 1) / page;
  absl::StatusOr<DevicePtr> base = backend_.ReserveAddressRange(pages * page);
  if (!base.ok()) {
    *error = base.status();
    return nullptr;
  }
  auto [it, inserted] = segments_.try_emplace(*base);
  if (!inserted) {
    *error = absl::InternalError(
        absl::StrFormat("address reservation returned 0x%x, the address of a live segment", *base));
    return nullptr;
  }
  Segment& segment = it->second;
  segment.base = *base;
  segment.size = pages * page;
  segment.stream = stream;
  segment.pool = pool;
  segment.id = next_segment_id_++;
  segment.expandable = true;
  ++expandable_segment_count_;
  segment.page_bytes = page;

  Block* head = arena_.New();
  head->ptr = segment.base;
  head->size = segment.size;
  head->stream = stream;
  head->segment = &segment;
  head->pool = pool;
  head->mapped = false;
  head->expandable = true;
  segment.head = head;
  active_.AddSegment(segment.base, segment.size, head);
  blocks.InsertUnmapped(head);
  return head;
}

Block* CachingAllocator::MapBlockLocked(Block* block, uint64_t bytes, absl::Status* error) {
  FRAGSCOPE_DCHECK(!block->mapped && bytes > 0 && bytes <= block->size);
  const uint64_t page = block->segment->page_bytes;
  const DevicePtr map_ptr = block->ptr;
  const uint64_t mapped_bytes = RoundUp(bytes, page);  // <= block->size: both are whole pages
  absl::Status status = backend_.MapPages(map_ptr, mapped_bytes, page);
  if (!status.ok()) {
    if (!absl::IsResourceExhausted(status)) *error = status;
    return nullptr;
  }
  BlockPool& pool = PoolOf(block->pool);
  pool.EraseUnmapped(block);
  if (mapped_bytes < block->size) {
    Block* front = SplitFront(block, mapped_bytes, arena_, active_.HomeGroup(block->ptr));
    pool.InsertUnmapped(block);  // the unmapped rest
    block = front;
  }
  block->mapped = true;
  TryMergeLocked(block, block->prev);
  TryMergeLocked(block, block->next);
  pool.Insert(block);
  reserved_bytes_ += mapped_bytes;

  AllocatorEvent e = BlockEvent(EventKind::kSegmentMap, *block);
  e.ptr = map_ptr;
  e.bytes = mapped_bytes;
  Emit(e);
  return block;
}

void CachingAllocator::UnmapBlockLocked(Block* block) {
  FRAGSCOPE_DCHECK(block->mapped && block->IsFree());
  Segment& segment = *block->segment;
  const uint64_t page = segment.page_bytes;
  // Only pages wholly inside the block.
  const uint64_t first_page = (block->ptr - segment.base + page - 1) / page;
  const uint64_t end_page = (block->end() - segment.base) / page;
  if (first_page >= end_page) return;
  const DevicePtr unmap_ptr = segment.base + first_page * page;
  const uint64_t unmap_bytes = (end_page - first_page) * page;
  absl::Status status = backend_.UnmapPages(unmap_ptr, unmap_bytes, page, segment.stream);
  if (!status.ok()) {
    internal::ReportBackendError("unmapping pages (they stay mapped)", status);
    return;
  }

  BlockPool& pool = PoolOf(block->pool);
  pool.Erase(block);
  if (unmap_ptr > block->ptr) {  // a free mapped piece below the first whole page
    pool.Insert(SplitFront(block, unmap_ptr - block->ptr, arena_, active_.HomeGroup(block->ptr)));
  }
  Block* unmapped = block;
  if (unmap_bytes < block->size) {  // a free mapped piece above the last whole page
    unmapped = SplitFront(block, unmap_bytes, arena_, active_.HomeGroup(block->ptr));
    pool.Insert(block);
  }
  unmapped->mapped = false;
  TryMergeLocked(unmapped, unmapped->prev);
  TryMergeLocked(unmapped, unmapped->next);
  reserved_bytes_ -= unmap_bytes;

  AllocatorEvent e = BlockEvent(EventKind::kSegmentUnmap, *unmapped);
  e.ptr = unmap_ptr;
  e.bytes = unmap_bytes;
  Emit(e);

  if (unmapped->IsSplit()) {
    pool.InsertUnmapped(unmapped);
    return;
  }
  // Nothing of the segment is mapped any more: give the reservation back.
  status = backend_.ReleaseAddressRange(segment.base, segment.size);
  if (!status.ok()) internal::ReportBackendError("releasing an address reservation", status);
  const DevicePtr base = segment.base;
  active_.RemoveSegment(base, segment.size);
  arena_.Delete(unmapped);
  segments_.erase(base);
  --expandable_segment_count_;
}

}  // namespace fragscope
