// PreloadState: what libfragscope_preload.so does behind the interposed CUDA runtime calls
// (preload_cuda_runtime.cc holds the thin extern "C" hooks themselves).
//
// FRAGSCOPE_PRELOAD_MODE selects, once, at the first interposed call:
//   observe (default)  every call goes to the real runtime unchanged; successful device
//                      allocations and frees are logged as segment_alloc / segment_free records,
//                      failed ones as oom records (the program may still recover from those).
//   cache              cudaMalloc / cudaMallocAsync are served by fragscope's CachingAllocator
//                      (one per device, FRAGSCOPE_ALLOC_CONF) over the real runtime, and logged
//                      with every allocator event. With PYTORCH_NO_CUDA_MEMORY_CACHING=1 this
//                      makes fragscope PyTorch's cache. Frees keep their semantics: cudaFree of a
//                      cached block synchronizes the device (as the real cudaFree does) before the
//                      block becomes reusable; cudaFreeAsync is stream-ordered (record_stream on
//                      the freeing stream). cudaMemGetInfo counts cached free bytes as free.
//   off                pass everything through, log nothing.
// Logs go to FRAGSCOPE_LOG (hook_config.h: %p %r %d); in observe mode without it nothing is
// recorded and a note says so.
//
// Thread safety: all methods are thread-safe. The state is created once and never destroyed
// (Note [Nothing after exit began] in process_exit.h).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "allocator/allocator_events.h"
#include "allocator/mutex.h"
#include "hooks/allocator_registry.h"
#include "hooks/device_logs.h"
#include "hooks/real_cuda.h"

namespace fragscope::hooks {

enum class PreloadMode : uint8_t { kOff, kObserve, kCache };

// The device ranges one cache-mode allocator holds, kept from its segment events, so that a free
// can tell fragscope's pointers from others without asking the allocator.
class SegmentRanges final : public AllocatorObserver {
 public:
  void OnEvent(const AllocatorEvent& event) override;
  bool Contains(uint64_t ptr) const;

 private:
  mutable Mutex mu_;
  std::map<uint64_t, uint64_t> ranges_ ABSL_GUARDED_BY(mu_);  // base -> bytes
};

class PreloadState {
 public:
  // The process-wide state, created at the first call.
  static PreloadState& Get();
  // The state if a call created it, else nullptr (for exit paths, which must not create it).
  static PreloadState* IfCreated();

  PreloadMode mode() const { return mode_; }
  std::string_view mode_name() const;
  // REQUIRES of the observe and cache methods: ResolveRealCuda() is not null (the hooks check).

  // --- observe mode ---
  // A device allocation (cudaMalloc family) returned `error`.
  void ObserveMalloc(int error, void* ptr, size_t size, void* stream);
  // `ptr` is about to be freed (cudaFree family); logs it if it was seen allocated.
  void ObserveFree(void* ptr, void* stream);

  // --- cache mode ---
  // cudaMalloc / cudaMallocAsync served by fragscope. Returns a cudaError_t.
  int CacheMalloc(void** ptr, size_t size, void* stream);
  // If `ptr` is fragscope's: frees it (ordered on `stream` when stream_ordered, else after a
  // device synchronization) and returns true with *error set; false for other pointers.
  bool CacheFree(void* ptr, void* stream, bool stream_ordered, int* error);
  // Adds the current device's cached free bytes to *free_bytes.
  void CacheAdjustMemInfo(size_t* free_bytes, size_t total_bytes);
  // PyTorch-keyed stats as "key value" lines, and memory_summary text, of one device.
  std::string CacheStatsText(int device);
  std::string CacheMemorySummary(int device);

  void Mark(std::string_view text);
  void RecordModel(std::string_view json);
  // Who holds the memory (Note [Context records] in fslog/fslog_context.h), as
  // libfragscope_alloc.so's fragscope_define_context and fragscope_tag_block_context, in the
  // interposer's logs: the context's id (0 without a log), and a tag record in `device`'s log if
  // it is open. The calling thread's context (FslogWriter::SetThreadContext) is named by the
  // alloc records of cache mode and by the oom records of both modes; a segment record names
  // none (fslog/FORMAT.md), so observe mode's segment_alloc records carry no context.
  uint32_t DefineContext(uint8_t role, std::string_view module, std::string_view op,
                         std::string_view site, bool backward);
  void Tag(uint64_t ptr, int device, uint8_t role, uint32_t context);
  int Flush();

 private:
  PreloadState();
  DeviceLogs* logs();
  FslogWriter* ObserveLog(int device);
  // The device's allocator, with its SegmentRanges attached; nullptr after reporting an error.
  CachingAllocator* CacheAllocator(int device);

  PreloadMode mode_ = PreloadMode::kObserve;

  // observe mode
  std::unique_ptr<DeviceLogs> observe_logs_;
  std::array<Mutex, kMaxDevices> observe_log_mu_;  // serializes OnEvent per device
  struct Live {
    uint64_t bytes;
    int device;
  };
  Mutex live_mu_;
  absl::flat_hash_map<uint64_t, Live> live_ ABSL_GUARDED_BY(live_mu_);
  std::array<std::atomic<uint64_t>, kMaxDevices> live_bytes_{};

  // cache mode
  std::unique_ptr<AllocatorRegistry> registry_;
  std::array<SegmentRanges, kMaxDevices> ranges_;
  std::array<std::once_flag, kMaxDevices> ranges_attached_;
  std::array<std::atomic<CachingAllocator*>, kMaxDevices> cache_allocators_{};
};

// Prints "fragscope: <message>" on stderr; only the first few messages are printed.
void PreloadReport(const std::string& message);

}  // namespace fragscope::hooks
