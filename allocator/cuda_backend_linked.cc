// CudaBackend over the CUDA runtime this binary links: the table of cudart functions (wrapped so
// that their types are those of CudaRuntimeTable), Create and DeviceCount. Compiled only into
// fragscope::cuda_backend, which links CUDA::cudart; the interposer never includes this file.
#include <cuda_runtime_api.h>

#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "allocator/cuda_backend.h"
#include "allocator/cuda_vmm.h"

namespace fragscope {

// The table's error codes are the runtime's.
constexpr bool SameCode(CudaErrorCode ours, cudaError_t theirs) {
  return static_cast<int>(ours) == static_cast<int>(theirs);
}
static_assert(SameCode(kCudaSuccess, cudaSuccess) &&
              SameCode(kCudaErrorInvalidValue, cudaErrorInvalidValue) &&
              SameCode(kCudaErrorMemoryAllocation, cudaErrorMemoryAllocation) &&
              SameCode(kCudaErrorInitializationError, cudaErrorInitializationError) &&
              SameCode(kCudaErrorCudartUnloading, cudaErrorCudartUnloading) &&
              SameCode(kCudaErrorNotReady, cudaErrorNotReady));
static_assert(kCudaEventDisableTiming == cudaEventDisableTiming);

namespace {

const char* ErrorName(int error) { return cudaGetErrorName(static_cast<cudaError_t>(error)); }
const char* ErrorString(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

CudaRuntimeTable MakeLinkedTable() {
  CudaRuntimeTable t;
  t.get_device = [](int* device) -> int { return cudaGetDevice(device); };
  t.set_device = [](int device) -> int { return cudaSetDevice(device); };
  t.malloc = [](void** ptr, size_t size) -> int { return cudaMalloc(ptr, size); };
  t.free = [](void* ptr) -> int { return cudaFree(ptr); };
  t.mem_get_info = [](size_t* free_bytes, size_t* total_bytes) -> int {
    return cudaMemGetInfo(free_bytes, total_bytes);
  };
  t.get_last_error = []() -> int { return cudaGetLastError(); };
  t.event_create_with_flags = [](void** event, unsigned flags) -> int {
    cudaEvent_t created = nullptr;
    const cudaError_t e = cudaEventCreateWithFlags(&created, flags);
    *event = created;
    return e;
  };
  t.event_record = [](void* event, void* stream) -> int {
    return cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream));
  };
  t.event_query = [](void* event) -> int {
    return cudaEventQuery(static_cast<cudaEvent_t>(event));
  };
  t.event_synchronize = [](void* event) -> int {
    return cudaEventSynchronize(static_cast<cudaEvent_t>(event));
  };
  t.event_destroy = [](void* event) -> int {
    return cudaEventDestroy(static_cast<cudaEvent_t>(event));
  };
  t.get_error_name = ErrorName;
  t.get_error_string = ErrorString;
  return t;
}

}  // namespace

const CudaRuntimeTable& LinkedCudaRuntime() {
  static const CudaRuntimeTable table = MakeLinkedTable();
  return table;
}

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
    (void)cudaGetLastError();  // clear the sticky per-thread error
    const std::string message = absl::StrFormat("cudaGetDeviceProperties failed: %s (%s)",
                                                cudaGetErrorName(e), cudaGetErrorString(e));
    if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
    return absl::InternalError(message);
  }
  // Device-independent driver queries: no device switch (cudaSetDevice may create the context).
  std::unique_ptr<VirtualMemory> vmm = CudaVirtualMemory::Create(device, prop.name);
  return std::make_unique<CudaBackend>(LinkedCudaRuntime(), device, prop.name, std::move(vmm));
}

}  // namespace fragscope
