// RandomAllocationMix: RMM's random_allocations workload on a CachingAllocator, one step at a
// time. Shared by BM_RandomAllocations (timed) and instruction_counts (a fixed number of steps,
// for cachegrind), so that both run exactly the same operations.
//
// Each step allocates with probability 73 % (while fewer than max_live blocks are live and the
// cap, by default RMM's 16000 MiB, leaves room for the request) a size drawn uniformly from
// [1, max_size_bytes], and otherwise frees a live block chosen uniformly. The seed is fixed.
// (Under RMM's cap, sizes up to 1 MiB stop at ~38k live blocks: kUncappedBytes lets them reach
// 100k.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/caching_allocator.h"
#include "allocator/types.h"

namespace fragscope {

class RandomAllocationMix {
 public:
  static constexpr uint64_t kCapBytes = 16000 * kMiB;
  static constexpr uint64_t kUncappedBytes = 256 * kGiB;
  // The simulated device to run it on: larger than the cap, so that fragmentation never turns
  // into an OOM inside a timed loop.
  static constexpr uint64_t DeviceBytesFor(uint64_t cap_bytes) { return 4 * cap_bytes; }

  RandomAllocationMix(CachingAllocator& allocator, size_t max_live, uint64_t max_size_bytes,
                      uint64_t cap_bytes = kCapBytes)
      : allocator_(allocator),
        max_live_(max_live),
        cap_bytes_(cap_bytes),
        size_dist_(1, max_size_bytes) {
    live_.reserve(max_live);
  }

  void Step() {
    const bool allocate = live_.empty() || (rng_() % 100 < 73 && live_.size() < max_live_);
    const uint64_t size = size_dist_(rng_);
    if (allocate && live_bytes_ + size <= cap_bytes_) {
      absl::StatusOr<DevicePtr> p = allocator_.Allocate(size, 0);
      if (p.ok()) {
        live_.emplace_back(*p, size);
        live_bytes_ += size;
      }
    } else if (!live_.empty()) {
      const size_t i = rng_() % live_.size();
      (void)allocator_.Free(live_[i].first);
      live_bytes_ -= live_[i].second;
      live_[i] = live_.back();
      live_.pop_back();
    }
  }

  size_t live_blocks() const { return live_.size(); }

 private:
  CachingAllocator& allocator_;
  const size_t max_live_;
  const uint64_t cap_bytes_;
  std::mt19937_64 rng_{42};
  std::uniform_int_distribution<uint64_t> size_dist_;
  std::vector<std::pair<DevicePtr, uint64_t>> live_;  // (address, requested bytes)
  uint64_t live_bytes_ = 0;
};

}  // namespace fragscope
