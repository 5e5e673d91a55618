// OomExplanation: why one allocation ran out of memory, classified and backed by numbers.
//
// The five causes, decided in this order from the allocator's state right after the
// failure (after PyTorch's retry ladder released what it could):
//
//   limit      = the memory-fraction cap if one is set, else the device's capacity
//   available  = limit, less the memory held outside the allocator (outside)
//   live       = bytes of allocated blocks;  pending = bytes freed but waiting for stream events
//
//   1. capacity          live + request > limit: no packing of the live tensors could have made
//                        room, even with nothing else on the device.
//   2. outside PyTorch   live + request <= limit but > available: the device's free memory was
//                        lower than the allocator's reservations explain (other processes, the
//                        CUDA context, NCCL, libraries), and that made the difference.
//   3. private pools     live + pending + request <= available, but not with the free cached
//                        memory of the private pools other than the request's (CUDA-graph pools,
//                        MemPools), which no request of another pool may use.
//   4. allocator policy  the request would have fit, but free memory was barred by a rule:
//                        pending free   live + pending + request > available (record_stream);
//                        oversize rule  a cached block big enough was refused by max_split_size;
//                        other stream   cached blocks big enough sat on other streams.
//   5. fragmentation     live + pending + request <= available: enough memory was free (cached
//                        holes plus what the device still had) but no hole was big enough and
//                        the device could not supply a new segment.
//
// Each explanation carries the largest hole, the number of holes, the fragmented segments and
// the live blocks that pin them, with where each was allocated (event, time, marker phase).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/explain/oom_layout_evidence.h"
#include "analysis/explain/segment_map.h"
#include "analysis/metrics/demand.h"
#include "analysis/replay/replay.h"

namespace fragscope {

enum class OomCause : uint8_t {
  kCapacity,
  kFragmentation,
  kAllocatorPolicy,
  // Free memory held in private pools (CUDA-graph pools, MemPools) other than the request's
  // decided it: no request of another pool can use it.
  kPrivatePools,
  kOutsidePyTorch,
  // The replay served the request and the trace records no device figures to classify the
  // job's failure with (an RMM log without --capacity): nothing can be said but that.
  kNotReproduced,
};
enum class PolicyRule : uint8_t { kNone, kPendingFree, kOversizeRule, kOtherStream };

// "capacity", "fragmentation", "allocator_policy", "private_pools", "outside_pytorch",
// "not_reproduced".
std::string_view OomCauseName(OomCause cause);
// "", "pending_free", "oversize_rule", "other_stream".
std::string_view PolicyRuleName(PolicyRule rule);

struct OomExplanation {
  uint64_t event_index = 0;
  uint64_t time_ns = 0;
  std::string phase;       // the marker phase the failing allocation was made in
  bool in_trace = false;   // the original job failed here
  bool in_replay = false;  // the replay failed here too
  uint64_t requested_bytes = 0;
  uint64_t rounded_bytes = 0;
  uint64_t segment_bytes = 0;  // PyTorch's "Tried to allocate"
  StreamId stream = 0;
  uint64_t device_total_bytes = 0;
  uint64_t device_free_bytes = 0;
  // The memory-fraction cap PyTorch applied, when one was set (0 is a cap of 0 bytes).
  std::optional<uint64_t> allowed_bytes;
  uint64_t limit_bytes = 0;
  uint64_t outside_bytes = 0;
  uint64_t available_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t allocated_bytes = 0;
  uint64_t pending_free_bytes = 0;
  uint64_t reserved_but_unallocated_bytes = 0;  // PyTorch's figure in its OOM message
  uint64_t free_cached_bytes = 0;
  uint64_t holes = 0;
  uint64_t largest_hole = 0;
  uint64_t fragmented_segment_count = 0;
  uint64_t oversize_rejected_bytes = 0;
  uint64_t other_stream_fitting_bytes = 0;
  // The pool the request was for ((0, 0): the default pool), and the private pools other than
  // it at the failure: how many (graph pools among them), the memory their segments hold, and
  // their free cached bytes, which this request could not use.
  PoolId pool_id;
  uint64_t private_pool_count = 0;
  uint64_t graph_pool_count = 0;
  uint64_t private_pool_reserved_bytes = 0;
  uint64_t private_pool_free_bytes = 0;
  OomCause cause = OomCause::kFragmentation;
  PolicyRule rule = PolicyRule::kNone;
  std::string headline;                       // one sentence, numbers included
  std::vector<std::string> evidence;          // the arithmetic behind the class
  std::vector<FragmentedSegment> fragmented;  // most free bytes first, at most kMaxSegments
  std::vector<PinningBlock> pinning;          // largest first, at most kMaxPinning
  // Who holds the memory: the job's live requests by role (index: AllocationRole) when it ran
  // out, from the log's tag records (OomCollector::set_demand); all unknown without them.
  RoleBytes held_by_role{};
  // The live requests by the module that allocated them, largest first (DemandCollector::
  // LiveModules: kModulesShown modules, then the rest summed); empty without contexts.
  std::vector<DemandTerm> held_by_module;
  // Who made the request that failed (its alloc's context, .fslog 2.6; empty without).
  BlockContext request_context;
  std::optional<LayoutSummary> layout;  // the full segment map (first few OOMs only)
  // Filled by later stages: the smallest tested setting that avoids it (sweep), and the
  // distance to the theoretical footprint (--model).
  std::string avoided_by;
  std::optional<size_t> fix_row;  // the sweep row of avoided_by, when one avoids it
  std::vector<std::string> model_gap;
  // available - live - pending free - request (below 0 when they do not fit), and whether that
  // leaves the job at its cap: Note [Headroom at an OOM] in job_verdict.h.
  int64_t headroom_bytes = 0;
  bool at_cap = false;
  // Not reproduced because the job ran under a cap the trace does not record
  // (RefusedUnderUnrecordedCap): no replay without that cap says anything about this OOM.
  bool unrecorded_cap = false;
  // Not reproduced because --conf or a cap flag gave the job more memory than the cap its
  // settings record (OomReplayContext::CapRaised): more room, not better settings, served it.
  bool cap_raised = false;

