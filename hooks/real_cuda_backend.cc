#include "hooks/real_cuda_backend.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"

namespace fragscope::hooks {
namespace {

// Makes `device` current for the scope and restores the previous device.
class RealDeviceGuard {
 public:
  RealDeviceGuard(const RealCuda& cuda, int device) : cuda_(cuda) {
    if (cuda_.get_device(&previous_) != kCudaSuccess) previous_ = -1;
    if (previous_ != device) cuda_.set_device(device);
  }
  ~RealDeviceGuard() {
    int current = -1;
    if (previous_ >= 0 && cuda_.get_device(&current) == kCudaSuccess && current != previous_) {
      cuda_.set_device(previous_);
    }
  }
  RealDeviceGuard(const RealDeviceGuard&) = delete;
  RealDeviceGuard& operator=(const RealDeviceGuard&) = delete;

 private:
  const RealCuda& cuda_;
  int previous_ = -1;
};

void* AsPointer(uint64_t value) { return reinterpret_cast<void*>(value); }

}  // namespace

std::string RealDeviceName(const RealCuda& cuda, int device) {
  if (cuda.get_device_properties != nullptr) {
    // cudaDeviceProp is about 1 KiB in CUDA 12-13; the buffer leaves room for growth. Only the
    // name (offset 0, char[256]) is read.
    auto prop = std::make_unique<char[]>(16384);
    if (cuda.get_device_properties(prop.get(), device) == kCudaSuccess) {
      prop[255] = '\0';
      if (prop[0] != '\0') return std::string(prop.get());
    } else if (cuda.get_last_error != nullptr) {
      cuda.get_last_error();
    }
  }
  return absl::StrFormat("CUDA device %d", device);
}

RealCudaBackend::RealCudaBackend(const RealCuda& cuda, int device)
    : cuda_(cuda), device_(device), name_(RealDeviceName(cuda, device)) {}

RealCudaBackend::~RealCudaBackend() {
  for (EventHandle event : free_events_) cuda_.event_destroy(AsPointer(event));
}

absl::Status RealCudaBackend::Error(const char* call, int error) {
  cuda_.get_last_error();  // clear the sticky per-thread error, as PyTorch does
  const std::string message =
      absl::StrFormat("%s failed: %s (%d)", call, CudaErrorName(cuda_, error), error);
  if (error == kCudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::StatusOr<DevicePtr> RealCudaBackend::Malloc(uint64_t bytes) {
  RealDeviceGuard guard(cuda_, device_);
  void* ptr = nullptr;
  if (int e = cuda_.malloc(&ptr, bytes); e != kCudaSuccess) return Error("cudaMalloc", e);
  return reinterpret_cast<DevicePtr>(ptr);
}

absl::Status RealCudaBackend::Free(DevicePtr ptr) {
  RealDeviceGuard guard(cuda_, device_);
  if (int e = cuda_.free(AsPointer(ptr)); e != kCudaSuccess) return Error("cudaFree", e);
  return absl::OkStatus();
}

DeviceMemInfo RealCudaBackend::MemInfo() {
  RealDeviceGuard guard(cuda_, device_);
  size_t free_bytes = 0, total_bytes = 0;
  if (cuda_.mem_get_info(&free_bytes, &total_bytes) != kCudaSuccess) {
    cuda_.get_last_error();
    return {};
  }
  return {free_bytes, total_bytes};
}

absl::StatusOr<EventHandle> RealCudaBackend::RecordEvent(StreamId stream) {
  RealDeviceGuard guard(cuda_, device_);
  void* event = nullptr;
  if (!free_events_.empty()) {
    event = AsPointer(free_events_.back());
    free_events_.pop_back();
  } else if (int e = cuda_.event_create_with_flags(&event, kCudaEventDisableTiming);
             e != kCudaSuccess) {
    return Error("cudaEventCreateWithFlags", e);
  }
  if (int e = cuda_.event_record(event, AsPointer(stream)); e != kCudaSuccess) {
    free_events_.push_back(reinterpret_cast<EventHandle>(event));
    return Error("cudaEventRecord", e);
  }
  return reinterpret_cast<EventHandle>(event);
}

absl::StatusOr<bool> RealCudaBackend::EventDone(EventHandle event) {
  const int e = cuda_.event_query(AsPointer(event));
  if (e == kCudaSuccess) return true;
  if (e == kCudaErrorNotReady) {
    cuda_.get_last_error();
    return false;
  }
  return Error("cudaEventQuery", e);
}

absl::Status RealCudaBackend::SynchronizeEvent(EventHandle event) {
  if (int e = cuda_.event_synchronize(AsPointer(event)); e != kCudaSuccess) {
    return Error("cudaEventSynchronize", e);
  }
  return absl::OkStatus();
}

void RealCudaBackend::ReleaseEvent(EventHandle event) { free_events_.push_back(event); }

}  // namespace fragscope::hooks
