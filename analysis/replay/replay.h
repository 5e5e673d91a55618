// Replayer: feeds a trace's user-level allocation sequence through fragscope's CachingAllocator on
// a SimulatedBackend of the trace's capacity, so that the exact segment and block layout is
// known at every event (and at every OOM), and so that a configuration the job never ran with can
// be measured on the job's own requests (the sweep).
//
// What is replayed: alloc (Allocate of the caller's request on its stream), free_requested
// (Free), oom (the failed request is tried again; if the replay serves it, the block is freed at
// once, since the job never got it), empty_cache, options changes and markers. The trace's own
// allocator decisions (segment_alloc/free/map/unmap, block addresses) are not replayed; they are
// what the replay is compared with (fidelity_check.h).
//
// Note [Expandable segments in a replay]
// A trace that uses expandable segments (segment_map/unmap events, expandable snapshot segments,
// or settings that say so: TraceInfo::expandable_segments) is replayed with
// expandable_segments:True even when its settings string lacks it, unless the caller replaces
// the trace's settings (follow_options_changes false: a sweep, --conf). Addresses: a segment_map
// whose address lies in no live reservation of the replay starts a new reservation there, so the
// next ReserveAddressRange of that operation is scripted at it
// (SimulatedBackend::ScriptReservations) and the pages mapped in it get the trace's addresses.
// That holds when the replay's reservations are as large as the job's: 9/8 of the device's
// memory each, so the capacity must be the device's own (--capacity for snapshots).
// segment_map plays segment_alloc's part and segment_unmap segment_free's in
// Note [Inferring empty_cache]; unmaps read after a map of the same allocation were its own
// retry ladder (it mapped part of the request, failed, released and retried). Expandable memory
// that existed before the trace is not rebuilt (Note [State before the trace]).
//
// Note [Stream-ordered frees in a replay]
// A block freed while other streams still used it (record_stream) goes back to the pool only
// after events recorded on those streams complete: PyTorch writes free_requested at the free and
// free_completed later, during the process_events() at the start of some later malloc. The
// replay reproduces it: a free_requested whose free_completed does not follow at once is given
// RecordStream() onto a busy pseudo-stream of its own, and that stream is completed when the
// trace's free_completed arrives. fragscope's allocator, like PyTorch's, polls events at the start
// of the next Allocate, so the block returns to the pool at the same point of the sequence.
// One exception: an allocation whose retry ladder synchronized every event (the OOM retry's full
// release, recorded in .fslog as empty_cache with kEventFlagOomRetry, inferred for snapshots)
// wrote the completions of that synchronization before its own segment events; those streams are
// left busy until after the allocation, so the blocks are freed inside the ladder, as they were.
// A free_completed right after its own free_requested is therefore ambiguous: an immediate free
// (no other stream used the block), or a stream-ordered free that the next allocation's ladder
// synchronized first. The replay looks ahead through that allocation's ladder (completions,
// segment frees and unmaps, the OOM-retry empty_cache, new segments or maps) to the allocation
// itself; if the block, once free (merged with its free neighbours), would have served it from
// the cache while the trace shows the allocation went past the cache (an OOM, the OOM-retry
// record, new device memory), the block was not free when the allocation looked: the free was
// stream-ordered and completed inside the ladder, and it is replayed so. (Without empty_cache
// records, releases between may be an empty_cache() before the allocation: the block must serve
// with and without the memory they released.) Otherwise both readings give the cache lookup the
// same answer and the free is replayed as immediate; only a later step of that allocation's
// ladder could still tell them apart (garbage collection or the max_split_size release choosing
// the block, or growing it in an expandable segment), and verify would then name the segment
// event where they part. The lookahead is O(pending frees + segments released) events, taken
// only at such a free.
// A source asked to fold (TraceSource::FoldFreeCompletions; a Run whose hooks do not look at the
// events) delivers such a pair as one free_requested marked kEventFlagCompletionFolded: the same
// inference, with the lookahead starting at Peek(1), and a stream-ordered reading queues the
// block's completion at once, as its free_completed would have; Run counts the pair as two
// events.
// What the replay does not reproduce: the order of the frees that one poll completes together.
// The allocator frees them in the order of its per-stream event table (stream ids), and the
// replay's streams are its pseudo-streams, not the job's. The same blocks are freed at the same
// point and end in the same layout, but merging them in another order creates and absorbs other
// intermediate inactive split blocks: the accumulated (and peak) inactive_split and
// inactive_split_bytes counts may differ from the job's, their current values do not. Reproducing
// the order needs an allocator call that polls events (the replay would then complete one
// pseudo-stream at a time), and for the ladder's synchronization an allocator that synchronizes in
// a defined order.
//
// Note [Private pools in a replay]
// Each event names its pool (TraceEvent::pool_id: .fslog 2.4 records it; a snapshot's come from
// its segments' segment_pool_id). An allocation goes into its pool explicitly
// (CachingAllocator::Allocate with a PoolId), the pool being created at its first use, so the
// replay needs neither the job's captures nor its use_mem_pool contexts. A private pool's
// segment is freed only once the pool has no users (PyTorch's releasePool, then empty_cache or
// the OOM retry): the replay releases a pool when the trace frees one of its segments, so that
// its own empty_cache frees it too. What the trace does not say is not reproduced: when a
// capture was underway (PyTorch then skips the event poll and the OOM retry's full release, and
// defers frees of blocks used on other streams), a pool's use_on_oom and no_split settings, and
// the pool of a segment a snapshot no longer holds (its events replay in the default pool).
//
// Note [Inferring empty_cache]
// PyTorch's snapshots do not record empty_cache() calls; they show only the segment_free (and
// segment_unmap) entries it produced. The same entries come from the allocator's own OOM-retry
// ladder and garbage collection. The replay decides at the next user-level event: segment frees
// followed by an allocation that no cached block could serve and that could not have got device
// memory without them (the memory fraction cap, checked against the allocation size PyTorch
// checks, or the device was full), or while garbage collection was due (segment frees only:
// collection never unmaps), came from the allocator itself and the replay lets its allocator do
// the same; any other group was an empty_cache() and the replay calls EmptyCache(). An
// empty_cache() that released nothing leaves no entry and is not replayed (it changes no
// layout). .fslog logs record empty_cache explicitly.
// The decision reads the replay's state, which is the job's only under the job's own settings:
// under others (a sweep row, --conf) a release of the job's ladder can look like an
// empty_cache() (another layout served the next allocation from the cache). So the calls are
// inferred once, by a replay of the trace's own settings (TraceEmptyCacheCalls in analyzer.h),
// and handed to the others (ReplayConfig::empty_cache_at), which make exactly those calls.
//
// Note [State before the trace]
// A snapshot's history often starts after the model was loaded (TraceInfo::initial_segments).
// The replay rebuilds those segments first, at their own addresses: each segment is obtained with
// one allocation of its size, freed, and carved into its allocated blocks and free gaps in address
// order (under default options, so that rounding cannot change the sizes); the gaps are freed
// last. A layout the carving cannot produce (a large-pool gap of 1 MiB or less at a segment's end)
// is reported in warnings(). A segment larger than the device's free memory is skipped without
// asking the allocator (whose out-of-memory path walks every segment), and one warning counts
// them. In a trace that uses expandable segments nothing is rebuilt and a
// warning says so: pages mapped before the trace cannot be carved by allocations (their holes
// and reservation bases are not known), and TraceInfo does not tell ordinary segments from
// expandable ranges. The replay then starts empty; reserved memory and layouts leave that state
// out, and frees of blocks allocated before the trace are reported and skipped.
//
// Memory: O(live blocks) (the pointer map, the allocator's own state) and the lookahead
// (TraceLookahead), never O(events).
//
// Files: replay.cc (the loop, alloc and oom), replay_frees.cc (Note [Stream-ordered frees in a
// replay]), replay_empty_cache.cc (Note [Inferring empty_cache]), replay_addresses.cc (scripted
// segment and reservation addresses, Note [Expandable segments in a replay]),
// replay_initial_state.cc (Note [State before the trace]), replay_pools.cc (Note [Private pools
// in a replay]), replay_lookahead.h (reading ahead),
// replay_phases.h (marker texts).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "allocator/address_map.h"
#include "allocator/allocator_options.h"
#include "allocator/caching_allocator.h"
#include "allocator/oom_report.h"
#include "allocator/simulated_backend.h"
#include "analysis/replay/replay_lookahead.h"
#include "analysis/replay/replay_phases.h"
#include "analysis/sources/trace_event.h"

