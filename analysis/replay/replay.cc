// Replayer: construction, the event loop and the user-level operations (alloc, oom). The rest
// of the replay is one file per Note of replay.h: replay_frees.cc, replay_empty_cache.cc,
// replay_addresses.cc, replay_initial_state.cc.
#include "analysis/replay/replay.h"

#include <algorithm>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "allocator/memory_fraction.h"
#include "allocator/size_policy.h"
#include "analysis/sources/excerpt.h"

namespace fragscope {
namespace {

constexpr size_t kMaxWarnings = 100;

// Run(nullptr): no per-event callbacks at all.
class NoHooks final : public ReplayHooks {
 public:
  uint32_t callbacks() const override { return 0; }
};

// Forwards the allocator's events to a run's hooks. It observes the allocator only during a Run
// whose hooks want allocator events, so a run that wants none pays nothing per event.
class AllocatorEventForwarder final : public AllocatorObserver {
 public:
  explicit AllocatorEventForwarder(ReplayHooks& hooks) : hooks_(hooks) {}
  void OnEvent(const AllocatorEvent& event) override { hooks_.OnAllocatorEvent(event); }

 private:
  ReplayHooks& hooks_;
};

}  // namespace

std::optional<uint64_t> ReplayCapBytes(const ReplayConfig& config) {
  if (config.allowed_bytes.has_value()) return config.allowed_bytes;
  if (config.options.per_process_memory_fraction < 1.0) {
    return AllowedBytesForFraction(config.options.per_process_memory_fraction,
                                   config.capacity_bytes);
  }
  return std::nullopt;
}

Replayer::Replayer(TraceSource& source, ReplayConfig config)
    : source_(source), config_(std::move(config)), events_(source) {}

Replayer::~Replayer() = default;

void Replayer::Warn(std::string warning) {
  if (warnings_.size() < kMaxWarnings) {
    warnings_.push_back(std::move(warning));
  } else if (++suppressed_warnings_ == 1) {
    warnings_.push_back("(further warnings suppressed)");
  }
}

absl::Status Replayer::Init() {
  if (config_.capacity_bytes < kSmallBufferBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: device capacity of %d bytes is too small to replay (at least 2 MiB)",
                        source_.info().path, config_.capacity_bytes));
  }
  if (config_.capacity_bytes > SimulatedBackend::kMaxCapacityBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: device capacity of %d bytes is too large to simulate (at most 4 TiB); pass the "
        "device's own with --capacity",
        source_.info().path, config_.capacity_bytes));
  }
  // Note [Expandable segments in a replay]: the trace's own settings, with what its events show.
  if (source_.info().expandable_segments && config_.follow_options_changes) {
    config_.options.expandable_segments = true;
  }
  backend_ = std::make_unique<SimulatedBackend>(config_.capacity_bytes, source_.info().device,
                                                AddressOrder::kHighestFirst);
  // A replay that departs from the job's layout (another cap, a refused request it served) can
  // find a trace address taken: the segment goes elsewhere rather than the allocation failing.
  backend_->set_scripted_overlap_fallback(true);
  // The state before the trace is carved under default options; see Note [State before the
  // trace].
  allocator_ = std::make_unique<CachingAllocator>(*backend_, AllocatorOptions());
  BuildInitialState();
  // The carving's own allocations are not the job's: statistics start from the rebuilt state.
  allocator_->ResetPeakStats();
  allocator_->ResetAccumulatedStats();
  allocator_->SetOptions(config_.options);
  if (config_.allowed_bytes.has_value()) {
    // Exactly the bytes given; a cap at or above the capacity is no cap (fraction 1.0).
    const uint64_t allowed = *config_.allowed_bytes;
    allocator_->SetAllowed(allowed < config_.capacity_bytes ? std::optional(allowed)
                                                            : std::nullopt);
    return absl::OkStatus();
  }
  if (config_.options.per_process_memory_fraction < 1.0) {
    return allocator_->SetMemoryFraction(config_.options.per_process_memory_fraction);
  }
  return absl::OkStatus();
}

