#include "analysis/phase_figures.h"

#include <algorithm>
#include <utility>

namespace fragscope {

PhaseFiguresCollector::PhaseFiguresCollector(const MetricsCollector& metrics,
                                             const DemandCollector& demand)
    : metrics_(metrics), demand_(demand) {}

PhaseFigures& PhaseFiguresCollector::Current() {
  if (rows_.empty()) rows_.push_back({});
  return rows_.back();
}

void PhaseFiguresCollector::OnTraceEvent(const TraceEvent& event) {
  if (event.kind == EventKind::kMarker) {
    if (rows_.size() < kMaxPhases) {
      rows_.push_back({.phase = event.text, .first_event = event.index});
    } else if (rows_.back().phase != kLaterPhases) {
      rows_.push_back({.phase = kLaterPhases, .first_event = event.index});
    }
  } else if (event.kind == EventKind::kAlloc) {
    ++Current().allocations;
  }
}

void PhaseFiguresCollector::OnOpDone(const TraceEvent&) {
  PhaseFigures& row = Current();
  row.peak_allocated_bytes = std::max(row.peak_allocated_bytes, metrics_.allocated_now());
  row.peak_reserved_bytes = std::max(row.peak_reserved_bytes, metrics_.reserved_now());
  row.peak_demand_bytes = std::max(row.peak_demand_bytes, demand_.live_bytes());
}

std::vector<PhaseFigures> PhaseFiguresCollector::Take() {
  // A part before the first marker that did nothing is no phase.
  if (!rows_.empty() && rows_.front().phase.empty() && rows_.front().allocations == 0 &&
      rows_.front().peak_reserved_bytes == 0) {
    rows_.erase(rows_.begin());
  }
  return std::move(rows_);
}

}  // namespace fragscope
