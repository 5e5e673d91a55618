// LiveLayout: a replay's layout kept current from its allocator's events, so that an OOM
// explanation reads what it reports instead of the whole layout.
//
// Note [A layout kept current]
// An OOM explanation needs a few totals of the layout (holes, free and reserved bytes, fragmented
// segments, the private pools' figures), the holes of other streams that would fit the request,
// and the handful of segments and blocks it names. Building the whole layout for each explanation
// (CurrentLayout: every segment and block with its origin and phase) would cost, on a log of 10^5
// OOMs over 10^5 segments, 1000 whole layouts. Instead the layout is read once, at the first OOM,
// into ordered indexes (fragmented segments by free bytes, live blocks by size, holes by pool,
// stream and size) with running totals; from then on each allocator event notes the segment it
// changed (its address range), and before the next explanation only those segments are read again
// (CachingAllocator::SnapshotSegmentAt) and re-indexed. An explanation therefore costs the blocks
// of the segments changed since the previous one plus what it reports (its segments' blocks, its
// pinning blocks, the holes it sums), each O(log segments); origins and phases are looked up for
// the reported blocks only (Replayer::LiveOrigin). The unit re-read is the allocator's segment:
// an expandable segment is one reservation per (pool, stream), so there a change anywhere re-reads
// all the mapped blocks of that pool and stream (still no origins and no strings, but not what
// the explanation reports). When more events than the layout has segments
// (at least kMinNotedChanges) arrive between two explanations, the layout is read whole again:
// that costs no more than those events did. EvidenceFromLayout over CurrentLayout gives the same
// evidence (tests/analysis/live_layout_test.cc compares them after every operation of random jobs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "allocator/allocator_events.h"
#include "allocator/allocator_snapshot.h"
#include "analysis/explain/oom_layout_evidence.h"
#include "analysis/replay/replay.h"

namespace fragscope {

class LiveLayout final : public AllocatorObserver {
 public:
  // Reads `replayer`'s layout (O(blocks)) and observes its allocator until destroyed.
  // REQUIRES: `replayer` outlives this; not called under the allocator's lock.
  explicit LiveLayout(Replayer& replayer);
  ~LiveLayout() override;
  LiveLayout(const LiveLayout&) = delete;
  LiveLayout& operator=(const LiveLayout&) = delete;

  // Notes the address range the event changed (runs under the allocator's lock).
  void OnEvent(const AllocatorEvent& event) override;

  // The evidence for `request` from the layout now: re-reads the segments changed since the last
  // call first.
  OomLayoutEvidence Evidence(const OomRequest& request);

  // Work, for tests that count it instead of timing it: blocks read from the allocator (building
  // and refreshing the layout), and index entries read to answer Evidence.
  uint64_t blocks_read() const { return blocks_read_; }
  uint64_t entries_read() const { return entries_read_; }

  static constexpr size_t kMinNotedChanges = 1024;

 private:
  // One segment of the layout as the allocator's snapshot shows it (an expandable segment's
  // mapped range), with its figures.
  struct Entry {
    SegmentInfo info;
    uint64_t free_bytes = 0;
    uint64_t holes = 0;
    uint64_t largest_hole = 0;
    uint64_t live_blocks = 0;
    bool fragmented() const { return holes > 0 && info.active_size > 0; }
  };
  // A live block, in pinning order (PinsBefore).
  struct LiveKey {
    uint64_t size;
    DevicePtr address;
    DevicePtr segment;
    uint64_t requested_bytes;
    bool pending_free;
  };
  struct LiveOrder {
    bool operator()(const LiveKey& a, const LiveKey& b) const {
      return PinsBefore(a.size, a.address, b.size, b.address);
    }
  };
  // Fragmented segments: most free bytes first, then lowest address.
  struct FragmentedOrder {
    bool operator()(const std::pair<uint64_t, DevicePtr>& a,
                    const std::pair<uint64_t, DevicePtr>& b) const {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    }
  };
  struct PoolFigures {
    uint64_t segments = 0;
    uint64_t reserved_bytes = 0;
    uint64_t free_bytes = 0;
  };
  using HoleKey = std::tuple<PoolId, PoolKind, StreamId>;
  struct Range {
    DevicePtr begin;
    DevicePtr end;  // past the range
    friend bool operator==(const Range&, const Range&) = default;
    friend auto operator<=>(const Range&, const Range&) = default;
  };

  void Note(DevicePtr begin, DevicePtr end);
  // Brings the indexes up to date with the allocator.
  void Refresh();
  void ReadWhole();
  void Insert(SegmentInfo segment);
  // Takes the segment at `it` out of the indexes; returns the next one (a btree's erase moves
  // the others).
  using Segments = absl::btree_map<DevicePtr, Entry>;
  Segments::iterator Erase(Segments::iterator it);
  // The pinning block of `key`, with its origin and phase.
  PinningBlock Pinning(const LiveKey& key);

  Replayer& replayer_;
  Segments segments_;  // by address
  uint64_t reserved_bytes_ = 0;
  uint64_t allocated_bytes_ = 0;
  uint64_t free_cached_bytes_ = 0;
  uint64_t holes_ = 0;
  absl::btree_multiset<uint64_t> largest_holes_;  // each segment's with holes
  absl::btree_set<std::pair<uint64_t, DevicePtr>, FragmentedOrder> fragmented_;
  absl::btree_set<LiveKey, LiveOrder> live_;
  absl::btree_map<HoleKey, absl::btree_multiset<uint64_t>> hole_sizes_;
  // The private pools with segments in the layout, and their totals.
  absl::btree_map<PoolId, PoolFigures> pools_;
  uint64_t graph_pools_ = 0;
  uint64_t pool_reserved_bytes_ = 0;
  uint64_t pool_free_bytes_ = 0;

  // The address ranges the events since the last Refresh changed; read_whole_: too many of them.
  std::vector<Range> changed_;
  bool read_whole_ = false;
  uint64_t blocks_read_ = 0;
  uint64_t entries_read_ = 0;
};

}  // namespace fragscope
