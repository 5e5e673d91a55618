// CachingAllocator: read-only inspection (snapshot, cache info) and the invariant checker.
#include <algorithm>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "allocator/caching_allocator.h"

namespace fragscope {
namespace {

// An invariant violation (a format string checked at compile time, unlike a forwarding lambda).
template <typename... Args>
absl::Status Fail(const absl::FormatSpec<Args...>& format, const Args&... args) {
  return absl::InternalError(absl::StrFormat(format, args...));
}

}  // namespace

AllocatorSnapshot CachingAllocator::Snapshot() const {
  Lock lock(&mu_);
  AllocatorSnapshot snapshot;
  snapshot.segments.reserve(segments_.size());
  for (const auto& [base, segment] : segments_) AppendSegmentInfos(segment, snapshot.segments);
  return snapshot;
}

std::optional<SegmentSnapshot> CachingAllocator::SnapshotSegmentAt(DevicePtr address) const {
  Lock lock(&mu_);
  auto it = segments_.upper_bound(address);
  if (it == segments_.begin()) return std::nullopt;
  const Segment& segment = std::prev(it)->second;
  if (address - segment.base >= segment.size) return std::nullopt;
  SegmentSnapshot snapshot;
  snapshot.base = segment.base;
  snapshot.size = segment.size;
  AppendSegmentInfos(segment, snapshot.segments);
  return snapshot;
}

void CachingAllocator::AppendSegmentInfos(const Segment& segment,
                                          std::vector<SegmentInfo>& out) const {
  // An expandable segment shows as one segment per contiguous mapped range, as in PyTorch.
  SegmentInfo* info = nullptr;
  for (const Block* b = segment.head; b != nullptr; b = b->next) {
    if (!b->mapped) {
      info = nullptr;
      continue;
    }
    if (info == nullptr) {
      info = &out.emplace_back();
      info->device = device_;
      info->address = b->ptr;
      info->stream = segment.stream;
      info->segment_type = segment.pool;
      info->is_expandable = segment.expandable;
      if (segment.owner != nullptr) info->pool_id = segment.owner->id;
    }
    BlockInfo block;
    block.address = b->ptr;
    block.size = b->size;
    if (b->allocated) {
      block.state = BlockState::kActiveAllocated;
    } else if (b->event_count > 0 || b->used_on_other_streams) {
      block.state = BlockState::kActivePendingFree;
    } else {
      block.state = BlockState::kInactive;
    }
    if (block.state != BlockState::kInactive) {
      block.requested_size = b->requested_size();
      info->active_size += b->size;
      info->requested_size += b->requested_size();
      if (b->allocated) info->allocated_size += b->size;
    }
    info->total_size += b->size;
    info->blocks.push_back(block);
  }
}

uint64_t CachingAllocator::LargestFreeCachedBlock() const {
  Lock lock(&mu_);
  // PyTorch's cacheInfo looks into every private pool too (running figures: no walk).
  uint64_t largest = std::max(small_pool_.LargestSize(), large_pool_.LargestSize());
  for (const auto& [id, pp] : private_pools_) {
    largest = std::max({largest, pp->small.LargestSize(), pp->large.LargestSize()});
  }
  return largest;
}

uint64_t CachingAllocator::PeakPrivatePoolReservedBytes() const {
  Lock lock(&mu_);
  return peak_private_pool_reserved_bytes_;
}

uint64_t CachingAllocator::PoolBlocksWalked() const {
  Lock lock(&mu_);
  return small_pool_.blocks_walked() + large_pool_.blocks_walked();
}

absl::Status CachingAllocator::CheckInvariants() const {
  Lock lock(&mu_);
  // Recomputed statistics, indexed [all, small, large].
  int64_t allocation[3] = {}, active[3] = {}, segment_count[3] = {}, inactive_split[3] = {};
  int64_t allocated_bytes[3] = {}, active_bytes[3] = {}, requested_bytes[3] = {};
  int64_t reserved_bytes[3] = {}, inactive_split_bytes[3] = {};
  auto add = [](int64_t(&a)[3], PoolKind pool, int64_t v) {
    a[0] += v;
    a[pool == PoolKind::kSmall ? 1 : 2] += v;
  };
  uint64_t reserved = 0, pending_free = 0;
  size_t free_blocks = 0, active_blocks = 0, unmapped_blocks = 0, stream_use_blocks = 0;
  size_t expandable_segments = 0;
  size_t private_free_blocks = 0;
  absl::flat_hash_map<const PrivatePool*, std::pair<int, uint64_t>> private_segments;
  const absl::flat_hash_set<const Block*> deferred(deferred_frees_.begin(), deferred_frees_.end());

  for (const auto& [base, segment] : segments_) {
    if (segment.owner != nullptr) {
      if (FindPrivatePoolLocked(segment.owner->id) != segment.owner) {
        return Fail("segment 0x%x: its private pool is not in the pool table", base);
      }
      ++private_segments[segment.owner].first;
      private_segments[segment.owner].second += segment.size;
    }
    if (segment.head == nullptr || segment.head->ptr != base || segment.head->prev != nullptr) {
      return Fail("segment 0x%x: head block does not start the segment", base);
    }
    if (segment.expandable) ++expandable_segments;
    if (!segment.expandable) {
      reserved += segment.size;
      add(segment_count, segment.pool, 1);
      add(reserved_bytes, segment.pool, static_cast<int64_t>(segment.size));
    }
    DevicePtr expected = base;
    bool previous_free = false, previous_unmapped = false;
    for (const Block* b = segment.head; b != nullptr; b = b->next) {
      if (b->ptr != expected) return Fail("segment 0x%x: gap or overlap at 0x%x", base, b->ptr);
      if (b->size == 0 || b->size % kMinBlockBytes != 0) {
        return Fail("block 0x%x: size %d is not a positive multiple of 512", b->ptr, b->size);
      }
      if (b->next != nullptr && b->next->prev != b) return Fail("block 0x%x: broken links", b->ptr);
      if (b->segment != &segment || b->stream != segment.stream || b->pool != segment.pool ||
          b->expandable != segment.expandable || b->in_private_pool != (segment.owner != nullptr)) {
        return Fail(
            "block 0x%x: segment, stream, pool, private pool or expandable flag differs from its "
            "segment's",
            b->ptr);
      }
      expected = b->end();
      if (b->used_on_other_streams) {
        ++stream_use_blocks;
        if ((!b->allocated && !deferred.contains(b)) || !stream_uses_.contains(b)) {
          return Fail("block 0x%x: stream uses without an allocation or a table entry", b->ptr);
        }
      }
      if (!b->mapped) {
        if (!segment.expandable || b->allocated || b->event_count > 0) {
          return Fail("unmapped block 0x%x is outside an expandable segment or in use", b->ptr);
        }
        if ((b->ptr - base) % segment.page_bytes != 0 || b->size % segment.page_bytes != 0) {
          return Fail("unmapped block 0x%x of %d bytes is not whole pages", b->ptr, b->size);
        }
        if (!PoolOfBlock(*b).ContainsUnmapped(const_cast<Block*>(b))) {
          return Fail("unmapped block 0x%x is missing from its pool", b->ptr);
        }
        if (previous_unmapped) return Fail("unmapped block 0x%x touches another", b->ptr);
        ++unmapped_blocks;
        previous_free = false;
        previous_unmapped = true;
        continue;
      }
      previous_unmapped = false;
      if (segment.expandable) {
        reserved += b->size;
        add(reserved_bytes, segment.pool, static_cast<int64_t>(b->size));
      }
      const bool is_free = b->IsFree();
      // Waiting for stream events, or (a free during a capture) for the capture to end.
      if (!b->allocated && (b->event_count > 0 || deferred.contains(b))) pending_free += b->size;
      if (is_free) {
        ++free_blocks;
        if (b->in_private_pool) ++private_free_blocks;
        if (!PoolOfBlock(*b).Contains(const_cast<Block*>(b))) {
          return Fail("free block 0x%x is missing from its pool", b->ptr);
        }
        if (previous_free) return Fail("free block 0x%x touches a free neighbour", b->ptr);
        if (b->IsSplit() && !segment.expandable) {
          add(inactive_split, b->pool, 1);
          add(inactive_split_bytes, b->pool, static_cast<int64_t>(b->size));
        }
      } else {
        ++active_blocks;
        if (active_.Find(b->ptr) != b) {
          return Fail("active block 0x%x is missing from the active-block index", b->ptr);
        }
        add(active, b->pool, 1);
        add(active_bytes, b->pool, static_cast<int64_t>(b->size));
        add(requested_bytes, b->pool, static_cast<int64_t>(b->requested_size()));
        if (b->allocated) {
          add(allocation, b->pool, 1);
          add(allocated_bytes, b->pool, static_cast<int64_t>(b->size));
        }
      }
      previous_free = is_free;
    }
    if (expected != base + segment.size) return Fail("segment 0x%x: blocks do not cover it", base);
  }
  if (free_blocks - private_free_blocks != small_pool_.size() + large_pool_.size()) {
    return Fail("pools hold %d blocks but segments have %d free blocks",
                small_pool_.size() + large_pool_.size(), free_blocks - private_free_blocks);
  }
  size_t private_pool_blocks = 0;
  for (const auto& [id, pp] : private_pools_) {
    private_pool_blocks += pp->small.size() + pp->large.size();
    if (!pp->small.IsOrdered() || !pp->large.IsOrdered()) {
      return Fail("private pool %s: free blocks out of size order", FormatPoolId(id));
    }
    auto count = private_segments.find(pp.get());
    const auto [segments, bytes] =
        count == private_segments.end() ? std::pair<int, uint64_t>{0, 0} : count->second;
    if (segments != pp->segment_count || bytes != pp->reserved_bytes) {
      return Fail("private pool %s counts %d segments of %d bytes but owns %d of %d",
                  FormatPoolId(id), pp->segment_count, pp->reserved_bytes, segments, bytes);
    }
    if (pp->freeable != (pp->use_count == 0)) {
      return Fail("private pool %s: freeable disagrees with use_count %d", FormatPoolId(id),
                  pp->use_count);
    }
  }
  if (private_free_blocks != private_pool_blocks) {
    return Fail("private pools hold %d blocks but their segments have %d free blocks",
                private_pool_blocks, private_free_blocks);
  }
  if (unmapped_blocks != small_pool_.unmapped_count() + large_pool_.unmapped_count()) {
    return Fail("pools hold %d unmapped blocks but segments have %d",
                small_pool_.unmapped_count() + large_pool_.unmapped_count(), unmapped_blocks);
  }
  if (!small_pool_.IsOrdered() || !large_pool_.IsOrdered()) {
    return Fail("a pool's free blocks are out of size order, or its free bytes are miscounted");
  }
  if (!small_pool_.IndexesAgree() || !large_pool_.IndexesAgree()) {
    return Fail("a pool's address or releasable index disagrees with its size order");
  }
  if (expandable_segments != expandable_segment_count_) {
    return Fail("%d expandable segments counted as %d", expandable_segments,
                expandable_segment_count_);
  }
  if (stream_use_blocks != stream_uses_.size()) {
    return Fail("stream-use table holds %d blocks but %d are marked", stream_uses_.size(),
                stream_use_blocks);
  }
  if (active_blocks != active_.size()) {
    return Fail("active-block index holds %d blocks but segments have %d", active_.size(),
                active_blocks);
  }
  if (pending_free != pending_free_bytes_) {
    return Fail("bytes waiting for stream events %d != sum of such blocks %d", pending_free_bytes_,
                pending_free);
  }
  if (reserved != reserved_bytes_) {
    return Fail("reserved bytes %d != sum of segments %d", reserved_bytes_, reserved);
  }
  if (arena_.live_count() != free_blocks + active_blocks + unmapped_blocks) {
    return Fail("%d blocks live in the arena but %d are in segments", arena_.live_count(),
                free_blocks + active_blocks + unmapped_blocks);
  }
  if (!active_.CheckInvariants()) {
    return Fail(
        "the active-block index's map holds a block that is not active, not at its address, or "
        "found through its home group");
  }
  if (!arena_.CheckInvariants()) {
    return Fail("the block arena's occupancy masks, empty-group list and live count disagree");
  }
  const DeviceStats s = stats_.stats();
  struct Check {
    const char* name;
    const StatArray& stat;
    const int64_t* expected;
  };
  const Check checks[] = {
      {"allocation", s.allocation, allocation},
      {"active", s.active, active},
      {"segment", s.segment, segment_count},
      {"inactive_split", s.inactive_split, inactive_split},
      {"allocated_bytes", s.allocated_bytes, allocated_bytes},
      {"active_bytes", s.active_bytes, active_bytes},
      {"requested_bytes", s.requested_bytes, requested_bytes},
      {"reserved_bytes", s.reserved_bytes, reserved_bytes},
      {"inactive_split_bytes", s.inactive_split_bytes, inactive_split_bytes},
  };
  static constexpr const char* kTypes[] = {"all", "small_pool", "large_pool"};
  for (const Check& c : checks) {
    for (size_t i = 0; i < kNumStatTypes; ++i) {
      if (c.stat[i].current != c.expected[i]) {
        return Fail("stat %s.%s.current is %d but the blocks say %d", c.name, kTypes[i],
                    c.stat[i].current, c.expected[i]);
      }
      if (c.stat[i].peak < c.stat[i].current) {
        return Fail("stat %s.%s: peak below current", c.name, kTypes[i]);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace fragscope
