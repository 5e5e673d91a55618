#include "analysis/metrics.h"

#include <algorithm>

namespace fragscope {
namespace {

uint64_t Current(const StatArray& a) { return static_cast<uint64_t>(a[0].current); }
uint64_t Peak(const StatArray& a) { return static_cast<uint64_t>(a[0].peak); }

double Ratio(uint64_t a, uint64_t b) {
  return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b);
}

}  // namespace

MetricsCollector::MetricsCollector(Replayer& replayer, size_t timeline_points)
    : replayer_(replayer), timeline_(timeline_points) {
  tracker_.mutable_stats() = replayer.allocator().GetStats();
  // Peaks are of this trace: the state before it is where they start.
  tracker_.mutable_stats().ResetPeak();
  const DeviceStats& s = tracker_.stats();
  metrics_.at_peak.reserved_bytes = Current(s.reserved_bytes);
  metrics_.at_peak.allocated_bytes = Current(s.allocated_bytes);
  metrics_.at_peak.active_bytes = Current(s.active_bytes);
  metrics_.at_peak.requested_bytes = Current(s.requested_bytes);
  for (const SegmentInfo& seg : replayer.allocator().Snapshot().segments) {
    for (const BlockInfo& b : seg.blocks) {
      if (b.state == BlockState::kActiveAllocated) waste_bytes_ += b.size - b.requested_size;
    }
  }
  metrics_.peak_internal_waste_bytes = waste_bytes_;
  metrics_.at_peak.internal_waste_bytes = waste_bytes_;
  metrics_.at_peak.free_cached_bytes =
      metrics_.at_peak.reserved_bytes - metrics_.at_peak.active_bytes;
  metrics_.at_peak.largest_free_block = replayer.allocator().LargestFreeCachedBlock();
}

void MetricsCollector::OnAllocatorEvent(const AllocatorEvent& event) {
  tracker_.OnEvent(event);
  switch (event.kind) {
    case EventKind::kAlloc:
      waste_bytes_ += event.bytes - event.requested_bytes;
      metrics_.peak_internal_waste_bytes =
          std::max(metrics_.peak_internal_waste_bytes, waste_bytes_);
      ++metrics_.allocations;
      break;
    case EventKind::kFreeRequested:
      waste_bytes_ -= event.bytes - event.requested_bytes;
      ++metrics_.frees;
      break;
    case EventKind::kSegmentAlloc:
    case EventKind::kSegmentMap:
      if (Current(tracker_.stats().reserved_bytes) > metrics_.at_peak.reserved_bytes) {
        new_reserved_peak_ = true;
      }
      break;
    default:
      break;
  }
}

void MetricsCollector::OnOpDone(const TraceEvent& event) {
  const DeviceStats& s = tracker_.stats();
  TimelinePoint p;
  p.index = event.index;
  p.time_ns = event.time_ns;
  p.allocated_bytes = Current(s.allocated_bytes);
  p.active_bytes = Current(s.active_bytes);
  p.requested_bytes = Current(s.requested_bytes);
  p.reserved_bytes = Current(s.reserved_bytes);
  timeline_.Add(p);
  if (!new_reserved_peak_) return;
  new_reserved_peak_ = false;
  if (p.reserved_bytes <= metrics_.at_peak.reserved_bytes) return;
  PeakMoment& m = metrics_.at_peak;
  m.index = event.index;
  m.time_ns = event.time_ns;
  m.reserved_bytes = p.reserved_bytes;
  m.allocated_bytes = p.allocated_bytes;
  m.active_bytes = p.active_bytes;
  m.requested_bytes = p.requested_bytes;
  m.free_cached_bytes = p.reserved_bytes - p.active_bytes;
  m.largest_free_block = replayer_.allocator().LargestFreeCachedBlock();
  m.internal_waste_bytes = waste_bytes_;
}

void MetricsCollector::OnFinish() {
  const DeviceStats& s = tracker_.stats();
  MemoryMetrics& m = metrics_;
  m.events = replayer_.events_read();
  m.final_stats = s;
  m.peak_allocated_bytes = Peak(s.allocated_bytes);
  m.peak_active_bytes = Peak(s.active_bytes);
  m.peak_requested_bytes = Peak(s.requested_bytes);
  m.peak_reserved_bytes = Peak(s.reserved_bytes);
  m.final_internal_waste_bytes = waste_bytes_;
  const PeakMoment& p = m.at_peak;
  m.reserved_but_unallocated_at_peak = p.reserved_bytes - p.allocated_bytes;
  m.rmm_fragmentation_at_peak =
      p.free_cached_bytes == 0 ? 0.0 : 1.0 - Ratio(p.largest_free_block, p.free_cached_bytes);
  m.realized_fragmentation = Ratio(p.reserved_bytes - p.allocated_bytes, p.allocated_bytes);
  m.internal_waste_fraction_at_peak = Ratio(p.internal_waste_bytes, p.allocated_bytes);
  m.utilization = Ratio(m.peak_active_bytes, m.peak_reserved_bytes);
  m.timeline = timeline_.Points();
}

}  // namespace fragscope
