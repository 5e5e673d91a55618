#include "allocator/cuda_backend.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_format.h"

namespace fragscope {
namespace {

// Makes `device` current for the scope and restores the previous device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() {
    int current = -1;
    if (previous_ >= 0 && cudaGetDevice(&current) == cudaSuccess && current != previous_) {
      cudaSetDevice(previous_);
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

absl::Status CudaError(const char* call, cudaError_t error) {
  (void)cudaGetLastError();  // clear the sticky per-thread error
  const std::string message = absl::StrFormat("%s failed: %s (%s)", call, cudaGetErrorName(error),
                                              cudaGetErrorString(error));
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

cudaEvent_t AsEvent(EventHandle handle) { return reinterpret_cast<cudaEvent_t>(handle); }

}  // namespace

int CudaBackend::DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int device) {
  const int count = DeviceCount();
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CUDA device %d does not exist (%d devices visible)", device, count));
  }
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) {
    return CudaError("cudaGetDeviceProperties", e);
  }
  // Device-independent driver queries: no DeviceGuard (cudaSetDevice may create the context).
  std::unique_ptr<CudaVirtualMemory> vmm = CudaVirtualMemory::Create(device, prop.name);
  return std::unique_ptr<CudaBackend>(new CudaBackend(device, prop.name, std::move(vmm)));
}

CudaBackend::~CudaBackend() {
  if (!vmm_->empty()) {
    DeviceGuard guard(device_);
    vmm_.reset();  // synchronizes the device, then unmaps and frees what is left
  }
  for (EventHandle event : free_events_) cudaEventDestroy(AsEvent(event));
}

absl::StatusOr<DevicePtr> CudaBackend::Malloc(uint64_t bytes) {
  DeviceGuard guard(device_);
  void* ptr = nullptr;
  if (cudaError_t e = cudaMalloc(&ptr, bytes); e != cudaSuccess) return CudaError("cudaMalloc", e);
  return reinterpret_cast<DevicePtr>(ptr);
}

absl::Status CudaBackend::Free(DevicePtr ptr) {
  DeviceGuard guard(device_);
  if (cudaError_t e = cudaFree(reinterpret_cast<void*>(ptr)); e != cudaSuccess) {
    return CudaError("cudaFree", e);
  }
  return absl::OkStatus();
}

DeviceMemInfo CudaBackend::MemInfo() {
  DeviceGuard guard(device_);
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  return {free_bytes, total_bytes};
}

absl::StatusOr<EventHandle> CudaBackend::RecordEvent(StreamId stream) {
  DeviceGuard guard(device_);
  cudaEvent_t event = nullptr;
  if (!free_events_.empty()) {
    event = AsEvent(free_events_.back());
    free_events_.pop_back();
  } else if (cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
             e != cudaSuccess) {
    return CudaError("cudaEventCreateWithFlags", e);
  }
  if (cudaError_t e = cudaEventRecord(event, reinterpret_cast<cudaStream_t>(stream));
      e != cudaSuccess) {
    free_events_.push_back(reinterpret_cast<EventHandle>(event));
    return CudaError("cudaEventRecord", e);
  }
  return reinterpret_cast<EventHandle>(event);
}

absl::StatusOr<bool> CudaBackend::EventDone(EventHandle event) {
  const cudaError_t e = cudaEventQuery(AsEvent(event));
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  return CudaError("cudaEventQuery", e);
}

absl::Status CudaBackend::SynchronizeEvent(EventHandle event) {
  if (cudaError_t e = cudaEventSynchronize(AsEvent(event)); e != cudaSuccess) {
    return CudaError("cudaEventSynchronize", e);
  }
  return absl::OkStatus();
}

void CudaBackend::ReleaseEvent(EventHandle event) { free_events_.push_back(event); }

absl::StatusOr<DevicePtr> CudaBackend::ReserveAddressRange(uint64_t bytes) {
  DeviceGuard guard(device_);
  return vmm_->ReserveAddressRange(bytes);
}

absl::Status CudaBackend::MapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes) {
  DeviceGuard guard(device_);
  return vmm_->MapPages(ptr, bytes, page_bytes);
}

absl::Status CudaBackend::UnmapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes,
                                     StreamId stream) {
  DeviceGuard guard(device_);
  return vmm_->UnmapPages(ptr, bytes, page_bytes, stream);
}

absl::Status CudaBackend::ReleaseAddressRange(DevicePtr base, uint64_t bytes) {
  DeviceGuard guard(device_);
  return vmm_->ReleaseAddressRange(base, bytes);
}

}  // namespace fragscope
