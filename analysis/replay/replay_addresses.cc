// Replayer: giving the replay's segments and expandable reservations the trace's own addresses.
// See ReplayConfig::script_addresses and Note [Expandable segments in a replay] in replay.h.
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "analysis/replay/replay.h"

namespace fragscope {

void Replayer::QueueSegmentAlloc(const TraceEvent& event) {
  if (event.ptr + event.bytes < event.ptr) [[unlikely]] {
    FailSegmentPastAddressSpace(event);
    return;
  }
  if (event.kind == EventKind::kSegmentAlloc) {
    if (config_.script_addresses) backend_->ScriptAddresses({event.ptr});
    queued_segment_alloc_bytes_ = event.bytes;
    return;
  }
  queued_maps_.push_back(event.ptr);
  queued_segment_alloc_bytes_ += event.bytes;
}

void Replayer::FailSegmentPastAddressSpace(const TraceEvent& event) {
  bad_trace_ = absl::InvalidArgumentError(absl::StrFormat(
      "%s: event %d: %s at 0x%x of %d bytes ends past the last address (2^64): the trace is "
      "damaged",
      source_.info().path, event.index, EventKindName(event.kind), event.ptr, event.bytes));
  config_.stop_after_index = event.index;  // Run stops before the next event and returns it
}

void Replayer::ScriptQueuedReservationsNow() {
  if (!config_.script_addresses) return;
  std::vector<DevicePtr> bases;
  for (DevicePtr ptr : queued_maps_) {
    if (!backend_->InReservation(ptr)) bases.push_back(ptr);
  }
  if (bases.empty()) return;
  backend_->ScriptReservations(std::move(bases));
  reservations_scripted_ = true;
}

void Replayer::ClearQueuedSegmentAllocsNow() {
  if (queued_segment_alloc_bytes_ > 0 && config_.script_addresses) backend_->ScriptAddresses({});
  if (reservations_scripted_) backend_->ScriptReservations({});
  reservations_scripted_ = false;
  queued_segment_alloc_bytes_ = 0;
  queued_maps_.clear();
  frees_after_segment_alloc_ = false;
}

}  // namespace fragscope
