#include "analysis/explain/segment_map.h"

#include <algorithm>

namespace fragscope {

LayoutSummary SummarizeLayout(const AllocatorSnapshot& snapshot,
                              const absl::flat_hash_map<DevicePtr, BlockOrigin>& origins,
                              const std::function<std::string(uint32_t)>& phase_text,
                              const std::function<std::string(uint32_t)>& site_text) {
  LayoutSummary layout;
  layout.maps.reserve(snapshot.segments.size());
  for (const SegmentInfo& s : snapshot.segments) {
    SegmentMap map;
    map.address = s.address;
    map.size = s.total_size;
    map.pool = s.segment_type;
    map.stream = s.stream;
    map.pool_id = s.pool_id;
    map.blocks.reserve(s.blocks.size());
    for (const BlockInfo& b : s.blocks) {
      MapBlock block;
      block.address = b.address;
      block.size = b.size;
      switch (b.state) {
        case BlockState::kActiveAllocated:
          block.state = MapBlockState::kAllocated;
          map.allocated_bytes += b.size;
          map.active_bytes += b.size;
          break;
        case BlockState::kActivePendingFree:
          block.state = MapBlockState::kPendingFree;
          map.active_bytes += b.size;
          break;
        case BlockState::kInactive:
          block.state = MapBlockState::kFree;
          map.free_bytes += b.size;
          ++map.holes;
          map.largest_hole = std::max(map.largest_hole, b.size);
          break;
      }
      if (block.state != MapBlockState::kFree) {
        block.requested_bytes = b.requested_size;
        if (auto it = origins.find(b.address); it != origins.end()) {
          block.origin = it->second;
          block.phase = phase_text(it->second.phase);
          if (it->second.site != 0) block.site = site_text(it->second.site);
          // The layout may outlive the trace source that owns the context: a copy.
          if (it->second.context != nullptr) block.context = *it->second.context;
          block.origin.context = nullptr;
        }
      }
      map.blocks.push_back(std::move(block));
    }
    LayoutTotals& t = layout.totals;
    t.reserved_bytes += map.size;
    t.allocated_bytes += map.allocated_bytes;
    t.free_cached_bytes += map.free_bytes;
    t.holes += map.holes;
    t.largest_hole = std::max(t.largest_hole, map.largest_hole);
    if (map.fragmented()) ++t.fragmented_segments;
    layout.active_bytes += map.active_bytes;
    layout.maps.push_back(std::move(map));
  }
  layout.segments = layout.maps.size();
  if (layout.totals.free_cached_bytes > 0) {
    layout.rmm_fragmentation = 1.0 - static_cast<double>(layout.totals.largest_hole) /
                                         static_cast<double>(layout.totals.free_cached_bytes);
  }
  return layout;
}

LayoutSummary CurrentLayout(Replayer& replayer) {
  LayoutSummary layout = SummarizeLayout(
      replayer.allocator().Snapshot(), replayer.LiveBlockOrigins(),
      [&](uint32_t phase) { return replayer.PhaseText(phase); },
      [&](uint32_t site) { return replayer.SiteText(site); });
  layout.index = replayer.last_index();
  layout.time_ns = replayer.last_time_ns();
  return layout;
}

}  // namespace fragscope
