// CachingAllocator: PyTorch's CUDA caching allocator (DeviceCachingAllocator), decision for
// decision, over a DeviceBackend. One instance serves one device.
//
// The policy (docs/pytorch_allocator_rules.md §2), in one place:
//  - Requests are rounded (size_policy.h) and served from the small (<= 1 MiB) or large pool.
//  - Best fit on the request's stream: smallest sufficient free block, oldest segment, lowest
//    address (block_pool.h). Blocks never cross streams.
//  - Oversize rules: with max_split_size set, a block >= max_split_size never serves a smaller
//    request, and serves a larger one only within max_non_split_rounding bytes. The lookup
//    rejects rather than trying the next candidate, as PyTorch does.
//  - A found block is split when the remainder is worth keeping (ShouldSplit); the front part
//    is handed out, the remainder returns to the pool.
//  - No block: run the free-memory callbacks and look again; GC old cached blocks (when a memory
//    fraction and garbage_collection_threshold are set); device malloc a new segment; on
//    failure release oversize cached blocks (only with max_split_size set) and malloc again;
//    then release every unsplit cached block after synchronizing all stream events and malloc
//    once more (counted in num_alloc_retries); then fail with an OOM status.
//  - Free: the block's allocated bytes drop at once; if other streams used it (RecordStream) it
//    waits for events recorded on those streams before it merges with free neighbours and
//    returns to the pool. Pending events are polled at the start of every Allocate.
//  - Only whole unsplit segments are ever returned to the device (EmptyCache, OOM retry, GC).
//    Free memory inside a split segment stays reserved: PyTorch's "reserved but unallocated".
//  - expandable_segments:True (caching_allocator_expandable.cc): instead of a new segment, the
//    request maps pages into one growing virtual-address reservation per (pool, stream), at the
//    lowest address where free and unmapped space together fit it; EmptyCache and the OOM retry
//    unmap every whole free page. Best fit prefers a free block not bordering unmapped space.
//  - placement:first_fit (a fragscope extension) replaces best fit by the lowest-address free
//    block that fits on the stream.
//
// Every state change is emitted as an AllocatorEvent to observers (StatsTracker first); see
// Note [Instrumentation is layered on] in allocator_events.h.
//
// Thread safety: all public methods are thread-safe; one mutex per allocator (allocator/mutex.h),
// never recursive, never released inside an operation. Observers run under it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/active_block_index.h"
#include "allocator/allocator_events.h"
#include "allocator/allocator_options.h"
#include "allocator/allocator_snapshot.h"
#include "allocator/block.h"
#include "allocator/block_arena.h"
#include "allocator/block_pool.h"
#include "allocator/device_backend.h"
#include "allocator/mutex.h"
#include "allocator/oom_report.h"
#include "allocator/pool_id.h"
#include "allocator/private_pool.h"
#include "allocator/stats_tracker.h"

