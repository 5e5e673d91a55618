#include "hooks/torch_observer.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "allocator/allocator_options.h"
#include "allocator/memory_fraction.h"
#include "hooks/device_logs.h"
#include "hooks/hook_config.h"
#include "hooks/native_trace_converter.h"

namespace fragscope::torch_hooks {
namespace {

using c10::CachingDeviceAllocator::TraceEntry;
using hooks::kMaxDevices;
using hooks::NativeTraceAction;

NativeTraceAction ActionOf(TraceEntry::Action action) {
  switch (action) {
    case TraceEntry::ALLOC:
      return NativeTraceAction::kAlloc;
    case TraceEntry::FREE_REQUESTED:
      return NativeTraceAction::kFreeRequested;
    case TraceEntry::FREE_COMPLETED:
      return NativeTraceAction::kFreeCompleted;
    case TraceEntry::SEGMENT_ALLOC:
      return NativeTraceAction::kSegmentAlloc;
    case TraceEntry::SEGMENT_FREE:
      return NativeTraceAction::kSegmentFree;
    case TraceEntry::SEGMENT_MAP:
      return NativeTraceAction::kSegmentMap;
    case TraceEntry::SEGMENT_UNMAP:
      return NativeTraceAction::kSegmentUnmap;
    case TraceEntry::SNAPSHOT:
      return NativeTraceAction::kSnapshot;
    case TraceEntry::OOM:
      return NativeTraceAction::kOom;
    default:
      return NativeTraceAction::kUnknown;  // an action newer than this file
  }
}

// The allocator options PyTorch parsed at startup, from the same environment variables.
std::string NativeAllocConf() {
  if (auto conf = hooks::GetEnv("PYTORCH_CUDA_ALLOC_CONF")) return *conf;
  return hooks::GetEnv("PYTORCH_ALLOC_CONF").value_or("");
}

// Whether PyTorch checks its memory cap (set_per_process_memory_fraction) around this action:
// the device calls (cudaMalloc, cudaFree, map, unmap) and the OOM.
bool IsDeviceCallOrOom(TraceEntry::Action action) {
  switch (action) {
    case TraceEntry::SEGMENT_ALLOC:
    case TraceEntry::SEGMENT_FREE:
    case TraceEntry::SEGMENT_MAP:
    case TraceEntry::SEGMENT_UNMAP:
    case TraceEntry::OOM:
      return true;
    default:
      return false;
  }
}

// Everything observing needs, created once by the first successful ObserveNativeAllocator and
// never destroyed (PyTorch keeps calling the tracker until the process ends).
//
// Note [The memory fraction in observed logs]
// torch.cuda.set_per_process_memory_fraction caps PyTorch's reserved memory without showing in
// PYTORCH_CUDA_ALLOC_CONF, and a replay without the cap serves what the job could not (its OOM
// "not reproduced", its retry ladder a divergence). So the log records it as
// per_process_memory_fraction in the allocator options: in the header when set before
// observing, and as an options change when it differs at a device call or an OOM (the first
// moments it can matter; reading it is a plain load in PyTorch, safe under its lock). The replay
// applies it like any other option. Only when the job's own conf parsed: the log's options string
// is then the conf re-formatted with the fraction.
struct Observer {
  std::string pattern;
  std::unique_ptr<hooks::DeviceLogs> logs;
  // The job's allocator options, when its conf parsed (see the Note).
  std::optional<AllocatorOptions> options;
  // Per device: created at attach time, used only under that device's allocator lock.
  std::array<std::unique_ptr<hooks::NativeTraceConverter>, kMaxDevices> converters;
  std::array<EventLogHeaderInfo, kMaxDevices> headers;
  std::array<double, kMaxDevices> fractions{};  // the fraction the log shows, per device

  EventLogWriter* Log(int device) {
    return logs->GetOrOpen(device, [&] { return headers[static_cast<size_t>(device)]; });
  }

  // The options string for the job's conf under the fraction PyTorch reports for `device`
  // (allowed / total), written as one that gives back exactly the job's cap (Note [The memory
  // fraction's bytes] in allocator/memory_fraction.h); 1.0 is no cap. REQUIRES: options.
  std::string ConfWithFraction(int device, double reported) const {
    const uint64_t total = headers[static_cast<size_t>(device)].device_total_bytes;
    AllocatorOptions with = *options;
    with.per_process_memory_fraction =
        reported < 1.0 && total > 0
            ? FractionForAllowedBytes(AllowedBytesOfReportedFraction(reported, total), total)
            : 1.0;
    return FormatAllocatorOptions(with);
  }

  // Records the device's memory fraction if it changed (Note [The memory fraction in observed
  // logs]). Under PyTorch's allocator lock.
  void RecordFractionChange(int device) {
    if (!options.has_value()) return;
    const double fraction =
        c10::cuda::CUDACachingAllocator::getMemoryFraction(static_cast<c10::DeviceIndex>(device));
    double& shown = fractions[static_cast<size_t>(device)];
    if (fraction == shown || !(fraction >= 0.0 && fraction <= 1.0)) return;
    shown = fraction;
    if (EventLogWriter* writer = Log(device))
      writer->RecordOptionsChange(ConfWithFraction(device, fraction));
  }

