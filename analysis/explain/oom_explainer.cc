#include "analysis/explain/oom_explainer.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "allocator/format_size.h"
#include "allocator/size_policy.h"

namespace fragscope {
namespace {

std::string Size(uint64_t bytes) { return FormatSize(bytes); }

// The layout's numbers the classification needs.
void FillLayoutNumbers(const OomLayoutEvidence& layout, OomExplanation& x) {
  x.free_cached_bytes = layout.totals.free_cached_bytes;
  x.holes = layout.totals.holes;
  x.largest_hole = layout.totals.largest_hole;
  x.fragmented_segment_count = layout.totals.fragmented_segments;
  x.private_pool_count = layout.private_pool_count;
  x.graph_pool_count = layout.graph_pool_count;
  x.private_pool_reserved_bytes = layout.private_pool_reserved_bytes;
  x.private_pool_free_bytes = layout.private_pool_free_bytes;
  x.other_stream_fitting_bytes = layout.other_stream_fitting_bytes;
}

// The fragmented segments and the live blocks that pin them; for a capacity OOM, or with no
// fragmented segment, what holds the memory: the largest live blocks anywhere.
void FillPinning(const OomLayoutEvidence& layout, OomExplanation& x) {
  x.fragmented = layout.fragmented;
  x.pinning = x.cause == OomCause::kCapacity || layout.fragmented.empty()
                  ? layout.largest_live
                  : layout.fragmented_pinning;
}

void Classify(OomExplanation& x) {
  const uint64_t r = x.rounded_bytes;
  const uint64_t live = x.allocated_bytes;
  if (live + r > x.limit_bytes) {
    x.cause = OomCause::kCapacity;
    x.headline = absl::StrFormat(
        "Capacity: live tensors held %s and the request was %s; together %s, more than the "
        "%s %s, even with perfect packing.",
        Size(live), Size(r), Size(live + r), Size(x.limit_bytes),
        x.allowed_bytes.has_value() ? "allowed by the memory fraction" : "the device has");
    x.evidence.push_back(absl::StrFormat("live %s + request %s = %s > limit %s", Size(live),
                                         Size(r), Size(live + r), Size(x.limit_bytes)));
    return;
  }
  if (live + r > x.available_bytes) {
    x.cause = OomCause::kOutsidePyTorch;
    x.headline = absl::StrFormat(
        "Outside PyTorch: %s of device memory was held outside the allocator (other processes, "
        "the CUDA context, NCCL, libraries); without it the request of %s would have fit.",
        Size(x.outside_bytes), Size(r));
    x.evidence.push_back(absl::StrFormat(
        "device %s - free %s - reserved by the allocator %s = %s held outside PyTorch",
        Size(x.device_total_bytes), Size(x.device_free_bytes), Size(x.reserved_bytes),
        Size(x.outside_bytes)));
    x.evidence.push_back(absl::StrFormat("live %s + request %s = %s <= limit %s, but > %s left",
                                         Size(live), Size(r), Size(live + r), Size(x.limit_bytes),
                                         Size(x.available_bytes)));
    return;
  }
  x.cause = OomCause::kAllocatorPolicy;
  if (live + x.pending_free_bytes + r > x.available_bytes) {
    x.rule = PolicyRule::kPendingFree;
    x.headline = absl::StrFormat(
        "Allocator policy (pending free): %s of freed blocks were still waiting for other "
        "streams' work (record_stream) and could not be reused; without them the request of %s "
        "would have fit.",
        Size(x.pending_free_bytes), Size(r));
    x.evidence.push_back(
        absl::StrFormat("live %s + pending free %s + request %s = %s > %s available", Size(live),
                        Size(x.pending_free_bytes), Size(r), Size(live + x.pending_free_bytes + r),
                        Size(x.available_bytes)));
    return;
  }
  if (live + x.pending_free_bytes + x.private_pool_free_bytes + r > x.available_bytes) {
    x.cause = OomCause::kPrivatePools;
    const uint64_t graphs = x.graph_pool_count;
    const uint64_t mempools = x.private_pool_count - graphs;
    std::string pools;
    if (graphs > 0)
      absl::StrAppendFormat(&pools, "%d CUDA-graph pool%s", graphs, graphs == 1 ? "" : "s");
    if (graphs > 0 && mempools > 0) pools += " and ";
    if (mempools > 0)
      absl::StrAppendFormat(&pools, "%d MemPool%s", mempools, mempools == 1 ? "" : "s");
    x.headline = absl::StrFormat(
        "Private pools: %s reserved in %s, %s of it free, unusable by this allocation; without "
        "that free memory held apart the request of %s would have fit.",
        Size(x.private_pool_reserved_bytes), pools, Size(x.private_pool_free_bytes), Size(r));
    x.evidence.push_back(absl::StrFormat(
        "live %s + pending free %s + request %s = %s <= %s available, but + %s free in other "
        "pools' segments = %s > %s",
        Size(live), Size(x.pending_free_bytes), Size(r), Size(live + x.pending_free_bytes + r),
        Size(x.available_bytes), Size(x.private_pool_free_bytes),
        Size(live + x.pending_free_bytes + x.private_pool_free_bytes + r),
        Size(x.available_bytes)));
    return;
  }
  if (x.oversize_rejected_bytes > 0) {
    x.rule = PolicyRule::kOversizeRule;
    x.headline = absl::StrFormat(
        "Allocator policy (max_split_size): %s of cached blocks large enough for the %s request "
        "were refused because blocks of max_split_size or more only serve requests close to "
        "their own size.",
        Size(x.oversize_rejected_bytes), Size(r));
    x.evidence.push_back(absl::StrFormat("oversize cached blocks that would fit: %s",
                                         Size(x.oversize_rejected_bytes)));
    return;
  }
  if (x.other_stream_fitting_bytes > 0) {
    x.rule = PolicyRule::kOtherStream;
    x.headline = absl::StrFormat(
        "Allocator policy (other stream): %s of cached blocks large enough for the %s request "
        "belonged to other streams; the allocator never hands a block to another stream.",
        Size(x.other_stream_fitting_bytes), Size(r));
    x.evidence.push_back(absl::StrFormat("free blocks >= %s on other streams: %s", Size(r),
                                         Size(x.other_stream_fitting_bytes)));
    return;
  }
  x.cause = OomCause::kFragmentation;
  const uint64_t device_room =
      x.available_bytes > x.reserved_bytes ? x.available_bytes - x.reserved_bytes : 0;
  x.headline = absl::StrFormat(
      "Fragmentation: %s was free (%s cached in %d holes + %s more the device could give) but "
      "no hole held the %s request: the largest was %s, and a new %s segment did not fit.",
      Size(x.free_cached_bytes + device_room), Size(x.free_cached_bytes), x.holes,
      Size(device_room), Size(r), Size(x.largest_hole), Size(x.segment_bytes));
  x.evidence.push_back(absl::StrFormat(
      "live %s + pending free %s + request %s = %s <= %s available: it fits with perfect packing",
      Size(live), Size(x.pending_free_bytes), Size(r), Size(live + x.pending_free_bytes + r),
      Size(x.available_bytes)));
  x.evidence.push_back(
      absl::StrFormat("largest hole %s < request %s; reserved %s + new segment %s > %s available",
                      Size(x.largest_hole), Size(r), Size(x.reserved_bytes), Size(x.segment_bytes),
                      Size(x.available_bytes)));
}

}  // namespace

std::string HeldByRoleText(const OomExplanation& x) {
  bool known = false;
  for (int role = 0; role < kAllocationRoleCount; ++role) {
    known = known || (static_cast<AllocationRole>(role) != AllocationRole::kUnknown &&
                      x.held_by_role[static_cast<size_t>(role)] > 0);
  }
  return known ? TermsText(RoleTerms(x.held_by_role)) : "";
}

std::string_view OomCauseName(OomCause cause) {
  switch (cause) {
    case OomCause::kCapacity:
      return "capacity";
    case OomCause::kFragmentation:
      return "fragmentation";
    case OomCause::kAllocatorPolicy:
      return "allocator_policy";
    case OomCause::kPrivatePools:
      return "private_pools";
    case OomCause::kOutsidePyTorch:
      return "outside_pytorch";
    case OomCause::kNotReproduced:
      return "not_reproduced";
  }
  return "unknown";
}

std::string_view PolicyRuleName(PolicyRule rule) {
  switch (rule) {
    case PolicyRule::kNone:
      return "";
    case PolicyRule::kPendingFree:
      return "pending_free";
    case PolicyRule::kOversizeRule:
      return "oversize_rule";
    case PolicyRule::kOtherStream:
      return "other_stream";
  }
  return "";
}

FailedRequestSizes SizesOfFailedRequest(const TraceEvent& e, const AllocatorOptions& options) {
  FailedRequestSizes sizes;
  sizes.rounded_bytes = e.bytes > 0 ? e.bytes : RoundSize(e.requested_bytes, options);
  sizes.segment_bytes = options.expandable_segments ? sizes.rounded_bytes
                                                    : SegmentSizeFor(sizes.rounded_bytes, options);
  return sizes;
}

namespace {

// The trace's OOM record has no device figures (an RMM log's, or one served by the replay).
bool DeviceUnknown(const TraceEvent& e) {
  return e.device_free_bytes == 0 && e.device_total_bytes == 0;
}

}  // namespace

bool RefusedUnderUnrecordedCap(const TraceEvent& e, const AllocatorOptions& trace_options) {
  return !DeviceUnknown(e) &&
         SizesOfFailedRequest(e, trace_options).segment_bytes <= e.device_free_bytes;
}

const char* CapRaiser(bool cap_from_flags) {
  return cap_from_flags ? "the cap given (--memory-fraction/--allowed)" : "the --conf settings";
}

namespace {

// The replay lacked a limit the job had and says nothing about this OOM (see
// ServedByReplacedSettings).
bool MissingJobLimit(const TraceEvent& e, const OomReplayContext& context) {
  return (DeviceUnknown(e) && context.capacity_assumed) ||
         (!context.cap_given() && RefusedUnderUnrecordedCap(e, context.trace_options));
}

}  // namespace

bool ServedByReplacedSettings(const ReplayOom& oom, const OomReplayContext& context) {
  return oom.in_trace && !oom.in_replay && context.settings_replaced && !context.CapRaised() &&
         !MissingJobLimit(*oom.event, context);
}

OomRequest RequestOf(const ReplayOom& oom, const OomReplayContext& context) {
  const TraceEvent& e = *oom.event;
  return OomRequest{
      .pool_id = e.pool_id,
      .stream = e.stream,
      .rounded_bytes = oom.in_replay
                           ? oom.report.rounded_bytes
                           : SizesOfFailedRequest(e, context.trace_options).rounded_bytes};
}

OomExplanation ExplainOom(const ReplayOom& oom, const LayoutSummary& layout,
                          const std::string& phase, const OomReplayContext& context) {
  return ExplainOom(oom, EvidenceFromLayout(layout, RequestOf(oom, context)), phase, context);
}

OomExplanation ExplainOom(const ReplayOom& oom, const OomLayoutEvidence& layout,
                          const std::string& phase, const OomReplayContext& context) {
  const uint64_t capacity_bytes = context.capacity_bytes;
  OomExplanation x;
  const TraceEvent& e = *oom.event;
  x.event_index = e.index;
  x.time_ns = e.time_ns;
  x.phase = phase;
  x.in_trace = oom.in_trace;
  x.in_replay = oom.in_replay;
  x.stream = e.stream;
  x.pool_id = e.pool_id;
  x.requested_bytes = e.requested_bytes > 0 ? e.requested_bytes : e.bytes;
  if (oom.in_replay) {
    const OomReport& r = oom.report;
    x.rounded_bytes = r.rounded_bytes;
    x.segment_bytes = r.segment_bytes;
    x.device_total_bytes = r.device_total_bytes;
    x.device_free_bytes = r.device_free_bytes;
    x.allowed_bytes = r.allowed_bytes;
    x.reserved_bytes = r.reserved_bytes;
    x.allocated_bytes = r.allocated_bytes;
    x.pending_free_bytes = r.pending_free_bytes;
    x.oversize_rejected_bytes = r.oversize_rejected_bytes;
  } else {
    // The job failed but the replay did not: use what the trace recorded.
    const FailedRequestSizes sizes = SizesOfFailedRequest(e, context.trace_options);
    x.rounded_bytes = sizes.rounded_bytes;
    x.segment_bytes = sizes.segment_bytes;
    x.device_total_bytes = e.device_total_bytes > 0 ? e.device_total_bytes : capacity_bytes;
    x.device_free_bytes = e.device_free_bytes;
    // The cap given stands for the job's, unless it raised the one the job recorded.
    x.allowed_bytes = context.CapRaised() ? context.recorded_job_cap : context.allowed_bytes;
    // (Not the layout's: that is after the replay served the request.)
    x.reserved_bytes = oom.job_reserved_bytes;
    x.allocated_bytes = oom.job_allocated_bytes;
  }
  x.reserved_but_unallocated_bytes =
      x.reserved_bytes > x.allocated_bytes ? x.reserved_bytes - x.allocated_bytes : 0;
  const uint64_t held = x.device_free_bytes + x.reserved_bytes;
  x.outside_bytes = x.device_total_bytes > held ? x.device_total_bytes - held : 0;
  x.limit_bytes = x.allowed_bytes.has_value() ? std::min(*x.allowed_bytes, x.device_total_bytes)
                                              : x.device_total_bytes;
  const uint64_t device_room =
      x.device_total_bytes > x.outside_bytes ? x.device_total_bytes - x.outside_bytes : 0;
  x.available_bytes = std::min(x.limit_bytes, device_room);
  FillLayoutNumbers(layout, x);
  if (oom.in_replay && oom.report.too_large) {
    // PyTorch refuses these before looking at any pool: "Tried to allocate more than 1EB memory".
    x.cause = OomCause::kCapacity;
    x.rounded_bytes = x.segment_bytes = x.requested_bytes;
    x.reserved_bytes = layout.totals.reserved_bytes;
    x.allocated_bytes = layout.totals.allocated_bytes;
    x.reserved_but_unallocated_bytes =
        x.reserved_bytes - std::min(x.reserved_bytes, x.allocated_bytes);
    x.headline = absl::StrFormat(
        "Capacity: the request of %s is 1 EiB or more, which PyTorch refuses outright (\"Tried "
        "to allocate more than 1EB memory\"), whatever the device or the cache holds.",
        Size(x.requested_bytes));
    if (!oom.in_trace) {
      x.headline = "The replay ran out of memory here (the job did not). " + x.headline;
    }
    FillPinning(layout, x);
    return x;
  }
  const bool device_unknown = !oom.in_replay && DeviceUnknown(e);
  if (device_unknown) x.outside_bytes = 0;
  if (device_unknown && context.capacity_assumed) {
    x.cause = OomCause::kNotReproduced;
    x.headline = absl::StrFormat(
        "The replay on a %s device served this %s request, and the trace records no device "
        "memory figures to explain the job's failure with; give the job's device capacity "
        "(--capacity) to replay it under the same limit.",
        Size(capacity_bytes), Size(x.rounded_bytes));
    FillPinning(layout, x);
    return x;
  }
  if (oom.in_trace && !oom.in_replay && context.CapRaised()) {
    x.cause = OomCause::kNotReproduced;
    x.cap_raised = true;
    const char* const under = context.cap_from_flags ? "the cap given" : "--conf";
    const std::string raised =
        context.cap_from_flags
            ? absl::StrFormat(
                  "the cap given (--memory-fraction/--allowed) is %s (without it the replay keeps "
                  "the job's)",
                  Size(*context.allowed_bytes))
        : context.cap_given() ? absl::StrFormat("the --conf settings raise the cap to %s",
                                                Size(*context.allowed_bytes))
                              : std::string("the --conf settings remove the cap");
    x.headline = absl::StrFormat(
        "Not reproduced under %s: the job ran out of memory here under the %s cap its settings "
        "record (per_process_memory_fraction %g); %s, and with that room the replay served this "
        "%s request: more memory, not better settings. %s%s, after it served the request.",
        under, Size(*context.recorded_job_cap), context.trace_options.per_process_memory_fraction,
        raised, Size(x.rounded_bytes),
        e.reserved_bytes > 0 ? "The reserved and allocated figures below are the job's (its OOM "
                               "record); the holes and segments are the replay's under "
                             : "The reserved and allocated figures below are the job's as the "
                               "replay rebuilt them (the snapshot records none); the holes and "
                               "segments are the replay's under ",
        under);
    FillPinning(layout, x);
    return x;
  }
  // (With a cap given and --conf settings, the given cap stands for the job's: the settings
  // served the request, below.)
  if (!oom.in_replay && RefusedUnderUnrecordedCap(e, context.trace_options) &&
      !ServedByReplacedSettings(oom, context)) {
    // The device had room for a new segment by the trace's own figures, yet the job failed:
    // PyTorch refused under a cap the trace does not record (set_per_process_memory_fraction).
    // The cap lay in [reserved, reserved + segment): the job held `reserved` and was refused the
    // new segment.
    x.cause = OomCause::kNotReproduced;
    x.unrecorded_cap = !context.cap_given();
    const std::string refused = absl::StrFormat(
        "Not reproduced: the job ran out of memory here although the device still had %s free "
        "(it could have given the new %s segment), and the replay served the request. The job "
        "ran under a cap the trace does not record, most likely "
        "torch.cuda.set_per_process_memory_fraction",
        Size(x.device_free_bytes), Size(x.segment_bytes));
    // A snapshot records no reserved bytes: the replay's stand for the job's only while it
    // follows the job (its own settings, no earlier refused request served). Else no bounds.
    if (e.reserved_bytes == 0 && (context.settings_replaced || !oom.replay_follows_job)) {
      x.headline = absl::StrFormat(
          "%s. %s The figures below are the replay's (reserved and allocated before it served "
          "the request, the holes and segments after), not the job's: %s",
          refused,
          context.cap_given() ? "The cap this replay applies is not that one: give the job's own."
                              : "Give it (--memory-fraction F or --allowed SIZE) to replay and "
                                "explain this OOM.",
          context.settings_replaced
              ? "the replay runs the --conf settings (without --conf, the first such OOM bounds "
                "the cap)."
              : "it served an earlier request the job was refused (the first such OOM bounds the "
                "cap).");
      FillPinning(layout, x);
      return x;
    }
    x.headline = absl::StrFormat(
        "%s, of at least the %s it held and below %s (that plus the new segment). %s %s", refused,
        Size(x.reserved_bytes), Size(x.reserved_bytes + x.segment_bytes),
        context.cap_given()
            ? "The cap this replay applies is not that one: give the job's own to explain this "
              "OOM."
        : context.settings_replaced
            ? "Give it (--memory-fraction F or --allowed SIZE) to tell whether the --conf "
              "settings avoid this OOM: without it any settings serve the request."
            : "Give it (--memory-fraction F or --allowed SIZE) to replay and explain this OOM.",
        e.reserved_bytes > 0
            ? "The reserved and allocated figures below are the job's (its OOM record); the holes "
              "and segments are the replay's, after it served the request."
            : "The reserved and allocated figures below are the job's as the replay rebuilt them "
              "(the snapshot records none); the holes and segments are the replay's, after it "
              "served the request.");
    FillPinning(layout, x);
    return x;
  }
  if (ServedByReplacedSettings(oom, context)) {
    // The replay ran other settings than the job's on the job's device and cap: they, not a
    // missing figure, are why it served the request.
    x.cause = OomCause::kNotReproduced;
    const bool job_figures = e.reserved_bytes > 0 && e.allocated_bytes > 0;
    x.headline = absl::StrFormat(
        "Not reproduced under --conf: the job ran out of memory here with its own settings, and "
        "the replay with the --conf settings served this %s request, so they avoid this OOM. %s",
        Size(x.rounded_bytes),
        job_figures ? "The reserved and allocated figures below are the job's (the trace's OOM "
                      "record); the holes and segments are the replay's under --conf, after it "
                      "served the request."
                    : "The figures below are the replay's under --conf (the trace's OOM record "
                      "has none): reserved and allocated before it served the request, the holes "
                      "and segments after.");
    FillPinning(layout, x);
    return x;
  }
  if (device_unknown) {
    x.cause = OomCause::kNotReproduced;
    x.headline = absl::StrFormat(
        "Not reproduced: the replay on a %s device%s served this %s request, and the trace "
        "records no device memory figures to tell why the job could not: it had less room than "
        "that (a smaller device or cap, or memory held outside the allocator).",
        Size(capacity_bytes), context.cap_given() ? " under the given cap" : "",
        Size(x.rounded_bytes));
    FillPinning(layout, x);
    return x;
  }
  Classify(x);
  FillPinning(layout, x);
  if (!oom.in_replay) {
    x.headline = absl::StrFormat(
        "Not reproduced: the job ran out of memory here but the replay served the request. %s",
        x.headline);
  }
  if (!oom.in_trace) {
    x.headline =
        absl::StrFormat("The replay ran out of memory here (the job did not). %s", x.headline);
  }
  return x;
}

int64_t HeadroomBytes(const OomExplanation& x) {
  // Each term is below 2^63 on any device a replay simulates (4 TiB at most), so the sum is exact.
  const auto s = [](uint64_t v) {
    return static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX / 4));
  };
  return s(x.available_bytes) - s(x.allocated_bytes) - s(x.pending_free_bytes) - s(x.rounded_bytes);
}

bool AtCap(int64_t headroom, uint64_t available_bytes) {
  return static_cast<double>(headroom) < kAtCapShare * static_cast<double>(available_bytes);
}

}  // namespace fragscope
