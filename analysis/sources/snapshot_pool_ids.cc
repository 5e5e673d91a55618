#include "analysis/sources/snapshot_pool_ids.h"

#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace fragscope {
namespace {

struct OwnedRange {
  uint64_t end = 0;
  PoolId pool;
};

PoolId ToPoolId(const std::pair<int64_t, int64_t>& id) {
  return PoolId{static_cast<uint64_t>(id.first), static_cast<uint64_t>(id.second)};
}

}  // namespace

std::vector<PoolId> TraceEntryPoolIds(const PyTorchSnapshot& snapshot, int device) {
  if (device < 0 || static_cast<size_t>(device) >= snapshot.device_traces.size()) return {};
  const std::vector<SnapshotTraceEntry>& trace =
      snapshot.device_traces[static_cast<size_t>(device)];
  bool any = false;
  for (const SnapshotTraceEntry& e : trace)
    any = any || (e.pool_id.has_value() && !ToPoolId(*e.pool_id).is_default());
  // Private segments of the final state, by address (expandable ones too: their mapped ranges).
  absl::flat_hash_map<uint64_t, OwnedRange> final_private;
  for (const SnapshotSegment& s : snapshot.segments) {
    if (s.device != device || SegmentPoolId(s).is_default()) continue;
    final_private[s.address] = OwnedRange{s.address + s.total_size, SegmentPoolId(s)};
    any = true;
  }
  if (!any) return {};
  // The entry at which each final private segment was last allocated (or mapped).
  absl::flat_hash_map<size_t, uint64_t> starts_at;  // entry index -> segment address
  absl::flat_hash_map<uint64_t, size_t> last_alloc;
  for (size_t i = 0; i < trace.size(); ++i) {
    const SnapshotTraceEntry& e = trace[i];
    if ((e.action == TraceAction::kSegmentAlloc || e.action == TraceAction::kSegmentMap) &&
        final_private.contains(e.addr)) {
      last_alloc[e.addr] = i;
    }
  }
  std::map<uint64_t, OwnedRange> owned;  // start -> range, the ranges owned so far
  for (const auto& [address, range] : final_private) {
    auto it = last_alloc.find(address);
    if (it == last_alloc.end()) {
      owned[address] = range;  // existed before the trace
    } else {
      starts_at[it->second] = address;
    }
  }
  std::vector<PoolId> pools(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    const SnapshotTraceEntry& e = trace[i];
    if (auto start = starts_at.find(i); start != starts_at.end()) {
      owned[start->second] = final_private[start->second];
    }
    if (e.pool_id.has_value()) {
      pools[i] = ToPoolId(*e.pool_id);
      continue;
    }
    if (e.action == TraceAction::kOom || owned.empty()) continue;
    auto range = owned.upper_bound(e.addr);
    if (range == owned.begin()) continue;
    --range;
    if (e.addr < range->second.end) pools[i] = range->second.pool;
  }
  return pools;
}

}  // namespace fragscope
