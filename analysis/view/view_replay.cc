#include "analysis/view/view_replay.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

#include "analysis/metrics/demand.h"
#include "analysis/metrics/metrics.h"
#include "analysis/replay/hook_list.h"
#include "analysis/report/json_report.h"
#include "fslog/allocation_role.h"

namespace fragscope {
namespace {

using estimator::OrderedJson;

// Samples the curves after every operation and captures the layout at each moment.
class ViewCollector final : public ReplayHooks {
 public:
  ViewCollector(Replayer& replayer, const MetricsCollector& metrics, const DemandCollector& demand,
                const ViewReplayOptions& options)
      : replayer_(replayer),
        metrics_(metrics),
        demand_(demand),
        sampling_(options.levels),
        levels_(options.max_finest_buckets) {
    for (const ViewMoment& m : options.moments) {
      if (m.at_oom) {
        ooms_.emplace(m.after_event, m);
      } else {
        moments_.push_back(m);
      }
    }
    std::stable_sort(
        moments_.begin(), moments_.end(),
        [](const ViewMoment& a, const ViewMoment& b) { return a.after_event < b.after_event; });
  }

  uint32_t callbacks() const override {
    return kHookTraceEvent | kHookOom | kHookFinish | (sampling_ ? kHookOpDone : kHookStop);
  }
  void OnTraceEvent(const TraceEvent& event) override {
    while (next_ < moments_.size() && moments_[next_].after_event < event.index) {
      Capture(moments_[next_++]);
    }
    // An OOM moment the replay passed without failing there: the layout before its request.
    while (!ooms_.empty() && ooms_.begin()->first < event.index) {
      Capture(ooms_.begin()->second);
      ooms_.erase(ooms_.begin());
    }
    ++events_;
    prev_index_ = event.index;
    prev_time_ns_ = event.time_ns;
  }
  void OnOpDone(const TraceEvent& event) override {
    levels_.Add({.index = event.index,
                 .time_ns = event.time_ns,
                 .allocated_bytes = metrics_.allocated_now(),
                 .reserved_bytes = metrics_.reserved_now(),
                 .active_bytes = metrics_.active_now(),
                 .requested_bytes = metrics_.requested_now(),
                 .demand_bytes = demand_.live_bytes()});
  }
  void OnOom(const ReplayOom& oom) override {
    if (oom.event == nullptr) return;
    auto it = ooms_.find(oom.event->index);
    if (it == ooms_.end()) return;
    Capture(it->second, oom.event->index, oom.event->time_ns);
    ooms_.erase(it);
  }
  void OnFinish() override {
    while (next_ < moments_.size()) Capture(moments_[next_++]);
    for (const auto& [index, moment] : ooms_) Capture(moment);
    ooms_.clear();
  }
  // Layouts only: the replay ends once the last one is taken.
  bool Stop() const override { return next_ == moments_.size() && ooms_.empty(); }

  uint64_t events() const { return events_; }
  const ViewLevels& levels() const { return levels_; }
  std::vector<ViewCapture>& captures() { return captures_; }

 private:
  void Capture(const ViewMoment& moment) { Capture(moment, prev_index_, prev_time_ns_); }
  void Capture(const ViewMoment& moment, uint64_t index, uint64_t time_ns) {
    LayoutSummary layout = CurrentLayout(replayer_);
    layout.index = index;
    layout.time_ns = time_ns;
    captures_.push_back({moment, std::move(layout)});
  }

