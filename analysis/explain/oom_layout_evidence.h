// OomLayoutEvidence: what an OOM explanation reads of the layout right after the failure, for one
// request: the layout's totals, the private pools other than the request's, the free blocks of
// other streams that would fit it, the fragmented segments with the most free bytes and the live
// blocks that pin them, and the largest live blocks anywhere. EvidenceFromLayout computes it from
// a whole LayoutSummary; LiveLayout (live_layout.h) from a layout kept current between OOMs, in
// time proportional to what it reports. The two agree field for field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "allocator/pool_id.h"
#include "allocator/types.h"
#include "analysis/explain/segment_map.h"
#include "analysis/replay/replay.h"

namespace fragscope {

struct PinningBlock {
  DevicePtr address = 0;
  DevicePtr segment = 0;
  uint64_t size = 0;
  uint64_t requested_bytes = 0;
  bool pending_free = false;
  BlockOrigin origin;  // origin.context is cleared: `context` is its copy
  std::string phase;
  std::string site;      // the allocation's call site ("" = not known)
  BlockContext context;  // who holds it (.fslog 2.6; empty fields where not known)
};

struct FragmentedSegment {
  DevicePtr address = 0;
  uint64_t size = 0;
  uint64_t free_bytes = 0;
  uint64_t holes = 0;
  uint64_t largest_hole = 0;
  uint64_t live_blocks = 0;
};

// The bounds of the lists an explanation reports.
inline constexpr size_t kMaxFragmentedSegments = 5;
inline constexpr size_t kMaxPinningBlocks = 12;

// The failed request, as the explanation reads the layout for it.
struct OomRequest {
  PoolId pool_id;  // (0, 0): the default pool
  StreamId stream = 0;
  uint64_t rounded_bytes = 0;  // its pool kind is PoolFor(rounded_bytes)
};

struct OomLayoutEvidence {
  LayoutTotals totals;
  // The private pools other than the request's (the default pool is not one): how many, how many
  // of them graph pools, the bytes of their segments and their free bytes.
  uint64_t private_pool_count = 0;
  uint64_t graph_pool_count = 0;
  uint64_t private_pool_reserved_bytes = 0;
  uint64_t private_pool_free_bytes = 0;
  // Holes of at least the rounded request in the request's pool (kind and id), on other streams.
  uint64_t other_stream_fitting_bytes = 0;
  // The fragmented segments, most free bytes first (then lowest address), at most
  // kMaxFragmentedSegments.
  std::vector<FragmentedSegment> fragmented;
  // The live blocks of `fragmented`, and the live blocks of all segments: each largest first (then
  // lowest address), at most kMaxPinningBlocks.
  std::vector<PinningBlock> fragmented_pinning;
  std::vector<PinningBlock> largest_live;
};

// The order of pinning blocks: largest first, then lowest address.
inline bool PinsBefore(uint64_t size_a, DevicePtr address_a, uint64_t size_b, DevicePtr address_b) {
  return size_a != size_b ? size_a > size_b : address_a < address_b;
}

// The evidence for `request` from a whole layout: O(its blocks).
OomLayoutEvidence EvidenceFromLayout(const LayoutSummary& layout, const OomRequest& request);

}  // namespace fragscope