namespace fragscope {

class CachingAllocator {
 public:
  // REQUIRES: backend outlives the allocator.
  CachingAllocator(DeviceBackend& backend, AllocatorOptions options);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Allocates `size` bytes usable on `stream`. size == 0 returns 0 (PyTorch returns a null data
  // pointer for empty tensors). An out-of-memory failure is kResourceExhausted with PyTorch's
  // message and an OomReport payload (see GetOomReport); backend errors other than OOM are
  // returned as they are.
  // While a private pool is active (BeginAllocateToPool), a request on a stream its filter
  // accepts goes to that pool (the latest begun first).
  absl::StatusOr<DevicePtr> Allocate(uint64_t size, StreamId stream);
  // Allocates into `pool` whatever the active filters say: (0, 0) is the default pool, any other
  // id a private pool that must exist (else kNotFound). A replay routes each request so, by the
  // pool the trace recorded for it.
  absl::StatusOr<DevicePtr> Allocate(uint64_t size, StreamId stream, PoolId pool);

  // Frees a pointer returned by Allocate. Unknown pointers, interior pointers and double frees
  // are kInvalidArgument / kNotFound errors that say which, and change nothing. Freeing 0 is a
  // no-op.
  absl::Status Free(DevicePtr ptr);

  // Marks the block at `ptr` as used on `stream`: when freed, it is reused only after the work
  // queued on `stream` up to the free has completed. Uses on the allocation stream are ignored.
  // A block waits for at most kMaxStreamUses other streams: one more is kResourceExhausted.
  absl::Status RecordStream(DevicePtr ptr, StreamId stream);
  static constexpr size_t kMaxStreamUses = 0x7fff;

  // Returns every unsplit cached segment to the device, after synchronizing pending events.
  // PyTorch's emptyCache({0, 0}): with a capture underway the default pool is left alone; the
  // unsplit cached segments of every freeable private pool are freed either way.
  void EmptyCache();
  // emptyCache(mempool_id) of a private pool: when that pool is freeable, synchronizes its
  // blocks' events and frees its unsplit cached segments (and those of no other pool); otherwise
  // nothing. (0, 0) is EmptyCache().
  void EmptyCache(PoolId pool);

  // --- Private pools (caching_allocator_pools.cc; allocator/README.md, "Private pools") ---
  // Which streams an active pool takes requests from (PyTorch's filter on cudaStream_t: the
  // capturing stream for a graph, the calling thread for use_mem_pool).
  using StreamFilter = std::function<bool(StreamId)>;
  // createOrIncrefPool: creates the pool with use_count 1, or adds a user to a live one.
  // A freeable pool (use_count 0) cannot be revived: kFailedPrecondition.
  absl::Status CreateOrIncrefPool(PoolId pool);
  // beginAllocateToPool: CreateOrIncrefPool, then routes requests on streams `filter` accepts to
  // the pool until EndAllocateToPool. A pool already being allocated to is kFailedPrecondition
  // with PyTorch's message (its use_count is raised first, as in PyTorch).
  absl::Status BeginAllocateToPool(PoolId pool, StreamFilter filter);
  // endAllocateToPool: stops routing to the pool (kFailedPrecondition if it was not).
  absl::Status EndAllocateToPool(PoolId pool);
  // releasePool: one user fewer; at 0 the pool becomes freeable. kNotFound for an unknown pool.
  absl::Status ReleasePool(PoolId pool);
  // getPoolUseCount; kNotFound for an unknown (or deleted) pool.
  absl::StatusOr<int> PoolUseCount(PoolId pool) const;
  // MemPool(use_on_oom=True): a request of the default pool that cannot get device memory takes a
  // fitting free block of this pool before the cache is released. kNotFound for an unknown pool.
  absl::Status SetUseOnOom(PoolId pool, bool use_on_oom);
  // MemPool(no_split=True): blocks of this pool are handed out whole, never split.
  absl::Status SetNoSplit(PoolId pool);
  // The private pools that exist (deleted ones are gone), in id order.
  std::vector<PoolId> PrivatePoolIds() const;

  // Caps reserved memory at fraction * device total, truncated to bytes (PyTorch 2.11's cap;
  // Note [The memory fraction's bytes] in memory_fraction.h); 1.0 removes the cap, as in PyTorch
  // 2.11, whose setMemoryFraction keeps none for 1.0 (so no "allowed" clause in the OOM message and
  // no garbage collection; older releases set a cap of the whole device, with both).
  // REQUIRES: 0 <= fraction <= 1, else kInvalidArgument.
  absl::Status SetMemoryFraction(double fraction);
  double GetMemoryFraction() const;
  // The fraction a log records for the cap in force: one that SetMemoryFraction (and PyTorch)
  // turn back into exactly that cap (FractionForAllowedBytes); 1.0 without a cap.
  double RecordedMemoryFraction() const;
  // The cap in bytes, exactly (a replay's --allowed; no round trip through a fraction); nullopt
  // removes it. Allowed() is the cap in force, from either setter.
  void SetAllowed(std::optional<uint64_t> bytes);
  std::optional<uint64_t> Allowed() const;

  // Replaces the options (torch._C._accelerator_setAllocatorSettings). Takes effect for the next
  // decision; existing blocks keep their sizes.
  void SetOptions(AllocatorOptions options);
  AllocatorOptions options() const;

  // Registers a callback run when no cached block fits, before allocating new device memory
  // (PyTorch's FreeCudaMemoryCallbacksRegistry). It returns true if it freed anything. It runs
  // under the allocator lock and must not call back into this allocator.
  void AddFreeMemoryCallback(std::function<bool()> callback);

  // REQUIRES: observer outlives the allocator or is removed first; see AllocatorObserver.
  void AddObserver(AllocatorObserver* observer);
  void RemoveObserver(AllocatorObserver* observer);

  DeviceStats GetStats() const;
  void ResetPeakStats();
  void ResetAccumulatedStats();

  // The segments and their blocks, in address order, with PyTorch's field names and states.
  AllocatorSnapshot Snapshot() const;
  // The segment that holds `address` (a device allocation or an expandable reservation), as
  // Snapshot() shows it; nullopt when none does. O(log segments + its blocks): for observers that
  // keep a layout current from the events' addresses.
  std::optional<SegmentSnapshot> SnapshotSegmentAt(DevicePtr address) const;

  // The size of the largest free cached block on any stream (PyTorch's cacheInfo, without the
  // device-free initial guess).
  uint64_t LargestFreeCachedBlock() const;

  // The most bytes reserved at once in private pools (CUDA-graph pools, MemPools), over the
  // allocator's life.
  uint64_t PeakPrivatePoolReservedBytes() const;

  // Free blocks visited so far by the walks of the pools (releases, garbage collection, the
  // out-of-memory report's oversize figure): for tests that count work instead of timing it.
  uint64_t PoolBlocksWalked() const;

  // Verifies every structural and statistical invariant; returns the first violation. Meant for
  // tests and debug builds: O(blocks).
  absl::Status CheckInvariants() const;

  int device() const { return device_; }
  DeviceBackend& backend() { return backend_; }

 private:
  using Lock = MutexLock;

  BlockPool& PoolOf(PoolKind kind) { return kind == PoolKind::kSmall ? small_pool_ : large_pool_; }
  // The free-block set a block returns to: its private pool's, else the default pool's.
  BlockPool& PoolOfBlock(const Block& block) {
    if (ABSL_PREDICT_FALSE(block.in_private_pool)) return block.segment->owner->Of(block.pool);
    return PoolOf(block.pool);
  }
  const BlockPool& PoolOfBlock(const Block& block) const {
    if (ABSL_PREDICT_FALSE(block.in_private_pool)) return block.segment->owner->Of(block.pool);
    return PoolOf(block.pool);
  }
  // Appends `segment`'s mapped ranges, as Snapshot() shows them, to `out`.
  void AppendSegmentInfos(const Segment& segment, std::vector<SegmentInfo>& out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static PoolId PoolIdOf(const Block& block) {
    return ABSL_PREDICT_FALSE(block.in_private_pool) ? block.segment->owner->id : PoolId{};
  }
  const BlockPool& PoolOf(PoolKind kind) const {
    return kind == PoolKind::kSmall ? small_pool_ : large_pool_;
  }
  // Inline (with BlockEvent) so that each call site's event kind is a constant the stats update
  // folds: together they were a third of a warm malloc+free pair as out-of-line calls.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Emit(const AllocatorEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    stats_.Apply(event);
    for (AllocatorObserver* observer : observers_) observer->OnEvent(event);
  }
  // Emit of the event `make()` returns, for the hot paths. Without observers the event is only
  // the stats' input: its address is never taken, so the compiler keeps the fields the stats read
  // in registers and stores none of the others (the two branches each have their own copy of the
  // stats update).
  template <typename MakeEvent>
  ABSL_ATTRIBUTE_ALWAYS_INLINE void EmitMade(MakeEvent make) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ABSL_PREDICT_TRUE(observers_.empty())) {
      stats_.Apply(make());
    } else {
      Emit(make());
    }
  }
  // The event for `block` with every kind-specific field zero.
  ABSL_ATTRIBUTE_ALWAYS_INLINE AllocatorEvent BlockEvent(EventKind kind, const Block& block) const {
    return BlockEvent(kind, block, block.segment->base);
  }
  ABSL_ATTRIBUTE_ALWAYS_INLINE AllocatorEvent BlockEvent(EventKind kind, const Block& block,
                                                         DevicePtr segment_base) const {
    // Every field spelled out: zero-initializing the whole struct first compiles to `rep stos`.
    return AllocatorEvent{.kind = kind,
                          .pool = block.pool,
                          .flags = block.expandable ? uint8_t{kEventFlagExpandable} : uint8_t{0},
                          .merged_count = 0,
                          .device = device_,
                          .ptr = block.ptr,
                          .bytes = block.size,
                          .requested_bytes = 0,
                          .stream = block.stream,
                          .segment = segment_base,
                          .split_bytes = 0,
                          .result_bytes = 0,
                          .device_free_bytes = 0,
                          .device_total_bytes = 0,
                          .reserved_bytes = 0,
                          .allocated_bytes = 0,
                          .pool_id = PoolIdOf(block)};
  }

