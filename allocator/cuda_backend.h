// CudaBackend: DeviceBackend over the CUDA runtime (cudaMalloc, cudaFree, cudaMemGetInfo,
// cudaEventRecord/Query/Synchronize). The only allocator file that includes CUDA headers.
//
// Errors: cudaErrorMemoryAllocation becomes kResourceExhausted (and the sticky error is cleared,
// as PyTorch does); other CUDA errors become kInternal naming the call and cudaGetErrorName.
// Events are pooled (created with cudaEventDisableTiming) and reused.
// Every call first makes `device` current and restores the caller's device afterwards.
#pragma once

#include <memory>
#include <string>
#include <vector>

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
  int device() const override { return device_; }
  std::string name() const override { return name_; }

  // The number of CUDA devices, 0 when there is no driver or no device.
  static int DeviceCount();

 private:
  CudaBackend(int device, std::string name) : device_(device), name_(std::move(name)) {}

  int device_;
  std::string name_;
  std::vector<EventHandle> free_events_;  // pooled cudaEvent_t values
};

}  // namespace fragscope
