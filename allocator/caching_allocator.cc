// CachingAllocator: construction, the allocation path, free, and the small public operations.
// The free/release machinery is in caching_allocator_release.cc, invariants and snapshots in
// caching_allocator_inspect.cc.
#include "allocator/caching_allocator.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "allocator/block_split_merge.h"
#include "allocator/memory_fraction.h"
#include "allocator/size_policy.h"

namespace fragscope {
namespace {

// PyTorch refuses requests of 1 EiB or more before touching the allocator.
constexpr uint64_t kOneExaByte = uint64_t{1} << 60;

absl::Status TooLargeStatus(uint64_t size, int device) {
  OomReport report;
  report.requested_bytes = size;
  report.device = device;
  report.too_large = true;
  return MakeOomStatus(report);
}

}  // namespace

CachingAllocator::CachingAllocator(DeviceBackend& backend, AllocatorOptions options)
    : backend_(backend), device_(backend.device()) {
  const double fraction = options.per_process_memory_fraction;
  SetOptions(std::move(options));
  if (fraction < 1.0) {
    absl::Status status = SetMemoryFraction(fraction);
    FRAGSCOPE_CHECK(status.ok());  // the option parser validated the range
  }
}

CachingAllocator::~CachingAllocator() = default;

absl::StatusOr<DevicePtr> CachingAllocator::Allocate(uint64_t size, StreamId stream) {
  if (size == 0) return DevicePtr{0};
  if (size >= kOneExaByte) return TooLargeStatus(size, device_);
  Lock lock(&mu_);
  PrivatePool* owner =
      ABSL_PREDICT_TRUE(captures_underway_.empty()) ? nullptr : RoutedPoolLocked(stream);
  return AllocateLocked(size, stream, owner);
}

absl::StatusOr<DevicePtr> CachingAllocator::Allocate(uint64_t size, StreamId stream, PoolId pool) {
  if (size == 0) return DevicePtr{0};
  if (size >= kOneExaByte) return TooLargeStatus(size, device_);
  Lock lock(&mu_);
  PrivatePool* owner = nullptr;
  if (!pool.is_default()) {
    owner = FindPrivatePoolLocked(pool);
    if (owner == nullptr) {
      return absl::NotFoundError(absl::StrFormat(
          "allocation into private pool %s, which does not exist", FormatPoolId(pool)));
    }
  }
  return AllocateLocked(size, stream, owner);
}

absl::StatusOr<DevicePtr> CachingAllocator::AllocateLocked(uint64_t size, StreamId stream,
                                                           PrivatePool* owner) {
  // Events are not polled while a capture may be underway (querying one is illegal then).
  if (ABSL_PREDICT_TRUE(captures_underway_.empty())) ProcessEventsLocked();
  const uint64_t rounded = RoundSize(size, options_);
  const PoolKind kind = PoolFor(rounded);
  BlockPool& pool = owner == nullptr ? PoolOf(kind) : owner->Of(kind);
  if (ABSL_PREDICT_FALSE(owner != nullptr && options_.expandable_segments)) {
    return absl::UnimplementedError(absl::StrFormat(
        "expandable_segments:True in private pool %s: expandable segments in CUDA-graph pools "
        "and MemPools are not modelled",
        FormatPoolId(owner->id)));
  }

  BlockPool::iterator cached = FindFreeBlockLocked(pool, stream, rounded);
  if (cached.at_end() && RunFreeMemoryCallbacksLocked()) {
    cached = FindFreeBlockLocked(pool, stream, rounded);
  }
  if (!cached.at_end()) return HandOutLocked(*cached, &cached, pool, rounded, size);

  const uint64_t segment_size = SegmentSizeFor(rounded, options_);
  if (GcEnabledLocked()) GarbageCollectCachedBlocksLocked();
  // The retry ladder. A backend error other than out-of-memory stops it at once.
  absl::Status error;
  Block* block = AllocateBlockLocked(kind, owner, stream, rounded, segment_size, &error);
  if (block == nullptr && error.ok() && owner == nullptr && !use_on_oom_pools_.empty()) {
    // try_mempool_fallback: before releasing anything, a use_on_oom pool's free block.
    auto [lender, found] = MempoolFallbackLocked(kind, stream, rounded);
    if (lender != nullptr) return HandOutLocked(*found, &found, lender->Of(kind), rounded, size);
  }
  if (block == nullptr && error.ok() && ReleaseAvailableCachedBlocksLocked(pool, stream, rounded)) {
    block = AllocateBlockLocked(kind, owner, stream, rounded, segment_size, &error);
  }
  // The full release is skipped while a capture may be underway.
  if (block == nullptr && error.ok() && captures_underway_.empty()) {
    ReleaseCachedBlocksLocked(/*oom_retry=*/true);
    block = AllocateBlockLocked(kind, owner, stream, rounded, segment_size, &error);
  }
  if (!error.ok()) return error;
  if (block == nullptr) {
    return OutOfMemoryLocked(size, rounded, segment_size, stream,
                             owner == nullptr ? kDefaultPoolId : owner->id);
  }
  return HandOutLocked(block, /*in_pool=*/nullptr, pool, rounded, size);
}

BlockPool::iterator CachingAllocator::FindFreeBlockLocked(BlockPool& pool, StreamId stream,
                                                          uint64_t rounded) {
  if (GcEnabledLocked()) pool.TickGcClock();
  const bool expandable = options_.expandable_segments;
  if (options_.placement == PlacementPolicy::kFirstFit) {
    // Unlike best fit, first fit skips a block the oversize rules forbid and goes on.
    Block* block = pool.FirstFit(stream, [&](const Block* b) {
      return b->size >= rounded && (expandable || !b->IsExpandable()) &&
             !OversizeRuleRejects(b->size, rounded, options_);
    });
    return block != nullptr ? pool.Find(block) : BlockPool::iterator();
  }
  auto it = pool.LowerBound(stream, rounded);
  if (it.at_end()) return it;
  if (expandable_segment_count_ > 0 && (*it)->IsExpandable()) {
    if (expandable) {
      // A free block bordering unmapped space can grow for free: count that space, and prefer
      // a larger mapped block that does not border it (keeps the growing edge free).
      auto expandable_size = [](const Block* b) {
        return b->size + (b->next != nullptr && !b->next->mapped ? b->next->size : 0);
      };
      for (auto next = std::next(it);
           (*it)->IsExpandable() && !next.at_end() && expandable_size(*next) < expandable_size(*it);
           ++next) {
        it = next;
      }
    } else {
      // expandable_segments was turned off: its segments serve no new requests.
      do {
        ++it;
      } while (!it.at_end() && (*it)->IsExpandable());
      if (it.at_end()) return it;
    }
  }
  // PyTorch rejects here rather than trying the next candidate (pytorch#189504).
  if (OversizeRuleRejects(it.key().size, rounded, options_)) return BlockPool::iterator();
  return it;
}

bool CachingAllocator::RunFreeMemoryCallbacksLocked() {
  bool freed = false;
  for (const auto& callback : free_memory_callbacks_) freed |= callback();
  return freed;
}

Block* CachingAllocator::AllocateBlockLocked(PoolKind pool, PrivatePool* owner, StreamId stream,
                                             uint64_t rounded, uint64_t segment_size,
                                             absl::Status* error) {
  // The memory-fraction cap is checked against the segment size even when expandable segments
  // map a different amount, as PyTorch does.
  if (allowed_maximum_bytes_.has_value() &&
      reserved_bytes_ + segment_size > *allowed_maximum_bytes_) {
    return nullptr;
  }
  if (options_.expandable_segments) return AllocateExpandableLocked(pool, stream, rounded, error);
  return AllocateSegmentLocked(pool, owner, stream, segment_size, error);
}

Block* CachingAllocator::AllocateSegmentLocked(PoolKind pool, PrivatePool* owner, StreamId stream,
                                               uint64_t segment_size, absl::Status* error) {
  absl::StatusOr<DevicePtr> ptr = backend_.Malloc(segment_size);
  if (!ptr.ok()) {
    if (!absl::IsResourceExhausted(ptr.status())) *error = ptr.status();
    return nullptr;
  }
  auto [it, inserted] = segments_.try_emplace(*ptr);
  if (!inserted) {
    // A broken backend (or a replay scripting inconsistent addresses) handed out the address of
    // a live segment: refuse it rather than corrupt the block lists.
    *error = absl::InternalError(
        absl::StrFormat("device malloc returned 0x%x, the address of a live segment of %d bytes",
                        *ptr, it->second.size));
    return nullptr;
  }
  reserved_bytes_ += segment_size;
  Segment& segment = it->second;
  segment.base = *ptr;
  segment.size = segment_size;
  segment.stream = stream;
  segment.pool = pool;
  segment.id = next_segment_id_++;
  segment.owner = owner;
  if (owner != nullptr) {
    ++owner->segment_count;
    owner->reserved_bytes += segment_size;
    private_pool_reserved_bytes_ += segment_size;
    peak_private_pool_reserved_bytes_ =
        std::max(peak_private_pool_reserved_bytes_, private_pool_reserved_bytes_);
  }

  Block* block = arena_.New();
  block->ptr = *ptr;
  block->size = segment_size;
  block->stream = stream;
  block->segment = &segment;
  block->pool = pool;
  block->in_private_pool = owner != nullptr;
  segment.head = block;
  active_.AddSegment(segment.base, segment.size, block);

  AllocatorEvent e = BlockEvent(EventKind::kSegmentAlloc, *block);
  if (segment_size >= options_.max_split_size_bytes) e.flags |= kEventFlagOversize;
  Emit(e);
  return block;
}

DevicePtr CachingAllocator::HandOutLocked(Block* block, const BlockPool::iterator* in_pool,
                                          BlockPool& pool, uint64_t rounded, uint64_t requested) {
  // With many live blocks the block, its lower neighbour (a split links the new block to it) and
  // (for observers' events) its segment are each a cache miss: start the neighbours' (Note
  // [Blocks grouped by segment]) with the block's, then the segment's, instead of one after
  // another. The handed-out block starts where this one does (the pool key holds the address):
  // its home group is the one SplitFront puts it in and Insert compares with.
  Block* const home = active_.HomeGroup(in_pool != nullptr ? in_pool->key().ptr : block->ptr);
  if (in_pool != nullptr) BlockArena::PrefetchGroup(block);
  const bool was_split = block->IsSplit();
  if (!observers_.empty()) __builtin_prefetch(block->segment);
  // The pool, size and address come from the request and the pool's key, not the block, so that
  // the pool's work does not wait for the block's cache miss. (The pool searched is the
  // request's, as is a new segment's.)
  const PoolKind kind = PoolFor(rounded);
  FRAGSCOPE_DCHECK(block->pool == kind);
  const uint64_t size = in_pool != nullptr ? in_pool->key().size : block->size;
  uint64_t remainder_bytes = 0;
  // A MemPool(no_split=True) hands its blocks out whole (PyTorch's should_split).
  const bool no_split =
      ABSL_PREDICT_FALSE(block->in_private_pool) && block->segment->owner->no_split;
  if (!no_split && ShouldSplit(size, rounded, kind, options_)) {
    Block* remainder = block;
    remainder_bytes = size - rounded;
    if (in_pool != nullptr) {
      // The remainder is the same Block at a higher address: re-key it where it sits.
      pool.Rekey(*in_pool, in_pool->key().ptr + rounded, remainder_bytes,
                 [&] { block = SplitFront(remainder, rounded, arena_, home); });
    } else {
      block = SplitFront(remainder, rounded, arena_, home);
      pool.Insert(remainder);
    }
  } else if (in_pool != nullptr) {
    pool.Erase(*in_pool);
  }
  block->allocated = true;
  block->set_requested_size(requested);
  active_.Insert(block, home);

  EmitMade([&] {
    AllocatorEvent e = BlockEvent(EventKind::kAlloc, *block);
    e.requested_bytes = requested;
    e.split_bytes = remainder_bytes;
    if (was_split) e.flags |= kEventFlagBlockWasSplit;
    if (block->size >= options_.max_split_size_bytes) e.flags |= kEventFlagOversize;
    return e;
  });
  return block->ptr;
}

absl::Status CachingAllocator::OutOfMemoryLocked(uint64_t requested, uint64_t rounded,
                                                 uint64_t segment_size, StreamId stream,
                                                 PoolId pool_id) {
  const DeviceMemInfo info = backend_.MemInfo();
  const DeviceStats stats = stats_.stats();
  OomReport r;
  r.requested_bytes = requested;
  r.rounded_bytes = rounded;
  r.segment_bytes = segment_size;
  r.stream = stream;
  r.device = device_;
  r.device_total_bytes = info.total_bytes;
  r.device_free_bytes = info.free_bytes;
  r.allowed_bytes = allowed_maximum_bytes_;
  r.allocated_bytes = static_cast<uint64_t>(stats.allocated_bytes[0].current);
  r.reserved_bytes = reserved_bytes_;
  // From the pools' running figures, without a walk: a trace with many out-of-memory records
  // over many free blocks would otherwise replay in quadratic time. The oversize figure visits
  // only the blocks it counts: those the rules bar, a suffix of the stream's size order.
  const PoolKind kind = PoolFor(rounded);
  // The request's pools (a private pool's when it allocates to one), from their running figures:
  // an OOM walks no blocks or segments.
  const PrivatePool* owner = FindPrivatePoolLocked(pool_id);
  const BlockPool& small = owner != nullptr ? owner->small : small_pool_;
  const BlockPool& large = owner != nullptr ? owner->large : large_pool_;
  r.free_cached_bytes = small.free_bytes() + large.free_bytes();
  r.free_cached_fragments = small.size() + large.size();
  r.largest_free_cached_block = std::max(small.LargestSize(), large.LargestSize());
  r.oversize_rejected_bytes =
      (kind == PoolKind::kSmall ? small : large)
          .BytesFrom(stream, std::max(rounded, OversizeRejectionFloor(rounded, options_)));
  r.pending_free_bytes = pending_free_bytes_;
  // PyTorch's "allocated in private pools": the free cached blocks of every private pool,
  // counted as allocated in its message; fragscope also keeps what they reserve.
  r.pool_id = pool_id;
  for (const auto& [id, pp] : private_pools_) {
    ++r.private_pool_count;
    if (id.is_graph_pool()) ++r.graph_pool_count;
    r.private_pool_free_bytes += pp->small.free_bytes() + pp->large.free_bytes();
    r.private_pool_reserved_bytes += pp->reserved_bytes;
  }

  AllocatorEvent e;
  e.kind = EventKind::kOom;
  e.pool = kind;
  e.device = r.device;
  e.bytes = rounded;
  e.requested_bytes = requested;
  e.stream = stream;
  e.device_free_bytes = r.device_free_bytes;
  e.device_total_bytes = r.device_total_bytes;
  e.reserved_bytes = r.reserved_bytes;
  e.allocated_bytes = r.allocated_bytes;
  e.pool_id = pool_id;
  if (r.would_fit_in_free_cached()) e.flags |= kEventFlagWouldFitIfContiguous;
  Emit(e);
  return MakeOomStatus(r);
}

absl::StatusOr<Block*> CachingAllocator::FindActiveBlockLocked(DevicePtr ptr) const {
  if (Block* block = active_.Find(ptr); block != nullptr) return block;
  // Not the start of an active block: say what it is.
  auto seg = segments_.upper_bound(ptr);
  if (seg != segments_.begin()) {
    --seg;
    const Segment& segment = seg->second;
    if (ptr < segment.base + segment.size) {
      for (const Block* b = segment.head; b != nullptr; b = b->next) {
        if (ptr < b->ptr || ptr >= b->end()) continue;
        if (ptr != b->ptr) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "0x%x is not the start of an allocation: it lies %d bytes into the %s block at "
              "0x%x of %d bytes",
              ptr, ptr - b->ptr, b->allocated ? "allocated" : "free", b->ptr, b->size));
        }
        return absl::InvalidArgumentError(
            absl::StrFormat("double free: 0x%x is a free block of %d bytes in the segment at 0x%x",
                            ptr, b->size, segment.base));
      }
    }
  }
  return absl::NotFoundError(absl::StrFormat("invalid device pointer: 0x%x", ptr));
}

