// RealCudaBackend: a DeviceBackend over the *real* CUDA runtime functions of real_cuda.h, for the
// interposer's cache mode. It is allocator/cuda_backend.h again, except that it calls through the
// resolved function pointers: calling cudaMalloc by name from inside libfragscope_preload.so would
// land in our own interposed cudaMalloc.
//
// Errors as in CudaBackend: cudaErrorMemoryAllocation is kResourceExhausted (the sticky error is
// cleared), any other error is kInternal naming the call. Every call makes the device current and
// restores the caller's device. Events are pooled. Not thread-safe (used under the allocator lock).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "allocator/device_backend.h"
#include "hooks/real_cuda.h"

namespace fragscope::hooks {

class RealCudaBackend final : public DeviceBackend {
 public:
  // REQUIRES: cuda.CanCache(); `cuda` outlives the backend.
  RealCudaBackend(const RealCuda& cuda, int device);
  ~RealCudaBackend() override;

  absl::StatusOr<DevicePtr> Malloc(uint64_t bytes) override;
  absl::Status Free(DevicePtr ptr) override;
  DeviceMemInfo MemInfo() override;
  absl::StatusOr<EventHandle> RecordEvent(StreamId stream) override;
  absl::StatusOr<bool> EventDone(EventHandle event) override;
  absl::Status SynchronizeEvent(EventHandle event) override;
  void ReleaseEvent(EventHandle event) override;
  int device() const override { return device_; }
  std::string name() const override { return name_; }

 private:
  absl::Status Error(const char* call, int error);

  const RealCuda& cuda_;
  int device_;
  std::string name_;
  std::vector<EventHandle> free_events_;
};

// The device's name from cudaGetDeviceProperties, or "CUDA device N".
std::string RealDeviceName(const RealCuda& cuda, int device);

}  // namespace fragscope::hooks
