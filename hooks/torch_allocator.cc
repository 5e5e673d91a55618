#include "hooks/torch_allocator.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <exception>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "hooks/fragscope_alloc.h"

namespace fragscope::torch_hooks {
namespace {

using PluggableAllocator = torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;

// The allocation function PyTorch calls. It is C++ (a std::function), so unlike the C ABI it may
// throw: NULL for a non-empty request becomes the exception PyTorch's own allocator would raise.
void* AllocateOrThrow(size_t size, int device, cudaStream_t stream) {
  void* ptr = fragscope_malloc(size, device, stream);
  if (ptr != nullptr || size == 0) return ptr;
  const std::string error = fragscope_last_error();
  if (absl::StrContains(error, "out of memory")) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "fragscope: ", error);
  }
  TORCH_CHECK(false, "fragscope could not allocate ", size, " bytes on device ", device, ": ",
              error);
}

}  // namespace

absl::Status UseFragscopeAllocator(const UseAllocatorOptions& options) {
  try {
    c10::cuda::CUDACachingAllocator::CUDAAllocator* current =
        c10::cuda::CUDACachingAllocator::get();
    if (current != nullptr && current->initialized()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "PyTorch's CUDA allocator (\"", current->name(),
          "\") is already initialized: install fragscope before the first CUDA tensor, "
          "torch.cuda.init() or any other CUDA use (see hooks/README.md)"));
    }
    if (fragscope_configure(options.conf ? options.conf->c_str() : nullptr,
                            options.log ? options.log->c_str() : nullptr) != 0) {
      return absl::InvalidArgumentError(fragscope_last_error());
    }
    std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> allocator =
        torch::cuda::CUDAPluggableAllocator::createCustomAllocator(&AllocateOrThrow,
                                                                   &fragscope_free);
    auto pluggable = std::dynamic_pointer_cast<PluggableAllocator>(allocator);
    if (pluggable == nullptr) {
      return absl::InternalError("createCustomAllocator did not return a CUDAPluggableAllocator");
    }
    pluggable->set_init_fn(&fragscope_init);
    pluggable->set_reset_fn(&fragscope_empty_cache);
    pluggable->set_memory_fraction_fn(&fragscope_set_memory_fraction);
    pluggable->set_record_stream_fn(&fragscope_record_stream);
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(allocator);
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("installing fragscope's allocator failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("installing fragscope's allocator failed: ", e.what()));
  }
}

std::vector<std::pair<std::string, int64_t>> MemoryStats(int device) {
  const int count = fragscope_stat_count();
  std::vector<int64_t> values(static_cast<size_t>(count));
  std::vector<std::pair<std::string, int64_t>> stats;
  if (fragscope_stat_values(device, values.data(), count) != count) return stats;
  for (int i = 0; i < count; ++i) {
    stats.emplace_back(fragscope_stat_key(i), values[static_cast<size_t>(i)]);
  }
  return stats;
}

namespace {
template <typename Fn>
std::string TextOf(Fn fn, int device) {
  std::string text(fn(device, nullptr, 0), '\0');
  const size_t written = fn(device, text.data(), text.size() + 1);  // room for the NUL
  text.resize(std::min(written, text.size()));
  return text;
}
}  // namespace

std::string MemorySummary(int device) { return TextOf(&fragscope_memory_summary, device); }

std::string MemorySnapshotJson(int device) { return TextOf(&fragscope_snapshot_json, device); }

void Mark(const std::string& text) { fragscope_mark(text.c_str()); }

}  // namespace fragscope::torch_hooks
