// DeviceBackend: the only way the allocator touches a device.
//
// The caching policy (CachingAllocator) never calls CUDA. It asks a backend for whole segments,
// gives them back, queries free/total memory and uses stream events to know when a block freed on
// one stream may be reused after work on other streams. Two implementations exist:
// SimulatedBackend (capacity, 2 MiB granularity, deterministic addresses, fault injection,
// hand-driven stream completion) for tests, replay, sweeps and benchmarks, and CudaBackend for
// real jobs (allocator/cuda_backend.h, over the linked CUDA runtime or the interposer's).
//
// Thread safety: a backend is used by one CachingAllocator, under that allocator's lock, so
// implementations need not be thread-safe unless shared.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/types.h"

namespace fragscope {

struct DeviceMemInfo {
  uint64_t free_bytes = 0;   // what cudaMemGetInfo calls free
  uint64_t total_bytes = 0;  // the device's capacity
};

// An opaque stream-event handle (cudaEvent_t on CUDA). 0 is never a valid event.
using EventHandle = uint64_t;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // Allocates `bytes` of device memory (cudaMalloc).
  // REQUIRES: bytes > 0. Returns kResourceExhausted when the device has no room; other codes for
  // other failures (they are reported, not retried).
  virtual absl::StatusOr<DevicePtr> Malloc(uint64_t bytes) = 0;

  // Releases an allocation returned by Malloc (cudaFree). REQUIRES: ptr came from Malloc and was
  // not freed since.
  virtual absl::Status Free(DevicePtr ptr) = 0;

  virtual DeviceMemInfo MemInfo() = 0;

  // Records an event on `stream` capturing the work queued so far (cudaEventRecord).
  virtual absl::StatusOr<EventHandle> RecordEvent(StreamId stream) = 0;
  // True once the work the event captured has finished (cudaEventQuery).
  virtual absl::StatusOr<bool> EventDone(EventHandle event) = 0;
  // Blocks until the event's work has finished (cudaEventSynchronize).
  virtual absl::Status SynchronizeEvent(EventHandle event) = 0;
  // Returns the event for reuse. REQUIRES: the event is done or was synchronized.
  virtual void ReleaseEvent(EventHandle event) = 0;

  // --- Virtual memory, for expandable segments (PyTorch's ExpandableSegment) ---
  // A backend without virtual memory support keeps these defaults: SupportsVirtualMemory() is
  // false and the calls fail with kUnimplemented, and the allocator then refuses
  // expandable_segments:True with an error naming the option.

  // Whether ReserveAddressRange / MapPages / UnmapPages / ReleaseAddressRange work (CUDA: the
  // device supports virtual memory management, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_
  // SUPPORTED).
  virtual bool SupportsVirtualMemory() const { return false; }

  // The granularity of physical pages (cuMemGetAllocationGranularity, minimum). Page sizes passed
  // to MapPages are multiples of it.
  virtual uint64_t PageGranularity() const { return 2 * 1024 * 1024; }

  // Reserves `bytes` of device virtual address space with no memory behind it
  // (cuMemAddressReserve). REQUIRES: bytes > 0 and a multiple of PageGranularity().
  virtual absl::StatusOr<DevicePtr> ReserveAddressRange(uint64_t bytes);

  // Backs [ptr, ptr + bytes) with physical pages of `page_bytes` each, readable and writable by
  // this device (cuMemCreate + cuMemMap + cuMemSetAccess per page). All or nothing: when the
  // device runs out of memory, the pages this call created are released again and
  // kResourceExhausted is returned. Mapped pages count as used device memory (MemInfo).
  // REQUIRES: the range lies in a reservation, is not mapped, and ptr and bytes are multiples of
  // page_bytes measured from the reservation's base; page_bytes is a multiple of
  // PageGranularity().
  virtual absl::Status MapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes);

  // Unmaps and releases the pages of [ptr, ptr + bytes), once the work queued on `stream` (the
  // segment's stream) has finished: unmapping does not synchronize by itself
  // (cudaStreamSynchronize, then cuMemUnmap + cuMemRelease per page).
  // REQUIRES: the range was mapped by MapPages calls with the same page_bytes.
  virtual absl::Status UnmapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes,
                                  StreamId stream);

  // Frees a reservation (cuMemAddressFree). REQUIRES: no page in it is mapped.
  virtual absl::Status ReleaseAddressRange(DevicePtr base, uint64_t bytes);

  // The device index and a human-readable name ("NVIDIA H100 80GB HBM3", "simulated").
  virtual int device() const = 0;
  virtual std::string name() const = 0;
};

}  // namespace fragscope
