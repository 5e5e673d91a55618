#include "allocator/allocator_events.h"

namespace fragscope {

std::string_view EventKindName(EventKind kind) {
  // The names of PyTorch's TraceEntry actions where one exists.
  switch (kind) {
    case EventKind::kAlloc:
      return "alloc";
    case EventKind::kFreeRequested:
      return "free_requested";
    case EventKind::kFreeCompleted:
      return "free_completed";
    case EventKind::kSegmentAlloc:
      return "segment_alloc";
    case EventKind::kSegmentFree:
      return "segment_free";
    case EventKind::kSegmentMap:
      return "segment_map";
    case EventKind::kSegmentUnmap:
      return "segment_unmap";
    case EventKind::kOom:
      return "oom";
    case EventKind::kEmptyCache:
      return "empty_cache";
    case EventKind::kOptionsChange:
      return "options_change";
    case EventKind::kMarker:
      return "marker";
    case EventKind::kModel:
      return "model";
    case EventKind::kTag:
      return "tag";
  }
  return "unknown";
}

}  // namespace fragscope
