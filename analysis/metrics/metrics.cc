#include "analysis/metrics/metrics.h"

#include <algorithm>

namespace fragscope {
namespace {

uint64_t Current(const StatArray& a) { return static_cast<uint64_t>(a[0].current); }

double Ratio(uint64_t a, uint64_t b) {
  return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b);
}

}  // namespace

MetricsCollector::MetricsCollector(Replayer& replayer, size_t timeline_points)
    : replayer_(replayer), timeline_(timeline_points) {
  const DeviceStats s = replayer.allocator().GetStats();
  now_ = {Current(s.allocated_bytes), Current(s.active_bytes), Current(s.requested_bytes),
          Current(s.reserved_bytes)};
  peak_ = now_;  // peaks are of this trace: the state before it is where they start
  metrics_.at_peak.reserved_bytes = now_.reserved;
  metrics_.at_peak.allocated_bytes = now_.allocated;
  metrics_.at_peak.active_bytes = now_.active;
  metrics_.at_peak.requested_bytes = now_.requested;
  for (const SegmentInfo& seg : replayer.allocator().Snapshot().segments) {
    for (const BlockInfo& b : seg.blocks) {
      if (b.state == BlockState::kActiveAllocated) waste_bytes_ += b.size - b.requested_size;
    }
  }
  metrics_.peak_internal_waste_bytes = waste_bytes_;
  metrics_.at_peak.internal_waste_bytes = waste_bytes_;
  metrics_.at_peak.free_cached_bytes = now_.reserved - now_.active;
  metrics_.at_peak.largest_free_block = replayer.allocator().LargestFreeCachedBlock();
}

void MetricsCollector::OnAllocatorEvent(const AllocatorEvent& event) {
  switch (event.kind) {
    case EventKind::kAlloc:
      now_.allocated += event.bytes;
      now_.active += event.bytes;
      now_.requested += event.requested_bytes;
      peak_.allocated = std::max(peak_.allocated, now_.allocated);
      peak_.active = std::max(peak_.active, now_.active);
      peak_.requested = std::max(peak_.requested, now_.requested);
      waste_bytes_ += event.bytes - event.requested_bytes;
      metrics_.peak_internal_waste_bytes =
          std::max(metrics_.peak_internal_waste_bytes, waste_bytes_);
      ++metrics_.allocations;
      break;
    case EventKind::kFreeRequested:
      now_.allocated -= event.bytes;
      waste_bytes_ -= event.bytes - event.requested_bytes;
      ++metrics_.frees;
      break;
    case EventKind::kFreeCompleted:
      now_.active -= event.bytes;
      now_.requested -= event.requested_bytes;
      break;
    case EventKind::kSegmentAlloc:
    case EventKind::kSegmentMap:
      if (in_trace_oom_) oom_segments_.emplace_back(event.ptr, event.bytes);
      now_.reserved += event.bytes;
      if (now_.reserved > peak_.reserved) {
        peak_.reserved = now_.reserved;
        new_reserved_peak_ = true;
      }
      break;
    case EventKind::kSegmentFree:
    case EventKind::kSegmentUnmap:
      // (What overlaps a refused range was left out of reserved already.)
      now_.reserved -= event.bytes - TakeRefused(event.ptr, event.bytes);
      break;
    default:
      break;
  }
}

void MetricsCollector::OnTraceEvent(const TraceEvent& event) {
  if (event.kind != EventKind::kOom) return;
  in_trace_oom_ = true;
  oom_segments_.clear();
  saved_peak_ = peak_;
  saved_counts_.allocations = metrics_.allocations;
  saved_counts_.frees = metrics_.frees;
  saved_counts_.peak_internal_waste_bytes = metrics_.peak_internal_waste_bytes;
}

void MetricsCollector::OnOom(const ReplayOom& oom) {
  in_trace_oom_ = false;
  if (!oom.in_trace || oom.in_replay) return;
  if (served_counts_ && served_counts_(oom)) {
    oom_segments_.clear();
    return;
  }
  // The segments made for the dropped request stay cached in the replay; the job never had them.
  for (const auto& [ptr, bytes] : oom_segments_) {
    refused_ranges_[ptr] = bytes;
    now_.reserved -= bytes;
  }
  oom_segments_.clear();
  peak_.allocated = std::max(saved_peak_.allocated, now_.allocated);
  peak_.active = std::max(saved_peak_.active, now_.active);
  peak_.requested = std::max(saved_peak_.requested, now_.requested);
  peak_.reserved = std::max(saved_peak_.reserved, now_.reserved);
  metrics_.allocations = saved_counts_.allocations;
  metrics_.frees = saved_counts_.frees;
  metrics_.peak_internal_waste_bytes = saved_counts_.peak_internal_waste_bytes;
  new_reserved_peak_ = false;
  ++metrics_.refused_requests_left_out;
  if (oom.event != nullptr) {
    metrics_.refused_bytes_left_out +=
        oom.event->requested_bytes > 0 ? oom.event->requested_bytes : oom.event->bytes;
  }
}

uint64_t MetricsCollector::TakeRefused(DevicePtr ptr, uint64_t bytes) {
  uint64_t overlap = 0;
  const DevicePtr end = ptr + bytes;
  for (auto it = refused_ranges_.begin(); it != refused_ranges_.end();) {
    const DevicePtr start = it->first, stop = it->first + it->second;
    if (stop <= ptr || start >= end) {
      ++it;
      continue;
    }
    overlap += std::min(stop, end) - std::max(start, ptr);
    it = refused_ranges_.erase(it);
    if (start < ptr) refused_ranges_[start] = ptr - start;  // the parts outside stay refused
    if (stop > end) refused_ranges_[end] = stop - end;
  }
  return overlap;
}

void MetricsCollector::OnOpDone(const TraceEvent& event) {
  TimelinePoint p;
  p.index = event.index;
  p.time_ns = event.time_ns;
  p.allocated_bytes = now_.allocated;
  p.active_bytes = now_.active;
  p.requested_bytes = now_.requested;
  p.reserved_bytes = now_.reserved;
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
  MemoryMetrics& m = metrics_;
  m.events = replayer_.events_read();
  m.final_stats = replayer_.allocator().GetStats();
  m.peak_allocated_bytes = peak_.allocated;
  m.peak_active_bytes = peak_.active;
  m.peak_requested_bytes = peak_.requested;
  m.peak_reserved_bytes = peak_.reserved;
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
