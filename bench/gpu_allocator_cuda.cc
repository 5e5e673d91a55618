// The CUDA-runtime allocators of gpu_allocator_comparison: fragscope's CachingAllocator over
// CudaBackend (with and without the .fslog writer), cudaMallocAsync on the default memory pool,
// and plain cudaMalloc/cudaFree. See gpu_allocator.h.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/allocator_options.h"
#include "allocator/caching_allocator.h"
#include "allocator/cuda_backend.h"
#include "allocator/format_size.h"
#include "bench/gpu_allocator.h"
#include "fslog/fslog_writer.h"

namespace fragscope::bench {
namespace {

std::string CudaError(const char* call, cudaError_t error) {
  return absl::StrCat(call, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
}

cudaStream_t Stream(const GpuContext& context) { return static_cast<cudaStream_t>(context.stream); }

// --- fragscope ---

class FragscopeAllocator final : public GpuAllocator {
 public:
  FragscopeAllocator(std::unique_ptr<CudaBackend> backend, const AllocatorOptions& options,
                     cudaStream_t stream)
      : backend_(std::move(backend)),
        allocator_(std::make_unique<CachingAllocator>(*backend_, options)),
        cuda_stream_(stream),
        stream_(reinterpret_cast<StreamId>(stream)) {}

  ~FragscopeAllocator() override {
    cudaStreamSynchronize(cuda_stream_);
    if (log_ != nullptr) allocator_->RemoveObserver(log_.get());
    allocator_.reset();  // before the backend it uses
    if (log_ != nullptr) {
      const std::string path = log_->path();
      log_.reset();
      if (!keep_log_) std::remove(path.c_str());
    }
  }

  absl::Status AttachLog(const std::string& path, bool keep_log) {
    FslogHeaderInfo info;
    info.device_name = backend_->name();
    info.device_total_bytes = backend_->MemInfo().total_bytes;
    info.device_index = backend_->device();
    info.allocator_options = FormatAllocatorOptions(allocator_->options());
    absl::StatusOr<std::unique_ptr<FslogWriter>> writer = FslogWriter::Open(path, info);
    if (!writer.ok()) return writer.status();
    log_ = *std::move(writer);
    keep_log_ = keep_log;
    allocator_->AddObserver(log_.get());
    return absl::OkStatus();
  }

  void* Allocate(uint64_t bytes) override {
    absl::StatusOr<DevicePtr> ptr = allocator_->Allocate(bytes, stream_);
    if (!ptr.ok()) {
      SetError(std::string(ptr.status().message()));
      return nullptr;
    }
    return reinterpret_cast<void*>(*ptr);
  }

  void Free(void* ptr) override {
    absl::Status status = allocator_->Free(reinterpret_cast<DevicePtr>(ptr));
    if (!status.ok()) SetError(std::string(status.message()));
  }

  void Release() override {
    cudaStreamSynchronize(cuda_stream_);
    allocator_->EmptyCache();
    if (log_ != nullptr) {
      if (absl::Status s = log_->Flush(); !s.ok()) SetError(std::string(s.message()));
    }
  }

  std::string Notes() const override {
    if (log_ == nullptr) return "";
    return absl::StrFormat(
        "log %s: %d records dropped so far (the writer drops rather than "
        "block when the disk falls behind)",
        log_->path(), log_->dropped_records());
  }

 private:
  std::unique_ptr<CudaBackend> backend_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<FslogWriter> log_;
  bool keep_log_ = false;
  cudaStream_t cuda_stream_;
  StreamId stream_;
};

// --- cudaMallocAsync ---

class CudaMallocAsyncAllocator final : public GpuAllocator {
 public:
  CudaMallocAsyncAllocator(cudaStream_t stream, cudaMemPool_t pool, uint64_t old_threshold)
      : stream_(stream), pool_(pool), old_threshold_(old_threshold) {}

  ~CudaMallocAsyncAllocator() override {
    Release();
    cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &old_threshold_);
  }

  void* Allocate(uint64_t bytes) override {
    void* ptr = nullptr;
    if (cudaError_t e = cudaMallocAsync(&ptr, bytes, stream_); e != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error, as PyTorch does after an OOM
      SetError(CudaError("cudaMallocAsync", e));
      return nullptr;
    }
    return ptr;
  }

  void Free(void* ptr) override {
    if (cudaError_t e = cudaFreeAsync(ptr, stream_); e != cudaSuccess) {
      SetError(CudaError("cudaFreeAsync", e));
    }
  }

  void Release() override {
    cudaStreamSynchronize(stream_);
    cudaMemPoolTrimTo(pool_, 0);
  }

 private:
  cudaStream_t stream_;
  cudaMemPool_t pool_;
  uint64_t old_threshold_;
};

// --- cudaMalloc / cudaFree ---

class CudaMallocAllocator final : public GpuAllocator {
 public:
  void* Allocate(uint64_t bytes) override {
    void* ptr = nullptr;
    if (cudaError_t e = cudaMalloc(&ptr, bytes); e != cudaSuccess) {
      cudaGetLastError();
      SetError(CudaError("cudaMalloc", e));
      return nullptr;
    }
    return ptr;
  }

