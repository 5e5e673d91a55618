// Replayer: telling an empty_cache() from the allocator's own releases (retry ladder, garbage
// collection) in a trace that does not record empty_cache. See Note [Inferring empty_cache] in
// replay.h.
#include <algorithm>
#include <vector>

#include "allocator/size_policy.h"
#include "analysis/replay/replay.h"

namespace fragscope {

void Replayer::QueueSegmentFree(const TraceEvent& event) {
  ++queued_segment_frees_;
  if (event.kind == EventKind::kSegmentUnmap) ++queued_segment_unmaps_;
  queued_segment_free_bytes_ += event.bytes;
  if (queued_segment_alloc_bytes_ > 0) frees_after_segment_alloc_ = true;
}

void Replayer::ClearQueuedSegmentFrees() {
  queued_segment_frees_ = 0;
  queued_segment_unmaps_ = 0;
  queued_segment_free_bytes_ = 0;
  frees_after_segment_alloc_ = false;
}

void Replayer::SettleSegmentFreesNow(const TraceEvent& next) {
  // A ladder already inferred (Note [Stream-ordered frees in a replay]) released them.
  bool internal = source_.info().records_empty_cache || ladder_expected_;
  if (!internal && (next.kind == EventKind::kAlloc || next.kind == EventKind::kOom)) {
    const DeviceStats stats = allocator_->GetStats();
    const auto reserved = static_cast<uint64_t>(stats.reserved_bytes[0].current);
    const AllocatorOptions& o = config_.options;
    const std::optional<uint64_t> cap = allocator_->Allowed();
    const bool capped = cap.has_value();
    const uint64_t allowed = cap.value_or(config_.capacity_bytes);
    const bool gc_due = capped && o.garbage_collection_threshold > 0 &&
                        static_cast<double>(reserved) >
                            o.garbage_collection_threshold * static_cast<double>(allowed);
    if (next.kind == EventKind::kOom) {
      internal = true;
    } else if (frees_after_segment_alloc_) {  // mapped part of it, failed, released, retried
      internal = true;
      ladder_expected_ = true;
    } else if (queued_segment_alloc_bytes_ > 0) {
      const uint64_t seg = queued_segment_alloc_bytes_;
      // PyTorch checks the cap against the allocation size, also before mapping pages.
      const uint64_t cap_bytes =
          queued_maps_.empty() ? seg : SegmentSizeFor(RoundSize(next.requested_bytes, o), o);
      const bool malloc_would_fail =
          ((capped && reserved + cap_bytes > allowed) || backend_->MemInfo().free_bytes < seg) &&
          !CacheServes(next);
      const bool gc_freed = gc_due && queued_segment_frees_ > queued_segment_unmaps_;
      internal = malloc_would_fail || gc_freed;
      ladder_expected_ = malloc_would_fail;
    }
  }
  if (config_.empty_cache_at != nullptr && !source_.info().records_empty_cache) {
    // The job's calls, as the replay of its own settings found them.
    const bool called = std::binary_search(config_.empty_cache_at->begin(),
                                           config_.empty_cache_at->end(), next.index);
    internal = !called;
    if (called) ladder_expected_ = false;
  }
  if (!internal) {
    CompleteQueuedFrees();
    allocator_->EmptyCache();
    empty_cache_calls_.push_back(next.index);
  }
  ClearQueuedSegmentFrees();
}

bool Replayer::CacheServes(const TraceEvent& next, DevicePtr also_free,
                           const std::vector<ReleasedRange>& released) const {
  const AllocatorOptions& o = config_.options;
  const uint64_t rounded = RoundSize(next.requested_bytes, o);
  const PoolKind pool = PoolFor(rounded);
  auto gone = [&](DevicePtr ptr, uint64_t size) {
    for (const ReleasedRange& r : released) {
      if (ptr < r.ptr + r.bytes && r.ptr < ptr + size) return true;
    }
    return false;
  };
  uint64_t best = 0;
  for (const SegmentInfo& segment : allocator_->Snapshot().segments) {
    if (segment.stream != next.stream || segment.segment_type != pool) continue;
    // With expandable_segments turned off, their blocks serve no new request (as in
    // CachingAllocator::FindFreeBlockLocked).
    if (segment.is_expandable && !o.expandable_segments) continue;
    const std::vector<BlockInfo>& blocks = segment.blocks;
    auto is_free = [&](size_t i) {
      return i < blocks.size() && blocks[i].state == BlockState::kInactive;
    };
    for (size_t i = 0; i < blocks.size(); ++i) {
      const BlockInfo& b = blocks[i];
      DevicePtr ptr = b.address;
      uint64_t size = 0;
      if (also_free != 0 && b.address == also_free) {
        // Freed, it merges with its free neighbours (a snapshot segment is one mapped range).
        const bool prev_free = i > 0 && is_free(i - 1);
        if (prev_free) ptr = blocks[i - 1].address;
        size = b.size + (prev_free ? blocks[i - 1].size : 0) +
               (is_free(i + 1) ? blocks[i + 1].size : 0);
      } else if (is_free(i)) {
        const bool merges =
            also_free != 0 && ((i > 0 && blocks[i - 1].address == also_free) ||
                               (i + 1 < blocks.size() && blocks[i + 1].address == also_free));
        if (!merges) size = b.size;
      }
      if (size >= rounded && (best == 0 || size < best) && !gone(ptr, size)) best = size;
    }
  }
  return best > 0 && !OversizeRuleRejects(best, rounded, o);
}

}  // namespace fragscope
