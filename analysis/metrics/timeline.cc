#include "analysis/metrics/timeline.h"

#include <algorithm>

namespace fragscope {

Timeline::Timeline(size_t max_points) : max_points_(std::max<size_t>(max_points, 2)) {
  buckets_.reserve(2 * max_points_);
}

void Timeline::AddBucket(const TimelinePoint& sample) {
  if (buckets_.size() == 2 * max_points_) Compact();
  if (!buckets_.empty() && in_last_bucket_ < width_) {  // Compact left room in the last bucket
    MergeInto(buckets_.back(), sample);
    ++in_last_bucket_;
    return;
  }
  buckets_.push_back(sample);
  in_last_bucket_ = 1;
}

void Timeline::Compact() {
  size_t out = 0;
  for (size_t i = 0; i < buckets_.size(); i += 2) {
    TimelinePoint merged = buckets_[i];
    if (i + 1 < buckets_.size()) MergeInto(merged, buckets_[i + 1]);
    buckets_[out++] = merged;
  }
  // The last bucket now holds its old samples plus, if it had a partner, a full one.
  const bool last_was_paired = buckets_.size() % 2 == 0;
  in_last_bucket_ = last_was_paired ? width_ + in_last_bucket_ : in_last_bucket_;
  buckets_.resize(out);
  width_ *= 2;
}

std::vector<TimelinePoint> Timeline::Points() const {
  std::vector<TimelinePoint> points = buckets_;
  while (points.size() > max_points_) {
    size_t out = 0;
    for (size_t i = 0; i < points.size(); i += 2) {
      TimelinePoint merged = points[i];
      if (i + 1 < points.size()) MergeInto(merged, points[i + 1]);
      points[out++] = merged;
    }
    points.resize(out);
  }
  return points;
}

}  // namespace fragscope