namespace fragscope {

struct ReplayConfig {
  AllocatorOptions options;  // the settings to replay under
  uint64_t capacity_bytes = 0;
  // Cap on reserved memory (PyTorch's per-process memory fraction, which snapshots do not
  // record); nullopt: the options' per_process_memory_fraction.
  std::optional<uint64_t> allowed_bytes;
  // Give new segments the trace's own addresses, so best-fit ties fall as on the device.
  bool script_addresses = true;
  // Apply the trace's options_change events (false in a sweep: the configuration is fixed).
  bool follow_options_changes = true;
  // Stop after the last event whose index is <= this.
  uint64_t stop_after_index = UINT64_MAX;
  // For a trace that does not record empty_cache() (snapshots): the trace event indices before
  // which the job called it, as a replay of the trace's own settings inferred them
  // (Replayer::inferred_empty_cache_at, sorted). A replay under other settings given them calls
  // EmptyCache() there and nowhere else, instead of inferring from its own state, which differs
  // (Note [Inferring empty_cache]). nullptr: infer.
  std::shared_ptr<const std::vector<uint64_t>> empty_cache_at;
};

// The cap on reserved memory a replay under `config` applies: allowed_bytes (a cap given with
// --memory-fraction or --allowed), else the options' per_process_memory_fraction (the trace's,
// or --conf's); nullopt: none.
std::optional<uint64_t> ReplayCapBytes(const ReplayConfig& config);

// Where and when a live block was allocated.
struct BlockOrigin {
  uint64_t index = 0;    // trace event index of its alloc
  uint64_t time_ns = 0;  // trace time of its alloc
  uint32_t phase = 0;    // Replayer::PhaseText(phase)
  bool before_trace = false;
  // Its role: its context's, then the trace's tag records' (.fslog 2.5, Note [Tag records]);
  // unknown without.
  AllocationRole role = AllocationRole::kUnknown;
  uint32_t site = 0;  // its call site, Replayer::SiteText(site); 0 = not known
  // Who holds it (.fslog 2.6): its alloc's context, or a later tag's; the trace source's.
  const BlockContext* context = nullptr;
};

struct ReplayOom {
  const TraceEvent* event = nullptr;  // the trace's alloc or oom event
  bool in_trace = false;              // the original job failed here
  bool in_replay = false;             // the replay failed here
  OomReport report;                   // valid when in_replay
  uint64_t external_bytes = 0;        // device memory outside the allocator assumed at this point
  // in_trace: the job's reserved and allocated bytes when it failed: its OOM record's, else
  // (snapshots record none) the replay's before it tried, less what the job's ladder released.
  uint64_t job_reserved_bytes = 0;
  uint64_t job_allocated_bytes = 0;
  // in_trace: no earlier OOM of the job was served by the replay, so (under the job's settings)
  // the replay still holds what the job held; after one, it holds that request's memory too.
  bool replay_follows_job = true;
};

// The callbacks of ReplayHooks, as bits of ReplayHooks::callbacks().
enum HookCallback : uint32_t {
  kHookTraceEvent = 1u << 0,
  kHookAllocatorEvent = 1u << 1,
  kHookOpDone = 1u << 2,
  kHookOom = 1u << 3,
  kHookFinish = 1u << 4,
  kHookStop = 1u << 5,
  kHookAll = (1u << 6) - 1,
};

// Callbacks of one replay. OnAllocatorEvent runs under the allocator lock: it must not call the
// allocator. The others may inspect it (Snapshot, GetStats).
class ReplayHooks {
 public:
  virtual ~ReplayHooks() = default;
  // The callbacks this hook overrides (HookCallback bits). Replayer::Run skips the per-event
  // OnTraceEvent, OnOpDone, Stop and OnAllocatorEvent calls a hook does not name, and a HookList
  // calls each of its hooks only for the callbacks it names (the replay's hottest loop). The
  // default is all of them; a hook that narrows it must name every callback it overrides.
  virtual uint32_t callbacks() const { return kHookAll; }
  virtual void OnTraceEvent(const TraceEvent& /*event*/) {}
  virtual void OnAllocatorEvent(const AllocatorEvent& /*event*/) {}
  virtual void OnOpDone(const TraceEvent& /*event*/) {}
  virtual void OnOom(const ReplayOom& /*oom*/) {}
  virtual void OnFinish() {}
  // Checked after each event; true ends the replay early.
  virtual bool Stop() const { return false; }
};

class Replayer {
 public:
  // REQUIRES: `source` outlives the replayer; nothing has been read from it.
  Replayer(TraceSource& source, ReplayConfig config);
  ~Replayer();