  static constexpr size_t kMaxSegments = kMaxFragmentedSegments;
  static constexpr size_t kMaxPinning = kMaxPinningBlocks;
};

// Note [Headroom at an OOM] (job_verdict.h): below this share of what the job may use, the room
// perfect packing would leave is no room a setting can be relied on to deliver.
inline constexpr double kAtCapShare = 0.02;
// available - live - pending free - rounded request of `x`, saturated to int64.
int64_t HeadroomBytes(const OomExplanation& x);
// Whether `headroom` leaves a job at its cap.
bool AtCap(int64_t headroom, uint64_t available_bytes);

// `x.held_by_role` in words, largest first ("optimizer_states 89.80 GiB, weights 44.90 GiB,
// ..."); "" when no block has a known role (a log without tag records).
std::string HeldByRoleText(const OomExplanation& x);

// Whether a replay under `cap` (nullopt: none) has more room than the job's recorded cap
// (RecordedJobCapReplaced; nullopt: none recorded, or it does not apply): a higher cap, or none.
inline bool RaisesRecordedCap(std::optional<uint64_t> cap,
                              std::optional<uint64_t> recorded_job_cap) {
  return recorded_job_cap.has_value() && (!cap.has_value() || *cap > *recorded_job_cap);
}

// What the replay was given, so that an OOM it does not reproduce is explained by that instead
// of by asking the user for what they already gave.
struct OomReplayContext {
  uint64_t capacity_bytes = 0;            // the simulated device's
  bool capacity_assumed = false;          // neither the trace nor --capacity said it
  std::optional<uint64_t> allowed_bytes;  // the replay's cap (flags or the settings' fraction)
  bool settings_replaced = false;         // --conf: not the job's own allocator settings
  // The job's own settings (the trace's), which sized the segment its failed request needed.
  AllocatorOptions trace_options;
  // The cap the job's settings record, when --conf or a cap flag may have changed it
  // (RecordedJobCapReplaced).
  std::optional<uint64_t> recorded_job_cap;
  // allowed_bytes comes from --memory-fraction/--allowed (else from the settings).
  bool cap_from_flags = false;

  bool cap_given() const { return allowed_bytes.has_value(); }
  // The replay has more room than the cap the job's settings record: --conf's larger
  // per_process_memory_fraction (or none), or a larger cap given with a flag.
  bool CapRaised() const { return RaisesRecordedCap(allowed_bytes, recorded_job_cap); }
};

// What gave a replay its cap when that is not the job's, for reports: "the --conf settings" or
// "the cap given (--memory-fraction/--allowed)".
const char* CapRaiser(bool cap_from_flags);

// The block and segment sizes the job's failed request needed, by its own settings: the trace's
// rounded size (or the request rounded), and PyTorch's get_allocation_size of it, the size its
// OOM message quotes ("Tried to allocate").
struct FailedRequestSizes {
  uint64_t rounded_bytes = 0;
  uint64_t segment_bytes = 0;
};
FailedRequestSizes SizesOfFailedRequest(const TraceEvent& oom_event,
                                        const AllocatorOptions& trace_options);

// Whether the trace's OOM record `oom_event` shows the device with room for the request's new
// segment although the job failed: PyTorch refused it under a cap the trace does not record
// (torch.cuda.set_per_process_memory_fraction). False when the record has no device figures.
bool RefusedUnderUnrecordedCap(const TraceEvent& oom_event, const AllocatorOptions& trace_options);

// Whether `oom`, the job's, was served by the replay because it ran other settings (--conf) on
// the job's own device and cap: then the settings avoid it. False where the replay only lacked
// the job's limits (no device figures on an assumed capacity; an unrecorded cap, none given) or
// had more room than them (CapRaised).
bool ServedByReplacedSettings(const ReplayOom& oom, const OomReplayContext& context);

// The request `oom` failed, as the explanation reads the layout for it: the replay's rounded size
// when the replay failed too, else the trace's (SizesOfFailedRequest).
OomRequest RequestOf(const ReplayOom& oom, const OomReplayContext& context);

// Classifies `oom` from the layout right after it: `evidence` is the layout's for
// RequestOf(oom, context).
OomExplanation ExplainOom(const ReplayOom& oom, const OomLayoutEvidence& evidence,
                          const std::string& phase, const OomReplayContext& context);
// The same from a whole layout (EvidenceFromLayout).
OomExplanation ExplainOom(const ReplayOom& oom, const LayoutSummary& layout,
                          const std::string& phase, const OomReplayContext& context);

}  // namespace fragscope
