// RealCuda: the CUDA runtime functions the interposer forwards to, resolved without the CUDA
// headers or libraries (libfragscope_preload.so must not pull a libcudart of its own into a
// process: PyTorch brings its own, and two would disagree).
//
// Resolution (ResolveRealCuda) happens once, at the first interposed call: dlsym(RTLD_NEXT) finds
// the next definition after libfragscope_preload.so in the global scope, which is the program's
// libcudart when it is linked against it or loaded RTLD_GLOBAL (PyTorch loads libcudart.so.13
// through libtorch_global_deps.so with RTLD_GLOBAL). If that fails (a libcudart dlopen()ed with
// RTLD_LOCAL), the loaded objects are searched for one named libcudart.so* and asked directly.
// A versioned reference (cudaMalloc@libcudart.so.13) binds to our unversioned definition, and
// dlsym returns the default version of the real one.
//
// The ABI facts used here (signatures; error codes and flag values in
// allocator/cuda_runtime_table.h) are those of driver_types.h and cuda_runtime_api.h, unchanged
// since CUDA 11. Cache mode runs CudaBackend (allocator/cuda_backend.h) over RealCudaTable.
#pragma once

#include <cstddef>
#include <string>

#include "allocator/cuda_runtime_table.h"

namespace fragscope::hooks {

struct RealCuda {
  int (*malloc)(void** ptr, size_t size) = nullptr;
  int (*free)(void* ptr) = nullptr;
  int (*malloc_async)(void** ptr, size_t size, void* stream) = nullptr;
  int (*free_async)(void* ptr, void* stream) = nullptr;
  int (*malloc_async_ptsz)(void** ptr, size_t size, void* stream) = nullptr;
  int (*free_async_ptsz)(void* ptr, void* stream) = nullptr;
  int (*mem_get_info)(size_t* free_bytes, size_t* total_bytes) = nullptr;
  int (*get_device)(int* device) = nullptr;
  int (*set_device)(int device) = nullptr;
  int (*device_synchronize)() = nullptr;
  int (*get_last_error)() = nullptr;
  const char* (*get_error_name)(int error) = nullptr;
  // cudaGetDeviceProperties_v2 (CUDA 12+) or cudaGetDeviceProperties; only the name (the first
  // field, char[256]) is read.
  int (*get_device_properties)(void* prop, int device) = nullptr;
  int (*event_create_with_flags)(void** event, unsigned flags) = nullptr;
  int (*event_record)(void* event, void* stream) = nullptr;
  int (*event_query)(void* event) = nullptr;
  int (*event_synchronize)(void* event) = nullptr;
  int (*event_destroy)(void* event) = nullptr;

  // malloc and free are the minimum for observe mode; cache mode needs the device and event
  // functions too.
  bool CanObserve() const { return malloc != nullptr && free != nullptr; }
  bool CanCache() const;
};

// The real functions, or nullptr while cudaMalloc/cudaFree cannot be found (a later call tries
// again; once found, the table never changes). Thread-safe.
const RealCuda* ResolveRealCuda();

// The table CudaBackend calls, made of the resolved functions (no error descriptions: the backend's
// messages carry the error's name and number). REQUIRES: cuda.CanCache().
CudaRuntimeTable RealCudaTable(const RealCuda& cuda);

// The device's name from cudaGetDeviceProperties, or "CUDA device N".
std::string RealDeviceName(const RealCuda& cuda, int device);

}  // namespace fragscope::hooks
