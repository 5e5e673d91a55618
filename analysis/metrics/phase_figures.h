// PhaseFiguresCollector: each marker phase of a trace (from one marker to the next, in order:
// "step 0 / forward", "step 0 / backward", ...) with its allocations and the peaks of allocated
// and reserved memory (the job's view: MetricsCollector's curves) and of the demand (demand.h)
// within it. Two traces of the same job (a log and its prediction, two runs) are compared phase
// by phase with these rows (report_comparison.h).
//
// Cost: a few comparisons per operation. Memory: at most kMaxPhases rows; the phases after them
// are summed into one row, kLaterPhases.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/metrics/demand.h"
#include "analysis/metrics/metrics.h"
#include "analysis/replay/replay.h"

namespace fragscope {

struct PhaseFigures {
  std::string phase;  // the marker's text; "" before the first marker
  uint64_t first_event = 0;
  uint64_t allocations = 0;  // the trace's alloc events in the phase
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  uint64_t peak_demand_bytes = 0;
  // The live requests by role at the phase's demand peak (demand.h; all unknown without tags).
  RoleBytes roles_at_peak_demand{};
  // ... and by module (DemandCollector::ended_phase_modules: Note [Phase peaks by module]);
  // empty without contexts.
  std::vector<DemandTerm> modules_at_peak_demand;
};

class PhaseFiguresCollector final : public ReplayHooks {
 public:
  static constexpr size_t kMaxPhases = 4096;
  static constexpr char kLaterPhases[] = "(later phases)";

  // REQUIRES: `metrics` and `demand` are hooks of the same replay, added before this one (the
  // demand has seen each event when this one does).
  PhaseFiguresCollector(const MetricsCollector& metrics, const DemandCollector& demand);

  uint32_t callbacks() const override { return kHookTraceEvent | kHookOpDone | kHookFinish; }
  void OnTraceEvent(const TraceEvent& event) override;
  void OnOpDone(const TraceEvent& event) override;
  // REQUIRES: after the demand's OnFinish (it is an earlier hook).
  void OnFinish() override;

  // In trace order; the first row is the part before the first marker when it allocated.
  std::vector<PhaseFigures> Take();

 private:
  PhaseFigures& Current();

  const MetricsCollector& metrics_;
  const DemandCollector& demand_;
  std::vector<PhaseFigures> rows_;
};

}  // namespace fragscope
