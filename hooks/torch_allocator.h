// LibTorch registration of fragscope's allocator (mode 1, replace) for C++ jobs, and fragscope's
// statistics, summary and snapshot from C++ (PyTorch's own memory_stats, memory_summary and
// memory_snapshot raise "CUDAPluggableAllocator does not yet support ..." with a pluggable
// allocator installed).
//
//   #include "hooks/torch_allocator.h"
//   int main() {
//     absl::Status s = fragscope::torch_hooks::UseFragscopeAllocator(
//         {.conf = "max_split_size_mb:128", .log = "/tmp/job.%r.%d.fslog"});
//     if (!s.ok()) { std::cerr << s << "\n"; return 1; }
//     ... build the model, train ...
//   }
//
// Link libfragscope_torch.so (which loads libfragscope_alloc.so). The allocator is the C ABI of
// fragscope_alloc.h installed through torch::cuda::CUDAPluggableAllocator::createCustomAllocator
// and changeCurrentAllocator, with the optional hooks (init, empty_cache, memory fraction,
// record_stream) set. Unlike the bare C ABI, this registration turns an out-of-memory NULL into a
// c10::OutOfMemoryError (torch.OutOfMemoryError in Python) carrying fragscope's OOM report,
// because the allocation function handed to PyTorch is C++ here and may throw.
//
// Only files named hooks/torch_* include LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace fragscope::torch_hooks {

struct UseAllocatorOptions {
  // PYTORCH_CUDA_ALLOC_CONF syntax; nullopt = the FRAGSCOPE_ALLOC_CONF environment variable.
  std::optional<std::string> conf;
  // .fslog path pattern (%p pid, %r rank, %d device); nullopt = FRAGSCOPE_LOG, "" = no log.
  std::optional<std::string> log;
};

// Installs fragscope as the current CUDA allocator. Call it before any CUDA tensor exists.
// Errors: kFailedPrecondition when PyTorch's CUDA allocator is already initialized (CUDA was used
// first) or another pluggable allocator is installed; kInvalidArgument for a bad conf or log
// pattern (the message names the key and value); kInternal for an unexpected LibTorch error.
absl::Status UseFragscopeAllocator(const UseAllocatorOptions& options = {});

// torch.cuda.memory_stats(device) of fragscope's allocator: (key, value) in PyTorch's key order.
std::vector<std::pair<std::string, int64_t>> MemoryStats(int device);
// torch.cuda.memory_summary(device) of fragscope's allocator.
std::string MemorySummary(int device);
// The segments and blocks as JSON with torch.cuda.memory_snapshot()'s field names
// (hooks/snapshot_json.h).
std::string MemorySnapshotJson(int device);
// A phase marker ("step 12 / forward") in fragscope's logs.
void Mark(const std::string& text);

}  // namespace fragscope::torch_hooks
