// PhasePeakCollector: which marker phases raised a replay's peaks. After every operation, when
// reserved (or allocated) memory stands above its highest level so far, the rise is credited to
// the phase the operation ran in, so the rises of a trace add up to its peak less the memory held
// before it: the peak, decomposed by phase. Phases are grouped into kinds (PhaseKindOf), so that
// "step 3 / forward" and "step 4 / forward" count as one.
//
// The cross-rank report (cross_rank.h) compares ranks phase by phase with these figures: "rank 7
// reserves 4.1 GiB more than the median, all of it in the optimizer phase".
//
// Cost: a comparison per operation; a phase lookup only when a peak rises. Memory: at most
// kMaxPhases kinds (later kinds count as "other phases").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/metrics/metrics.h"
#include "analysis/replay/replay.h"

namespace fragscope {

struct PhaseRise {
  std::string phase;  // PhaseKindOf the marker text
  uint64_t reserved_rise_bytes = 0;
  uint64_t allocated_rise_bytes = 0;
};

// The kind of a marker phase: "optimizer" (text with "optim" or ".step"), "backward", "forward"
// (checked in that order, case-insensitively, as the model gap's categories are), else the text
// with each run of digits replaced by "N" ("eval N"), at most 48 bytes.
std::string PhaseKindOf(std::string_view marker_text);

class PhasePeakCollector final : public ReplayHooks {
 public:
  static constexpr size_t kMaxPhases = 32;
  static constexpr char kOtherPhases[] = "(other phases)";

  // REQUIRES: `metrics` is a hook of the same replay, added before this one.
  PhasePeakCollector(const Replayer& replayer, const MetricsCollector& metrics);

  uint32_t callbacks() const override { return kHookOpDone; }
  void OnOpDone(const TraceEvent& event) override;

  // In order of first rise.
  const std::vector<PhaseRise>& phases() const { return phases_; }

 private:
  PhaseRise& Current();

  const Replayer& replayer_;
  const MetricsCollector& metrics_;
  uint64_t high_reserved_ = 0;
  uint64_t high_allocated_ = 0;
  std::vector<PhaseRise> phases_;
  // The marker text of the last phase credited, and its index in phases_.
  std::string last_text_;
  size_t last_index_ = SIZE_MAX;
};

}  // namespace fragscope
