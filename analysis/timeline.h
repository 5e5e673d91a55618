// Timeline: the memory curves of a replay (allocated, active, requested, reserved bytes) in a
// bounded number of points, whatever the trace's length.
//
// Points are buckets of consecutive samples. Each bucket keeps the first sample's event index
// and time and the *maximum* of each curve over its samples, so peaks survive downsampling (a
// memory plot that averaged would hide the spike that caused an OOM). When the bucket count
// reaches 2 x max_points, neighbours merge pairwise and the bucket width doubles: O(max_points)
// memory and O(1) amortized work per sample.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fragscope {

struct TimelinePoint {
  uint64_t index = 0;    // trace event index of the bucket's first sample
  uint64_t time_ns = 0;  // its trace time
  uint64_t allocated_bytes = 0;
  uint64_t active_bytes = 0;
  uint64_t requested_bytes = 0;
  uint64_t reserved_bytes = 0;
};

class Timeline {
 public:
  // REQUIRES: max_points >= 2.
  explicit Timeline(size_t max_points = 1000);

  void Add(const TimelinePoint& sample);
  // At most max_points points (buckets merged once more if needed), in event order.
  std::vector<TimelinePoint> Points() const;
  uint64_t samples() const { return samples_; }

 private:
  static void MergeInto(TimelinePoint& into, const TimelinePoint& from);
  void Compact();

  size_t max_points_;
  uint64_t width_ = 1;           // samples per bucket
  uint64_t in_last_bucket_ = 0;  // samples in buckets_.back()
  uint64_t samples_ = 0;
  std::vector<TimelinePoint> buckets_;
};

}  // namespace fragscope
