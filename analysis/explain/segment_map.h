// SegmentMap / LayoutSummary: the device layout at one moment of a replay, as evidence: every
// segment with its blocks in address order, its free holes, and for each live block where it
// was allocated (event index, time, marker phase). OOM explanations and the HTML report's
// segment maps are built from it.
//
// A "hole" is a free cached block (PyTorch state "inactive"). A segment is *fragmented* when it
// holds at least one hole and at least one live block: the live blocks keep the segment from
// being returned to the device and keep its holes from merging into one. They are the segment's
// pinning blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "allocator/allocator_snapshot.h"
#include "analysis/replay/replay.h"

namespace fragscope {

enum class MapBlockState : uint8_t { kAllocated, kPendingFree, kFree };

struct MapBlock {
  DevicePtr address = 0;
  uint64_t size = 0;
  uint64_t requested_bytes = 0;  // 0 for free blocks
  MapBlockState state = MapBlockState::kFree;
  BlockOrigin origin;    // live blocks only (origin.context cleared: `context` is its copy)
  std::string phase;     // live blocks only
  std::string site;      // live blocks only: the call site ("" = not known)
  BlockContext context;  // live blocks only: who holds it (.fslog 2.6)
};

struct SegmentMap {
  DevicePtr address = 0;
  uint64_t size = 0;
  PoolKind pool = PoolKind::kSmall;
  StreamId stream = 0;
  PoolId pool_id;                // the private pool (CUDA graph, MemPool); (0, 0): the default
  uint64_t allocated_bytes = 0;  // allocated blocks
  uint64_t active_bytes = 0;     // allocated + pending free
  uint64_t free_bytes = 0;       // holes
  uint64_t holes = 0;
  uint64_t largest_hole = 0;
  std::vector<MapBlock> blocks;  // address order
  bool fragmented() const { return holes > 0 && active_bytes > 0; }
};

// A layout's totals over all its segments, as a LayoutSummary and an OOM explanation's evidence
// (OomLayoutEvidence) both hold them.
struct LayoutTotals {
  uint64_t reserved_bytes = 0;
  uint64_t allocated_bytes = 0;
  uint64_t free_cached_bytes = 0;  // sum of holes
  uint64_t holes = 0;
  uint64_t largest_hole = 0;
  uint64_t fragmented_segments = 0;
};

struct LayoutSummary {
  uint64_t index = 0;  // trace event the layout follows
  uint64_t time_ns = 0;
  LayoutTotals totals;
  uint64_t active_bytes = 0;  // allocated + pending free
  uint64_t segments = 0;
  // RMM's external fragmentation: 1 - largest hole / all holes (0 with no holes).
  double rmm_fragmentation = 0.0;
  std::vector<SegmentMap> maps;  // address order
};

// Builds the layout from an allocator snapshot and the replay's block origins.
LayoutSummary SummarizeLayout(const AllocatorSnapshot& snapshot,
                              const absl::flat_hash_map<DevicePtr, BlockOrigin>& origins,
                              const std::function<std::string(uint32_t)>& phase_text,
                              const std::function<std::string(uint32_t)>& site_text);

// The layout of a replay right now.
LayoutSummary CurrentLayout(Replayer& replayer);

}  // namespace fragscope
