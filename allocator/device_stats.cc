#include "allocator/device_stats.h"

#include "absl/strings/str_cat.h"

namespace fragscope {

namespace {

template <typename Fn>
void ForEachStatArray(DeviceStats& s, Fn fn) {
  for (StatArray* a :
       {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
        &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes}) {
    for (Stat& stat : *a) fn(stat);
  }
  fn(s.oversize_allocations);
  fn(s.oversize_segments);
}

}  // namespace

void DeviceStats::ResetAccumulated() {
  ForEachStatArray(*this, [](Stat& s) { s.ResetAccumulated(); });
  num_alloc_retries = num_ooms = num_sync_all_streams = num_device_alloc = num_device_free = 0;
}

void DeviceStats::ResetPeak() {
  ForEachStatArray(*this, [](Stat& s) { s.ResetPeak(); });
}

std::vector<std::pair<std::string, int64_t>> FlattenStats(const DeviceStats& s) {
  std::vector<std::pair<std::string, int64_t>> out;
  auto add_stat = [&](const std::string& prefix, const Stat& stat) {
    out.emplace_back(prefix + ".current", stat.current);
    out.emplace_back(prefix + ".peak", stat.peak);
    out.emplace_back(prefix + ".allocated", stat.allocated);
    out.emplace_back(prefix + ".freed", stat.freed);
  };
  auto add_array = [&](const char* name, const StatArray& array) {
    static constexpr const char* kTypes[] = {"all", "small_pool", "large_pool"};
    for (size_t i = 0; i < kNumStatTypes; ++i)
      add_stat(absl::StrCat(name, ".", kTypes[i]), array[i]);
  };
  // PyTorch's memory_stats() sorts keys; we emit in its sorted order too.
  add_array("active", s.active);
  add_array("active_bytes", s.active_bytes);
  add_array("allocated_bytes", s.allocated_bytes);
  add_array("allocation", s.allocation);
  add_array("inactive_split", s.inactive_split);
  add_array("inactive_split_bytes", s.inactive_split_bytes);
  out.emplace_back("max_split_size", s.max_split_size);
  out.emplace_back("num_alloc_retries", s.num_alloc_retries);
  out.emplace_back("num_device_alloc", s.num_device_alloc);
  out.emplace_back("num_device_free", s.num_device_free);
  out.emplace_back("num_ooms", s.num_ooms);
  out.emplace_back("num_sync_all_streams", s.num_sync_all_streams);
  add_stat("oversize_allocations", s.oversize_allocations);
  add_stat("oversize_segments", s.oversize_segments);
  add_array("requested_bytes", s.requested_bytes);
  add_array("reserved_bytes", s.reserved_bytes);
  add_array("segment", s.segment);
  return out;
}

void StatsTracker::OnEvent(const AllocatorEvent& e) {
  const auto bytes = static_cast<int64_t>(e.bytes);
  const bool expandable = (e.flags & kEventFlagExpandable) != 0;
  switch (e.kind) {
    case EventKind::kAlloc: {
      Increase(stats_.allocation, e.pool, 1);
      Increase(stats_.allocated_bytes, e.pool, bytes);
      Increase(stats_.active, e.pool, 1);
      Increase(stats_.active_bytes, e.pool, bytes);
      Increase(stats_.requested_bytes, e.pool, static_cast<int64_t>(e.requested_bytes));
      if (e.flags & kEventFlagOversize) stats_.oversize_allocations.Increase(1);
      if (expandable) break;  // PyTorch keeps no inactive_split stats for expandable segments
      const bool was_split = (e.flags & kEventFlagBlockWasSplit) != 0;
      if (e.split_bytes > 0) {
        if (was_split) {
          // An already-split free block shrinks by the allocated bytes.
          Decrease(stats_.inactive_split_bytes, e.pool, bytes);
        } else {
          // A whole free block became split: its remainder is a new inactive split block.
          Increase(stats_.inactive_split_bytes, e.pool, static_cast<int64_t>(e.split_bytes));
          Increase(stats_.inactive_split, e.pool, 1);
        }
      } else if (was_split) {
        // A free block inside a split segment is reused whole.
        Decrease(stats_.inactive_split_bytes, e.pool, bytes);
        Decrease(stats_.inactive_split, e.pool, 1);
      }
      break;
    }
    case EventKind::kFreeRequested:
      Decrease(stats_.allocation, e.pool, 1);
      Decrease(stats_.allocated_bytes, e.pool, bytes);
      if (e.flags & kEventFlagOversize) stats_.oversize_allocations.Decrease(1);
      break;
    case EventKind::kFreeCompleted:
      if (!expandable) {
        int64_t blocks = -static_cast<int64_t>(e.merged_count);
        int64_t split_bytes = -static_cast<int64_t>(e.split_bytes);
        if (e.flags & kEventFlagResultIsSplit) {
          blocks += 1;
          split_bytes += static_cast<int64_t>(e.result_bytes);
        }
        Update(stats_.inactive_split, e.pool, blocks);
        Update(stats_.inactive_split_bytes, e.pool, split_bytes);
      }
      Decrease(stats_.active, e.pool, 1);
      Decrease(stats_.active_bytes, e.pool, bytes);
      Decrease(stats_.requested_bytes, e.pool, static_cast<int64_t>(e.requested_bytes));
      break;
    case EventKind::kSegmentAlloc:
      Increase(stats_.segment, e.pool, 1);
      [[fallthrough]];
    case EventKind::kSegmentMap:
      Increase(stats_.reserved_bytes, e.pool, bytes);
      if (e.flags & kEventFlagOversize) stats_.oversize_segments.Increase(1);
      ++stats_.num_device_alloc;
      break;
    case EventKind::kSegmentFree:
      Decrease(stats_.segment, e.pool, 1);
      [[fallthrough]];
    case EventKind::kSegmentUnmap:
      Decrease(stats_.reserved_bytes, e.pool, bytes);
      if (e.flags & kEventFlagOversize) stats_.oversize_segments.Decrease(1);
      ++stats_.num_device_free;
      break;
    case EventKind::kOom:
      ++stats_.num_ooms;
      break;
    case EventKind::kEmptyCache:
      ++stats_.num_sync_all_streams;
      if (e.flags & kEventFlagOomRetry) ++stats_.num_alloc_retries;
      break;
    case EventKind::kOptionsChange:
    case EventKind::kMarker:
      break;
  }
}

}  // namespace fragscope
