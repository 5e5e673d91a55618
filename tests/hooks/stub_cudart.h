// The test-only interface of libfragscope_stub_cudart.so (stub_cudart.cc), a host-memory stand-in
// for the CUDA runtime. The CUDA functions themselves are declared where they are used, with int
// for cudaError_t, as the interposer declares them.
#pragma once

#include <cstddef>
#include <cstdint>

struct StubCudartCounters {
  int64_t malloc_calls = 0;  // cudaMalloc, including the ones cudaMallocAsync makes
  int64_t free_calls = 0;    // cudaFree, including the ones cudaFreeAsync makes and NULL frees
  int64_t malloc_async_calls = 0;
  int64_t free_async_calls = 0;
  int64_t device_synchronize_calls = 0;
  uint64_t live_bytes = 0;  // allocated and not freed, all devices
};

extern "C" {
void stub_cudart_counters(StubCudartCounters* out);

int cudaMalloc(void** ptr, size_t size);
int cudaFree(void* ptr);
int cudaMallocAsync(void** ptr, size_t size, void* stream);
int cudaFreeAsync(void* ptr, void* stream);
int cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
int cudaGetDevice(int* device);
int cudaSetDevice(int device);
int cudaGetLastError(void);
}
