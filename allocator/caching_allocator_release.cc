// CachingAllocator: the free path (merging, stream events) and everything that returns memory
// to the device (release of oversize blocks, empty_cache, garbage collection).
#include <utility>
#include <vector>

#include "allocator/backend_error.h"
#include "allocator/block_split_merge.h"
#include "allocator/caching_allocator.h"

namespace fragscope {
using internal::ReportBackendError;

void CachingAllocator::FreeBlockLocked(Block* block) {
  FRAGSCOPE_DCHECK(block->IsFree() && !block->used_on_other_streams);
  // The freed block as it was (the merge below may delete it); completed at the end. Its segment
  // is read only for observers (in the stats' event it is dead, and a cache miss).
  AllocatorEvent freed = BlockEvent(EventKind::kFreeCompleted, *block, /*segment_base=*/0);
  const Segment* const segment = block->segment;
  freed.requested_bytes = block->requested_size();
  uint8_t merged_count = 0;
  uint64_t merged_bytes = 0;  // what the neighbours added

  // PyTorch's try_merge_blocks: only free blocks merge (not allocated, not waiting for events),
  // and mapped memory never merges with unmapped address space. (A freed block is mapped.)
  auto mergeable = [](const Block* b) { return b != nullptr && b->IsFree() && b->mapped; };
  Block* const prev = mergeable(block->prev) ? block->prev : nullptr;
  Block* const next = mergeable(block->next) ? block->next : nullptr;
  BlockPool& pool = PoolOfBlock(*block);
  Block* result = block;
  if (prev == nullptr && next == nullptr) {
    block->set_requested_size(0);
    pool.Insert(block);
  } else {
    // The survivor is the larger free neighbour, already in the pool: it absorbs the freed block
    // (and the other neighbour), and usually keeps its place in the size order (Rekey).
    Block* other = next;
    result = prev;
    if (prev == nullptr || (next != nullptr && next->size > prev->size)) std::swap(result, other);
    if (other != nullptr) pool.Erase(other);
    const DevicePtr merged_ptr = prev != nullptr ? prev->ptr : block->ptr;
    const uint64_t merged_size =
        block->size + (prev != nullptr ? prev->size : 0) + (next != nullptr ? next->size : 0);
    pool.Rekey(pool.Find(result), merged_ptr, merged_size, [&] {
      MergeInto(result, block, arena_);
      if (other != nullptr) MergeInto(result, other, arena_);
    });
    merged_count = static_cast<uint8_t>((prev != nullptr) + (next != nullptr));
    merged_bytes = merged_size - freed.bytes;
  }
  EmitMade([&] {
    AllocatorEvent e = freed;
    e.segment = segment->base;
    e.merged_count = merged_count;
    e.split_bytes = merged_bytes;
    e.result_bytes = result->size;
    if (result->IsSplit()) e.flags |= kEventFlagResultIsSplit;
    return e;
  });
}

uint64_t CachingAllocator::TryMergeLocked(Block* dst, Block* src) {
  // PyTorch's try_merge_blocks: only free blocks merge (not allocated, not waiting for events),
  // and mapped memory never merges with unmapped address space.
  if (src == nullptr || !src->IsFree() || src->mapped != dst->mapped) return 0;
  if (src->mapped) {
    PoolOfBlock(*src).Erase(src);
  } else {
    PoolOfBlock(*src).EraseUnmapped(src);
  }
  return MergeInto(dst, src, arena_);
}

void CachingAllocator::InsertEventsLocked(Block* block) {
  // See Note [Stream-ordered reuse] in caching_allocator.h: one event per stream that used the
  // block; the block rejoins the pool when all have completed.
  auto uses = stream_uses_.extract(block);
  FRAGSCOPE_CHECK(!uses.empty());
  block->used_on_other_streams = false;
  // One event per stream (RecordStream bounds the streams), so event_count (16 bits) never wraps.
  FRAGSCOPE_DCHECK(uses.mapped().size() <= kMaxStreamUses);
  for (StreamId stream : uses.mapped()) {
    absl::StatusOr<EventHandle> event = backend_.RecordEvent(stream);
    if (!event.ok()) {
      // Without an event we cannot know when the other stream is done: never reuse the block.
      ReportBackendError("recording a stream event (the block is leaked)", event.status());
      ++block->event_count;
      continue;
    }
    ++block->event_count;
    pending_events_[stream].emplace_back(*event, block);
  }
  pending_free_bytes_ += block->size;  // event_count > 0: one per stream in `uses`
}

void CachingAllocator::ProcessEventsLocked() {
  if (ABSL_PREDICT_FALSE(!deferred_frees_.empty())) InsertDeferredEventsLocked();
  if (pending_events_.empty()) return;
  for (auto it = pending_events_.begin(); it != pending_events_.end();) {
    auto& queue = it->second;
    while (!queue.empty()) {
      auto [event, block] = queue.front();
      absl::StatusOr<bool> done = backend_.EventDone(event);
      if (!done.ok()) ReportBackendError("querying a stream event", done.status());
      if (!done.ok() || !*done) break;
      backend_.ReleaseEvent(event);
      queue.pop_front();
      if (--block->event_count == 0) {
        pending_free_bytes_ -= block->size;
        active_.Erase(block);
        FreeBlockLocked(block);
      }
    }
    if (queue.empty()) {
      it = pending_events_.erase(it);
    } else {
      ++it;
    }
  }
}

void CachingAllocator::SynchronizeAndFreeEventsLocked(const PrivatePool* only) {
  if (!deferred_frees_.empty()) InsertDeferredEventsLocked();
  for (auto it = pending_events_.begin(); it != pending_events_.end();) {
    auto& queue = it->second;
    for (auto e = queue.begin(); e != queue.end();) {
      auto [event, block] = *e;
      // Only the events of `only`'s blocks, when a pool is named (PyTorch syncs per pool then).
      if (only != nullptr && (!block->in_private_pool || block->segment->owner != only)) {
        ++e;
        continue;
      }
      absl::Status status = backend_.SynchronizeEvent(event);
      if (!status.ok()) ReportBackendError("synchronizing a stream event", status);
      backend_.ReleaseEvent(event);
      e = queue.erase(e);
      if (--block->event_count == 0) {
        pending_free_bytes_ -= block->size;
        active_.Erase(block);
        FreeBlockLocked(block);
      }
    }
    it = queue.empty() ? pending_events_.erase(it) : std::next(it);
  }
}

void CachingAllocator::ReleaseBlockLocked(Block* block) {
  FRAGSCOPE_DCHECK(!block->IsSplit() && !block->allocated && !block->IsExpandable());
  PoolOfBlock(*block).Erase(block);
  if (ABSL_PREDICT_FALSE(block->in_private_pool)) {
    FRAGSCOPE_DCHECK(block->segment->owner->segment_count > 0);
    --block->segment->owner->segment_count;
    block->segment->owner->reserved_bytes -= block->size;
    private_pool_reserved_bytes_ -= block->size;
  }
  AllocatorEvent e = BlockEvent(EventKind::kSegmentFree, *block);
  if (block->size >= options_.max_split_size_bytes) e.flags |= kEventFlagOversize;
  Emit(e);
  absl::Status status = backend_.Free(block->ptr);
  if (!status.ok()) ReportBackendError("device free", status);
  reserved_bytes_ -= block->size;
  active_.RemoveSegment(block->ptr, block->size);
  segments_.erase(block->ptr);
  arena_.Delete(block);
}

bool CachingAllocator::ReleaseAvailableCachedBlocksLocked(BlockPool& pool, StreamId stream,
                                                          uint64_t rounded) {
  if (!options_.max_split_size_set()) return false;
  const uint64_t max_split = options_.max_split_size_bytes;
  const uint64_t key_size = std::max(rounded, max_split);
  auto it = pool.LowerBound(stream, key_size);
  // Expandable memory is never released here (PyTorch#134338): its blocks are skipped.
  if (!it.at_end() && !(*it)->IsSplit() && !(*it)->IsExpandable()) {
    ReleaseBlockLocked(*it);
    return true;
  }
  // No single block is large enough: release oversize blocks of this stream, largest first,
  // until enough is freed. (Collected first: releasing invalidates btree iterators.)
  // Deviation: PyTorch would also hand a split oversize block to release_block, which is only
  // possible when max_split_size is not a multiple of 2 MiB; fragscope skips split blocks.
  std::vector<Block*> victims;
  uint64_t released = 0;
  while (!it.at_begin() && released < key_size) {
    --it;
    Block* block = *it;
    if (block->size < max_split) break;
    if (block->IsSplit() || block->IsExpandable()) continue;
    victims.push_back(block);
    released += block->size;
  }
  for (Block* block : victims) ReleaseBlockLocked(block);
  return released >= key_size;
}

void CachingAllocator::ReleaseCachedBlocksLocked(bool oom_retry, PoolId pool) {
  const uint64_t reserved_before = reserved_bytes_;
  // PyTorch's release_cached_blocks: the default pool only for (0, 0) with no capture underway.
  const bool default_pool = pool.is_default() && captures_underway_.empty();
  if (default_pool) {
    SynchronizeAndFreeEventsLocked();
    // release_blocks, large pool first: whole unsplit segments go back to the device, then every
    // free expandable block gives back its whole pages, in the pool's order.
    std::vector<Block*> victims, to_unmap;
    for (BlockPool* p : {&large_pool_, &small_pool_}) {
      victims.clear();
      to_unmap.clear();
      p->ForEachReleasable([&](Block* block) {
        if (block->IsExpandable()) {
          to_unmap.push_back(block);
        } else if (!block->IsSplit()) {
          victims.push_back(block);
        }
      });
      for (Block* block : victims) ReleaseBlockLocked(block);
      for (Block* block : to_unmap) UnmapBlockLocked(block);
    }
  }
  bool synchronized = default_pool;
  if (!private_pools_.empty()) {
    if (!pool.is_default()) {
      PrivatePool* only = FindPrivatePoolLocked(pool);
      if (only != nullptr && only->freeable) {
        SynchronizeAndFreeEventsLocked(only);
        synchronized = true;
      }
    }
    ReleaseFreeablePoolsLocked(pool);
  }
  AllocatorEvent e;
  e.kind = EventKind::kEmptyCache;
  e.device = device_;
  e.reserved_bytes = reserved_before - reserved_bytes_;  // bytes released
  e.pool_id = pool;
  if (oom_retry) e.flags |= kEventFlagOomRetry;
  if (!synchronized) e.flags |= kEventFlagEmptyCacheNoSync;
  Emit(e);
}

void CachingAllocator::GarbageCollectCachedBlocksLocked() {
  // PyTorch's garbage_collect_cached_blocks: without synchronizing, free unsplit large blocks
  // that have gone unused for at least the average age, pass after pass, until reserved memory
  // is back under threshold * allowed maximum.
  const auto threshold = static_cast<uint64_t>(options_.garbage_collection_threshold *
                                               static_cast<double>(*allowed_maximum_bytes_));
  if (reserved_bytes_ <= threshold) return;
  const uint64_t target = reserved_bytes_ - threshold;
  const uint64_t clock = large_pool_.gc_clock();
  auto age = [clock](const Block* b) { return static_cast<double>(clock - b->gc_count_base()); };

  double total_age = 0.0;
  int64_t freeable = 0;
  large_pool_.ForEachReleasable([&](const Block* block) {
    if (block->IsSplit() || block->IsExpandable()) return;
    total_age += age(block);
    ++freeable;
  });
  uint64_t reclaimed = 0;
  bool freed_any = true;
  std::vector<Block*> victims;
  while (reclaimed < target && freed_any && freeable > 0) {
    const double age_threshold = total_age / static_cast<double>(freeable);
    victims.clear();
    // Free every block at least as old as the average; do not stop at the target, so GC does
    // not trigger again right away.
    large_pool_.ForEachReleasable([&](Block* block) {
      if (!block->IsSplit() && !block->IsExpandable() && age(block) >= age_threshold) {
        victims.push_back(block);
      }
    });
    freed_any = !victims.empty();
    for (Block* block : victims) {
      reclaimed += block->size;
      total_age -= age(block);
      --freeable;
      ReleaseBlockLocked(block);
    }
  }
}

}  // namespace fragscope
