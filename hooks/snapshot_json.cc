#include "hooks/snapshot_json.h"

#include <nlohmann/json.hpp>

namespace fragscope::hooks {

std::string SnapshotJson(const AllocatorSnapshot& snapshot, int device) {
  using Json = nlohmann::ordered_json;
  Json segments = Json::array();
  for (const SegmentInfo& segment : snapshot.segments) {
    Json blocks = Json::array();
    for (const BlockInfo& block : segment.blocks) {
      blocks.push_back({{"address", block.address},
                        {"size", block.size},
                        {"requested_size", block.requested_size},
                        {"state", BlockStateName(block.state)}});
    }
    segments.push_back({{"device", segment.device},
                        {"address", segment.address},
                        {"total_size", segment.total_size},
                        {"allocated_size", segment.allocated_size},
                        {"active_size", segment.active_size},
                        {"requested_size", segment.requested_size},
                        {"stream", segment.stream},
                        {"segment_type", PoolKindName(segment.segment_type)},
                        {"is_expandable", segment.is_expandable},
                        {"blocks", std::move(blocks)}});
  }
  // One line, no spaces: the layout the C ABI has always returned.
  return Json{{"device", device}, {"segments", std::move(segments)}}.dump();
}

}  // namespace fragscope::hooks
