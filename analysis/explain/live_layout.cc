#include "analysis/explain/live_layout.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "allocator/size_policy.h"

namespace fragscope {

LiveLayout::LiveLayout(Replayer& replayer) : replayer_(replayer) {
  ReadWhole();
  replayer_.allocator().AddObserver(this);
}

LiveLayout::~LiveLayout() { replayer_.allocator().RemoveObserver(this); }

void LiveLayout::OnEvent(const AllocatorEvent& e) {
  switch (e.kind) {
    case EventKind::kAlloc:
    case EventKind::kFreeRequested:
    case EventKind::kFreeCompleted:
      return Note(e.segment, e.segment + 1);
    case EventKind::kSegmentAlloc:
    case EventKind::kSegmentFree:
    case EventKind::kSegmentMap:
    case EventKind::kSegmentUnmap:
      return Note(
          e.ptr, e.ptr + std::max<uint64_t>(1, std::min<uint64_t>(e.bytes, ~DevicePtr{0} - e.ptr)));
    default:
      return;  // no change to the layout
  }
}

void LiveLayout::Note(DevicePtr begin, DevicePtr end) {
  if (read_whole_) return;
  const Range range{begin, end};
  if (!changed_.empty() && changed_.back() == range) return;
  if (changed_.size() >= std::max(kMinNotedChanges, segments_.size())) {
    read_whole_ = true;  // reading the whole layout costs no more than these events did
    changed_.clear();
    changed_.shrink_to_fit();
    return;
  }
  changed_.push_back(range);
}

void LiveLayout::ReadWhole() {
  segments_.clear();
  reserved_bytes_ = allocated_bytes_ = free_cached_bytes_ = holes_ = 0;
  largest_holes_.clear();
  fragmented_.clear();
  live_.clear();
  hole_sizes_.clear();
  pools_.clear();
  graph_pools_ = pool_reserved_bytes_ = pool_free_bytes_ = 0;
  AllocatorSnapshot snapshot = replayer_.allocator().Snapshot();
  for (SegmentInfo& info : snapshot.segments) Insert(std::move(info));
  read_whole_ = false;
  changed_.clear();
}

void LiveLayout::Refresh() {
  if (read_whole_) return ReadWhole();
  if (changed_.empty()) return;
  std::sort(changed_.begin(), changed_.end());
  changed_.erase(std::unique(changed_.begin(), changed_.end()), changed_.end());
  // First every range the changes touched is erased (with the whole of the segment that holds it
  // now), then the segments that hold them now are read in: a segment freed and another made
  // over part of its range are both noted, in either order.
  std::vector<SegmentSnapshot> now;
  for (const Range& r : changed_) {
    Range erase = r;
    if (now.empty() || r.begin - now.back().base >= now.back().size) {
      if (std::optional<SegmentSnapshot> s = replayer_.allocator().SnapshotSegmentAt(r.begin)) {
        for (const SegmentInfo& info : s->segments) blocks_read_ += info.blocks.size();
        now.push_back(std::move(*s));
      }
    }
    if (!now.empty() && r.begin - now.back().base < now.back().size) {
      erase.begin = std::min(erase.begin, now.back().base);
      erase.end = std::max(erase.end, now.back().base + now.back().size);
    }
    for (auto it = segments_.lower_bound(erase.begin);
         it != segments_.end() && it->first < erase.end;) {
      it = Erase(it);
    }
  }
  for (SegmentSnapshot& s : now) {
    for (SegmentInfo& info : s.segments) Insert(std::move(info));
  }
  changed_.clear();
}

void LiveLayout::Insert(SegmentInfo segment) {
  const DevicePtr address = segment.address;
  if (auto old = segments_.find(address); old != segments_.end()) Erase(old);
  Entry& entry = segments_.try_emplace(address).first->second;
  entry.info = std::move(segment);
  const SegmentInfo& info = entry.info;
  const PoolKind kind = info.segment_type;
  for (const BlockInfo& b : info.blocks) {
    ++blocks_read_;
    if (b.state == BlockState::kInactive) {
      entry.free_bytes += b.size;
      ++entry.holes;
      entry.largest_hole = std::max(entry.largest_hole, b.size);
      hole_sizes_[HoleKey{info.pool_id, kind, info.stream}].insert(b.size);
    } else {
      ++entry.live_blocks;
      live_.insert(LiveKey{b.size, b.address, info.address, b.requested_size,
                           b.state == BlockState::kActivePendingFree});
    }
  }
  reserved_bytes_ += info.total_size;
  allocated_bytes_ += info.allocated_size;
  free_cached_bytes_ += entry.free_bytes;
  holes_ += entry.holes;
  if (entry.holes > 0) largest_holes_.insert(entry.largest_hole);
  if (entry.fragmented()) fragmented_.insert({entry.free_bytes, info.address});
  if (!info.pool_id.is_default()) {
    PoolFigures& pool = pools_[info.pool_id];
    if (pool.segments++ == 0 && info.pool_id.is_graph_pool()) ++graph_pools_;
    pool.reserved_bytes += info.total_size;
    pool.free_bytes += entry.free_bytes;
    pool_reserved_bytes_ += info.total_size;
    pool_free_bytes_ += entry.free_bytes;
  }
}

LiveLayout::Segments::iterator LiveLayout::Erase(Segments::iterator it) {
  const Entry& entry = it->second;
  const SegmentInfo& info = entry.info;
  const HoleKey key{info.pool_id, info.segment_type, info.stream};
  for (const BlockInfo& b : info.blocks) {
    if (b.state == BlockState::kInactive) {
      auto sizes = hole_sizes_.find(key);
      sizes->second.erase(sizes->second.find(b.size));
      if (sizes->second.empty()) hole_sizes_.erase(sizes);
    } else {
      live_.erase(LiveKey{b.size, b.address, info.address, 0, false});
    }
  }
  reserved_bytes_ -= info.total_size;
  allocated_bytes_ -= info.allocated_size;
  free_cached_bytes_ -= entry.free_bytes;
  holes_ -= entry.holes;
  if (entry.holes > 0) largest_holes_.erase(largest_holes_.find(entry.largest_hole));
  if (entry.fragmented()) fragmented_.erase({entry.free_bytes, info.address});
  if (!info.pool_id.is_default()) {
    auto pool = pools_.find(info.pool_id);
    pool->second.reserved_bytes -= info.total_size;
    pool->second.free_bytes -= entry.free_bytes;
    pool_reserved_bytes_ -= info.total_size;
    pool_free_bytes_ -= entry.free_bytes;
    if (--pool->second.segments == 0) {
      if (info.pool_id.is_graph_pool()) --graph_pools_;
      pools_.erase(pool);
    }
  }
  return segments_.erase(it);
}

PinningBlock LiveLayout::Pinning(const LiveKey& key) {
  PinningBlock p{.address = key.address,
                 .segment = key.segment,
                 .size = key.size,
                 .requested_bytes = key.requested_bytes,
                 .pending_free = key.pending_free};
  if (std::optional<BlockOrigin> origin = replayer_.LiveOrigin(key.address)) {
    p.origin = *origin;
    p.phase = replayer_.PhaseText(origin->phase);
    p.site = replayer_.SiteText(origin->site);
    // The explanation outlives the trace source that owns the context: a copy.
    if (origin->context != nullptr) p.context = *origin->context;
    p.origin.context = nullptr;
  }
  return p;
}

OomLayoutEvidence LiveLayout::Evidence(const OomRequest& request) {
  Refresh();
  OomLayoutEvidence x;
  x.totals = {.reserved_bytes = reserved_bytes_,
              .allocated_bytes = allocated_bytes_,
              .free_cached_bytes = free_cached_bytes_,
              .holes = holes_,
              .largest_hole = largest_holes_.empty() ? 0 : *largest_holes_.rbegin(),
              .fragmented_segments = fragmented_.size()};

  x.private_pool_count = pools_.size();
  x.graph_pool_count = graph_pools_;
  x.private_pool_reserved_bytes = pool_reserved_bytes_;
  x.private_pool_free_bytes = pool_free_bytes_;
  if (auto own = pools_.find(request.pool_id); own != pools_.end()) {
    --x.private_pool_count;
    if (request.pool_id.is_graph_pool()) --x.graph_pool_count;
    x.private_pool_reserved_bytes -= own->second.reserved_bytes;
    x.private_pool_free_bytes -= own->second.free_bytes;
  }

  // The holes that fit, of the request's pool on other streams: only those are read.
  const PoolKind kind = PoolFor(request.rounded_bytes);
  for (auto it = hole_sizes_.lower_bound(HoleKey{request.pool_id, kind, StreamId{0}});
       it != hole_sizes_.end() && std::get<0>(it->first) == request.pool_id &&
       std::get<1>(it->first) == kind;
       ++it) {
    ++entries_read_;
    if (std::get<2>(it->first) == request.stream) continue;
    for (auto h = it->second.lower_bound(request.rounded_bytes); h != it->second.end(); ++h) {
      ++entries_read_;
      x.other_stream_fitting_bytes += *h;
    }
  }

  std::vector<LiveKey> pinning;
  for (auto it = fragmented_.begin();
       it != fragmented_.end() && x.fragmented.size() < kMaxFragmentedSegments; ++it) {
    const Entry& entry = segments_.find(it->second)->second;
    const SegmentInfo& info = entry.info;
    x.fragmented.push_back({info.address, info.total_size, entry.free_bytes, entry.holes,
                            entry.largest_hole, entry.live_blocks});
    for (const BlockInfo& b : info.blocks) {
      ++entries_read_;
      if (b.state == BlockState::kInactive) continue;
      pinning.push_back(LiveKey{b.size, b.address, info.address, b.requested_size,
                                b.state == BlockState::kActivePendingFree});
    }
  }
  const size_t kept = std::min(pinning.size(), kMaxPinningBlocks);
  std::partial_sort(pinning.begin(), pinning.begin() + static_cast<std::ptrdiff_t>(kept),
                    pinning.end(), LiveOrder());
  for (size_t i = 0; i < kept; ++i) x.fragmented_pinning.push_back(Pinning(pinning[i]));
  for (auto it = live_.begin(); it != live_.end() && x.largest_live.size() < kMaxPinningBlocks;
       ++it) {
    ++entries_read_;
    x.largest_live.push_back(Pinning(*it));
  }
  return x;
}

}  // namespace fragscope
