#include "analysis/explain/oom_layout_evidence.h"

#include <algorithm>

#include "absl/container/btree_set.h"
#include "allocator/size_policy.h"

namespace fragscope {
namespace {

// The live blocks of `m`, appended to `out`.
void AddLive(const SegmentMap& m, std::vector<PinningBlock>& out) {
  for (const MapBlock& b : m.blocks) {
    if (b.state == MapBlockState::kFree) continue;
    out.push_back(PinningBlock{b.address, m.address, b.size, b.requested_bytes,
                               b.state == MapBlockState::kPendingFree, b.origin, b.phase});
  }
}

// The first kMaxPinningBlocks of `blocks` in pinning order.
std::vector<PinningBlock> Largest(std::vector<PinningBlock> blocks) {
  std::sort(blocks.begin(), blocks.end(), [](const PinningBlock& a, const PinningBlock& b) {
    return PinsBefore(a.size, a.address, b.size, b.address);
  });
  if (blocks.size() > kMaxPinningBlocks) blocks.resize(kMaxPinningBlocks);
  return blocks;
}

}  // namespace

OomLayoutEvidence EvidenceFromLayout(const LayoutSummary& layout, const OomRequest& request) {
  OomLayoutEvidence x;
  x.totals = layout.totals;
  absl::btree_set<PoolId> pools;
  for (const SegmentMap& m : layout.maps) {
    if (m.pool_id == request.pool_id || m.pool_id.is_default()) continue;
    if (pools.insert(m.pool_id).second && m.pool_id.is_graph_pool()) ++x.graph_pool_count;
    x.private_pool_reserved_bytes += m.size;
    x.private_pool_free_bytes += m.free_bytes;
  }
  x.private_pool_count = pools.size();
  const PoolKind pool = PoolFor(request.rounded_bytes);
  for (const SegmentMap& m : layout.maps) {
    if (m.stream == request.stream || m.pool != pool || m.pool_id != request.pool_id) continue;
    for (const MapBlock& b : m.blocks) {
      if (b.state == MapBlockState::kFree && b.size >= request.rounded_bytes) {
        x.other_stream_fitting_bytes += b.size;
      }
    }
  }

  std::vector<const SegmentMap*> fragmented;
  for (const SegmentMap& m : layout.maps) {
    if (m.fragmented()) fragmented.push_back(&m);
  }
  std::sort(fragmented.begin(), fragmented.end(), [](const SegmentMap* a, const SegmentMap* b) {
    return a->free_bytes != b->free_bytes ? a->free_bytes > b->free_bytes : a->address < b->address;
  });
  std::vector<PinningBlock> pinning;
  for (size_t i = 0; i < fragmented.size() && i < kMaxFragmentedSegments; ++i) {
    const SegmentMap& m = *fragmented[i];
    uint64_t live = 0;
    for (const MapBlock& b : m.blocks) live += b.state != MapBlockState::kFree ? 1u : 0u;
    x.fragmented.push_back({m.address, m.size, m.free_bytes, m.holes, m.largest_hole, live});
    AddLive(m, pinning);
  }
  x.fragmented_pinning = Largest(std::move(pinning));
  std::vector<PinningBlock> live;
  for (const SegmentMap& m : layout.maps) AddLive(m, live);
  x.largest_live = Largest(std::move(live));
  return x;
}

}  // namespace fragscope
