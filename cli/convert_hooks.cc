#include "cli/convert_hooks.h"

namespace fragscope::cli {

std::vector<InitialSegment> StateBeforeTrace(const LayoutSummary& layout) {
  std::vector<InitialSegment> state;
  for (const SegmentMap& m : layout.maps) {
    InitialSegment& seg = state.emplace_back();
    seg.address = m.address;
    seg.size = m.size;
    seg.pool = m.pool;
    seg.stream = m.stream;
    for (const MapBlock& b : m.blocks) {
      if (b.state != MapBlockState::kFree) {
        seg.allocated.push_back(InitialBlock{b.address, b.size, b.requested_bytes});
      }
    }
  }
  return state;
}

std::vector<ExportSegment> ToExport(const LayoutSummary& layout) {
  std::vector<ExportSegment> out;
  for (const SegmentMap& m : layout.maps) {
    ExportSegment s{m.address, m.size, m.pool == PoolKind::kLarge, m.stream, {}};
    for (const MapBlock& b : m.blocks) {
      s.blocks.push_back({b.address, b.size, b.requested_bytes,
                          b.state == MapBlockState::kAllocated     ? 0
                          : b.state == MapBlockState::kPendingFree ? 1
                                                                   : 2});
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace fragscope::cli
