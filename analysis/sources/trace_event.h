// TraceEvent and TraceSource: the one event stream every analysis reads, whatever file it came
// from.
//
// Sources (one file each): an .fslog event log (fslog_source.h, streamed chunk by chunk), a
// PyTorch memory snapshot pickle (snapshot_source.h, whose device_traces PyTorch writes as one
// pickled object), and RMM's logging_resource_adaptor CSV (rmm_source.h). OpenTrace
// (open_trace.h) picks the source from the file's first bytes or extension.
//
// The events keep the vocabulary of the allocator (EventKind) so that a replay can compare the
// trace's own allocator decisions with fragscope's. What each source knows differs, and the
// fields say so rather than guess:
//
//   kind            .fslog                      PyTorch snapshot              RMM CSV
//   alloc           block ptr, block size,      block ptr, requested bytes    ptr, requested
//                   requested, stream           (bytes = 0: unknown), stream  (bytes = 0)
//   free_requested  block ptr                   block ptr                     ptr
//   free_completed  block ptr                   block ptr                     (synthesized)
//   segment_*       address, bytes              address, bytes                --
//   oom             rounded bytes, requested,   rounded bytes (= requested),  requested
//                   device free/total,          device free                   ("allocate
//                   reserved, allocated                                       failure")
//   empty_cache     yes (flag kEventFlagOomRetry  -- (inferred by the replay)  --
//                   marks the OOM retry's)
//   marker          text                        record_function annotations   --
//   options_change  text                        --                            --
//   call site       --                          from `frames` (snapshot_      --
//                                               call_sites.h)
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/allocator_events.h"
#include "allocator/allocator_options.h"
#include "allocator/pool_id.h"
#include "allocator/types.h"
#include "fslog/allocation_role.h"

