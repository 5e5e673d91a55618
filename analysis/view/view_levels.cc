#include "analysis/view/view_levels.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/escaping.h"

namespace fragscope {

ViewBucket ViewBucket::Of(const ViewSample& s) {
  return {.index = s.index,
          .time_ns = s.time_ns,
          .allocated_min = s.allocated_bytes,
          .allocated_max = s.allocated_bytes,
          .reserved_min = s.reserved_bytes,
          .reserved_max = s.reserved_bytes,
          .active_max = s.active_bytes,
          .requested_max = s.requested_bytes,
          .demand_min = s.demand_bytes,
          .demand_max = s.demand_bytes};
}

void ViewBucket::Merge(const ViewBucket& later) {
  allocated_min = std::min(allocated_min, later.allocated_min);
  allocated_max = std::max(allocated_max, later.allocated_max);
  reserved_min = std::min(reserved_min, later.reserved_min);
  reserved_max = std::max(reserved_max, later.reserved_max);
  active_max = std::max(active_max, later.active_max);
  requested_max = std::max(requested_max, later.requested_max);
  demand_min = std::min(demand_min, later.demand_min);
  demand_max = std::max(demand_max, later.demand_max);
}

namespace {

// Merges each run of `factor` buckets into one.
std::vector<ViewBucket> Coarsen(const std::vector<ViewBucket>& buckets, size_t factor) {
  std::vector<ViewBucket> out;
  out.reserve((buckets.size() + factor - 1) / factor);
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (i % factor == 0) {
      out.push_back(buckets[i]);
    } else {
      out.back().Merge(buckets[i]);
    }
  }
  return out;
}

}  // namespace

ViewLevels::ViewLevels(size_t max_buckets) : max_buckets_(std::max<size_t>(max_buckets, 2)) {}

void ViewLevels::AddBucket(const ViewSample& sample) {
  if (finest_.buckets.size() >= max_buckets_) {
    // Every bucket but the last holds `width` samples; after pairing, the last holds its own
    // samples plus, when it pairs with a full one, that one's.
    const bool last_pairs = finest_.buckets.size() % 2 == 0;
    finest_.buckets = Coarsen(finest_.buckets, 2);
    in_last_ += last_pairs ? finest_.width : 0;
    finest_.width *= 2;
    if (in_last_ < finest_.width) {
      finest_.buckets.back().Merge(ViewBucket::Of(sample));
      ++in_last_;
      return;
    }
  }
  finest_.buckets.push_back(ViewBucket::Of(sample));
  in_last_ = 1;
}

std::vector<ViewLevel> ViewLevels::Levels() const {
  std::vector<ViewLevel> levels{finest_};
  while (levels.back().buckets.size() > kTileBuckets) {
    const ViewLevel& finer = levels.back();
    levels.push_back({.width = finer.width * 4, .buckets = Coarsen(finer.buckets, 4)});
  }
  return levels;
}

std::string ViewLevels::EncodeTile(const ViewLevel& level, size_t first, size_t count) {
  static_assert(std::endian::native == std::endian::little, "tiles are little-endian float64");
  first = std::min(first, level.buckets.size());
  count = std::min(count, level.buckets.size() - first);
  std::string raw(count * kViewColumnCount * sizeof(double), '\0');
  char* out = raw.data();
  for (size_t i = first; i < first + count; ++i) {
    const ViewBucket& b = level.buckets[i];
    const uint64_t columns[kViewColumnCount] = {
        b.index,        b.time_ns,    b.allocated_min, b.allocated_max, b.reserved_min,
        b.reserved_max, b.active_max, b.requested_max, b.demand_min,    b.demand_max};
    for (uint64_t v : columns) {
      const double d = static_cast<double>(v);
      std::memcpy(out, &d, sizeof d);
      out += sizeof d;
    }
  }
  return absl::Base64Escape(raw);
}

}  // namespace fragscope
