#include "hooks/torch_observer.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "allocator/alloc_conf_env.h"
#include "allocator/allocator_options.h"
#include "hooks/hook_config.h"
#include "hooks/torch_trace_observer.h"

namespace fragscope::torch_hooks {
namespace {

using c10::CachingDeviceAllocator::TraceEntry;
using hooks::kMaxDevices;

// The allocator options PyTorch parsed at startup, from the same environment variables.
std::string NativeAllocConf() {
  std::optional<AllocConfEnv> env = ReadAllocConfEnv(ProcessEnv);
  return env.has_value() ? std::move(env->value) : std::string();
}

double NativeMemoryFraction(int device) {
  return c10::cuda::CUDACachingAllocator::getMemoryFraction(static_cast<c10::DeviceIndex>(device));
}

std::mutex g_mu;
TraceObserver* g_observer = nullptr;  // guarded by g_mu for writes; never freed

// The hook's settings for observing into `log_pattern` ("" = FRAGSCOPE_LOG), which must name one.
absl::StatusOr<hooks::HookConfig> LoadObserveConfig(std::string_view log_pattern) {
  absl::StatusOr<hooks::HookConfig> config = hooks::LoadHookConfig(
      "", log_pattern.empty() ? std::nullopt : std::optional<std::string_view>(log_pattern));
  if (config.ok() && config->log_pattern.empty()) {
    return absl::InvalidArgumentError(
        "observe needs a log path pattern (argument or FRAGSCOPE_LOG), e.g. "
        "/tmp/job.%r.%d.fslog");
  }
  return config;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TraceObserver>> MakeNativeObserver(std::string_view log_pattern) {
  try {
    absl::StatusOr<hooks::HookConfig> config = LoadObserveConfig(log_pattern);
    if (!config.ok()) return config.status();
    // The native allocator attaches trackers only to the devices its init() has set up.
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    c10::cuda::CUDACachingAllocator::CUDAAllocator* native = c10::cuda::CUDACachingAllocator::get();
    if (native == nullptr || native->name() != "native") {
      return absl::FailedPreconditionError(absl::StrCat(
          "observe needs PyTorch's native CUDA caching allocator, the current one is \"",
          native != nullptr ? native->name() : std::string("none"),
          "\" (a pluggable allocator logs itself; backend:cudaMallocAsync is not traced)"));
    }

    const std::string alloc_conf = NativeAllocConf();
    absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(alloc_conf);
    if (!options.ok()) {
      std::fprintf(stderr,
                   "fragscope: observe: cannot parse PyTorch's allocator conf \"%s\" (%s); block "
                   "sizes in the log assume PyTorch's defaults, and the memory fraction is not "
                   "recorded\n",
                   alloc_conf.c_str(), std::string(options.status().message()).c_str());
    }
    auto observer = std::make_unique<TraceObserver>(
        config->log_pattern, config->log_options,
        options.ok() ? std::optional<AllocatorOptions>(*options) : std::nullopt,
        &NativeMemoryFraction);
    // The current device's header also gets the memory outside the allocator at this moment
    // (Note [Who wrote the log]): here, not under PyTorch's lock, its stats and cudaMemGetInfo may
    // be asked. Devices opened later, at their first event under the lock, go without it.
    const int current = c10::cuda::current_device();
    const int device_count = std::min<int>(c10::cuda::device_count(), kMaxDevices);
    for (int d = 0; d < device_count; ++d) {
      const auto index = static_cast<c10::DeviceIndex>(d);
      const cudaDeviceProp* prop = at::cuda::getDeviceProperties(index);
      FslogHeaderInfo header;
      header.device_name = prop->name;
      header.device_total_bytes = prop->totalGlobalMem;
      header.device_index = d;
      header.allocator_options = alloc_conf;
      size_t free_bytes = 0, total_bytes = 0;
      if (d == current && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
        header.device_free_bytes = free_bytes;
        const c10::CachingDeviceAllocator::DeviceStats stats =
            c10::cuda::CUDACachingAllocator::getDeviceStats(index);
        header.reserved_bytes =
            static_cast<uint64_t>(std::max<int64_t>(stats.reserved_bytes[0].current, 0));
      }
      observer->AddDevice(d, std::move(header), NativeMemoryFraction(d));
    }
    // Open the current device's log now rather than under PyTorch's lock at its first event.
    if (current >= 0 && current < device_count) observer->Log(current);
    return observer;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("observe: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("observe: ", e.what()));
  }
}

absl::Status ObserveNativeAllocator(std::string_view log_pattern) {
  try {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_observer != nullptr) {
      absl::StatusOr<hooks::HookConfig> config = LoadObserveConfig(log_pattern);
      if (!config.ok()) return config.status();
      if (g_observer->pattern() == config->log_pattern) return absl::OkStatus();
      return absl::FailedPreconditionError(
          absl::StrCat("already observing PyTorch's allocator into \"", g_observer->pattern(),
                       "\" (a trace tracker cannot be detached)"));
    }
    absl::StatusOr<std::unique_ptr<TraceObserver>> observer = MakeNativeObserver(log_pattern);
    if (!observer.ok()) return observer.status();
    // Lives as long as the process: PyTorch keeps the tracker.
    TraceObserver* raw = observer->release();
    g_observer = raw;
    c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(
        [raw](const TraceEntry& entry) { raw->OnTrace(entry); });
    c10::cuda::CUDACachingAllocator::attachOutOfMemoryObserver(
        [raw](int64_t device, size_t, size_t, size_t) { raw->OnOutOfMemory(device); });
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("observe: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("observe: ", e.what()));
  }
}

void ObserveMark(std::string_view text) {
  TraceObserver* observer = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    observer = g_observer;
  }
  if (observer != nullptr) observer->logs().MarkAll(text);
}

void ObserveRecordModel(std::string_view json) {
  TraceObserver* observer = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    observer = g_observer;
  }
  if (observer != nullptr) observer->logs().RecordModelAll(json);
}

uint32_t ObserveDefineContext(uint8_t role, std::string_view module, std::string_view op,
                              std::string_view site, bool backward) {
  TraceObserver* observer = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    observer = g_observer;
  }
  return observer != nullptr ? observer->DefineContext(role, module, op, site, backward) : 0;
}

void ObserveSetContext(uint32_t context) { FslogWriter::SetThreadContext(context); }

void ObserveTagBlock(uint64_t ptr, int device, uint8_t role, uint32_t context) {
  TraceObserver* observer = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    observer = g_observer;
  }
  if (observer == nullptr || device < 0 || device >= hooks::kMaxDevices) return;
  if (FslogWriter* writer = observer->logs().Get(device)) writer->Tag(ptr, role, context);
}

absl::Status ObserveFlush() {
  TraceObserver* observer = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    observer = g_observer;
  }
  return observer != nullptr ? observer->logs().FlushAll() : absl::OkStatus();
}

}  // namespace fragscope::torch_hooks