  // --- Allocation path (caching_allocator.cc) ---
  // Allocate, with the pool chosen: `owner` is the private pool, nullptr the default pool.
  absl::StatusOr<DevicePtr> AllocateLocked(uint64_t size, StreamId stream, PrivatePool* owner)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The cached free block that serves `rounded` bytes on `stream` under the placement policy and
  // the oversize rules, left in the pool; an at_end() iterator if none.
  BlockPool::iterator FindFreeBlockLocked(BlockPool& pool, StreamId stream, uint64_t rounded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool RunFreeMemoryCallbacksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Device-mallocs a new segment of `segment_size` and returns its single free block, or
  // nullptr on out-of-memory (other backend errors go to *error).
  Block* AllocateSegmentLocked(PoolKind pool, PrivatePool* owner, StreamId stream,
                               uint64_t segment_size, absl::Status* error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Device-allocates room for a `rounded` block: a new segment of `segment_size`, or pages in an
  // expandable segment. Returns a free block of at least `rounded` bytes, out of every pool set,
  // or nullptr on out-of-memory (other backend errors go to *error).
  Block* AllocateBlockLocked(PoolKind pool, PrivatePool* owner, StreamId stream, uint64_t rounded,
                             uint64_t segment_size, absl::Status* error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands out the first `rounded` bytes of free `block` for a request of `requested` bytes:
  // splits off a remainder worth keeping (ShouldSplit) back into the pool, marks the block
  // allocated, emits kAlloc. `in_pool` is the block's position in its pool when it is still
  // there (a cached block), nullptr when it is in no set (fresh device memory). `pool` is the
  // block's free-block set.
  DevicePtr HandOutLocked(Block* block, const BlockPool::iterator* in_pool, BlockPool& pool,
                          uint64_t rounded, uint64_t requested) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OutOfMemoryLocked(uint64_t requested, uint64_t rounded, uint64_t segment_size,
                                 StreamId stream, PoolId pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Block*> FindActiveBlockLocked(DevicePtr ptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Private pools (caching_allocator_pools.cc) ---
  PrivatePool* FindPrivatePoolLocked(PoolId id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pool whose filter accepts `stream`, the latest begun first (PyTorch's get_pool); nullptr.
  PrivatePool* RoutedPoolLocked(StreamId stream) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // try_mempool_fallback: a fitting free block of a use_on_oom pool, with its pool; for a request
  // of the default pool only.
  std::pair<PrivatePool*, BlockPool::iterator> MempoolFallbackLocked(PoolKind kind, StreamId stream,
                                                                     uint64_t rounded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the unsplit cached segments of every freeable private pool (only of `only` when it is
  // not the default id, after synchronizing that pool's events) and deletes the pools left with
  // no segment (PyTorch's loop over graph_pools_freeable in release_cached_blocks).
  void ReleaseFreeablePoolsLocked(PoolId only) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the unsplit cached segments among `pool`'s free blocks (PyTorch's release_blocks).
  void ReleaseUnsplitBlocksLocked(BlockPool& pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees deferred during a capture (PyTorch's insert_events_deferred_until_no_capture): each
  // block's uses on streams recorded during the capture are dropped (they completed with it);
  // the others get events, and a block with none left is freed.
  void InsertDeferredEventsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Expandable segments (caching_allocator_expandable.cc) ---
  // PyTorch's try_allocate_expandable_block: maps pages so that a free block of >= rounded
  // bytes exists on the stream and returns it, out of the pool; nullptr on out-of-memory.
  Block* AllocateExpandableLocked(PoolKind pool, StreamId stream, uint64_t rounded,
                                  absl::Status* error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The block where `rounded` bytes start: the lowest-address unmapped block (or the free
  // block before it) followed by enough free or unmapped space; a new segment if none.
  Block* FindExpandableBlockLocked(PoolKind pool, StreamId stream, uint64_t rounded,
                                   absl::Status* error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Maps the pages covering the first `bytes` of unmapped `block` and merges them with free
  // mapped neighbours. Returns the resulting free block (in the pool), or nullptr.
  Block* MapBlockLocked(Block* block, uint64_t bytes, absl::Status* error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unmaps the whole pages inside free mapped `block`; releases the segment once nothing in it
  // is mapped any more.
  void UnmapBlockLocked(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Merges `src` into `dst` if src is free and as mapped as dst, taking src out of its set.
  // Returns the bytes absorbed (0 = no merge).
  uint64_t TryMergeLocked(Block* dst, Block* src) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Free and release paths (caching_allocator_release.cc) ---
  // Merges a free block with its free neighbours and returns it to the pool.
  // REQUIRES: the block was removed from active_.
  void FreeBlockLocked(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void InsertEventsLocked(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ProcessEventsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Synchronizes pending events and frees their blocks: all of them, or those of `only`'s blocks.
  void SynchronizeAndFreeEventsLocked(const PrivatePool* only = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns an unsplit free block's segment to the device.
  void ReleaseBlockLocked(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReleaseAvailableCachedBlocksLocked(BlockPool& pool, StreamId stream, uint64_t rounded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PyTorch's release_cached_blocks(mempool_id): see EmptyCache.
  void ReleaseCachedBlocksLocked(bool oom_retry, PoolId pool = kDefaultPoolId)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GarbageCollectCachedBlocksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool GcEnabledLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return allowed_maximum_bytes_.has_value() && options_.garbage_collection_threshold > 0.0;
  }

  DeviceBackend& backend_;
  const int device_;  // cached: BlockEvent runs on every operation
  mutable Mutex mu_;
  AllocatorOptions options_ ABSL_GUARDED_BY(mu_);
  BlockArena arena_ ABSL_GUARDED_BY(mu_);
  BlockPool small_pool_ ABSL_GUARDED_BY(mu_){PoolKind::kSmall};
  BlockPool large_pool_ ABSL_GUARDED_BY(mu_){PoolKind::kLarge};
  // Allocated blocks and freed blocks waiting for stream events, by address.
  ActiveBlockIndex active_ ABSL_GUARDED_BY(mu_);
  // For each allocated block with used_on_other_streams: the streams other than its own that used
  // it (PyTorch's Block::stream_uses), kept apart because few blocks ever have any.
  absl::flat_hash_map<const Block*, std::vector<StreamId>> stream_uses_ ABSL_GUARDED_BY(mu_);
  // Every live segment by base address: ordered for interior-pointer lookups and snapshots,
  // node-stable because blocks point into it.
  std::map<DevicePtr, Segment> segments_ ABSL_GUARDED_BY(mu_);
  uint64_t next_segment_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Live expandable segments: while there are none, best fit skips its expandable checks (which
  // read the block and its segment, two cache misses in a large pool).
  size_t expandable_segment_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Per-stream FIFO of (event, block) for blocks freed after use on that stream. Per-stream
  // queues avoid head-of-line blocking (pytorch#71616). Ordered by stream, so the order in which
  // frees complete (and with it the transient inactive_split peaks and the order of the
  // free_completed events) is the same in every run: PyTorch's map hashes the stream's id, a fixed
  // order for given streams, where an absl hash map's order depends on where its table lives.
  absl::btree_map<StreamId, std::deque<std::pair<EventHandle, Block*>>> pending_events_
      ABSL_GUARDED_BY(mu_);
  // Bytes obtained from the device (PyTorch's total_allocated_memory).
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Bytes of the freed blocks still waiting for stream events (event_count > 0): the OOM report's
  // figure, kept so that the report walks no segments.
  uint64_t pending_free_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Bytes of the segments private pools own, now and at most.
  uint64_t private_pool_reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t peak_private_pool_reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Set when a memory fraction < 1 is in force.
  std::optional<uint64_t> allowed_maximum_bytes_ ABSL_GUARDED_BY(mu_);
  StatsTracker stats_ ABSL_GUARDED_BY(mu_);
  std::vector<AllocatorObserver*> observers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<bool()>> free_memory_callbacks_ ABSL_GUARDED_BY(mu_);

  // Private pools by id (PyTorch's graph_pools, freeable ones included until deleted); node-stable
  // (segments point at them) and ordered, so loops over them run in id order.
  std::map<PoolId, std::unique_ptr<PrivatePool>> private_pools_ ABSL_GUARDED_BY(mu_);
  // Pools being allocated to, in begin order (PyTorch's captures_underway). Non-empty also means
  // "a capture may be underway": events are not polled, the OOM retry does not release the cache,
  // and frees of blocks used on other streams wait for the end (deferred_frees_).
  std::vector<std::pair<PoolId, StreamFilter>> captures_underway_ ABSL_GUARDED_BY(mu_);
  // Pools a default-pool request may borrow from on OOM (PyTorch's use_on_oom_pools), in id order.
  absl::btree_set<PoolId> use_on_oom_pools_ ABSL_GUARDED_BY(mu_);
  // Blocks freed during a capture while used on other streams, and the streams recorded while a
  // capture was underway (PyTorch's deferred_blocks and block_to_cudagraph_stream_uses).
  std::vector<Block*> deferred_frees_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const Block*, std::vector<StreamId>> capture_stream_uses_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace fragscope
