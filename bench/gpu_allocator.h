// GpuAllocator: one device allocator under test in gpu_allocator_comparison, behind the smallest
// interface the workloads need (allocate, free, give the cache back), so that every allocator
// pays the same harness cost (one virtual call per operation).
//
// Implementations, all on one device and one stream (GpuContext):
//   fragscope        CachingAllocator over CudaBackend (PyTorch's policy, fragscope's code),
//                    optionally with the .fslog FslogWriter attached   gpu_allocator_cuda.cc
//   cudaMallocAsync  stream-ordered allocation from the device's default memory pool, its
//                    release threshold raised to UINT64_MAX so that it caches gpu_allocator_cuda.cc
//   cudaMalloc       cudaMalloc / cudaFree, no caching (cudaFree synchronizes)
//   gpu_allocator_cuda.cc PyTorch native   c10::cuda::CUDACachingAllocator::raw_alloc_with_stream /
//   raw_delete through
//                    LibTorch; refuses to run unless the native allocator is the one installed
//                                                                         gpu_allocator_torch.cc
// Only the two .cc files include CUDA or LibTorch headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace fragscope::bench {

class GpuAllocator {
 public:
  virtual ~GpuAllocator() = default;

  // Returns nullptr when the allocation fails; error() then says why.
  // REQUIRES: bytes > 0.
  virtual void* Allocate(uint64_t bytes) = 0;
  // REQUIRES: ptr came from Allocate and was not freed since.
  virtual void Free(void* ptr) = 0;
  // Waits for the stream and returns every cached byte to the device. Called between workloads,
  // never timed.
  virtual void Release() = 0;
  // Facts for the report (e.g. log records dropped); "" when none.
  virtual std::string Notes() const { return ""; }

  // The first error met by Allocate or Free since the last ClearError; "" when none.
  const std::string& error() const { return error_; }
  void ClearError() { error_.clear(); }

 protected:
  void SetError(std::string error) {
    if (error_.empty()) error_ = std::move(error);
  }

 private:
  std::string error_;
};

// Where the allocators run. `stream` is a cudaStream_t.
struct GpuContext {
  int device = 0;
  void* stream = nullptr;
};

// --- gpu_allocator_cuda.cc ---

// The number of CUDA devices; 0 with `why` set when there is no driver or no device.
int CudaDeviceCount(std::string* why);

// Makes `device` current and creates a non-blocking stream on it.
absl::StatusOr<GpuContext> CreateGpuContext(int device);
void DestroyGpuContext(const GpuContext& context);

// "NVIDIA H100 80GB HBM3, 79.19 GiB, driver API 13.0, runtime 13.0, CC 9.0".
std::string DescribeDevice(int device);

// fragscope's CachingAllocator over CudaBackend with `conf` (PYTORCH_CUDA_ALLOC_CONF syntax).
// A non-empty `log_path` attaches an FslogWriter with its default options (it drops records
// rather than block when the disk falls behind, as in a job); the file is removed on destruction
// unless `keep_log`.
absl::StatusOr<std::unique_ptr<GpuAllocator>> MakeFragscopeAllocator(const GpuContext& context,
                                                                     const std::string& conf,
                                                                     const std::string& log_path,
                                                                     bool keep_log);

absl::StatusOr<std::unique_ptr<GpuAllocator>> MakeCudaMallocAsyncAllocator(
    const GpuContext& context);

absl::StatusOr<std::unique_ptr<GpuAllocator>> MakeCudaMallocAllocator(const GpuContext& context);

// --- gpu_allocator_torch.cc ---

// PyTorch's native caching allocator. kFailedPrecondition when another allocator backend is
// installed (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, a pluggable allocator) or, unless
// `allow_fragscope_observer` (gpu_history_overhead links fragscope's observer, which only reads),
// when fragscope's hooks are loaded in this process (LD_PRELOAD).
absl::StatusOr<std::unique_ptr<GpuAllocator>> MakeTorchNativeAllocator(
    const GpuContext& context, bool allow_fragscope_observer = false);

// "2.11.0" (the LibTorch headers this binary was built with).
std::string TorchVersion();

}  // namespace fragscope::bench
