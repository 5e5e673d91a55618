// CudaBackend: DeviceBackend over the CUDA runtime (cudaMalloc, cudaFree, cudaMemGetInfo,
// cudaEventRecord/Query/Synchronize), and over the driver's virtual memory management for
// expandable segments (a VirtualMemory, allocator/virtual_memory.h).
//
// The runtime is reached only through a CudaRuntimeTable (allocator/cuda_runtime_table.h), so
// this class includes no CUDA header and links no CUDA library:
//   - Create(device) uses the linked runtime (LinkedCudaRuntime) and CudaVirtualMemory
//     (allocator/cuda_vmm.h); both, with Create and DeviceCount, live in cuda_backend_linked.cc,
//     which with cuda_vmm.cc are the only allocator files including CUDA headers (library
//     fragscope::cuda_backend).
//   - The interposer (hooks/preload_state.cc) builds the backend over the table of the process's
//     own runtime, found with dlsym (hooks/real_cuda.h), without virtual memory: it links only
//     fragscope::cuda_backend_core.
//
// Errors: cudaErrorMemoryAllocation becomes kResourceExhausted (and the sticky error is cleared,
// as PyTorch does); other CUDA errors become kInternal naming the call and the error.
// Events are pooled (created with cudaEventDisableTiming) and reused.
// Every call first makes `device` current and restores the caller's device afterwards.
// Virtual memory: SupportsVirtualMemory() is decided once, at construction; without support (or
// without a VirtualMemory) the virtual-memory calls fail with kUnimplemented. Reservations and
// pages still held when the backend is destroyed are unmapped, released and freed then.
// Not thread-safe: used under its allocator's lock.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "allocator/cuda_runtime_table.h"
#include "allocator/device_backend.h"
#include "allocator/virtual_memory.h"

namespace fragscope {

class CudaBackend final : public DeviceBackend {
 public:
  // Over the linked CUDA runtime, with the driver's virtual memory where the device supports it.
  // Fails if the device does not exist or CUDA cannot be initialized. Only in
  // fragscope::cuda_backend.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int device);

  // Over `runtime`, for `device` named `name`; `vmm` may be null (no virtual memory).
  // REQUIRES: every member of `runtime` other than the error texts is set.
  CudaBackend(const CudaRuntimeTable& runtime, int device, std::string name,
              std::unique_ptr<VirtualMemory> vmm);
  ~CudaBackend() override;

  absl::StatusOr<DevicePtr> Malloc(uint64_t bytes) override;
  absl::Status Free(DevicePtr ptr) override;
  DeviceMemInfo MemInfo() override;
  absl::StatusOr<EventHandle> RecordEvent(StreamId stream) override;
  absl::StatusOr<bool> EventDone(EventHandle event) override;
  absl::Status SynchronizeEvent(EventHandle event) override;
  void ReleaseEvent(EventHandle event) override;

  bool SupportsVirtualMemory() const override { return vmm_ != nullptr && vmm_->supported(); }
  uint64_t PageGranularity() const override;
  absl::StatusOr<DevicePtr> ReserveAddressRange(uint64_t bytes) override;
  absl::Status MapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes) override;
  absl::Status UnmapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes,
                          StreamId stream) override;
  absl::Status ReleaseAddressRange(DevicePtr base, uint64_t bytes) override;

  int device() const override { return device_; }
  std::string name() const override { return name_; }

  // The number of devices the linked CUDA runtime sees, 0 when there is no driver or no device.
  // Only in fragscope::cuda_backend.
  static int DeviceCount();

 private:
  // The status for `error` returned by `call`; clears the sticky error.
  absl::Status Error(const char* call, int error) const;

  CudaRuntimeTable cuda_;
  int device_;
  std::string name_;
  std::vector<EventHandle> free_events_;  // pooled cudaEvent_t values
  std::unique_ptr<VirtualMemory> vmm_;    // null: no virtual memory
};

}  // namespace fragscope
