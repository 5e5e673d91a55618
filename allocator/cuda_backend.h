// CudaBackend: DeviceBackend over the CUDA runtime (cudaMalloc, cudaFree, cudaMemGetInfo,
// cudaEventRecord/Query/Synchronize), and over the driver's virtual memory management for
// expandable segments (CudaVirtualMemory, allocator/cuda_vmm.h). With cuda_vmm.cc, the only
// allocator files that include CUDA headers.
//
// Errors: cudaErrorMemoryAllocation becomes kResourceExhausted (and the sticky error is cleared,
// as PyTorch does); other CUDA errors become kInternal naming the call and cudaGetErrorName.
// Events are pooled (created with cudaEventDisableTiming) and reused.
// Every call first makes `device` current and restores the caller's device afterwards.
// Virtual memory: SupportsVirtualMemory() is decided once, at Create; without support the
// virtual-memory calls fail with kUnimplemented. Reservations and pages still held when the
// backend is destroyed are unmapped, released and freed then.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "allocator/cuda_vmm.h"
#include "allocator/device_backend.h"

namespace fragscope {

class CudaBackend final : public DeviceBackend {
 public:
  // Fails if the device does not exist or CUDA cannot be initialized.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int device);
  ~CudaBackend() override;

  absl::StatusOr<DevicePtr> Malloc(uint64_t bytes) override;
  absl::Status Free(DevicePtr ptr) override;
  DeviceMemInfo MemInfo() override;
  absl::StatusOr<EventHandle> RecordEvent(StreamId stream) override;
  absl::StatusOr<bool> EventDone(EventHandle event) override;
  absl::Status SynchronizeEvent(EventHandle event) override;
  void ReleaseEvent(EventHandle event) override;

  bool SupportsVirtualMemory() const override { return vmm_->supported(); }
  uint64_t PageGranularity() const override { return vmm_->granularity_bytes(); }
  absl::StatusOr<DevicePtr> ReserveAddressRange(uint64_t bytes) override;
  absl::Status MapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes) override;
  absl::Status UnmapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes,
                          StreamId stream) override;
  absl::Status ReleaseAddressRange(DevicePtr base, uint64_t bytes) override;

  int device() const override { return device_; }
  std::string name() const override { return name_; }

  // The number of CUDA devices, 0 when there is no driver or no device.
  static int DeviceCount();

 private:
  CudaBackend(int device, std::string name, std::unique_ptr<CudaVirtualMemory> vmm)
      : device_(device), name_(std::move(name)), vmm_(std::move(vmm)) {}

  int device_;
  std::string name_;
  std::vector<EventHandle> free_events_;    // pooled cudaEvent_t values
  std::unique_ptr<CudaVirtualMemory> vmm_;  // Invariant: never null
};

}  // namespace fragscope
