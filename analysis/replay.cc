#include "analysis/replay.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "allocator/format_size.h"
#include "allocator/size_policy.h"

namespace fragscope {
namespace {

constexpr size_t kMaxWarnings = 100;
constexpr uint32_t kPhaseStart = 0;   // "(no marker)": events before the first marker
constexpr uint32_t kPhaseBefore = 1;  // blocks that existed before the trace began

}  // namespace

// Forwards the allocator's events to the current hooks.
class Replayer::Forwarder final : public AllocatorObserver {
 public:
  void OnEvent(const AllocatorEvent& event) override {
    if (hooks != nullptr) hooks->OnAllocatorEvent(event);
  }
  ReplayHooks* hooks = nullptr;
};

Replayer::Replayer(TraceSource& source, ReplayConfig config)
    : source_(source), config_(std::move(config)) {
  phase_text_ = {"(no marker)", "before the trace"};
  phase_refs_ = {1u << 30, 1u << 30};
}

Replayer::~Replayer() {
  if (allocator_ != nullptr && forwarder_ != nullptr) allocator_->RemoveObserver(forwarder_.get());
}

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
        absl::StrFormat("device capacity of %d bytes is too small to replay (at least 2 MiB)",
                        config_.capacity_bytes));
  }
  // Note [Expandable segments in a replay]: the trace's own settings, with what its events show.
  if (source_.info().expandable_segments && config_.follow_options_changes) {
    config_.options.expandable_segments = true;
  }
  backend_ = std::make_unique<SimulatedBackend>(config_.capacity_bytes, source_.info().device);
  // The state before the trace is carved under default options; see Note [State before the
  // trace].
  allocator_ = std::make_unique<CachingAllocator>(*backend_, AllocatorOptions());
  forwarder_ = std::make_unique<Forwarder>();
  allocator_->AddObserver(forwarder_.get());
  BuildInitialState();
  // The carving's own allocations are not the job's: statistics start from the rebuilt state.
  allocator_->ResetPeakStats();
  allocator_->ResetAccumulatedStats();
  allocator_->SetOptions(config_.options);
  const double capacity = static_cast<double>(config_.capacity_bytes);
  if (config_.allowed_bytes.has_value()) {
    const double fraction = std::min(1.0, static_cast<double>(*config_.allowed_bytes) / capacity);
    return allocator_->SetMemoryFraction(fraction);
  }
  if (config_.options.per_process_memory_fraction < 1.0) {
    return allocator_->SetMemoryFraction(config_.options.per_process_memory_fraction);
  }
  return absl::OkStatus();
}

void Replayer::BuildInitialState() {
  const std::vector<InitialSegment>& segments = source_.info().initial_segments;
  if (segments.empty()) return;
  if (source_.info().expandable_segments) {  // Note [State before the trace]
    uint64_t bytes = 0;
    size_t blocks = 0;
    for (const InitialSegment& seg : segments) {
      bytes += seg.size;
      blocks += seg.allocated.size();
    }
    Warn(absl::StrFormat(
        "%d segments or mapped ranges (%s, %d allocated blocks) existed before the trace began; "
        "rebuilding that state is not supported for a trace that uses expandable segments, so "
        "the replay starts without it: its reserved memory and layouts leave those bytes out",
        segments.size(), FormatSize(bytes), blocks));
    return;
  }
  std::vector<DevicePtr> gaps;
  for (const InitialSegment& seg : segments) {
    if (config_.script_addresses) backend_->ScriptAddresses({seg.address});
    const bool small = seg.pool == PoolKind::kSmall;
    absl::StatusOr<DevicePtr> whole =
        allocator_->Allocate(small ? kSmallSizeBytes : seg.size, seg.stream);
    backend_->ScriptAddresses({});
    if (!whole.ok()) {
      Warn(
          absl::StrFormat("could not rebuild the segment at 0x%x (%s) that existed before the "
                          "trace: %s",
                          seg.address, FormatSize(seg.size), whole.status().message()));
      continue;
    }
    (void)allocator_->Free(*whole);
    const DevicePtr base = *whole;
    // Pieces in address order: allocated blocks and the free gaps between them.
    DevicePtr at = seg.address;
    auto carve = [&](uint64_t size, bool gap, const InitialBlock* block) {
      absl::StatusOr<DevicePtr> p = allocator_->Allocate(size, seg.stream);
      if (!p.ok()) {
        Warn(absl::StrFormat("could not rebuild a block of %s in the segment at 0x%x: %s",
                             FormatSize(size), seg.address, p.status().message()));
        return;
      }
      if (*p != base + (at - seg.address)) {
        Warn(
            absl::StrFormat("the pre-trace layout of the segment at 0x%x could not be rebuilt "
                            "exactly (a block of %s landed elsewhere)",
                            seg.address, FormatSize(size)));
      }
      if (gap) {
        gaps.push_back(*p);
      } else {
        LiveBlock live;
        live.ours = *p;
        live.origin.phase = kPhaseBefore;
        live.origin.before_trace = true;
        live_[block->address] = live;
      }
    };
    // A free gap is carved in pieces its pool serves: small-pool requests are <= 1 MiB, while a
    // small segment's gap can be larger. The pieces merge again when the gaps are freed.
    auto carve_gap = [&](DevicePtr end) {
      while (at < end) {
        const uint64_t piece = small ? std::min<uint64_t>(end - at, kSmallSizeBytes) : end - at;
        carve(piece, /*gap=*/true, nullptr);
        at += piece;
      }
    };
    for (const InitialBlock& b : seg.allocated) {
      carve_gap(b.address);
      carve(b.size, /*gap=*/false, &b);
      at = b.address + b.size;
    }
    carve_gap(seg.address + seg.size);
  }
  for (DevicePtr gap : gaps) (void)allocator_->Free(gap);
}