absl::Status Replayer::Run(ReplayHooks* hooks) {
  NoHooks no_hooks;
  if (hooks == nullptr) hooks = &no_hooks;
  // The per-event calls the hooks do not want are skipped (ReplayHooks::callbacks()).
  const uint32_t wanted = hooks->callbacks();
  const bool trace_events = (wanted & kHookTraceEvent) != 0;
  const bool can_stop = (wanted & kHookStop) != 0;
  op_done_wanted_ = (wanted & kHookOpDone) != 0;
  // Note [Stream-ordered frees in a replay]: hooks that see neither the events nor where a
  // Stop() falls cannot tell folded frees from the pairs, and the replay saves a pass per free.
  if ((wanted & (kHookTraceEvent | kHookStop)) == 0) (void)source_.FoldFreeCompletions();
  AllocatorEventForwarder forwarder(*hooks);
  const bool forward = (wanted & kHookAllocatorEvent) != 0;
  if (forward) allocator_->AddObserver(&forwarder);
  absl::Cleanup detach = [&] {
    if (forward) allocator_->RemoveObserver(&forwarder);
  };
  bool stopped_early = false;
  for (;;) {
    TraceEvent* event = events_.Next();
    if (event == nullptr) {
      if (events_.status().ok()) break;
      return events_.status();
    }
    if (event->index > config_.stop_after_index) {
      stopped_early = true;
      break;
    }
    ++events_read_;
    last_index_ = event->index;
    last_time_ns_ = event->time_ns;
    if (trace_events) hooks->OnTraceEvent(*event);
    Apply(*event, hooks);
    if (can_stop && hooks->Stop()) {
      stopped_early = true;
      break;
    }
    if ((event->flags & kEventFlagCompletionFolded) != 0) {  // its free_completed, applied too
      if (event->index >= config_.stop_after_index) {
        stopped_early = true;
        break;
      }
      ++events_read_;
      ++last_index_;
    }
  }
  if (!bad_trace_.ok()) return bad_trace_;
  if (queued_segment_frees_ > 0 && !source_.info().records_empty_cache && !stopped_early) {
    CompleteQueuedFrees();
    allocator_->EmptyCache();  // trailing segment frees: an empty_cache() at the end
    ClearQueuedSegmentFrees();
  }
  CompleteQueuedFrees();
  if (const uint64_t n = backend_->scripted_overlaps(); n > 0) {
    Warn(absl::StrFormat(
        "%d %s could not take the trace's address (the replay's layout had departed from the "
        "job's): placed elsewhere, so later addresses differ from the trace's",
        n, n == 1 ? "segment" : "segments"));
  }
  hooks->OnFinish();
  return absl::OkStatus();
}

void Replayer::Apply(TraceEvent& event, ReplayHooks* hooks) {
  // The hot cases (alloc, frees, segment records) only call out; the rare ones are out-of-line
  // calls too, so that this dispatch needs no stack frame of its own.
  switch (event.kind) {
    case EventKind::kAlloc:
      SettleSegmentFrees(event);
      // See Note [Stream-ordered frees in a replay]: completions read before an allocation whose
      // retry ladder synchronized events happened inside that ladder.
      if (!ladder_expected_) CompleteQueuedFrees();
      ApplyAlloc(event, hooks);
      CompleteQueuedFrees();
      ladder_expected_ = false;
      break;
    case EventKind::kFreeRequested:
      SettleSegmentFrees(event);
      CompleteQueuedFrees();
      ApplyFreeRequested(event);
      break;
    case EventKind::kFreeCompleted:
      if (skip_completion_of_ == event.ptr) {  // the immediate completion of the last free
        skip_completion_of_ = 0;
        return;
      }
      SettleSegmentFrees(event);
      ApplyFreeCompleted(event);
      return;
    case EventKind::kSegmentAlloc:
    case EventKind::kSegmentMap:
      QueueSegmentAlloc(event);
      return;
    case EventKind::kSegmentFree:
    case EventKind::kSegmentUnmap:
      if (ABSL_PREDICT_FALSE(!event.pool_id.is_default())) ReleasePoolForFree(event);
      QueueSegmentFree(event);
      return;
    case EventKind::kOom: {
      const uint64_t ladder_released = queued_segment_free_bytes_;  // the job's ladder freed these
      SettleSegmentFrees(event);
      ApplyOom(event, ladder_released, hooks);  // an OOM always went through the whole ladder
      CompleteQueuedFrees();
      ladder_expected_ = false;
      break;
    }
    case EventKind::kEmptyCache:
      if (!ApplyEmptyCache(event)) return;
      break;
    case EventKind::kMarker:
      ApplyMarker(event);
      return;
    case EventKind::kOptionsChange:
      ApplyOptionsChange(event);
      return;
    case EventKind::kModel:
      recorded_model_ = event.text;  // the last one counts (Note [Model records])
      return;
    case EventKind::kTag:
      // A block's role (no allocator operation): its origin says it from now on.
      if (LiveBlock* live = live_.Find(event.ptr)) {
        live->origin.role = event.role;
        if (event.context != nullptr) live->origin.context = event.context;
      }
      return;
    default:
      return;
  }
  if (op_done_wanted_) hooks->OnOpDone(event);
}

