// TraceObserver: what the observe mode does with each of PyTorch's allocator trace entries
// (torch_observer.h attaches it): convert the entry (native_trace_converter.h) and append it to
// its device's .fslog writer, and record a change of the device's memory fraction.
//
// It needs no CUDA device: the devices' header facts and the memory-fraction getter are given to
// it, so bench/observe_tracker_benchmark times exactly this callback on a CPU-only machine next
// to what PyTorch's own recorder does with the same entries.
//
// OnTrace runs under PyTorch's allocator lock for the entry's device: it never throws, blocks or
// allocates on its common path (an alloc or free with the device's log open), which is a handful
// of loads and stores plus the writer's append.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "allocator/allocator_options.h"
#include "fslog/fslog_writer.h"
#include "hooks/device_logs.h"
#include "hooks/native_trace_converter.h"

namespace fragscope::torch_hooks {

// PyTorch's trace action as the converter's (kUnknown for an action newer than this file).
inline hooks::NativeTraceAction NativeActionOf(
    c10::CachingDeviceAllocator::TraceEntry::Action action) {
  using c10::CachingDeviceAllocator::TraceEntry;
  using hooks::NativeTraceAction;
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

class TraceObserver {
 public:
  // The fraction of device memory PyTorch may use on `device` (c10's getMemoryFraction in the
  // observe mode); read only at device calls and OOMs, and only when `options` is set.
  using FractionGetter = double (*)(int device);

  // `options`: the job's allocator options when its conf parsed, else nullopt (block sizes then
  // assume PyTorch's defaults and the memory fraction is not recorded).
  TraceObserver(std::string pattern, FslogWriterOptions log_options,
                std::optional<AllocatorOptions> options, FractionGetter fraction_of);
  ~TraceObserver();  // flushes and closes the logs
  TraceObserver(const TraceObserver&) = delete;
  TraceObserver& operator=(const TraceObserver&) = delete;

  // Sets up `device` (0 <= device < kMaxDevices) before its first OnTrace: its log's header and
  // the memory fraction in effect now; a fraction below 1 goes into the header's options string
  // when the job's options parsed (Note [The memory fraction in observed logs]).
  void AddDevice(int device, FslogHeaderInfo header, double fraction);

  // The device's log, opened now if it is not yet (nullptr when it cannot be).
  FslogWriter* Log(int device);
  hooks::DeviceLogs& logs() { return *logs_; }
  // DeviceLogs::DefineContextAll on this observer's logs (Note [Context records]).
  uint32_t DefineContext(uint8_t role, std::string_view module, std::string_view op,
                         std::string_view site, bool backward);
  const std::string& pattern() const { return pattern_; }

  // PyTorch's trace tracker. Never throws into PyTorch.
  void OnTrace(const c10::CachingDeviceAllocator::TraceEntry& entry) noexcept;
  // PyTorch's out-of-memory observer: flushes the device's log before the exception is raised.
  void OnOutOfMemory(int64_t device) noexcept;

 private:
  void RecordFractionChange(int device);
  // The options string for the job's conf under the fraction `reported` (allowed / total) of a
  // device of `total` bytes, written as one that gives back exactly the job's cap (Note [The
  // memory fraction's bytes] in allocator/memory_fraction.h); 1.0 is no cap. REQUIRES: options_.
  std::string ConfWithFraction(uint64_t total, double reported) const;

  std::string pattern_;
  std::unique_ptr<hooks::DeviceLogs> logs_;
  std::optional<AllocatorOptions> options_;
  FractionGetter fraction_of_;
  // Per device: set by AddDevice, used only under that device's allocator lock.
  std::array<std::unique_ptr<hooks::NativeTraceConverter>, hooks::kMaxDevices> converters_;
  std::array<FslogHeaderInfo, hooks::kMaxDevices> headers_;
  std::array<double, hooks::kMaxDevices> fractions_{};  // the fraction the log shows, per device
};

}  // namespace fragscope::torch_hooks
