#include "analysis/explain/oom_collector.h"

#include <utility>

#include "analysis/explain/segment_map.h"

namespace fragscope {

void OomCollector::OnOom(const ReplayOom& oom) {
  ++total_;
  if (explanations_.size() >= kMaxExplanations) return;
  if (!layout_.has_value()) layout_.emplace(replayer_);
  OomExplanation x = ExplainOom(oom, layout_->Evidence(RequestOf(oom, context_)),
                                replayer_.current_phase(), context_);
  x.headroom_bytes = HeadroomBytes(x);
  x.at_cap = AtCap(x.headroom_bytes, x.available_bytes);
  if (demand_ != nullptr) {
    x.held_by_role = demand_->live_roles();
    x.held_by_module = demand_->LiveModules(DemandCollector::kModulesShown);
  }
  if (oom.event != nullptr && oom.event->context != nullptr) {
    x.request_context = *oom.event->context;
  }
  if (explanations_.size() < kMaxMaps) x.layout = CurrentLayout(replayer_);
  explanations_.push_back(std::move(x));
  // No more explanations: the layout need not follow the replay any longer.
  if (explanations_.size() >= kMaxExplanations) layout_.reset();
}

}  // namespace fragscope
