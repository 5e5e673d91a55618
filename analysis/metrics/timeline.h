// Timeline: the memory curves of a replay (allocated, active, requested, reserved bytes) in a
// bounded number of points, whatever the trace's length.
//
// Points are buckets of consecutive samples. Each bucket keeps the first sample's event index
// and time and the *maximum* of each curve over its samples, so peaks survive downsampling (a
// memory plot that averaged would hide the spike that caused an OOM). When the bucket count
// reaches 2 x max_points, neighbours merge pairwise and the bucket width doubles: O(max_points)
// memory and O(1) amortized work per sample.
#pragma once

#include <algorithm>
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

  // Inline: the replay adds one sample per operation, and almost every one merges into the last
  // bucket.
  void Add(const TimelinePoint& sample) {
    ++samples_;
    if (buckets_.empty() || in_last_bucket_ >= width_) {
      AddBucket(sample);
      return;
    }
    MergeInto(buckets_.back(), sample);
    ++in_last_bucket_;
  }
  // At most max_points points (buckets merged once more if needed), in event order.
  std::vector<TimelinePoint> Points() const;
  uint64_t samples() const { return samples_; }

 private:
  static void MergeInto(TimelinePoint& into, const TimelinePoint& from) {
    into.allocated_bytes = std::max(into.allocated_bytes, from.allocated_bytes);
    into.active_bytes = std::max(into.active_bytes, from.active_bytes);
    into.requested_bytes = std::max(into.requested_bytes, from.requested_bytes);
    into.reserved_bytes = std::max(into.reserved_bytes, from.reserved_bytes);
  }
  // The last bucket is full (or there is none): compacts if at 2 x max_points, then adds the
  // sample to the last bucket if compaction made room there, else as a new bucket.
  void AddBucket(const TimelinePoint& sample);
  void Compact();

  size_t max_points_;
  uint64_t width_ = 1;           // samples per bucket
  uint64_t in_last_bucket_ = 0;  // samples in buckets_.back()
  uint64_t samples_ = 0;
  std::vector<TimelinePoint> buckets_;
};

}  // namespace fragscope
