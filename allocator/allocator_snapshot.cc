#include "allocator/allocator_snapshot.h"

namespace fragscope {

std::string_view BlockStateName(BlockState state) {
  switch (state) {
    case BlockState::kActiveAllocated:
      return "active_allocated";
    case BlockState::kActivePendingFree:
      return "active_pending_free";
    case BlockState::kInactive:
      return "inactive";
  }
  return "unknown";
}

}  // namespace fragscope
