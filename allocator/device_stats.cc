#include "allocator/device_stats.h"

#include "absl/strings/str_cat.h"

namespace fragscope {

namespace {

// Calls fn(stat) for every Stat of `s`.
template <typename Fn>
void ForEachStat(DeviceStats& s, Fn fn) {
  ForEachStatArray(s, [&fn](StatArray& array) {
    for (Stat& stat : array) fn(stat);
  });
  fn(s.oversize_allocations);
  fn(s.oversize_segments);
}

}  // namespace

void DeviceStats::ResetAccumulated() {
  ForEachStat(*this, [](Stat& s) { s.ResetAccumulated(); });
  num_alloc_retries = num_ooms = num_sync_all_streams = num_device_alloc = num_device_free = 0;
}

void DeviceStats::ResetPeak() {
  ForEachStat(*this, [](Stat& s) { s.ResetPeak(); });
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

}  // namespace fragscope
