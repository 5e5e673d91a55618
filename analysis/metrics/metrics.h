// MemoryMetrics and MetricsCollector: what a replay measures, each metric defined in
// analysis/METRICS.md (the names below are the ones used there, in the JSON report and in the
// terminal summary).
//
// The collector keeps the four memory curves of PyTorch's statistics (allocated, active,
// requested, reserved) from the replay's allocator events, starting from the state before the
// trace, samples them after every user-level operation into a bounded Timeline (the full
// statistics are read from the allocator at the end), and records the moment
// reserved memory first reached its peak, where the "at peak" metrics are taken (tcmalloc's
// convention: overhead at peak demand is what must be provisioned). O(1) work per event except at
// a new reserved peak (a scan of the free blocks).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "allocator/device_stats.h"
#include "analysis/metrics/timeline.h"
#include "analysis/replay/replay.h"

namespace fragscope {

// The state when reserved memory first reached its peak.
struct PeakMoment {
  uint64_t index = 0;
  uint64_t time_ns = 0;
  uint64_t reserved_bytes = 0;
  uint64_t allocated_bytes = 0;
  uint64_t active_bytes = 0;
  uint64_t requested_bytes = 0;
  uint64_t free_cached_bytes = 0;  // reserved - active
  uint64_t largest_free_block = 0;
  uint64_t internal_waste_bytes = 0;
};

struct MemoryMetrics {
  uint64_t events = 0;       // trace events read
  uint64_t allocations = 0;  // successful allocations replayed
  uint64_t frees = 0;        // free requests replayed
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_active_bytes = 0;
  uint64_t peak_requested_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  uint64_t peak_internal_waste_bytes = 0;  // max over time of sum(block size - request)
  uint64_t final_internal_waste_bytes = 0;
  PeakMoment at_peak;
  // Derived at the peak moment (METRICS.md):
  uint64_t reserved_but_unallocated_at_peak = 0;  // PyTorch: reserved - allocated
  double rmm_fragmentation_at_peak = 0.0;         // RMM: 1 - largest free / total free
  double realized_fragmentation = 0.0;            // tcmalloc: (reserved - allocated) / allocated
  double internal_waste_fraction_at_peak = 0.0;   // waste / allocated
  // GMLake: peak active / peak reserved (over the whole trace).
  double utilization = 0.0;
  // Requests the job was refused (its OOMs) that the replay served and that the figures above
  // leave out (MetricsCollector::OnOom), and their caller's bytes. The replay's allocator
  // statistics (final_stats, memory_summary) and every sweep row count them.
  uint64_t refused_requests_left_out = 0;
  uint64_t refused_bytes_left_out = 0;
  DeviceStats final_stats;
  std::vector<TimelinePoint> timeline;
};

class MetricsCollector final : public ReplayHooks {
 public:
  // REQUIRES: replayer.Init() has run (the collector starts from its state).
  explicit MetricsCollector(Replayer& replayer, size_t timeline_points = 1000);

  uint32_t callbacks() const override {
    return kHookTraceEvent | kHookAllocatorEvent | kHookOpDone | kHookOom | kHookFinish;
  }
  void OnTraceEvent(const TraceEvent& event) override;
  void OnAllocatorEvent(const AllocatorEvent& event) override;
  void OnOpDone(const TraceEvent& event) override;
  // An OOM of the job that the replay served: the request was tried and dropped, and the job
  // never held it, so the peaks it raised are undone, and the device memory the replay reserved
  // for it (the job was refused that memory) is left out of reserved from then on, until the
  // replay returns it.
  // Except where `served_counts(oom)` is true (set_served_counts): other settings than the job's
  // served it on the job's device (analyze --conf), and the replay's figures stand, as in a sweep
  // row.
  void OnOom(const ReplayOom& oom) override;
  void OnFinish() override;
  void set_served_counts(std::function<bool(const ReplayOom&)> served_counts) {
    served_counts_ = std::move(served_counts);
  }

  const MemoryMetrics& metrics() const { return metrics_; }
  uint64_t internal_waste_bytes() const { return waste_bytes_; }
  // The curves now (the job's view: without memory reserved for requests it was refused).
  uint64_t allocated_now() const { return now_.allocated; }
  uint64_t reserved_now() const { return now_.reserved; }
  uint64_t active_now() const { return now_.active; }
  uint64_t requested_now() const { return now_.requested; }

 private:
  // The four curves, kept from events (PyTorch's "all" stats, without the per-pool split that a
  // full StatsTracker would repeat: the allocator keeps those, read at the end).
  struct Curves {
    uint64_t allocated = 0, active = 0, requested = 0, reserved = 0;
  };

  Replayer& replayer_;
  std::function<bool(const ReplayOom&)> served_counts_;
  Curves now_;
  Curves peak_;
  // Saved before each trace OOM event, restored by OnOom when the replay served the request.
  Curves saved_peak_;
  MemoryMetrics saved_counts_;
  // Between a trace OOM event and its OnOom: the segments (or mapped ranges) the retry made.
  bool in_trace_oom_ = false;
  std::vector<std::pair<DevicePtr, uint64_t>> oom_segments_;
  // Address ranges reserved for requests the job was refused, still held by the replay
  // (start -> bytes; a handful: one or two per such OOM).
  std::map<DevicePtr, uint64_t> refused_ranges_;
  // Removes [ptr, ptr + bytes) from refused_ranges_; returns the bytes it overlapped.
  uint64_t TakeRefused(DevicePtr ptr, uint64_t bytes);
  Timeline timeline_;
  MemoryMetrics metrics_;
  uint64_t waste_bytes_ = 0;
  bool new_reserved_peak_ = false;
};

}  // namespace fragscope
