// DeviceStats: PyTorch's allocator statistics, with exactly its keys and semantics
// (docs/pytorch_allocator_rules.md §4), derived from allocator events.
//
// DeviceStats is a plain struct you can copy and compare; StatsTracker (stats_tracker.h) keeps
// one up to date from events.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "allocator/allocator_events.h"
#include "allocator/types.h"

namespace fragscope {

// One statistic. Invariant: current == allocated - freed (since the last accumulated reset,
// counting the current value at reset as the new baseline), peak >= current.
struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // cumulative increases
  int64_t freed = 0;      // cumulative decreases

  // REQUIRES: amount >= 0. Increase and Decrease are the hot forms (a dozen per allocator
  // operation, the sign known at the call site); Update takes either sign.
  void Increase(int64_t amount) {
    current += amount;
    allocated += amount;
    if (current > peak) peak = current;
  }
  void Decrease(int64_t amount) {
    current -= amount;
    freed += amount;
  }
  void Update(int64_t delta) {
    if (delta >= 0) {
      Increase(delta);
    } else {
      Decrease(-delta);
    }
  }
  void ResetAccumulated() { allocated = freed = 0; }
  void ResetPeak() { peak = current; }
  friend bool operator==(const Stat&, const Stat&) = default;
};

// Index into the per-pool stat arrays: "all", "small_pool", "large_pool".
enum class StatType : uint8_t { kAll = 0, kSmallPool = 1, kLargePool = 2 };
inline constexpr int kNumStatTypes = 3;
using StatArray = std::array<Stat, kNumStatTypes>;

struct DeviceStats {
  StatArray allocation;              // allocated blocks (count), -1 at the free request
  StatArray segment;                 // device allocations (count)
  StatArray active;                  // allocated or pending-free blocks (count)
  StatArray inactive_split;          // free blocks inside split segments (count)
  StatArray allocated_bytes;         // sum of allocated block sizes
  StatArray reserved_bytes;          // bytes obtained from the device
  StatArray active_bytes;            // sum of active block sizes
  StatArray inactive_split_bytes;    // sum of free block sizes inside split segments
  StatArray requested_bytes;         // sum of callers' requests for active blocks
  Stat oversize_allocations;         // allocated blocks >= max_split_size
  Stat oversize_segments;            // segments >= max_split_size
  int64_t num_alloc_retries = 0;     // allocations that needed the full cache release
  int64_t num_ooms = 0;              // out-of-memory failures
  int64_t num_sync_all_streams = 0;  // full event synchronizations (empty_cache, OOM retry)
  int64_t num_device_alloc = 0;      // device mallocs and expandable maps
  int64_t num_device_free = 0;       // device frees and expandable unmaps
  int64_t max_split_size = -1;       // the option's value; -1 when unlimited (PyTorch: SIZE_MAX)

  void ResetAccumulated();
  void ResetPeak();
  friend bool operator==(const DeviceStats&, const DeviceStats&) = default;
};

// Calls fn(array) for each per-pool StatArray of `stats` (a DeviceStats, const or not).
template <typename Stats, typename Fn>
void ForEachStatArray(Stats& stats, Fn fn) {
  for (auto* array : {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
                      &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
                      &stats.inactive_split_bytes, &stats.requested_bytes}) {
    fn(*array);
  }
}

// The stats as torch.cuda.memory_stats() flattens them: ("allocation.all.current", 3), ... in
// PyTorch's key order.
std::vector<std::pair<std::string, int64_t>> FlattenStats(const DeviceStats& stats);

}  // namespace fragscope
