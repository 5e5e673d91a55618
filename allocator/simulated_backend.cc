#include "allocator/simulated_backend.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_format.h"
#include "allocator/format_size.h"

namespace fragscope {

SimulatedBackend::SimulatedBackend(uint64_t capacity_bytes, int device, AddressOrder order)
    : capacity_bytes_(capacity_bytes), device_(device), order_(order) {}

std::string SimulatedBackend::name() const {
  return absl::StrFormat("simulated device %d (%s)", device_, FormatSize(capacity_bytes_));
}

absl::Status SimulatedBackend::AdmitDeviceAllocation(uint64_t granular_bytes) {
  if (fail_next_mallocs_ > 0) {
    --fail_next_mallocs_;
    return absl::ResourceExhaustedError("injected device malloc failure");
  }
  if (granular_bytes >= fail_at_least_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("injected failure for mallocs of at least %d bytes", fail_at_least_bytes_));
  }
  if (used_bytes_ + external_bytes_ > capacity_bytes_ ||
      granular_bytes > capacity_bytes_ - used_bytes_ - external_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("simulated device out of memory: %d bytes requested, %d free",
                        granular_bytes, MemInfo().free_bytes));
  }
  return absl::OkStatus();
}

DevicePtr SimulatedBackend::FirstFit(const absl::btree_map<DevicePtr, uint64_t>& ranges,
                                     DevicePtr base, uint64_t bytes) {
  DevicePtr candidate = base;
  auto it = ranges.lower_bound(base);
  if (it != ranges.begin() && std::prev(it)->first + std::prev(it)->second > candidate) {
    candidate = std::prev(it)->first + std::prev(it)->second;  // a range straddling base
  }
  for (; it != ranges.end(); ++it) {
    if (it->first - candidate >= bytes) break;
    candidate = it->first + it->second;
  }
  return candidate;
}

DevicePtr SimulatedBackend::HighestFit(const absl::btree_map<DevicePtr, uint64_t>& ranges,
                                       DevicePtr top, uint64_t bytes) {
  DevicePtr end = top;
  for (auto it = ranges.lower_bound(top); it != ranges.begin();) {
    --it;
    const DevicePtr range_end = it->first + it->second;
    if (range_end <= end && end - range_end >= bytes) break;
    end = std::min(end, it->first);
  }
  return end - bytes;
}

absl::Status SimulatedBackend::CheckNoOverlap(const absl::btree_map<DevicePtr, uint64_t>& ranges,
                                              DevicePtr ptr, uint64_t bytes) {
  auto next = ranges.lower_bound(ptr);
  const bool overlaps_next = next != ranges.end() && next->first < ptr + bytes;
  const bool overlaps_prev =
      next != ranges.begin() && std::prev(next)->first + std::prev(next)->second > ptr;
  if (ptr == 0 || overlaps_next || overlaps_prev) {
    return absl::InternalError(absl::StrFormat(
        "scripted address 0x%x for %d bytes overlaps a live allocation", ptr, bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<DevicePtr> SimulatedBackend::Malloc(uint64_t bytes) {
  ++malloc_calls_;
  if (bytes == 0) return absl::InvalidArgumentError("Malloc of 0 bytes");
  const uint64_t granular = Granular(bytes);
  if (granular < bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("simulated device out of memory: %d bytes requested", bytes));
  }
  if (absl::Status admitted = AdmitDeviceAllocation(granular); !admitted.ok()) return admitted;
  std::optional<DevicePtr> scripted;
  if (!scripted_.empty()) {
    scripted = scripted_.front();
    scripted_.pop_front();
    if (absl::Status s = CheckNoOverlap(live_, *scripted, granular); !s.ok()) {
      if (!scripted_overlap_fallback_) return s;
      ++scripted_overlaps_;
      scripted.reset();
    }
  }
  DevicePtr candidate;
  if (scripted.has_value()) {
    candidate = *scripted;
  } else if (order_ == AddressOrder::kHighestFirst) {
    candidate = HighestFit(live_, gapless_start_, granular);
    // Below kBaseAddress lie the virtual-memory reservations: a range fragmented that far (a
    // trace can do it with ever larger requests) takes the lowest gap above instead.
    if (candidate < kBaseAddress || candidate > kTopAddress) {
      candidate = FirstFit(live_, gapless_end_, granular);
    }
  } else {
    candidate = FirstFit(live_, gapless_end_, granular);
  }
  live_.emplace(candidate, granular);
  used_bytes_ += granular;
  for (auto it = live_.find(gapless_end_); it != live_.end(); it = live_.find(gapless_end_)) {
    gapless_end_ += it->second;
  }
  if (order_ == AddressOrder::kHighestFirst) {
    // The range that ends where the tiled top begins joins it.
    for (auto it = live_.lower_bound(gapless_start_); it != live_.begin();) {
      --it;
      if (it->first + it->second != gapless_start_) break;
      gapless_start_ = it->first;
    }
  }
  return candidate;
}

absl::StatusOr<DevicePtr> SimulatedBackend::ReserveAddressRange(uint64_t bytes) {
  if (bytes == 0 || bytes % kGranularityBytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ReserveAddressRange of %d bytes: not a positive multiple of %d", bytes,
                        kGranularityBytes));
  }
  DevicePtr base;
  if (!scripted_reservations_.empty()) {
    base = scripted_reservations_.front();
    scripted_reservations_.pop_front();
    if (absl::Status s = CheckNoOverlap(reservations_, base, bytes); !s.ok()) return s;
    if (absl::Status s = CheckNoOverlap(live_, base, bytes); !s.ok()) return s;
  } else {
    base = FirstFit(reservations_, kReserveBaseAddress, bytes);
    if (base + bytes > kBaseAddress) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("simulated virtual address space exhausted reserving %d bytes", bytes));
    }
  }
  reservations_.emplace(base, bytes);
  return base;
}

