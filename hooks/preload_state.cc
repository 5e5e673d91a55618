#include "hooks/preload_state.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/alloc_conf_env.h"
#include "allocator/cuda_backend.h"
#include "allocator/device_stats.h"
#include "allocator/memory_summary.h"
#include "allocator/oom_report.h"
#include "hooks/hook_config.h"
#include "hooks/process_exit.h"

namespace fragscope::hooks {
namespace {

constexpr int kMaxReportLines = 16;
std::atomic<int> g_report_lines{0};

PoolKind SegmentPool(uint64_t bytes) {
  return bytes <= kSmallBufferBytes ? PoolKind::kSmall : PoolKind::kLarge;
}

}  // namespace

void PreloadReport(const std::string& message) {
  const int line = g_report_lines.fetch_add(1, std::memory_order_relaxed);
  if (line < kMaxReportLines) {
    std::fprintf(stderr, "fragscope: %s\n", message.c_str());
  } else if (line == kMaxReportLines) {
    std::fprintf(stderr, "fragscope: further messages are not printed\n");
  }
}

void SegmentRanges::OnEvent(const AllocatorEvent& event) {
  if (event.kind == EventKind::kSegmentAlloc || event.kind == EventKind::kSegmentMap) {
    MutexLock lock(&mu_);
    ranges_[event.ptr] = event.bytes;
  } else if (event.kind == EventKind::kSegmentFree || event.kind == EventKind::kSegmentUnmap) {
    MutexLock lock(&mu_);
    ranges_.erase(event.ptr);
  }
}

bool SegmentRanges::Contains(uint64_t ptr) const {
  MutexLock lock(&mu_);
  auto it = ranges_.upper_bound(ptr);
  if (it == ranges_.begin()) return false;
  --it;
  return ptr < it->first + it->second;
}

namespace {
std::atomic<PreloadState*> g_state{nullptr};
std::once_flag g_state_once;
}  // namespace

PreloadState& PreloadState::Get() {
  // Never destroyed. The constructor makes no CUDA call, so a hook never waits on itself here.
  std::call_once(g_state_once,
                 [] { g_state.store(new PreloadState(), std::memory_order_release); });
  return *g_state.load(std::memory_order_acquire);
}

PreloadState* PreloadState::IfCreated() { return g_state.load(std::memory_order_acquire); }

PreloadState::PreloadState() {
  WatchProcessExit();
  const std::string mode = ProcessEnv("FRAGSCOPE_PRELOAD_MODE").value_or("");
  if (mode.empty() || mode == "observe") {
    mode_ = PreloadMode::kObserve;
  } else if (mode == "cache") {
    mode_ = PreloadMode::kCache;
  } else if (mode == "off") {
    mode_ = PreloadMode::kOff;
  } else {
    PreloadReport(absl::StrFormat(
        "FRAGSCOPE_PRELOAD_MODE=\"%s\" is not observe, cache or off: passing every call through",
        mode));
    mode_ = PreloadMode::kOff;
  }
  if (mode_ == PreloadMode::kObserve) {
    // Only the log pattern matters here; FRAGSCOPE_ALLOC_CONF configures cache mode.
    absl::StatusOr<HookConfig> config = LoadHookConfig("", std::nullopt);
    if (!config.ok()) {
      PreloadReport(absl::StrCat(config.status().message(), ": nothing is recorded"));
    } else if (config->log_pattern.empty()) {
      PreloadReport("FRAGSCOPE_PRELOAD_MODE=observe without FRAGSCOPE_LOG: nothing is recorded");
    } else {
      observe_logs_ = std::make_unique<DeviceLogs>(config->log_pattern, config->log_options);
    }
  } else if (mode_ == PreloadMode::kCache) {
    registry_ = std::make_unique<AllocatorRegistry>(
        [](int device) -> absl::StatusOr<std::unique_ptr<DeviceBackend>> {
          const RealCuda* real = ResolveRealCuda();
          if (real == nullptr || !real->CanCache()) {
            return absl::FailedPreconditionError(
                "FRAGSCOPE_PRELOAD_MODE=cache needs cudaGetDevice, cudaSetDevice, "
                "cudaDeviceSynchronize, cudaGetLastError and the cudaEvent functions, which the "
                "loaded CUDA runtime does not export");
          }
          // The process's own runtime, without virtual memory (expandable segments are refused).
          return std::make_unique<CudaBackend>(RealCudaTable(*real), device,
                                               RealDeviceName(*real, device), nullptr);
        });
  }
}

std::string_view PreloadState::mode_name() const {
  switch (mode_) {
    case PreloadMode::kObserve:
      return "observe";
    case PreloadMode::kCache:
      return "cache";
    case PreloadMode::kOff:
      break;
  }
  return "off";
}

DeviceLogs* PreloadState::logs() {
  if (observe_logs_ != nullptr) return observe_logs_.get();
  return registry_ != nullptr ? registry_->logs() : nullptr;
}

// --- observe mode ---------------------------------------------------------------------------

FslogWriter* PreloadState::ObserveLog(int device) {
  if (observe_logs_ == nullptr) return nullptr;
  const RealCuda& real = *ResolveRealCuda();
  return observe_logs_->GetOrOpen(device, [&] {
    FslogHeaderInfo info;
    info.device_name = RealDeviceName(real, device);
    info.device_index = device;
    size_t free_bytes = 0, total_bytes = 0;
    if (real.mem_get_info != nullptr && real.mem_get_info(&free_bytes, &total_bytes) == 0) {
      info.device_total_bytes = total_bytes;
      // The log opens at the device's first allocation the interposer sees: none is held yet.
      info.device_free_bytes = free_bytes;
    }
    info.allocator_options = "";  // the program's own allocator: unknown
    return info;
  });
}

void PreloadState::ObserveMalloc(int error, void* ptr, size_t size, void* stream) {
  if (observe_logs_ == nullptr) return;
  const RealCuda& real = *ResolveRealCuda();
  int device = 0;
  if (real.get_device == nullptr || real.get_device(&device) != kCudaSuccess) device = 0;
  if (device < 0 || device >= kMaxDevices) return;
  const auto index = static_cast<size_t>(device);
  AllocatorEvent event;
  event.device = device;
  event.stream = reinterpret_cast<StreamId>(stream);
  if (error == kCudaSuccess && ptr != nullptr) {
    event.kind = EventKind::kSegmentAlloc;
    event.ptr = reinterpret_cast<DevicePtr>(ptr);
    event.bytes = size;
    event.pool = SegmentPool(size);
    {
      MutexLock lock(&live_mu_);
      live_[event.ptr] = Live{size, device};
    }
    live_bytes_[index].fetch_add(size, std::memory_order_relaxed);
  } else if (error == kCudaErrorMemoryAllocation) {
    event.kind = EventKind::kOom;
    event.bytes = event.requested_bytes = size;
    event.pool = SegmentPool(size);
    size_t free_bytes = 0, total_bytes = 0;
    if (real.mem_get_info != nullptr && real.mem_get_info(&free_bytes, &total_bytes) == 0) {
      event.device_free_bytes = free_bytes;
      event.device_total_bytes = total_bytes;
    }
    event.reserved_bytes = live_bytes_[index].load(std::memory_order_relaxed);
  } else {
    return;
  }
  if (FslogWriter* writer = ObserveLog(device)) {
    MutexLock lock(&observe_log_mu_[index]);
    writer->OnEvent(event);
  }
}

void PreloadState::ObserveFree(void* ptr, void* stream) {
  if (observe_logs_ == nullptr || ptr == nullptr) return;
  Live live{};
  {
    MutexLock lock(&live_mu_);
    auto it = live_.find(reinterpret_cast<uint64_t>(ptr));
    if (it == live_.end()) return;
    live = it->second;
    live_.erase(it);
  }
  const auto index = static_cast<size_t>(live.device);
  live_bytes_[index].fetch_sub(live.bytes, std::memory_order_relaxed);
  AllocatorEvent event;
  event.kind = EventKind::kSegmentFree;
  event.device = live.device;
  event.ptr = reinterpret_cast<DevicePtr>(ptr);
  event.bytes = live.bytes;
  event.pool = SegmentPool(live.bytes);
  event.stream = reinterpret_cast<StreamId>(stream);
  if (FslogWriter* writer = ObserveLog(live.device)) {
    MutexLock lock(&observe_log_mu_[index]);
    writer->OnEvent(event);
  }
}

// --- cache mode -----------------------------------------------------------------------------

CachingAllocator* PreloadState::CacheAllocator(int device) {
  if (device < 0 || device >= kMaxDevices || registry_ == nullptr) return nullptr;
  const auto index = static_cast<size_t>(device);
  if (CachingAllocator* allocator = cache_allocators_[index].load(std::memory_order_acquire)) {
    return allocator;
  }
  absl::StatusOr<CachingAllocator*> allocator = registry_->Get(device);
  if (!allocator.ok()) {
    PreloadReport(std::string(allocator.status().message()));
    return nullptr;
  }
  // Every thread waits until the ranges observer is attached, so no segment goes unseen.
  std::call_once(ranges_attached_[index], [&] {
    (*allocator)->AddObserver(&ranges_[index]);
    cache_allocators_[index].store(*allocator, std::memory_order_release);
  });
  return *allocator;
}

int PreloadState::CacheMalloc(void** ptr, size_t size, void* stream) {
  const RealCuda& real = *ResolveRealCuda();
  int device = 0;
  if (real.get_device == nullptr) return kCudaErrorInitializationError;
  if (int e = real.get_device(&device); e != kCudaSuccess) return e;
  CachingAllocator* allocator = CacheAllocator(device);
  if (allocator == nullptr) return kCudaErrorInitializationError;
  absl::StatusOr<DevicePtr> block = allocator->Allocate(size, reinterpret_cast<StreamId>(stream));
  if (block.ok()) {
    *ptr = reinterpret_cast<void*>(*block);
    return kCudaSuccess;
  }
  if (GetOomReport(block.status()).has_value()) {
    PreloadReport(
        absl::StrFormat("CUDA out of memory in fragscope's cache on device %d "
                        "(cudaMalloc returns cudaErrorMemoryAllocation):\n%s",
                        device, block.status().message()));
    return kCudaErrorMemoryAllocation;
  }
  PreloadReport(absl::StrFormat("cudaMalloc(%u bytes) on device %d: %s", size, device,
                                block.status().message()));
  return kCudaErrorInitializationError;
}

bool PreloadState::CacheFree(void* ptr, void* stream, bool stream_ordered, int* error) {
  const auto address = reinterpret_cast<DevicePtr>(ptr);
  for (int d = 0; d < kMaxDevices; ++d) {
    CachingAllocator* allocator = cache_allocators_[static_cast<size_t>(d)].load();
    if (allocator == nullptr || !ranges_[static_cast<size_t>(d)].Contains(address)) continue;
    *error = kCudaSuccess;
    if (ProcessIsExiting()) return true;  // the dying context takes the memory with it
    if (stream_ordered) {
      // Its errors are the Free's below, which reports them: a wrong address, or one freed
      // already. (A block's one use here, per free, is far below kMaxStreamUses.)
      (void)allocator->RecordStream(address, reinterpret_cast<StreamId>(stream));
    } else {
      // cudaFree implicitly synchronizes; programs (and PyTorch's uncached mode) rely on it to
      // know that no kernel still uses the memory when it is reused.
      const RealCuda& real = *ResolveRealCuda();
      int previous = -1;
      real.get_device(&previous);
      if (previous != d) real.set_device(d);
      *error = real.device_synchronize();
      if (previous >= 0 && previous != d) real.set_device(previous);
      if (*error != kCudaSuccess) return true;
    }
    if (absl::Status status = allocator->Free(address); !status.ok()) {
      PreloadReport(absl::StrFormat("cudaFree(%p): %s", ptr, status.message()));
      *error = kCudaErrorInvalidValue;
    }
    return true;
  }
  return false;
}

void PreloadState::CacheAdjustMemInfo(size_t* free_bytes, size_t total_bytes) {
  const RealCuda& real = *ResolveRealCuda();
  int device = 0;
  if (real.get_device == nullptr || real.get_device(&device) != kCudaSuccess || device < 0 ||
      device >= kMaxDevices) {
    return;
  }
  CachingAllocator* allocator = cache_allocators_[static_cast<size_t>(device)].load();
  if (allocator == nullptr) return;
  const DeviceStats stats = allocator->GetStats();
  const int64_t cached = stats.reserved_bytes[0].current - stats.allocated_bytes[0].current;
  if (cached > 0) *free_bytes = std::min(total_bytes, *free_bytes + static_cast<size_t>(cached));
}

std::string PreloadState::CacheStatsText(int device) {
  if (device < 0 || device >= kMaxDevices || registry_ == nullptr) return "";
  CachingAllocator* allocator = cache_allocators_[static_cast<size_t>(device)].load();
  std::string text;
  for (const auto& [key, value] : FlattenStats(allocator ? allocator->GetStats() : DeviceStats{})) {
    absl::StrAppend(&text, key, " ", value, "\n");
  }
  return text;
}

std::string PreloadState::CacheMemorySummary(int device) {
  if (device < 0 || device >= kMaxDevices || registry_ == nullptr) return "";
  CachingAllocator* allocator = cache_allocators_[static_cast<size_t>(device)].load();
  return MemorySummary(allocator ? allocator->GetStats() : DeviceStats{}, device);
}

void PreloadState::Mark(std::string_view text) {
  if (DeviceLogs* device_logs = logs()) device_logs->MarkAll(text);
}

void PreloadState::RecordModel(std::string_view json) {
  if (DeviceLogs* device_logs = logs()) device_logs->RecordModelAll(json);
}

uint32_t PreloadState::DefineContext(uint8_t role, std::string_view module, std::string_view op,
                                     std::string_view site, bool backward) {
  DeviceLogs* device_logs = logs();
  return device_logs != nullptr ? device_logs->DefineContextAll(role, module, op, site, backward)
                                : 0;
}

void PreloadState::Tag(uint64_t ptr, int device, uint8_t role, uint32_t context) {
  DeviceLogs* device_logs = logs();
  if (FslogWriter* writer = device_logs != nullptr ? device_logs->Get(device) : nullptr) {
    writer->Tag(ptr, role, context);
  }
}

int PreloadState::Flush() {
  DeviceLogs* device_logs = logs();
  if (device_logs == nullptr) return 0;
  absl::Status status = device_logs->FlushAll();
  if (status.ok()) return 0;
  PreloadReport(std::string(status.message()));
  return -1;
}

}  // namespace fragscope::hooks
