// SimulatedBackend: a device that exists only in host memory bookkeeping.
//
// What it models:
//  - Capacity: Malloc fails with kResourceExhausted once the granular bytes in use plus
//    `external_bytes` (memory held outside the allocator: other processes, the CUDA context,
//    NCCL) would exceed capacity. Allocations are accounted in 2 MiB granules, as the CUDA driver
//    does for large allocations.
//  - Deterministic addresses: first fit in a virtual range starting at kBaseAddress, from the
//    lowest address up (AddressOrder::kLowestFirst) or, as the CUDA driver places them, from
//    the highest down (kHighestFirst: Note [Where the driver puts segments]), so the same call
//    sequence always yields the same addresses. A replay can instead script the addresses a real
//    device returned (ScriptAddresses), so that address-ordered decisions (best-fit ties) come
//    out as they did on the device.
//  - Virtual memory (expandable segments): address ranges are reserved first fit from
//    kReserveBaseAddress, far below the Malloc range, and cost nothing; mapped pages count
//    toward capacity like Malloc'd granules. UnmapPages completes the segment's stream first,
//    as the CUDA backend synchronizes it.
//  - Fault injection: fail the next N device allocations (Malloc or MapPages), or every one of
//    at least some size.
//  - Streams: work is "outstanding" on a stream until CompleteStream(); an event recorded while
//    a stream has outstanding work stays pending until the stream completes (or the event is
//    synchronized, which completes the stream's work, like cudaEventSynchronize).
//
// No device memory exists: pointers must not be dereferenced.
#pragma once

#include <cstdint>
#include <deque>
#include <iterator>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "allocator/device_backend.h"

namespace fragscope {

// Note [Where the driver puts segments]
// PyTorch's allocator breaks ties between cached blocks of one size by address, so where the
// device puts each segment changes which block a request takes, how it splits, and so the peaks.
// On an H100 (driver 580, CUDA 13) the request sequences of eleven recorded jobs, replayed on a
// device that places each segment at the highest free address, give PyTorch's own peak
// allocated and reserved bytes exactly in nine and within 0.02 % in two; placed lowest first,
// four of them differ (up to 1.2 % of peak reserved). (The driver's own placement is richer:
// 32 MiB-aligned chunks taken downward and filled upward, and more than one region; on an H200
// snapshot of GPT-2 either order gives the steps' peaks within 0.09 %.) Segments a device did not
// return (a prediction, a sweep's other settings) are therefore placed highest first.
enum class AddressOrder { kLowestFirst, kHighestFirst };

class SimulatedBackend final : public DeviceBackend {
 public:
  static constexpr DevicePtr kBaseAddress = DevicePtr{0x7f0000000000};
  static constexpr DevicePtr kReserveBaseAddress = DevicePtr{0x200000000000};
  static constexpr uint64_t kGranularityBytes = 2 * kMiB;
  // The largest device a replay simulates: expandable segments reserve 9/8 of the capacity per
  // stream and pool below kBaseAddress (104 TiB), so 4 TiB leaves room for 11 of them. Today's
  // largest GPUs have under 300 GB.
  static constexpr uint64_t kMaxCapacityBytes = uint64_t{4} << 40;
  // The top of the Malloc range under kHighestFirst: room for twice the largest device (its
  // segments and the gaps between them) above kBaseAddress.
  static constexpr DevicePtr kTopAddress = kBaseAddress + 2 * kMaxCapacityBytes;

  explicit SimulatedBackend(uint64_t capacity_bytes, int device = 0,
                            AddressOrder order = AddressOrder::kLowestFirst);

