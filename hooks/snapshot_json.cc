#include "hooks/snapshot_json.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fragscope::hooks {

std::string SnapshotJson(const AllocatorSnapshot& snapshot, int device) {
  std::string out = absl::StrFormat("{\"device\":%d,\"segments\":[", device);
  bool first_segment = true;
  for (const SegmentInfo& segment : snapshot.segments) {
    if (!first_segment) out.push_back(',');
    first_segment = false;
    absl::StrAppendFormat(&out,
                          "{\"device\":%d,\"address\":%u,\"total_size\":%u,\"allocated_size\":%u,"
                          "\"active_size\":%u,\"requested_size\":%u,\"stream\":%u,"
                          "\"segment_type\":\"%s\",\"is_expandable\":%s,\"blocks\":[",
                          segment.device, segment.address, segment.total_size,
                          segment.allocated_size, segment.active_size, segment.requested_size,
                          segment.stream, PoolKindName(segment.segment_type),
                          segment.is_expandable ? "true" : "false");
    bool first_block = true;
    for (const BlockInfo& block : segment.blocks) {
      if (!first_block) out.push_back(',');
      first_block = false;
      absl::StrAppendFormat(
          &out, "{\"address\":%u,\"size\":%u,\"requested_size\":%u,\"state\":\"%s\"}",
          block.address, block.size, block.requested_size, BlockStateName(block.state));
    }
    out.append("]}");
  }
  out.append("]}");
  return out;
}

}  // namespace fragscope::hooks
