#include "allocator/simulated_backend.h"

#include "absl/strings/str_format.h"
#include "allocator/format_size.h"

namespace fragscope {

SimulatedBackend::SimulatedBackend(uint64_t capacity_bytes, int device)
    : capacity_bytes_(capacity_bytes), device_(device) {}

std::string SimulatedBackend::name() const {
  return absl::StrFormat("simulated device %d (%s)", device_, FormatSize(capacity_bytes_));
}

absl::StatusOr<DevicePtr> SimulatedBackend::Malloc(uint64_t bytes) {
  ++malloc_calls_;
  if (bytes == 0) return absl::InvalidArgumentError("Malloc of 0 bytes");
  if (fail_next_mallocs_ > 0) {
    --fail_next_mallocs_;
    return absl::ResourceExhaustedError("injected device malloc failure");
  }
  if (bytes >= fail_at_least_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("injected failure for mallocs of at least %d bytes", fail_at_least_bytes_));
  }
  const uint64_t granular = Granular(bytes);
  if (granular < bytes || used_bytes_ + external_bytes_ > capacity_bytes_ ||
      granular > capacity_bytes_ - used_bytes_ - external_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("simulated device out of memory: %d bytes requested, %d free", bytes,
                        MemInfo().free_bytes));
  }
  DevicePtr candidate = kBaseAddress;
  if (!scripted_.empty()) {
    candidate = scripted_.front();
    scripted_.pop_front();
    auto next = live_.lower_bound(candidate);
    const bool overlaps_next = next != live_.end() && next->first < candidate + granular;
    const bool overlaps_prev =
        next != live_.begin() && std::prev(next)->first + std::prev(next)->second > candidate;
    if (candidate == 0 || overlaps_next || overlaps_prev) {
      return absl::InternalError(absl::StrFormat(
          "scripted address 0x%x for %d bytes overlaps a live allocation", candidate, bytes));
    }
  } else {
    // Lowest-address gap that fits.
    for (const auto& [ptr, size] : live_) {
      if (ptr - candidate >= granular) break;
      candidate = ptr + size;
    }
  }
  live_.emplace(candidate, granular);
  used_bytes_ += granular;
  return candidate;
}

absl::Status SimulatedBackend::Free(DevicePtr ptr) {
  ++free_calls_;
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Free of 0x%x, which is not a live simulated allocation", ptr));
  }
  used_bytes_ -= it->second;
  live_.erase(it);
  return absl::OkStatus();
}

DeviceMemInfo SimulatedBackend::MemInfo() {
  const uint64_t held = used_bytes_ + external_bytes_;
  return {held >= capacity_bytes_ ? 0 : capacity_bytes_ - held, capacity_bytes_};
}

void SimulatedBackend::ScriptAddresses(std::vector<DevicePtr> addresses) {
  scripted_.assign(addresses.begin(), addresses.end());
}

void SimulatedBackend::SetStreamBusy(StreamId stream, bool busy) {
  StreamState& s = streams_[stream];
  if (busy) {
    if (s.completed_epoch == s.epoch) ++s.epoch;  // new outstanding work
  } else {
    s.completed_epoch = s.epoch;
  }
}

absl::StatusOr<EventHandle> SimulatedBackend::RecordEvent(StreamId stream) {
  const EventHandle handle = next_event_++;
  events_.emplace(handle, Event{stream, streams_[stream].epoch});
  return handle;
}

absl::StatusOr<bool> SimulatedBackend::EventDone(EventHandle event) {
  auto it = events_.find(event);
  if (it == events_.end()) return absl::InvalidArgumentError("unknown simulated event");
  return streams_[it->second.stream].completed_epoch >= it->second.epoch;
}

absl::Status SimulatedBackend::SynchronizeEvent(EventHandle event) {
  auto it = events_.find(event);
  if (it == events_.end()) return absl::InvalidArgumentError("unknown simulated event");
  StreamState& s = streams_[it->second.stream];
  if (s.completed_epoch < it->second.epoch) s.completed_epoch = it->second.epoch;
  return absl::OkStatus();
}

void SimulatedBackend::ReleaseEvent(EventHandle event) { events_.erase(event); }

}  // namespace fragscope