  // Builds the device and allocator and the state before the trace. Errors: a bad capacity.
  absl::Status Init();
  // Replays to the end (or config.stop_after_index). Errors: the source's, or a segment record
  // whose range wraps past 2^64. A trace that frees what it never allocated in a way the
  // allocator refuses is reported, not fatal (see warnings()). Called once: when the hooks want
  // neither trace events nor Stop(), the source is asked to fold immediate frees
  // (TraceSource::FoldFreeCompletions), which the hooks cannot tell from the unfolded events.
  absl::Status Run(ReplayHooks* hooks);

  CachingAllocator& allocator() { return *allocator_; }
  SimulatedBackend& backend() { return *backend_; }
  const TraceInfo& info() const { return source_.info(); }
  const ReplayConfig& config() const { return config_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  // The trace events before which the replay called EmptyCache() for a trace that does not
  // record it (inferred, or ReplayConfig::empty_cache_at), in order.
  const std::vector<uint64_t>& inferred_empty_cache_at() const { return empty_cache_calls_; }
  // The JSON of the trace's last model record (Note [Model records]), "" when it has none.
  const std::string& recorded_model() const { return recorded_model_; }
  // Allocations the replay's allocator refused for another reason than running out of memory
  // (the simulated device's address space, an address the trace scripts twice): the replay's
  // figures leave them out. The first one's warning, or "" when there was none.
  uint64_t failed_allocations() const { return failed_allocations_; }
  // Allocator calls made to rebuild the state before the trace (Note [State before the trace]):
  // a few per segment that fits and block in it, none for a segment that does not fit.
  uint64_t initial_state_allocations() const { return initial_state_allocations_; }
  const std::string& first_failed_allocation() const { return first_failed_allocation_; }

  // Events read, and the index of the last one applied.
  uint64_t events_read() const { return events_read_; }
  uint64_t last_index() const { return last_index_; }
  uint64_t last_time_ns() const { return last_time_ns_; }
  const std::string& PhaseText(uint32_t phase) const { return phases_.Text(phase); }
  const std::string& SiteText(uint32_t site) const { return source_.SiteText(site); }
  const std::string& current_phase() const { return PhaseText(current_phase_); }
  // Origins of the live blocks, by the replay's (allocator's) address. O(live blocks).
  absl::flat_hash_map<DevicePtr, BlockOrigin> LiveBlockOrigins() const;
  // The origin of the live block at the replay's address `ours`, as LiveBlockOrigins() has it
  // (nullopt where it has none). The first call indexes the live blocks by that address
  // (O(live blocks)); the replay keeps the index from then on, and each call is O(1).
  std::optional<BlockOrigin> LiveOrigin(DevicePtr ours);

 private:
  struct LiveBlock {
    DevicePtr ours = 0;           // 0: the replay failed to allocate it (OOM)
    StreamId pending_stream = 0;  // pseudo-stream of a stream-ordered free; 0 = none
    BlockOrigin origin;
  };

  // --- The replay loop (replay.cc) ---
  void Apply(TraceEvent& event, ReplayHooks* hooks);
  void ApplyAlloc(const TraceEvent& event, ReplayHooks* hooks);
  // --- Private pools (replay_pools.cc; Note [Private pools in a replay]) ---
  // Allocate(bytes) on the event's stream, into the event's pool (created on first use).
  absl::StatusOr<DevicePtr> AllocateAs(const TraceEvent& event, uint64_t bytes) {
    if (ABSL_PREDICT_TRUE(event.pool_id.is_default())) {
      return allocator_->Allocate(bytes, event.stream);
    }
    EnsurePool(event.pool_id);
    return allocator_->Allocate(bytes, event.stream, event.pool_id);
  }
  void EnsurePool(PoolId pool);
  // A segment of a private pool went back to the device: the pool had no users left then.
  void ReleasePoolForFree(const TraceEvent& event);
  // The replay could not serve the trace's allocation: an OOM for the hooks, or a warning.
  ABSL_ATTRIBUTE_NOINLINE void AllocationFailed(const TraceEvent& event, const absl::Status& status,
                                                ReplayHooks* hooks);
  // The rare events, never inlined into Apply (their frames would be every event's).
  // `ladder_released_bytes`: the segment frees the trace shows just before the OOM record.
  ABSL_ATTRIBUTE_NOINLINE void ApplyOom(const TraceEvent& event, uint64_t ladder_released_bytes,
                                        ReplayHooks* hooks);
  ABSL_ATTRIBUTE_NOINLINE void ApplyMarker(const TraceEvent& event);
  ABSL_ATTRIBUTE_NOINLINE void ApplyOptionsChange(const TraceEvent& event);
  // A recorded empty_cache: false when it is part of the next allocation's ladder (no operation
  // of its own).
  ABSL_ATTRIBUTE_NOINLINE bool ApplyEmptyCache(const TraceEvent& event);
  void Warn(std::string warning);

  // --- Note [State before the trace] (replay_initial_state.cc) ---
  void BuildInitialState();

  // --- Note [Stream-ordered frees in a replay] (replay_frees.cc) ---
  void ApplyFreeRequested(const TraceEvent& event);
  // Its rare paths, out of line: warnings, and a free made stream-ordered (RecordStream onto a
  // busy pseudo-stream, completed by the block's free_completed).
  ABSL_ATTRIBUTE_NOINLINE void FreeOfUnknownBlock(const TraceEvent& event);
  ABSL_ATTRIBUTE_NOINLINE void FreeFailed(const TraceEvent& event, const absl::Status& status);
  ABSL_ATTRIBUTE_NOINLINE void DeferFree(LiveBlock& live);
  // Whether the free_completed that follows the block's free_requested at once came from the
  // next allocation's retry ladder, as the lookahead proves when the block would have served that
  // allocation from the cache; if so, that allocation is expected to run the ladder.
  // REQUIRES: the current event is the block's free_requested, followed by its free_completed
  // (Peek(1), or folded into it); Peek(first) is the event after that completion; `live` is the
  // block, still allocated in the replay.
  bool CompletedInNextLadder(const LiveBlock& live, size_t first);
  void ApplyFreeCompleted(const TraceEvent& event);
  // A stream-ordered free's completion (its free_completed, or one folded into its
  // free_requested): queues its pseudo-stream's completion and forgets the block.
  // REQUIRES: `live` came from live_.Find and has a pending_stream.
  ABSL_ATTRIBUTE_NOINLINE void QueueCompletion(LiveBlock* live);
  // Completes the pseudo-streams of the free_completed events read so far. The inline guards
  // here and below keep the replay's per-event path free of calls when nothing is queued.
  void CompleteQueuedFrees() {
    if (!queued_completions_.empty()) CompleteQueuedFreesNow();
  }
  void CompleteQueuedFreesNow();

  // --- Note [Inferring empty_cache] (replay_empty_cache.cc) ---
  // Queues a segment_free/unmap (or segment_alloc/map) read between user-level events.
  void QueueSegmentFree(const TraceEvent& event);
  // Settles the queued segment frees before the user-level event `next`: an empty_cache() the
  // replay calls, or the allocator's own (retry ladder, garbage collection).
  void SettleSegmentFrees(const TraceEvent& next) {
    if (queued_segment_frees_ != 0) SettleSegmentFreesNow(next);
  }
  void SettleSegmentFreesNow(const TraceEvent& next);
  void ClearQueuedSegmentFrees();
  // Whether a free cached block would serve the allocation `next` before any release, so that
  // it could not have been the retry ladder's (get_free_block's best fit and oversize rules; the
  // blocks of expandable segments only while expandable_segments is on).
  // O(blocks); asked only for a group of segment frees that a full device or cap could explain.
  // With `also_free` (a replay address of an allocated block), as if that block had been freed
  // first and merged with its free neighbours; without the blocks (also_free included) that
  // overlap a `released` range.
  struct ReleasedRange {
    DevicePtr ptr = 0;
    uint64_t bytes = 0;
  };
  bool CacheServes(const TraceEvent& next, DevicePtr also_free = 0,
                   const std::vector<ReleasedRange>& released = {}) const;

  // --- Note [Expandable segments in a replay]: scripted addresses (replay_addresses.cc) ---
  // A segment_alloc or segment_map read before the allocation that makes it.
  void QueueSegmentAlloc(const TraceEvent& event);
  // A segment record whose range wraps past 2^64: Run's error (bad_trace_), and the replay stops.
  ABSL_ATTRIBUTE_NOINLINE void FailSegmentPastAddressSpace(const TraceEvent& event);
  // Scripts the queued segment_map addresses that lie in no live reservation as reservation
  // bases, before the allocation that maps them.
  void ScriptQueuedReservations() {
    if (!queued_maps_.empty()) ScriptQueuedReservationsNow();
  }
  void ScriptQueuedReservationsNow();
  // Clears what the allocation left queued (segment_alloc and reservation scripts) after it.
  void ClearQueuedSegmentAllocs() {
    if (queued_segment_alloc_bytes_ != 0 || reservations_scripted_ || frees_after_segment_alloc_ ||
        !queued_maps_.empty()) {
      ClearQueuedSegmentAllocsNow();
    }
  }
  void ClearQueuedSegmentAllocsNow();

  TraceSource& source_;
  ReplayConfig config_;
  // The running hooks name kHookOpDone (set by Run).
  bool op_done_wanted_ = false;
  TraceLookahead events_;
  std::unique_ptr<SimulatedBackend> backend_;
  std::unique_ptr<CachingAllocator> allocator_;

  // Live blocks by the trace's address (any address, 0 included).
  AddressMap<LiveBlock, /*kZeroKey=*/true> live_;
  // Once LiveOrigin was called: the trace's address of the block each allocation of the replay
  // returned, by the replay's address (checked against live_ at each lookup, so an entry of a
  // block since freed or replaced is never taken for the block now there).
  bool origins_indexed_ = false;
  absl::flat_hash_map<DevicePtr, DevicePtr> trace_address_of_;

  // Note [Stream-ordered frees in a replay].
  StreamId next_pseudo_stream_ = 0;
  std::vector<StreamId> free_pseudo_streams_;  // completed, reusable: O(pending frees)
  // Pseudo-streams whose free_completed was read, to complete before or after the next
  // allocation.
  std::vector<StreamId> queued_completions_;
  // The next allocation went through the retry ladder that synchronizes all events.
  bool ladder_expected_ = false;
  // The trace pointer whose free_completed immediately follows its free_requested (nothing to do).
  DevicePtr skip_completion_of_ = 0;

  // Segment frees read since the last user-level event (Note [Inferring empty_cache]).
  uint64_t queued_segment_free_bytes_ = 0;
  std::vector<uint64_t> empty_cache_calls_;  // inferred_empty_cache_at()
  uint32_t queued_segment_frees_ = 0;
  uint32_t queued_segment_unmaps_ = 0;       // of queued_segment_frees_, segment_unmaps
  uint64_t queued_segment_alloc_bytes_ = 0;  // a segment_alloc (or maps) after them, if any
  // Segment frees or unmaps read after a segment_alloc/map of the same allocation.
  bool frees_after_segment_alloc_ = false;
  // segment_map addresses read since the last allocation (Note [Expandable segments in a
  // replay]), and whether reservations were scripted for it.
  std::vector<DevicePtr> queued_maps_;
  bool reservations_scripted_ = false;
  uint64_t external_bytes_ = 0;
  bool served_trace_oom_ = false;  // an OOM of the job was served (ReplayOom::replay_follows_job)

  PhaseTable phases_;
  uint32_t current_phase_ = PhaseTable::kStart;

  uint64_t events_read_ = 0;
  uint64_t last_index_ = 0;
  uint64_t last_time_ns_ = 0;
  std::vector<std::string> warnings_;
  std::string recorded_model_;
  uint64_t suppressed_warnings_ = 0;
  uint64_t failed_allocations_ = 0;
  uint64_t initial_state_allocations_ = 0;
  std::string first_failed_allocation_;
  absl::Status bad_trace_;  // a trace event no device could have produced: Run returns it
};

// The pseudo-streams of Note [Stream-ordered frees in a replay] start here; a trace's own
// streams never reach it.
inline constexpr StreamId kFirstPseudoStream = StreamId{0xF5F5'0000'0000'0000};

}  // namespace fragscope
