// VirtualMemory: the device virtual memory that CudaBackend's expandable-segment calls go to
// (CudaVirtualMemory over the CUDA driver, allocator/cuda_vmm.h). An interface so that CudaBackend
// itself references no driver code: a backend built without one (the interposer's) reports no
// virtual memory support. Contracts of the calls: allocator/device_backend.h.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/types.h"

namespace fragscope {

class VirtualMemory {
 public:
  // Releases whatever is still reserved or mapped.
  virtual ~VirtualMemory() = default;

  virtual bool supported() const = 0;
  virtual uint64_t granularity_bytes() const = 0;
  virtual absl::StatusOr<DevicePtr> ReserveAddressRange(uint64_t bytes) = 0;
  virtual absl::Status MapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes) = 0;
  virtual absl::Status UnmapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes,
                                  StreamId stream) = 0;
  virtual absl::Status ReleaseAddressRange(DevicePtr base, uint64_t bytes) = 0;
  // No reservation is held (hence no page is mapped).
  virtual bool empty() const = 0;
};

}  // namespace fragscope