absl::Status CachingAllocator::Free(DevicePtr ptr) {
  if (ptr == 0) return absl::OkStatus();
  Lock lock(&mu_);
  // Find loads the block's group: the block and, usually, both neighbours, which the merge reads
  // (Note [Finding a block through its segment]). Observers' events read the segment too.
  const Block* const home = active_.HomeGroup(ptr);
  Block* block = active_.Find(ptr, home);
  if (block == nullptr) return FindActiveBlockLocked(ptr).status();  // says what ptr is
  if (!observers_.empty()) __builtin_prefetch(block->segment);
  if (!block->allocated) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "double free: 0x%x was already freed and is waiting for events on other streams", ptr));
  }
  block->allocated = false;
  EmitMade([&] {
    AllocatorEvent e = BlockEvent(EventKind::kFreeRequested, *block);
    e.requested_bytes = block->requested_size();
    if (block->size >= options_.max_split_size_bytes) e.flags |= kEventFlagOversize;
    return e;
  });
  if (!block->used_on_other_streams) {
    active_.Erase(block, home);
    FreeBlockLocked(block);
    return absl::OkStatus();
  }
  if (ABSL_PREDICT_FALSE(!captures_underway_.empty())) {
    // No event may be recorded for later querying during a capture: the free waits until no
    // capture is underway (PyTorch's deferred_blocks).
    deferred_frees_.push_back(block);
    pending_free_bytes_ += block->size;
    return absl::OkStatus();
  }
  capture_stream_uses_.erase(block);  // uses recorded during an earlier capture still count
  InsertEventsLocked(block);
  return absl::OkStatus();
}