void Replayer::ApplyMarker(const TraceEvent& event) {
  const uint32_t phase = phases_.Intern(event.text);
  phases_.Ref(phase);
  phases_.Unref(current_phase_);
  current_phase_ = phase;
}

void Replayer::ApplyOptionsChange(const TraceEvent& event) {
  if (!config_.follow_options_changes) return;
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(event.text);
  if (!options.ok()) {
    Warn(absl::StrFormat("event %d: options change '%s' does not parse: %s", event.index,
                         Excerpt(event.text), Excerpt(options.status().message())));
    return;
  }
  config_.options = *options;
  // A cap the user gave (--allowed, --memory-fraction) wins over the log's, as in Init.
  const double fraction = options->per_process_memory_fraction;
  allocator_->SetOptions(std::move(*options));
  if (!config_.allowed_bytes.has_value()) (void)allocator_->SetMemoryFraction(fraction);
}

bool Replayer::ApplyEmptyCache(const TraceEvent& event) {
  ClearQueuedSegmentFrees();                      // recorded: nothing to infer
  if ((event.flags & kEventFlagOomRetry) != 0) {  // part of the next allocation's ladder
    ladder_expected_ = true;
    return false;
  }
  CompleteQueuedFrees();
  allocator_->EmptyCache(event.pool_id);
  return true;
}

void Replayer::ApplyAlloc(const TraceEvent& event, ReplayHooks* hooks) {
  ScriptQueuedReservations();
  absl::StatusOr<DevicePtr> ptr = AllocateAs(event, event.requested_bytes);
  ClearQueuedSegmentAllocs();
  LiveBlock live;
  live.origin = BlockOrigin{.index = event.index,
                            .time_ns = event.time_ns,
                            .phase = current_phase_,
                            .site = event.site,
                            .context = event.context};
  if (event.context != nullptr) live.origin.role = event.context->role;
  if (ptr.ok()) {
    live.ours = *ptr;
    phases_.Ref(current_phase_);
    if (ABSL_PREDICT_FALSE(origins_indexed_)) trace_address_of_[*ptr] = event.ptr;
  } else {
    AllocationFailed(event, ptr.status(), hooks);
  }
  auto [existing, inserted] = live_.TryEmplace(event.ptr, live);
  if (!inserted) {
    if (existing->ours != 0 && existing->pending_stream == 0) {
      Warn(absl::StrFormat("event %d: the trace allocates 0x%x twice without freeing it",
                           event.index, event.ptr));
    }
    *existing = live;
  }
}