  absl::StatusOr<DevicePtr> Malloc(uint64_t bytes) override;
  absl::Status Free(DevicePtr ptr) override;
  DeviceMemInfo MemInfo() override;
  absl::StatusOr<EventHandle> RecordEvent(StreamId stream) override;
  absl::StatusOr<bool> EventDone(EventHandle event) override;
  absl::Status SynchronizeEvent(EventHandle event) override;
  void ReleaseEvent(EventHandle event) override;
  bool SupportsVirtualMemory() const override { return true; }
  uint64_t PageGranularity() const override { return kGranularityBytes; }
  absl::StatusOr<DevicePtr> ReserveAddressRange(uint64_t bytes) override;
  absl::Status MapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes) override;
  absl::Status UnmapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes,
                          StreamId stream) override;
  absl::Status ReleaseAddressRange(DevicePtr base, uint64_t bytes) override;
  int device() const override { return device_; }
  std::string name() const override;

  // --- Simulation controls ---
  // Bytes held outside the allocator (reduces what Malloc can get and what MemInfo reports free).
  void set_external_bytes(uint64_t bytes) { external_bytes_ = bytes; }
  // The next `count` device allocations (Malloc or MapPages calls) fail with
  // kResourceExhausted regardless of capacity.
  void FailNextMallocs(int count) { fail_next_mallocs_ = count; }
  // The next Malloc calls return these addresses, in order, instead of first-fit ones (an
  // address that would overlap a live allocation is an error, or with the overlap fallback on,
  // dropped for a first-fit one and counted). Afterwards first fit resumes.
  void ScriptAddresses(std::vector<DevicePtr> addresses);
  // For replays whose layout may depart from the trace's (then a trace address can be taken):
  // place such an allocation by first fit instead of failing it.
  void set_scripted_overlap_fallback(bool on) { scripted_overlap_fallback_ = on; }
  // Scripted addresses dropped by the fallback.
  uint64_t scripted_overlaps() const { return scripted_overlaps_; }
  // The next ReserveAddressRange calls return these bases, in order (an overlap is an error).
  void ScriptReservations(std::vector<DevicePtr> bases);
  // Every device allocation (Malloc, or MapPages call) of at least `bytes` fails
  // (kUnlimitedBytes disables).
  void FailMallocsAtLeast(uint64_t bytes) { fail_at_least_bytes_ = bytes; }
  // Marks `stream` as having (or not having) queued work. Events recorded while it is busy stay
  // pending until CompleteStream(stream).
  void SetStreamBusy(StreamId stream, bool busy);
  void CompleteStream(StreamId stream) { SetStreamBusy(stream, false); }

  uint64_t capacity_bytes() const { return capacity_bytes_; }
  // Granular bytes held by Malloc plus mapped page bytes.
  uint64_t used_bytes() const { return used_bytes_; }
  uint64_t mapped_bytes() const { return mapped_bytes_; }
  int64_t malloc_calls() const { return malloc_calls_; }
  int64_t free_calls() const { return free_calls_; }
  size_t reservation_count() const { return reservations_.size(); }
  // Whether `ptr` lies in a live reservation.
  bool InReservation(DevicePtr ptr) const {
    auto it = reservations_.upper_bound(ptr);
    return it != reservations_.begin() && ptr < std::prev(it)->first + std::prev(it)->second;
  }
  size_t live_events() const { return events_.size(); }

 private:
  static uint64_t Granular(uint64_t bytes) {
    return (bytes + kGranularityBytes - 1) / kGranularityBytes * kGranularityBytes;
  }

  // The injected-failure and capacity checks shared by Malloc and MapPages.
  absl::Status AdmitDeviceAllocation(uint64_t granular_bytes);
  // The lowest address >= base where `bytes` fit between the ranges of `ranges`.
  static DevicePtr FirstFit(const absl::btree_map<DevicePtr, uint64_t>& ranges, DevicePtr base,
                            uint64_t bytes);
  // The highest address where `bytes` fit between the ranges of `ranges` and end at or below
  // `top`.
  static DevicePtr HighestFit(const absl::btree_map<DevicePtr, uint64_t>& ranges, DevicePtr top,
                              uint64_t bytes);
  // An error if [ptr, ptr + bytes) overlaps a range of `ranges`.
  static absl::Status CheckNoOverlap(const absl::btree_map<DevicePtr, uint64_t>& ranges,
                                     DevicePtr ptr, uint64_t bytes);

  struct Event {
    StreamId stream;
    uint64_t epoch;  // the stream's epoch when recorded
  };

  uint64_t capacity_bytes_;
  int device_;
  uint64_t used_bytes_ = 0;
  uint64_t external_bytes_ = 0;
  int fail_next_mallocs_ = 0;
  uint64_t fail_at_least_bytes_ = kUnlimitedBytes;
  int64_t malloc_calls_ = 0;
  int64_t free_calls_ = 0;
  // Live ranges by address -> granular size; used for address-ordered first fit.
  absl::btree_map<DevicePtr, uint64_t> live_;
  // Invariant: live ranges tile [kBaseAddress, gapless_end_) with no gap, so first fit starts
  // its scan here. A caching allocator rarely frees segments, so without this every Malloc
  // walked all live segments (11 % of a 38k-block random benchmark).
  DevicePtr gapless_end_ = kBaseAddress;
  AddressOrder order_;
  // Under kHighestFirst: live ranges tile [gapless_start_, kTopAddress) with no gap, so highest
  // fit starts its scan here (the mirror of gapless_end_; kTopAddress under kLowestFirst).
  DevicePtr gapless_start_ = kTopAddress;
  std::deque<DevicePtr> scripted_;
  bool scripted_overlap_fallback_ = false;
  uint64_t scripted_overlaps_ = 0;
  // Reservations by base -> size, and mapped pages by address -> page size.
  absl::btree_map<DevicePtr, uint64_t> reservations_;
  absl::btree_map<DevicePtr, uint64_t> mapped_pages_;
  uint64_t mapped_bytes_ = 0;
  std::deque<DevicePtr> scripted_reservations_;
  // A stream's work completes in epochs: busy streams have completed_epoch < current epoch.
  struct StreamState {
    uint64_t epoch = 0;            // incremented when the stream becomes busy
    uint64_t completed_epoch = 0;  // epochs <= this are done
  };
  absl::flat_hash_map<StreamId, StreamState> streams_;
  absl::flat_hash_map<EventHandle, Event> events_;
  EventHandle next_event_ = 1;
};

}  // namespace fragscope