absl::Status CachingAllocator::RecordStream(DevicePtr ptr, StreamId stream) {
  Lock lock(&mu_);
  // A view at an offset protects its whole block (pytorch#27366): resolve interior pointers.
  Block* block = active_.Find(ptr);
  if (block == nullptr) {
    if (auto seg = segments_.upper_bound(ptr); seg != segments_.begin()) {
      for (Block* b = std::prev(seg)->second.head; b != nullptr; b = b->next) {
        if (ptr >= b->ptr && ptr < b->end()) {
          if (b->allocated) block = b;
          break;
        }
      }
    }
  }
  if (block == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("record_stream on 0x%x, which is not inside an allocated block", ptr));
  }
  if (!block->allocated) {
    return absl::InvalidArgumentError(
        absl::StrFormat("record_stream on 0x%x, which was already freed", ptr));
  }
  if (stream == block->stream) return absl::OkStatus();
  std::vector<StreamId>& uses = stream_uses_[block];
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) {
    // The free records an event per stream, counted in Block::event_count (16 bits).
    if (uses.size() >= kMaxStreamUses) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "record_stream on 0x%x: the block is already in use on %d other streams, the most one "
          "block can wait for",
          ptr, uses.size()));
    }
    uses.push_back(stream);
    if (ABSL_PREDICT_FALSE(!captures_underway_.empty())) {
      capture_stream_uses_[block].push_back(stream);
    }
  }
  block->used_on_other_streams = true;
  return absl::OkStatus();
}