  // Runs under PyTorch's allocator lock: no exception may escape into PyTorch.
  void OnTrace(const TraceEntry& entry) noexcept {
    try {
      const int device = entry.device_;
      if (device < 0 || device >= kMaxDevices) return;
      hooks::NativeTraceConverter* converter = converters[static_cast<size_t>(device)].get();
      if (converter == nullptr) return;
      if (IsDeviceCallOrOom(entry.action_)) RecordFractionChange(device);
      hooks::NativeTraceEntry native;
      native.action = ActionOf(entry.action_);
      native.device = device;
      native.addr = entry.addr_;
      native.size = entry.size_;
      native.stream = reinterpret_cast<uint64_t>(entry.stream_);
      AllocatorEvent event;
      if (!converter->Convert(native, &event)) return;
      // The block's, segment's or request's private pool (.fslog 2.4); (0, 0): the default.
      event.pool_id = PoolId{entry.mempool_.first, entry.mempool_.second};
      if (EventLogWriter* writer = Log(device)) writer->OnEvent(event);
    } catch (...) {
      // A lost record is better than an exception inside PyTorch's allocator.
    }
  }

  void OnOutOfMemory(int64_t device) noexcept {
    try {
      if (EventLogWriter* writer = logs->Get(static_cast<int>(device)))
        writer->Flush().IgnoreError();
    } catch (...) {
    }
  }
};

std::mutex g_mu;
Observer* g_observer = nullptr;  // guarded by g_mu for writes; never freed

}  // namespace

absl::Status ObserveNativeAllocator(std::string_view log_pattern) {
  try {
    std::lock_guard<std::mutex> lock(g_mu);
    absl::StatusOr<hooks::HookConfig> config = hooks::LoadHookConfig(
        "", log_pattern.empty() ? std::nullopt : std::optional<std::string_view>(log_pattern));
    if (!config.ok()) return config.status();
    if (config->log_pattern.empty()) {
      return absl::InvalidArgumentError(
          "observe needs a log path pattern (argument or FRAGSCOPE_LOG), e.g. "
          "/tmp/job.%r.%d.fslog");
    }
    if (g_observer != nullptr) {
      if (g_observer->pattern == config->log_pattern) return absl::OkStatus();
      return absl::FailedPreconditionError(
          absl::StrCat("already observing PyTorch's allocator into \"", g_observer->pattern,
                       "\" (a trace tracker cannot be detached)"));
    }
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
    auto observer = std::make_unique<Observer>();
    observer->pattern = config->log_pattern;
    observer->logs = std::make_unique<hooks::DeviceLogs>(config->log_pattern, config->log_options);
    if (!options.ok()) {
      std::fprintf(stderr,
                   "fragscope: observe: cannot parse PyTorch's allocator conf \"%s\" (%s); block "
                   "sizes in the log assume PyTorch's defaults, and the memory fraction is not "
                   "recorded\n",
                   alloc_conf.c_str(), std::string(options.status().message()).c_str());
      options = AllocatorOptions{};
    } else {
      observer->options = *options;
    }
    const int device_count = std::min<int>(c10::cuda::device_count(), kMaxDevices);
    for (int d = 0; d < device_count; ++d) {
      const auto index = static_cast<c10::DeviceIndex>(d);
      const cudaDeviceProp* prop = at::cuda::getDeviceProperties(index);
      EventLogHeaderInfo& header = observer->headers[static_cast<size_t>(d)];
      header.device_name = prop->name;
      header.device_total_bytes = prop->totalGlobalMem;
      header.device_index = d;
      header.allocator_options = alloc_conf;
      observer->fractions[static_cast<size_t>(d)] = 1.0;
      const double fraction = c10::cuda::CUDACachingAllocator::getMemoryFraction(index);
      if (observer->options.has_value() && fraction >= 0.0 && fraction < 1.0) {
        observer->fractions[static_cast<size_t>(d)] = fraction;
        header.allocator_options = observer->ConfWithFraction(d, fraction);
      }
      observer->converters[static_cast<size_t>(d)] =
          std::make_unique<hooks::NativeTraceConverter>(*options, prop->totalGlobalMem);
    }
    // Open the current device's log now rather than under PyTorch's lock at its first event,
    // with the memory outside the allocator at this moment (Note [Who wrote the log]): here, not
    // under the lock, PyTorch's stats and cudaMemGetInfo may be asked. Devices opened later, at
    // their first event under the lock, go without it.
    const int current = c10::cuda::current_device();
    size_t free_bytes = 0, total_bytes = 0;
    if (current >= 0 && current < kMaxDevices &&
        cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      EventLogHeaderInfo& header = observer->headers[static_cast<size_t>(current)];
      header.device_free_bytes = free_bytes;
      const c10::CachingDeviceAllocator::DeviceStats stats =
          c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(current));
      header.reserved_bytes =
          static_cast<uint64_t>(std::max<int64_t>(stats.reserved_bytes[0].current, 0));
    }
    observer->Log(current);

    Observer* raw = observer.release();  // lives as long as the process: PyTorch keeps the tracker
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
  Observer* observer = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    observer = g_observer;
  }
  if (observer != nullptr) observer->logs->MarkAll(text);
}

void ObserveRecordModel(std::string_view json) {
  Observer* observer = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    observer = g_observer;
  }
  if (observer != nullptr) observer->logs->RecordModelAll(json);
}

absl::Status ObserveFlush() {
  Observer* observer = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    observer = g_observer;
  }
  return observer != nullptr ? observer->logs->FlushAll() : absl::OkStatus();
}

}  // namespace fragscope::torch_hooks