absl::StatusOr<TraceEvent*> Replayer::Fetch() {
  if (have_lookahead_) {  // the lookahead buffer becomes the current one: no copy
    current_ ^= 1;
    have_lookahead_ = false;
    return &buffers_[current_];
  }
  if (!source_error_.ok()) return source_error_;
  if (source_done_) return nullptr;
  absl::StatusOr<bool> got = source_.Next(&buffers_[current_]);
  if (!got.ok()) return got.status();
  if (!*got) {
    source_done_ = true;
    return nullptr;
  }
  return &buffers_[current_];
}

const TraceEvent* Replayer::Peek() {
  if (!have_lookahead_ && !source_done_ && source_error_.ok()) {
    absl::StatusOr<bool> got = source_.Next(&buffers_[current_ ^ 1]);
    if (!got.ok()) {
      source_error_ = got.status();
    } else if (!*got) {
      source_done_ = true;
    } else {
      have_lookahead_ = true;
    }
  }
  return have_lookahead_ ? &buffers_[current_ ^ 1] : nullptr;
}

absl::Status Replayer::Run(ReplayHooks* hooks) {
  ReplayHooks no_hooks;
  if (hooks == nullptr) hooks = &no_hooks;
  forwarder_->hooks = hooks;
  bool stopped_early = false;
  for (;;) {
    absl::StatusOr<TraceEvent*> got = Fetch();
    if (!got.ok()) {
      forwarder_->hooks = nullptr;
      return got.status();
    }
    TraceEvent* event = *got;
    if (event == nullptr) break;
    if (event->index > config_.stop_after_index) {
      stopped_early = true;
      break;
    }
    ++events_read_;
    last_index_ = event->index;
    last_time_ns_ = event->time_ns;
    hooks->OnTraceEvent(*event);
    Apply(*event, hooks);
    if (hooks->Stop()) {
      stopped_early = true;
      break;
    }
  }
  if (queued_segment_frees_ > 0 && !source_.info().records_empty_cache && !stopped_early) {
    CompleteQueuedFrees();
    allocator_->EmptyCache();  // trailing segment frees: an empty_cache() at the end
    queued_segment_frees_ = 0;
    queued_segment_unmaps_ = 0;
  }
  CompleteQueuedFrees();
  hooks->OnFinish();
  forwarder_->hooks = nullptr;
  return absl::OkStatus();
}

void Replayer::Apply(TraceEvent& event, ReplayHooks* hooks) {
  switch (event.kind) {
    case EventKind::kMarker: {
      const uint32_t phase = InternPhase(event.text);
      RefPhase(phase);
      UnrefPhase(current_phase_);
      current_phase_ = phase;
      return;
    }
    case EventKind::kOptionsChange: {
      if (!config_.follow_options_changes) return;
      absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(event.text);
      if (!options.ok()) {
        Warn(absl::StrFormat("event %d: options change '%s' does not parse: %s", event.index,
                             event.text, options.status().message()));
        return;
      }
      config_.options = *options;
      allocator_->SetOptions(std::move(*options));
      return;
    }
    case EventKind::kAlloc:
      SettleSegmentFrees(event);
      // See Note [Stream-ordered frees in a replay]: completions read before an allocation whose
      // retry ladder synchronized events happened inside that ladder.
      if (!ladder_expected_) CompleteQueuedFrees();
      ApplyAlloc(event, hooks);
      CompleteQueuedFrees();
      ladder_expected_ = false;
      break;
    case EventKind::kOom:
      SettleSegmentFrees(event);
      ApplyOom(event, hooks);  // an OOM always went through the whole ladder
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
      if (config_.script_addresses) backend_->ScriptAddresses({event.ptr});
      queued_segment_alloc_bytes_ = event.bytes;
      return;
    case EventKind::kSegmentMap:  // Note [Expandable segments in a replay]
      queued_maps_.push_back(event.ptr);
      queued_segment_alloc_bytes_ += event.bytes;
      return;
    case EventKind::kSegmentFree:
    case EventKind::kSegmentUnmap:
      ++queued_segment_frees_;
      if (event.kind == EventKind::kSegmentUnmap) ++queued_segment_unmaps_;
      queued_segment_free_bytes_ += event.bytes;
      if (queued_segment_alloc_bytes_ > 0) frees_after_segment_alloc_ = true;
      return;
    case EventKind::kEmptyCache:
      queued_segment_frees_ = 0;
      queued_segment_unmaps_ = 0;
      queued_segment_free_bytes_ = 0;
      if ((event.flags & kEventFlagOomRetry) != 0) {  // part of the next allocation's ladder
        ladder_expected_ = true;
        return;
      }
      CompleteQueuedFrees();
      allocator_->EmptyCache();
      break;
    default:
      return;
  }
  hooks->OnOpDone(event);
}

