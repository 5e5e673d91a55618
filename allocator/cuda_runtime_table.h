// CudaRuntimeTable: the CUDA runtime functions CudaBackend calls, as a table of function pointers,
// so that one backend serves both the libraries that link the CUDA runtime and the interposer,
// which must not (hooks/real_cuda.h finds the process's own runtime with dlsym instead). The
// system calls are injected the way tcmalloc injects its own: the backend never names a CUDA
// function, only the table's members.
//
// No CUDA header is included here: error codes are ints (cudaError_t is an enum, passed as int on
// the C ABI) and handles are void* (cudaEvent_t and cudaStream_t are pointers). The values below
// are those of driver_types.h, unchanged since CUDA 11; cuda_backend_linked.cc checks them against
// the headers at compile time.
#pragma once

#include <cstddef>

namespace fragscope {

// cudaError_t values.
enum CudaErrorCode : int {
  kCudaSuccess = 0,
  kCudaErrorInvalidValue = 1,
  kCudaErrorMemoryAllocation = 2,
  kCudaErrorInitializationError = 3,
  kCudaErrorCudartUnloading = 4,
  kCudaErrorNotReady = 600,
};
// cudaEventDisableTiming.
inline constexpr unsigned kCudaEventDisableTiming = 0x02;

// Each member is the runtime function of its name (get_device is cudaGetDevice,
// event_create_with_flags is cudaEventCreateWithFlags), with int for cudaError_t and void* for
// handles. CudaBackend REQUIRES every member but the two error texts to be set.
struct CudaRuntimeTable {
  int (*get_device)(int* device) = nullptr;
  int (*set_device)(int device) = nullptr;
  int (*malloc)(void** ptr, size_t size) = nullptr;
  int (*free)(void* ptr) = nullptr;
  int (*mem_get_info)(size_t* free_bytes, size_t* total_bytes) = nullptr;
  int (*get_last_error)() = nullptr;
  int (*event_create_with_flags)(void** event, unsigned flags) = nullptr;
  int (*event_record)(void* event, void* stream) = nullptr;
  int (*event_query)(void* event) = nullptr;
  int (*event_synchronize)(void* event) = nullptr;
  int (*event_destroy)(void* event) = nullptr;
  // Error texts for messages (cudaGetErrorName, cudaGetErrorString); either may be null:
  // "unknown CUDA error" then stands for the name, the error's number for the description.
  const char* (*get_error_name)(int error) = nullptr;
  const char* (*get_error_string)(int error) = nullptr;
};

// The CUDA runtime this binary links (CUDA::cudart), every member set. Defined in
// cuda_backend_linked.cc, which only the libraries linking the runtime compile.
const CudaRuntimeTable& LinkedCudaRuntime();

}  // namespace fragscope
