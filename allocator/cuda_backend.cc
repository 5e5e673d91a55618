#include "allocator/cuda_backend.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace fragscope {
namespace {

// Makes `device` current for the scope and restores the previous device.
class DeviceGuard {
 public:
  DeviceGuard(const CudaRuntimeTable& cuda, int device) : cuda_(cuda) {
    if (cuda_.get_device(&previous_) != kCudaSuccess) previous_ = -1;
    if (previous_ != device) cuda_.set_device(device);
  }
  ~DeviceGuard() {
    int current = -1;
    if (previous_ >= 0 && cuda_.get_device(&current) == kCudaSuccess && current != previous_) {
      cuda_.set_device(previous_);
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  const CudaRuntimeTable& cuda_;
  int previous_ = -1;
};

void* AsPointer(uint64_t value) { return reinterpret_cast<void*>(value); }

}  // namespace

CudaBackend::CudaBackend(const CudaRuntimeTable& runtime, int device, std::string name,
                         std::unique_ptr<VirtualMemory> vmm)
    : cuda_(runtime), device_(device), name_(std::move(name)), vmm_(std::move(vmm)) {}

CudaBackend::~CudaBackend() {
  if (vmm_ != nullptr && !vmm_->empty()) {
    DeviceGuard guard(cuda_, device_);
    vmm_.reset();  // synchronizes the device, then unmaps and frees what is left
  }
  for (EventHandle event : free_events_) cuda_.event_destroy(AsPointer(event));
}

absl::Status CudaBackend::Error(const char* call, int error) const {
  cuda_.get_last_error();  // clear the sticky per-thread error
  const char* name = cuda_.get_error_name != nullptr ? cuda_.get_error_name(error) : nullptr;
  const char* text = cuda_.get_error_string != nullptr ? cuda_.get_error_string(error) : nullptr;
  const std::string message =
      absl::StrFormat("%s failed: %s (%s)", call, name != nullptr ? name : "unknown CUDA error",
                      text != nullptr ? std::string(text) : absl::StrFormat("%d", error));
  if (error == kCudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::StatusOr<DevicePtr> CudaBackend::Malloc(uint64_t bytes) {
  DeviceGuard guard(cuda_, device_);
  void* ptr = nullptr;
  if (int e = cuda_.malloc(&ptr, bytes); e != kCudaSuccess) return Error("cudaMalloc", e);
  return reinterpret_cast<DevicePtr>(ptr);
}

absl::Status CudaBackend::Free(DevicePtr ptr) {
  DeviceGuard guard(cuda_, device_);
  if (int e = cuda_.free(AsPointer(ptr)); e != kCudaSuccess) return Error("cudaFree", e);
  return absl::OkStatus();
}

DeviceMemInfo CudaBackend::MemInfo() {
  DeviceGuard guard(cuda_, device_);
  size_t free_bytes = 0, total_bytes = 0;
  if (cuda_.mem_get_info(&free_bytes, &total_bytes) != kCudaSuccess) {
    cuda_.get_last_error();
    return {};
  }
  return {free_bytes, total_bytes};
}

absl::StatusOr<EventHandle> CudaBackend::RecordEvent(StreamId stream) {
  DeviceGuard guard(cuda_, device_);
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

absl::StatusOr<bool> CudaBackend::EventDone(EventHandle event) {
  const int e = cuda_.event_query(AsPointer(event));
  if (e == kCudaSuccess) return true;
  if (e == kCudaErrorNotReady) {
    cuda_.get_last_error();
    return false;
  }
  return Error("cudaEventQuery", e);
}

absl::Status CudaBackend::SynchronizeEvent(EventHandle event) {
  if (int e = cuda_.event_synchronize(AsPointer(event)); e != kCudaSuccess) {
    return Error("cudaEventSynchronize", e);
  }
  return absl::OkStatus();
}

void CudaBackend::ReleaseEvent(EventHandle event) { free_events_.push_back(event); }

uint64_t CudaBackend::PageGranularity() const {
  return vmm_ != nullptr ? vmm_->granularity_bytes() : DeviceBackend::PageGranularity();
}

absl::StatusOr<DevicePtr> CudaBackend::ReserveAddressRange(uint64_t bytes) {
  if (vmm_ == nullptr) return DeviceBackend::ReserveAddressRange(bytes);
  DeviceGuard guard(cuda_, device_);
  return vmm_->ReserveAddressRange(bytes);
}

absl::Status CudaBackend::MapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes) {
  if (vmm_ == nullptr) return DeviceBackend::MapPages(ptr, bytes, page_bytes);
  DeviceGuard guard(cuda_, device_);
  return vmm_->MapPages(ptr, bytes, page_bytes);
}

absl::Status CudaBackend::UnmapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes,
                                     StreamId stream) {
  if (vmm_ == nullptr) return DeviceBackend::UnmapPages(ptr, bytes, page_bytes, stream);
  DeviceGuard guard(cuda_, device_);
  return vmm_->UnmapPages(ptr, bytes, page_bytes, stream);
}

absl::Status CudaBackend::ReleaseAddressRange(DevicePtr base, uint64_t bytes) {
  if (vmm_ == nullptr) return DeviceBackend::ReleaseAddressRange(base, bytes);
  DeviceGuard guard(cuda_, device_);
  return vmm_->ReleaseAddressRange(base, bytes);
}

}  // namespace fragscope