void CachingAllocator::EmptyCache() { EmptyCache(kDefaultPoolId); }

void CachingAllocator::EmptyCache(PoolId pool) {
  Lock lock(&mu_);
  ReleaseCachedBlocksLocked(/*oom_retry=*/false, pool);
}

absl::Status CachingAllocator::SetMemoryFraction(double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Invalid fraction value: %g. Allowed range: 0~1", fraction));
  }
  Lock lock(&mu_);
  if (fraction == 1.0) {
    allowed_maximum_bytes_.reset();
    return absl::OkStatus();
  }
  // Truncated, as PyTorch 2.11 does: Note [The memory fraction's bytes].
  allowed_maximum_bytes_ = AllowedBytesForFraction(fraction, backend_.MemInfo().total_bytes);
  return absl::OkStatus();
}

void CachingAllocator::SetAllowed(std::optional<uint64_t> bytes) {
  Lock lock(&mu_);
  allowed_maximum_bytes_ = bytes;
}

std::optional<uint64_t> CachingAllocator::Allowed() const {
  Lock lock(&mu_);
  return allowed_maximum_bytes_;
}

double CachingAllocator::RecordedMemoryFraction() const {
  Lock lock(&mu_);
  if (!allowed_maximum_bytes_.has_value()) return 1.0;
  return FractionForAllowedBytes(*allowed_maximum_bytes_, backend_.MemInfo().total_bytes);
}

