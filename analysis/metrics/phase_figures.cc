#include "analysis/metrics/phase_figures.h"

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
    // The demand has ended the phase before this marker (it is an earlier hook).
    if (!rows_.empty() && rows_.back().phase != kLaterPhases) {
      rows_.back().modules_at_peak_demand = demand_.ended_phase_modules();
    }
    // A phase starts with what the one before it left live.
    if (rows_.size() < kMaxPhases) {
      rows_.push_back({.phase = event.text,
                       .first_event = event.index,
                       .peak_demand_bytes = demand_.live_bytes(),
                       .roles_at_peak_demand = demand_.live_roles()});
    } else if (rows_.back().phase != kLaterPhases) {
      rows_.push_back({.phase = kLaterPhases, .first_event = event.index});
    }
  } else if (event.kind == EventKind::kAlloc) {
    ++Current().allocations;
  } else if (event.kind == EventKind::kTag && !rows_.empty() &&
             demand_.live_bytes() == rows_.back().peak_demand_bytes) {
    // The tag right after an alloc that set the phase's peak (Note [Tag records]): the peak's
    // roles include the new block's.
    rows_.back().roles_at_peak_demand = demand_.live_roles();
  }
}

void PhaseFiguresCollector::OnOpDone(const TraceEvent&) {
  PhaseFigures& row = Current();
  row.peak_allocated_bytes = std::max(row.peak_allocated_bytes, metrics_.allocated_now());
  row.peak_reserved_bytes = std::max(row.peak_reserved_bytes, metrics_.reserved_now());
  if (demand_.live_bytes() > row.peak_demand_bytes) {
    row.peak_demand_bytes = demand_.live_bytes();
    row.roles_at_peak_demand = demand_.live_roles();
  }
}

void PhaseFiguresCollector::OnFinish() {
  if (!rows_.empty() && rows_.back().phase != kLaterPhases) {
    rows_.back().modules_at_peak_demand = demand_.ended_phase_modules();
  }
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
