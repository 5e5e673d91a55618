// PyTorch's native CUDA caching allocator for gpu_allocator_comparison, through LibTorch's
// c10::cuda::CUDACachingAllocator::raw_alloc_with_stream / raw_delete (raw_alloc on a given
// stream: the same malloc/free path a tensor takes, without the tensor). See gpu_allocator.h.
//
// The figures must be the native allocator's: this process links none of fragscope's hooks, and
// the factory refuses to run when another backend is installed or when fragscope's interposer
// was preloaded into the process anyway.
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <torch/headeronly/version.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/gpu_allocator.h"

namespace fragscope::bench {
namespace {

class TorchNativeAllocator final : public GpuAllocator {
 public:
  explicit TorchNativeAllocator(cudaStream_t stream) : stream_(stream) {}

  void* Allocate(uint64_t bytes) override {
    try {
      return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(bytes, stream_);
    } catch (const c10::Error& e) {  // c10::OutOfMemoryError included
      SetError(e.what_without_backtrace());
      return nullptr;
    }
  }

  void Free(void* ptr) override {
    try {
      c10::cuda::CUDACachingAllocator::raw_delete(ptr);
    } catch (const c10::Error& e) {
      SetError(e.what_without_backtrace());
    }
  }

  void Release() override {
    cudaStreamSynchronize(stream_);
    c10::cuda::CUDACachingAllocator::emptyCache();
  }

 private:
  cudaStream_t stream_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuAllocator>> MakeTorchNativeAllocator(
    const GpuContext& context, bool allow_fragscope_observer) {
  // Symbols that only fragscope's hook libraries define.
  for (const char* symbol : {"fragscope_preload_mark", "fragscope_malloc"}) {
    if (!allow_fragscope_observer && dlsym(RTLD_DEFAULT, symbol) != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("fragscope's hooks are loaded in this process (", symbol,
                       " is defined; LD_PRELOAD?): PyTorch's figures would not be native"));
    }
  }
  try {
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);  // runs the allocator's init()
    c10::cuda::CUDACachingAllocator::CUDAAllocator* native = c10::cuda::CUDACachingAllocator::get();
    const std::string name = native != nullptr ? native->name() : "none";
    if (name != "native") {
      return absl::FailedPreconditionError(absl::StrCat(
          "PyTorch's CUDA allocator backend is \"", name,
          "\", not \"native\" (PYTORCH_CUDA_ALLOC_CONF=backend:... or a pluggable allocator)"));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("LibTorch CUDA init: ", e.what_without_backtrace()));
  }
  return std::make_unique<TorchNativeAllocator>(static_cast<cudaStream_t>(context.stream));
}

std::string TorchVersion() { return TORCH_VERSION; }

}  // namespace fragscope::bench