  Replayer& replayer_;
  const MetricsCollector& metrics_;
  const DemandCollector& demand_;
  bool sampling_;
  ViewLevels levels_;
  std::vector<ViewMoment> moments_;  // in event order
  size_t next_ = 0;
  std::map<uint64_t, ViewMoment> ooms_;  // by the OOM's event
  uint64_t events_ = 0;
  uint64_t prev_index_ = 0;
  uint64_t prev_time_ns_ = 0;
  std::vector<ViewCapture> captures_;
};

std::string_view StateName(MapBlockState state) {
  switch (state) {
    case MapBlockState::kAllocated:
      return "allocated";
    case MapBlockState::kPendingFree:
      return "pending_free";
    case MapBlockState::kFree:
      return "free";
  }
  return "free";
}

}  // namespace

absl::StatusOr<ViewReplayResult> ReplayForView(const TraceOpener& opener,
                                               const AnalysisOptions& analysis,
                                               const ViewReplayOptions& options) {
  absl::StatusOr<std::unique_ptr<TraceSource>> source = opener.Open();
  if (!source.ok()) return source.status();
  absl::StatusOr<ReplayConfig> config = MakeReplayConfig((*source)->info(), analysis);
  if (!config.ok()) return config.status();
  if (analysis.conf.has_value()) {
    config->empty_cache_at = TraceEmptyCacheCalls(opener, (*source)->info(), analysis);
  }
  Replayer replayer(**source, *config);
  if (absl::Status s = replayer.Init(); !s.ok()) return s;
  MetricsCollector metrics(replayer, /*timeline_points=*/2);
  DemandCollector demand((*source)->info());
  ViewCollector view(replayer, metrics, demand, options);
  HookList hooks;
  if (options.levels) {
    hooks.Add(&metrics);
    hooks.Add(&demand);
  }
  hooks.Add(&view);
  if (absl::Status s = replayer.Run(&hooks); !s.ok()) return s;

  ViewReplayResult result;
  if (options.levels) result.levels = view.levels().Levels();
  result.samples = view.levels().samples();
  result.events = view.events();
  result.capacity_bytes = config->capacity_bytes;
  result.limit_bytes = config->allowed_bytes.value_or(config->capacity_bytes);
  result.captures = std::move(view.captures());
  return result;
}

OrderedJson ViewLayoutJson(const LayoutSummary& layout, size_t max_blocks) {
  OrderedJson j = LayoutJson(layout);
  // The largest segments first until the block budget is spent; listed in address order.
  std::vector<size_t> order(layout.maps.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return layout.maps[a].size > layout.maps[b].size; });
  std::vector<bool> listed(layout.maps.size(), false);
  size_t budget = max_blocks;
  uint64_t left_out = 0;
  for (size_t i : order) {
    const size_t blocks = layout.maps[i].blocks.size();
    if (blocks <= budget) {
      listed[i] = true;
      budget -= blocks;
    } else {
      left_out += blocks;
    }
  }
  OrderedJson maps = OrderedJson::array();
  for (size_t i = 0; i < layout.maps.size(); ++i) {
    if (!listed[i]) continue;
    const SegmentMap& m = layout.maps[i];
    OrderedJson blocks = OrderedJson::array();
    for (const MapBlock& b : m.blocks) {
      OrderedJson block;
      block["address"] = HexAddress(b.address);
      block["size_bytes"] = b.size;
      block["requested_bytes"] = b.requested_bytes;
      block["state"] = StateName(b.state);
      if (b.state != MapBlockState::kFree) {
        block["alloc_event"] = b.origin.index;
        block["alloc_time_ns"] = b.origin.time_ns;
        block["phase"] = b.phase;
        block["role"] = AllocationRoleName(b.origin.role);
        block["before_trace"] = b.origin.before_trace;
        block["site"] = b.site;
        if (!b.context.module.empty() || !b.context.op.empty()) {
          block["module"] = b.context.module;
          block["op"] = b.context.op;
          block["backward"] = b.context.backward;
        }
      }
      blocks.push_back(std::move(block));
    }
    OrderedJson segment;
    segment["address"] = HexAddress(m.address);
    segment["size_bytes"] = m.size;
    segment["pool"] = PoolKindName(m.pool);
    segment["stream"] = HexAddress(m.stream);
    segment["pool_id"] = {m.pool_id.first, m.pool_id.second};
    segment["allocated_bytes"] = m.allocated_bytes;
    segment["free_bytes"] = m.free_bytes;
    segment["holes"] = m.holes;
    segment["largest_hole_bytes"] = m.largest_hole;
    segment["fragmented"] = m.fragmented();
    segment["blocks"] = std::move(blocks);
    maps.push_back(std::move(segment));
  }
  j["maps"] = std::move(maps);
  j["blocks_left_out"] = left_out;
  return j;
}

}  // namespace fragscope