double CachingAllocator::GetMemoryFraction() const {
  Lock lock(&mu_);
  if (!allowed_maximum_bytes_.has_value()) return 1.0;
  const uint64_t total = backend_.MemInfo().total_bytes;
  return total == 0 ? 0.0 : static_cast<double>(*allowed_maximum_bytes_) / total;
}

void CachingAllocator::SetOptions(AllocatorOptions options) {
  Lock lock(&mu_);
  options_ = std::move(options);
  const bool first_fit = options_.placement == PlacementPolicy::kFirstFit;
  small_pool_.set_address_index(first_fit);
  large_pool_.set_address_index(first_fit);
  stats_.set_max_split_size(
      options_.max_split_size_set() ? static_cast<int64_t>(options_.max_split_size_bytes) : -1);
}

AllocatorOptions CachingAllocator::options() const {
  Lock lock(&mu_);
  return options_;
}

void CachingAllocator::AddFreeMemoryCallback(std::function<bool()> callback) {
  Lock lock(&mu_);
  free_memory_callbacks_.push_back(std::move(callback));
}

void CachingAllocator::AddObserver(AllocatorObserver* observer) {
  Lock lock(&mu_);
  observers_.push_back(observer);
}

void CachingAllocator::RemoveObserver(AllocatorObserver* observer) {
  Lock lock(&mu_);
  observers_.erase(std::remove(observers_.begin(), observers_.end(), observer), observers_.end());
}

DeviceStats CachingAllocator::GetStats() const {
  Lock lock(&mu_);
  return stats_.stats();
}

void CachingAllocator::ResetPeakStats() {
  Lock lock(&mu_);
  stats_.ResetPeak();
}

void CachingAllocator::ResetAccumulatedStats() {
  Lock lock(&mu_);
  stats_.ResetAccumulated();
}

}  // namespace fragscope
