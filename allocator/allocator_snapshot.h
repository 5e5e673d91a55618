// AllocatorSnapshot: the segments and blocks of an allocator at one moment, with the field names
// and block states of PyTorch's torch.cuda.memory_snapshot() (docs/pytorch_allocator_rules.md §6),
// so exporters can write a snapshot pickle that PyTorch's memory_viz opens.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "allocator/pool_id.h"
#include "allocator/types.h"

namespace fragscope {

enum class BlockState : uint8_t {
  kActiveAllocated,    // handed out
  kActivePendingFree,  // freed, waiting for events on streams that used it
  kInactive,           // free, in the pool
};

// PyTorch's strings: "active_allocated", "active_pending_free", "inactive".
std::string_view BlockStateName(BlockState state);

struct BlockInfo {
  DevicePtr address = 0;
  uint64_t size = 0;
  uint64_t requested_size = 0;  // 0 for inactive blocks
  BlockState state = BlockState::kInactive;
};

struct SegmentInfo {
  int device = 0;
  DevicePtr address = 0;
  uint64_t total_size = 0;      // sum of its blocks
  uint64_t allocated_size = 0;  // allocated blocks
  uint64_t active_size = 0;     // allocated + pending-free blocks
  uint64_t requested_size = 0;  // requests of active blocks
  StreamId stream = 0;
  PoolKind segment_type = PoolKind::kSmall;
  bool is_expandable = false;
  PoolId pool_id;                 // segment_pool_id: (0, 0) for the default pool
  std::vector<BlockInfo> blocks;  // address order
};

struct AllocatorSnapshot {
  std::vector<SegmentInfo> segments;  // address order
};

// One device allocation (or expandable reservation) of an allocator: its address range and its
// snapshot, one SegmentInfo per mapped range (one for an ordinary segment, none for a reservation
// with nothing mapped).
struct SegmentSnapshot {
  DevicePtr base = 0;
  uint64_t size = 0;
  std::vector<SegmentInfo> segments;  // address order
};

}  // namespace fragscope