absl::Status SimulatedBackend::MapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes) {
  if (page_bytes == 0 || page_bytes % kGranularityBytes != 0 || bytes == 0 ||
      bytes % page_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MapPages(0x%x, %d bytes, pages of %d): sizes must be positive multiples of the page "
        "(and the page of %d)",
        ptr, bytes, page_bytes, kGranularityBytes));
  }
  auto reservation = reservations_.upper_bound(ptr);
  if (reservation == reservations_.begin() ||
      ptr + bytes > std::prev(reservation)->first + std::prev(reservation)->second) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MapPages(0x%x, %d bytes): not inside a reservation", ptr, bytes));
  }
  if ((ptr - std::prev(reservation)->first) % page_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MapPages(0x%x): not page-aligned from its reservation's base", ptr));
  }
  auto mapped = mapped_pages_.lower_bound(ptr);
  if ((mapped != mapped_pages_.end() && mapped->first < ptr + bytes) ||
      (mapped != mapped_pages_.begin() &&
       std::prev(mapped)->first + std::prev(mapped)->second > ptr)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "MapPages(0x%x, %d bytes): part of the range is already mapped", ptr, bytes));
  }
  if (absl::Status admitted = AdmitDeviceAllocation(bytes); !admitted.ok()) return admitted;
  for (DevicePtr page = ptr; page < ptr + bytes; page += page_bytes) {
    mapped_pages_.emplace(page, page_bytes);
  }
  used_bytes_ += bytes;
  mapped_bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status SimulatedBackend::UnmapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes,
                                          StreamId stream) {
  if (page_bytes == 0 || bytes % page_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "UnmapPages(0x%x, %d bytes): not whole pages of %d", ptr, bytes, page_bytes));
  }
  for (DevicePtr page = ptr; page < ptr + bytes; page += page_bytes) {
    auto it = mapped_pages_.find(page);
    if (it == mapped_pages_.end() || it->second != page_bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("UnmapPages: no mapped page of %d bytes at 0x%x", page_bytes, page));
    }
  }
  CompleteStream(stream);  // the CUDA backend synchronizes the stream before unmapping
  mapped_pages_.erase(mapped_pages_.find(ptr), mapped_pages_.lower_bound(ptr + bytes));
  used_bytes_ -= bytes;
  mapped_bytes_ -= bytes;
  return absl::OkStatus();
}

absl::Status SimulatedBackend::ReleaseAddressRange(DevicePtr base, uint64_t bytes) {
  auto it = reservations_.find(base);
  if (it == reservations_.end() || it->second != bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ReleaseAddressRange(0x%x, %d bytes): no such reservation", base, bytes));
  }
  auto mapped = mapped_pages_.lower_bound(base);
  if (mapped != mapped_pages_.end() && mapped->first < base + bytes) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "ReleaseAddressRange(0x%x): the page at 0x%x is still mapped", base, mapped->first));
  }
  reservations_.erase(it);
  return absl::OkStatus();
}

absl::Status SimulatedBackend::Free(DevicePtr ptr) {
  ++free_calls_;
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Free of 0x%x, which is not a live simulated allocation", ptr));
  }
  used_bytes_ -= it->second;
  if (order_ == AddressOrder::kHighestFirst) {
    gapless_start_ = std::min(kTopAddress, std::max(gapless_start_, ptr + it->second));
  }
  live_.erase(it);
  gapless_end_ = std::min(gapless_end_, ptr);
  return absl::OkStatus();
}

DeviceMemInfo SimulatedBackend::MemInfo() {
  const uint64_t held = used_bytes_ + external_bytes_;
  return {held >= capacity_bytes_ ? 0 : capacity_bytes_ - held, capacity_bytes_};
}

void SimulatedBackend::ScriptAddresses(std::vector<DevicePtr> addresses) {
  scripted_.assign(addresses.begin(), addresses.end());
}

void SimulatedBackend::ScriptReservations(std::vector<DevicePtr> bases) {
  scripted_reservations_.assign(bases.begin(), bases.end());
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