  void Free(void* ptr) override {
    if (cudaError_t e = cudaFree(ptr); e != cudaSuccess) SetError(CudaError("cudaFree", e));
  }

  void Release() override { cudaDeviceSynchronize(); }
};

}  // namespace

int CudaDeviceCount(std::string* why) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();
    *why = CudaError("cudaGetDeviceCount", e);
    return 0;
  }
  if (count == 0) *why = "cudaGetDeviceCount: 0 devices";
  return count;
}

absl::StatusOr<GpuContext> CreateGpuContext(int device) {
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return absl::FailedPreconditionError(CudaError("cudaSetDevice", e));
  }
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    return absl::InternalError(CudaError("cudaStreamCreateWithFlags", e));
  }
  return GpuContext{device, stream};
}

void DestroyGpuContext(const GpuContext& context) {
  cudaStreamSynchronize(Stream(context));
  cudaStreamDestroy(Stream(context));
}

std::string DescribeDevice(int device) {
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) {
    return CudaError("cudaGetDeviceProperties", e);
  }
  int driver = 0;
  int runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return absl::StrFormat(
      "%s (device %d, %s, compute capability %d.%d), CUDA driver API %d.%d, "
      "runtime %d.%d",
      prop.name, device, FormatSize(prop.totalGlobalMem), prop.major, prop.minor, driver / 1000,
      (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10);
}

absl::StatusOr<std::unique_ptr<GpuAllocator>> MakeFragscopeAllocator(const GpuContext& context,
                                                                     const std::string& conf,
                                                                     const std::string& log_path,
                                                                     bool keep_log) {
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(conf);
  if (!options.ok()) return options.status();
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create(context.device);
  if (!backend.ok()) return backend.status();
  auto allocator =
      std::make_unique<FragscopeAllocator>(*std::move(backend), *options, Stream(context));
  if (!log_path.empty()) {
    if (absl::Status s = allocator->AttachLog(log_path, keep_log); !s.ok()) return s;
  }
  return allocator;
}

absl::StatusOr<std::unique_ptr<GpuAllocator>> MakeCudaMallocAsyncAllocator(
    const GpuContext& context) {
  cudaMemPool_t pool = nullptr;
  if (cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, context.device); e != cudaSuccess) {
    return absl::FailedPreconditionError(CudaError("cudaDeviceGetDefaultMemPool", e));
  }
  uint64_t old_threshold = 0;
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &old_threshold);
  uint64_t keep_everything = std::numeric_limits<uint64_t>::max();
  if (cudaError_t e =
          cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything);
      e != cudaSuccess) {
    return absl::InternalError(CudaError("cudaMemPoolSetAttribute(ReleaseThreshold)", e));
  }
  return std::make_unique<CudaMallocAsyncAllocator>(Stream(context), pool, old_threshold);
}

absl::StatusOr<std::unique_ptr<GpuAllocator>> MakeCudaMallocAllocator(const GpuContext&) {
  return std::make_unique<CudaMallocAllocator>();
}

}  // namespace fragscope::bench