void Replayer::AllocationFailed(const TraceEvent& event, const absl::Status& status,
                                ReplayHooks* hooks) {
  std::optional<OomReport> report = GetOomReport(status);
  if (!report.has_value()) {
    std::string warning = absl::StrFormat("event %d: allocation of %d bytes failed: %s",
                                          event.index, event.requested_bytes, status.message());
    if (failed_allocations_++ == 0) first_failed_allocation_ = warning;
    Warn(std::move(warning));
  } else {
    hooks->OnOom(ReplayOom{&event, false, true, *report, external_bytes_});
  }
}

void Replayer::ApplyOom(const TraceEvent& event, uint64_t ladder_released_bytes,
                        ReplayHooks* hooks) {
  // The job's reserved and allocated bytes when it gave up: its record's, else the replay's now,
  // less the cached segments the job's retry ladder released just before (the trace's segment
  // frees; the replay's allocator has not released them: its own ladder runs in Allocate).
  const DeviceStats before = allocator_->GetStats();
  const auto replay_reserved = static_cast<uint64_t>(before.reserved_bytes[0].current);
  const uint64_t job_reserved =
      event.reserved_bytes > 0 ? event.reserved_bytes
                               : replay_reserved - std::min(replay_reserved, ladder_released_bytes);
  const uint64_t job_allocated = event.allocated_bytes > 0
                                     ? event.allocated_bytes
                                     : static_cast<uint64_t>(before.allocated_bytes[0].current);
  // Memory outside the allocator: what the device lacked beyond the allocator's reservations.
  if (event.device_free_bytes > 0 || event.device_total_bytes > 0) {
    const uint64_t total =
        event.device_total_bytes > 0 ? event.device_total_bytes : config_.capacity_bytes;
    // Not recorded (snapshot): the replay's. (Less the job's ladder's releases would be the
    // job's own figure, but the replay's allocator still holds them until its own ladder, which
    // must find the device as full as the job did: the expandable oracle diverges otherwise.)
    const uint64_t reserved =
        event.device_total_bytes == 0 ? replay_reserved : event.reserved_bytes;
    if (total > event.device_free_bytes + reserved) {
      const uint64_t external = total - event.device_free_bytes - reserved;
      if (external > external_bytes_) {
        external_bytes_ = external;
        backend_->set_external_bytes(external);
      }
    }
  }
  const uint64_t request = event.requested_bytes > 0 ? event.requested_bytes : event.bytes;
  ScriptQueuedReservations();
  absl::StatusOr<DevicePtr> ptr = AllocateAs(event, request);
  ClearQueuedSegmentAllocs();
  ReplayOom oom{&event,          true,         !ptr.ok(),     {},
                external_bytes_, job_reserved, job_allocated, !served_trace_oom_};
  if (ptr.ok()) served_trace_oom_ = true;
  if (!ptr.ok()) {
    std::optional<OomReport> report = GetOomReport(ptr.status());
    if (report.has_value()) oom.report = *report;
  } else {
    (void)allocator_->Free(*ptr);  // the job never got it: the state is the job's without it
  }
  hooks->OnOom(oom);
}

absl::flat_hash_map<DevicePtr, BlockOrigin> Replayer::LiveBlockOrigins() const {
  absl::flat_hash_map<DevicePtr, BlockOrigin> origins;
  origins.reserve(live_.size());
  live_.ForEach([&origins](DevicePtr, const LiveBlock& live) {
    if (live.ours != 0 && live.pending_stream == 0) origins.emplace(live.ours, live.origin);
  });
  return origins;
}

std::optional<BlockOrigin> Replayer::LiveOrigin(DevicePtr ours) {
  if (!origins_indexed_) {
    origins_indexed_ = true;
    trace_address_of_.reserve(live_.size());
    live_.ForEach([this](DevicePtr trace, const LiveBlock& live) {
      if (live.ours != 0 && live.pending_stream == 0) trace_address_of_.emplace(live.ours, trace);
    });
  }
  auto it = trace_address_of_.find(ours);
  if (it == trace_address_of_.end()) return std::nullopt;
  const LiveBlock* live = live_.Find(it->second);
  if (live == nullptr || live->ours != ours || live->pending_stream != 0) return std::nullopt;
  return live->origin;
}

}  // namespace fragscope