void Replayer::SettleSegmentFrees(const TraceEvent& next) {
  if (queued_segment_frees_ == 0) return;
  bool internal = source_.info().records_empty_cache;
  if (!internal && (next.kind == EventKind::kAlloc || next.kind == EventKind::kOom)) {
    const DeviceStats stats = allocator_->GetStats();
    const auto reserved = static_cast<uint64_t>(stats.reserved_bytes[0].current);
    const AllocatorOptions& o = config_.options;
    const double fraction = allocator_->GetMemoryFraction();
    const bool capped = fraction < 1.0;
    const auto allowed =
        static_cast<uint64_t>(fraction * static_cast<double>(config_.capacity_bytes));
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
  if (!internal) {
    CompleteQueuedFrees();
    allocator_->EmptyCache();
  }
  queued_segment_frees_ = 0;
  queued_segment_unmaps_ = 0;
  queued_segment_free_bytes_ = 0;
  frees_after_segment_alloc_ = false;
}

bool Replayer::CacheServes(const TraceEvent& next) const {
  const AllocatorOptions& o = config_.options;
  const uint64_t rounded = RoundSize(next.requested_bytes, o);
  const PoolKind pool = PoolFor(rounded);
  uint64_t best = 0;
  for (const SegmentInfo& segment : allocator_->Snapshot().segments) {
    if (segment.stream != next.stream || segment.segment_type != pool) continue;
    for (const BlockInfo& b : segment.blocks) {
      if (b.state == BlockState::kInactive && b.size >= rounded && (best == 0 || b.size < best)) {
        best = b.size;
      }
    }
  }
  return best > 0 && !OversizeRuleRejects(best, rounded, o);
}

void Replayer::ScriptQueuedReservations() {
  if (!config_.script_addresses || queued_maps_.empty()) return;
  std::vector<DevicePtr> bases;
  for (DevicePtr ptr : queued_maps_) {
    if (!backend_->InReservation(ptr)) bases.push_back(ptr);
  }
  if (bases.empty()) return;
  backend_->ScriptReservations(std::move(bases));
  reservations_scripted_ = true;
}

void Replayer::ClearQueuedSegmentAllocs() {
  if (queued_segment_alloc_bytes_ > 0 && config_.script_addresses) backend_->ScriptAddresses({});
  if (reservations_scripted_) backend_->ScriptReservations({});
  reservations_scripted_ = false;
  queued_segment_alloc_bytes_ = 0;
  queued_maps_.clear();
  frees_after_segment_alloc_ = false;
}

void Replayer::ApplyAlloc(const TraceEvent& event, ReplayHooks* hooks) {
  ScriptQueuedReservations();
  absl::StatusOr<DevicePtr> ptr = allocator_->Allocate(event.requested_bytes, event.stream);
  ClearQueuedSegmentAllocs();
  LiveBlock live;
  live.origin = BlockOrigin{event.index, event.time_ns, current_phase_, false};
  if (ptr.ok()) {
    live.ours = *ptr;
    RefPhase(current_phase_);
  } else {
    std::optional<OomReport> report = GetOomReport(ptr.status());
    if (!report.has_value()) {
      Warn(absl::StrFormat("event %d: allocation of %d bytes failed: %s", event.index,
                           event.requested_bytes, ptr.status().message()));
    } else {
      hooks->OnOom(ReplayOom{&event, false, true, *report, external_bytes_});
    }
  }
  auto [it, inserted] = live_.try_emplace(event.ptr, live);
  if (!inserted) {
    if (it->second.ours != 0 && it->second.pending_stream == 0) {
      Warn(absl::StrFormat("event %d: the trace allocates 0x%x twice without freeing it",
                           event.index, event.ptr));
    }
    it->second = live;
  }
}

void Replayer::ApplyOom(const TraceEvent& event, ReplayHooks* hooks) {
  // Memory outside the allocator: what the device lacked beyond the allocator's reservations.
  if (event.device_free_bytes > 0 || event.device_total_bytes > 0) {
    const uint64_t total =
        event.device_total_bytes > 0 ? event.device_total_bytes : config_.capacity_bytes;
    uint64_t reserved = event.reserved_bytes;
    if (event.device_total_bytes == 0) {  // not recorded (snapshot): the replay's, after the ladder
      const DeviceStats stats = allocator_->GetStats();
      reserved = static_cast<uint64_t>(stats.reserved_bytes[0].current);
      const uint64_t releasable = queued_segment_free_bytes_;
      reserved = reserved > releasable ? reserved - releasable : 0;
    }
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
  absl::StatusOr<DevicePtr> ptr = allocator_->Allocate(request, event.stream);
  ClearQueuedSegmentAllocs();
  ReplayOom oom{&event, true, !ptr.ok(), {}, external_bytes_};
  if (!ptr.ok()) {
    std::optional<OomReport> report = GetOomReport(ptr.status());
    if (report.has_value()) oom.report = *report;
  } else {
    (void)allocator_->Free(*ptr);  // the job never got it: the state is the job's without it
  }
  hooks->OnOom(oom);
}

void Replayer::ApplyFreeRequested(const TraceEvent& event) {
  auto it = live_.find(event.ptr);
  if (it == live_.end()) {
    Warn(
        absl::StrFormat("event %d: free of 0x%x, which the trace never allocated (allocated "
                        "before recording started?)",
                        event.index, event.ptr));
    return;
  }
  LiveBlock& live = it->second;
  if (live.ours == 0) {  // its allocation failed in the replay
    live_.erase(it);
    return;
  }
  bool deferred = false;
  if (source_.info().records_free_completed) {
    const TraceEvent* next = Peek();
    deferred =
        !(next != nullptr && next->kind == EventKind::kFreeCompleted && next->ptr == event.ptr);
    if (!deferred) skip_completion_of_ = event.ptr;
  }
  if (deferred) {
    // Note [Stream-ordered frees in a replay].
    StreamId pseudo;
    if (!free_pseudo_streams_.empty()) {
      pseudo = free_pseudo_streams_.back();
      free_pseudo_streams_.pop_back();
    } else {
      pseudo = kFirstPseudoStream + next_pseudo_stream_++;
    }
    backend_->SetStreamBusy(pseudo, true);
    (void)allocator_->RecordStream(live.ours, pseudo);
    live.pending_stream = pseudo;
  }
  absl::Status status = allocator_->Free(live.ours);
  if (!status.ok()) {
    Warn(absl::StrFormat("event %d: free of 0x%x: %s", event.index, event.ptr, status.message()));
  }
  if (!live.origin.before_trace) UnrefPhase(live.origin.phase);
  if (!deferred) live_.erase(it);
}

void Replayer::ApplyFreeCompleted(const TraceEvent& event) {
  auto it = live_.find(event.ptr);
  if (it == live_.end() || it->second.pending_stream == 0) return;
  queued_completions_.push_back(it->second.pending_stream);
  live_.erase(it);
}

void Replayer::CompleteQueuedFrees() {
  for (StreamId pseudo : queued_completions_) {
    backend_->CompleteStream(pseudo);
    free_pseudo_streams_.push_back(pseudo);
  }
  queued_completions_.clear();
}

uint32_t Replayer::InternPhase(const std::string& text) {
  if (auto it = phase_ids_.find(text); it != phase_ids_.end()) return it->second;
  uint32_t id;
  if (!free_phases_.empty()) {
    id = free_phases_.back();
    free_phases_.pop_back();
    phase_text_[id] = text;
    phase_refs_[id] = 0;
  } else {
    id = static_cast<uint32_t>(phase_text_.size());
    phase_text_.push_back(text);
    phase_refs_.push_back(0);
  }
  phase_ids_.emplace(text, id);
  return id;
}

void Replayer::RefPhase(uint32_t phase) { ++phase_refs_[phase]; }

void Replayer::UnrefPhase(uint32_t phase) {
  if (--phase_refs_[phase] != 0 || phase <= kPhaseBefore) return;
  phase_ids_.erase(phase_text_[phase]);
  free_phases_.push_back(phase);
}

const std::string& Replayer::PhaseText(uint32_t phase) const { return phase_text_[phase]; }

absl::flat_hash_map<DevicePtr, BlockOrigin> Replayer::LiveBlockOrigins() const {
  absl::flat_hash_map<DevicePtr, BlockOrigin> origins;
  origins.reserve(live_.size());
  for (const auto& [trace_ptr, live] : live_) {
    if (live.ours != 0 && live.pending_stream == 0) origins.emplace(live.ours, live.origin);
  }
  return origins;
}

}  // namespace fragscope
