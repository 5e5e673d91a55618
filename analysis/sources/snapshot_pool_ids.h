// The private pool of each trace entry of a PyTorch snapshot.
//
// PyTorch 2.11 records the pool of each segment (segment_pool_id) but not of its trace entries.
// An entry's pool is therefore the pool of the segment its address lies in: a segment of the
// final state with a non-default pool owns its address range from its last segment_alloc in the
// trace (from the start if the trace never allocates it) to the end. Entries that carry a
// pool_id of their own (snapshots fragscope writes) keep it. What stays unknown, and so the
// default pool, is the pool of a segment freed before the snapshot was taken, and of an OOM
// entry (it has no address).
#pragma once

#include <vector>

#include "allocator/pool_id.h"
#include "analysis/sources/pytorch_snapshot.h"

namespace fragscope {

// One PoolId per entry of snapshot.device_traces[device]; empty when every entry is in the
// default pool. Linear in segments and entries (an ordered map of the owned ranges).
std::vector<PoolId> TraceEntryPoolIds(const PyTorchSnapshot& snapshot, int device);

// The pool of a snapshot segment's segment_pool_id.
inline PoolId SegmentPoolId(const SnapshotSegment& segment) {
  return PoolId{static_cast<uint64_t>(segment.pool_id.first),
                static_cast<uint64_t>(segment.pool_id.second)};
}

}  // namespace fragscope
