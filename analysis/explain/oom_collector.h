// OomCollector: the explanation of every OOM of a replay (the trace's and the replay's own), up to
// kMaxExplanations, with the whole segment map for the first kMaxMaps. Each explanation reads the
// layout through a LiveLayout made at the first OOM (Note [A layout kept current] in
// live_layout.h), so its cost is what it reports, not the layout's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "analysis/explain/live_layout.h"
#include "analysis/explain/oom_explainer.h"
#include "analysis/metrics/demand.h"
#include "analysis/replay/replay.h"

namespace fragscope {

class OomCollector final : public ReplayHooks {
 public:
  static constexpr size_t kMaxMaps = 8;
  static constexpr size_t kMaxExplanations = 1000;

  // REQUIRES: `replayer` outlives the collector.
  OomCollector(Replayer& replayer, OomReplayContext context)
      : replayer_(replayer), context_(context) {}
  uint32_t callbacks() const override { return kHookOom; }
  void OnOom(const ReplayOom& oom) override;

  // The demand whose live requests by role each explanation records (held_by_role). REQUIRES:
  // `demand` sees each trace event before this collector's OnOom for it (any hook order does:
  // every hook's OnTraceEvent runs before the event is applied).
  void set_demand(const DemandCollector* demand) { demand_ = demand; }
  std::vector<OomExplanation>& explanations() { return explanations_; }
  uint64_t total() const { return total_; }
  // The layout the explanations read (none before the first OOM and after the last explained).
  const LiveLayout* layout() const { return layout_ ? &*layout_ : nullptr; }

 private:
  Replayer& replayer_;
  OomReplayContext context_;
  const DemandCollector* demand_ = nullptr;
  std::vector<OomExplanation> explanations_;
  uint64_t total_ = 0;
  std::optional<LiveLayout> layout_;
};

}  // namespace fragscope
