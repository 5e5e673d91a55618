// CudaVirtualMemory: the CUDA driver's virtual memory management (cuMemAddressReserve,
// cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree) behind
// CudaBackend's expandable-segment calls (its VirtualMemory), done the way PyTorch's
// ExpandableSegment does it.
//
// Driver entry points: the driver functions are looked up once per process through the runtime
// (cudaGetDriverEntryPointByVersion), as PyTorch's c10/cuda/driver_api.cpp does, so the library
// links only against CUDA::cudart and builds on machines without libcuda.so. A driver that lacks
// one of them, or a device without CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, makes
// supported() false; every call then fails with kUnimplemented saying why.
//
// Layout: a reservation is an address range with no memory behind it. MapPages backs a part of
// it with physical pages, one cuMemCreate allocation (a "handle") per page, each mapped at its own
// address; pages of different sizes may share a reservation (PyTorch maps 2 MiB pages in small
// segments and 20 MiB pages in large ones).
//
//   reservation [base ............................................... base + bytes)
//   pages       [2M][2M][2M]...........[ 20 MiB page ][ 20 MiB page ]..............
//
// Contract checks: the REQUIRES of DeviceBackend's calls are checked before any driver call and
// a violation changes nothing: a bad size, alignment or an address outside every reservation is
// kInvalidArgument; a range that is already (or not) mapped, or a reservation that still has pages,
// is kFailedPrecondition. Every message names the address.
//
// Errors: CUDA_ERROR_OUT_OF_MEMORY is kResourceExhausted; other driver errors are kInternal
// naming the call and cuGetErrorName. MapPages is all or nothing.
//
// Thread safety: none; CudaBackend is used under its allocator's lock. Every call, destruction
// included, REQUIRES that the backend's device is current (CudaBackend's DeviceGuard).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/types.h"
#include "allocator/virtual_memory.h"

namespace fragscope {

class CudaVirtualMemory final : public VirtualMemory {
 public:
  // Looks up the driver entry points (once per process) and asks whether `device` supports
  // virtual memory management, and at which page granularity. Never fails: without support,
  // supported() is false. REQUIRES: the CUDA runtime is initialized and `device` exists.
  static std::unique_ptr<CudaVirtualMemory> Create(int device, std::string device_name);

  // Unmaps and releases every page still mapped and frees every reservation still held, after
  // cudaDeviceSynchronize, so that a caller that forgets leaks nothing. Errors are ignored (this
  // may run after the driver has shut down).
  ~CudaVirtualMemory() override;

  CudaVirtualMemory(const CudaVirtualMemory&) = delete;
  CudaVirtualMemory& operator=(const CudaVirtualMemory&) = delete;

  bool supported() const override { return supported_; }
  // cuMemGetAllocationGranularity(MINIMUM) for a pinned allocation on the device; 2 MiB (what
  // every NVIDIA GPU reports) when the device has no virtual memory support.
  uint64_t granularity_bytes() const override { return granularity_bytes_; }

  // The DeviceBackend calls of the same names; contracts in allocator/device_backend.h.
  absl::StatusOr<DevicePtr> ReserveAddressRange(uint64_t bytes) override;
  absl::Status MapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes) override;
  absl::Status UnmapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes,
                          StreamId stream) override;
  absl::Status ReleaseAddressRange(DevicePtr base, uint64_t bytes) override;

  // Bytes backed by pages now, over all reservations.
  uint64_t mapped_bytes() const { return mapped_bytes_; }
  bool empty() const override { return reservations_.empty(); }

 private:
  struct Page {
    uint64_t handle;  // CUmemGenericAllocationHandle
    uint64_t bytes;
  };

  CudaVirtualMemory(int device, std::string device_name)
      : device_(device), device_name_(std::move(device_name)) {}

  absl::Status Unsupported() const;
  // The reservation holding all of [ptr, ptr + bytes), or reservations_.end().
  std::map<DevicePtr, uint64_t>::const_iterator FindReservation(DevicePtr ptr,
                                                                uint64_t bytes) const;
  // The first page overlapping [ptr, ptr + bytes), or pages_.end().
  std::map<DevicePtr, Page>::const_iterator FirstPageIn(DevicePtr ptr, uint64_t bytes) const;

  int device_;
  std::string device_name_;
  bool supported_ = false;
  std::string unsupported_reason_;  // why supported_ is false
  uint64_t granularity_bytes_ = 2 * kMiB;

  // base -> bytes. Invariant: reservations never overlap.
  std::map<DevicePtr, uint64_t> reservations_;
  // page address -> page. Invariant: every page lies inside one reservation, pages never overlap,
  // and each is mapped with read-write access for device_.
  std::map<DevicePtr, Page> pages_;
  uint64_t mapped_bytes_ = 0;  // Invariant: the sum of pages_' bytes
};

}  // namespace fragscope