namespace fragscope {

enum class TraceFormat : uint8_t { kFslog, kPyTorchSnapshot, kRmmCsv };

std::string_view TraceFormatName(TraceFormat format);

// Who holds a block (.fslog 2.6, Note [Context records] in fslog/fslog_context.h): what the memory
// is for, the module and the op that allocated it, where in the code. Owned by the trace source
// (alive while it is); events and blocks point at it.
struct BlockContext {
  AllocationRole role = AllocationRole::kUnknown;
  bool backward = false;  // allocated in a backward pass
  std::string module;     // "model.h.7.attn"; "" when not known
  std::string op;         // "aten::bmm"
  std::string site;       // "train.py:88 in step"
};

struct TraceEvent {
  EventKind kind = EventKind::kAlloc;
  PoolKind pool = PoolKind::kSmall;
  uint8_t flags = 0;  // EventFlag bits (fslog only)
  // Position in the source: the event number (fslog: LogEntry::sequence's numbering), the
  // entry's index in device_traces (snapshot) or the row's line (RMM). Reports cite it as
  // "event N".
  uint64_t index = 0;
  // Nanoseconds since the trace's first event (0 when the source has no times).
  uint64_t time_ns = 0;
  DevicePtr ptr = 0;             // block or segment address
  uint64_t bytes = 0;            // block/segment size, OOM rounded size; 0 = unknown
  uint64_t requested_bytes = 0;  // the caller's request (alloc, free_*, oom)
  StreamId stream = 0;
  // kOom: what the device and the allocator reported at the failure (0 = not recorded).
  uint64_t device_free_bytes = 0;
  uint64_t device_total_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t allocated_bytes = 0;
  // The private pool of the block, segment or request ((0, 0): the default pool): .fslog 2.4
  // records it; for a snapshot, the pool of the segment the address lies in (snapshot_source.h).
  PoolId pool_id;
  // kMarker, kOptionsChange, kModel (JSON: Note [Model records] in fslog/fslog_format.h).
  std::string text;
  // kTag (.fslog 2.5, Note [Tag records]): the role of the live block at `ptr`.
  AllocationRole role = AllocationRole::kUnknown;
  // kAlloc: the allocation's call site, TraceSource::SiteText(site); 0 = not known.
  uint32_t site = 0;
  // kAlloc: the allocation's context; kTag: the block's context from now on (nullptr: the alloc's
  // has none; a tag keeps the block's). .fslog 2.6.
  const BlockContext* context = nullptr;
};

// TraceEvent::flags bit, beside the allocator's EventFlag bits (which end at bit 6): a
// kFreeRequested that carries the block's free_completed too, the next event (index + 1, the same
// time and block), because the source was asked to fold them (TraceSource::FoldFreeCompletions).
// The free_completed's own flags are not carried.
inline constexpr uint8_t kEventFlagCompletionFolded = 1 << 7;

// A segment that existed before the trace's first event (a snapshot whose history recording
// started after the model was loaded), and its allocated blocks, in address order.
struct InitialBlock {
  DevicePtr address = 0;
  uint64_t size = 0;
  uint64_t requested_bytes = 0;
};
struct InitialSegment {
  DevicePtr address = 0;
  uint64_t size = 0;
  PoolKind pool = PoolKind::kLarge;
  StreamId stream = 0;
  std::vector<InitialBlock> allocated;  // the rest of the segment was free
  PoolId pool_id;                       // segment_pool_id: (0, 0) for the default pool
};

// The allocator settings a trace records as in effect in the job, key by key (the
// effective-settings check, analysis/sources/settings_check.h).
struct RecordedSettings {
  AllocatorOptions values;
  std::bitset<kAllocatorKeyCount> keys;  // the keys whose values the trace records
  std::string where;                     // "the snapshot's allocator_settings", "the log header"
};

struct TraceInfo {
  std::string path;
  TraceFormat format = TraceFormat::kFslog;
  int32_t device = 0;
  int32_t rank = 0;
  int32_t world_size = 0;
  int32_t local_rank = -1;  // -1: not recorded
  // Pipeline- and tensor-parallel sizes the job gave its hooks (0: not recorded).
  int32_t pp_size = 0;
  int32_t tp_size = 0;
  // The device's free memory when the log opened, and the allocator's reserved bytes then
  // (.fslog 2.3; nullopt: not recorded). Memory outside the allocator then: capacity - free -
  // reserved.
  std::optional<uint64_t> device_free_at_open_bytes;
  uint64_t reserved_at_open_bytes = 0;
  int64_t pid = 0;
  std::string host;
  std::string device_name;
  // Device capacity; 0 when the source does not say (see capacity_source).
  uint64_t capacity_bytes = 0;
  std::string capacity_source;  // "log header", "--capacity", "OOM device_free + reserved", ...
  // The allocator settings the trace ran with, in PYTORCH_CUDA_ALLOC_CONF syntax, as the trace
  // gives them (for display and messages), and parsed once by the source (SetTraceSettings):
  // the settings, or why the text is not valid settings.
  std::string allocator_options;
  absl::StatusOr<AllocatorOptions> settings = AllocatorOptions();
  // What the trace records as in effect; nullopt when it records nothing (RMM, a log header whose
  // settings are not valid, a snapshot without allocator_settings).
  std::optional<RecordedSettings> recorded_settings;
  // Unix time of the first event in ns (0 unknown).
  int64_t start_wall_ns = 0;
  // The source records empty_cache() itself (fslog); otherwise the replay infers it from
  // segment frees.
  bool records_empty_cache = false;
  // The source records which blocks were freed only after other streams' events
  // (free_completed later than free_requested); false for RMM, whose frees are immediate.
  bool records_free_completed = true;
  // Events that use expandable segments (segment_map/unmap) were seen, or the options enable them.
  bool expandable_segments = false;
  std::vector<InitialSegment> initial_segments;
};

// Sets the trace's settings text and parses it into info.settings.
void SetTraceSettings(TraceInfo& info, std::string text);

// A stream of TraceEvents. Implementations hold O(1) state beyond their read buffer, except
// the snapshot source, which holds the decoded pickle.
class TraceSource {
 public:
  virtual ~TraceSource() = default;
  const TraceInfo& info() const { return info_; }
  TraceInfo& mutable_info() { return info_; }
  // The next event; false at the end. Errors are sticky and name the file and position.
  virtual absl::StatusOr<bool> Next(TraceEvent* event) = 0;
  // The next events, in order, into `events[0]`, `events[1]`, ...: how many were read (fewer
  // than asked only at the end or before an error; 0 at the end). An error met after some events
  // is returned by the next call. The default calls Next() per event; FslogSource overrides it
  // with its fast path inline (the replay reads through it, a batch per virtual call).
  virtual absl::StatusOr<size_t> NextBatch(std::span<TraceEvent* const> events);
  // Asks the source to deliver the frees it knows completed at once (FslogSource: its combined
  // free records) as one free_requested marked kEventFlagCompletionFolded instead of that event
  // and its free_completed (a replay that wants neither the events themselves nor the
  // completion's flags saves a pass per free). Returns whether it will: not once reading has
  // started, nor for a source without such records (the default).
  virtual bool FoldFreeCompletions() { return false; }
  // The text of a call site an event names (TraceEvent::site): "file.py:88 in forward"; "" for 0
  // and for sources that record none.
  virtual const std::string& SiteText(uint32_t site) const;
  // Non-fatal problems met so far (torn tail, dropped records).
  virtual std::vector<std::string> warnings() const { return {}; }
  // The fraction of the input consumed so far, in [0, 1] (for progress bars).
  virtual double Progress() const { return 0.0; }

 protected:
  TraceInfo info_;
};

}  // namespace fragscope
