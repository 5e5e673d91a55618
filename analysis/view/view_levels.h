// ViewLevels: the memory curves of a replay at every zoom, for the viewer (analysis/view/README.md,
// "Levels of detail").
//
// One pass keeps the finest level: buckets of `width` consecutive samples, each with the min and
// max of the curves. Width starts at 1; when the level reaches its bucket limit, neighbours merge
// pairwise and the width doubles, so memory stays bounded (O(max_buckets)) and each sample costs
// O(1) amortized. Coarser levels are made from the finest by merging groups of four.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fragscope {

// The curves after one replayed operation.
struct ViewSample {
  uint64_t index = 0;  // trace event index
  uint64_t time_ns = 0;
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t active_bytes = 0;
  uint64_t requested_bytes = 0;
  uint64_t demand_bytes = 0;
};

struct ViewBucket {
  uint64_t index = 0;  // the first sample's
  uint64_t time_ns = 0;
  uint64_t allocated_min = 0, allocated_max = 0;
  uint64_t reserved_min = 0, reserved_max = 0;
  uint64_t active_max = 0;
  uint64_t requested_max = 0;
  uint64_t demand_min = 0, demand_max = 0;

  static ViewBucket Of(const ViewSample& s);
  void Merge(const ViewBucket& later);
};

// The column names of a bucket as the viewer reads it, in order.
inline constexpr const char* kViewColumns[] = {
    "event",        "time_ns",    "allocated_min", "allocated_max", "reserved_min",
    "reserved_max", "active_max", "requested_max", "demand_min",    "demand_max"};
inline constexpr size_t kViewColumnCount = std::size(kViewColumns);

struct ViewLevel {
  uint64_t width = 1;  // samples per bucket (the last bucket may hold fewer)
  std::vector<ViewBucket> buckets;
};

class ViewLevels {
 public:
  static constexpr size_t kMaxFinestBuckets = size_t{1} << 19;
  static constexpr size_t kTileBuckets = 4096;

  // REQUIRES: max_buckets >= 2.
  explicit ViewLevels(size_t max_buckets = kMaxFinestBuckets);

  void Add(const ViewSample& sample) {
    ++samples_;
    if (finest_.buckets.empty() || in_last_ >= finest_.width) {
      AddBucket(sample);
      return;
    }
    finest_.buckets.back().Merge(ViewBucket::Of(sample));
    ++in_last_;
  }

  uint64_t samples() const { return samples_; }
  // Every level, finest first, down to the first that fits in one tile.
  std::vector<ViewLevel> Levels() const;

  // The buckets [first, first + count) of `level` as the tile file's payload: kViewColumnCount
  // little-endian float64 values per bucket, base64-encoded.
  static std::string EncodeTile(const ViewLevel& level, size_t first, size_t count);

 private:
  void AddBucket(const ViewSample& sample);

  size_t max_buckets_;
  ViewLevel finest_;
  uint64_t in_last_ = 0;  // samples in finest_.buckets.back()
  uint64_t samples_ = 0;
};

}  // namespace fragscope
