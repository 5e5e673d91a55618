#include "analysis/view/view_levels.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

ViewSample Sample(uint64_t i, uint64_t allocated) {
  return {.index = i * 3,
          .time_ns = i * 10,
          .allocated_bytes = allocated,
          .reserved_bytes = allocated + 100,
          .active_bytes = allocated + 1,
          .requested_bytes = allocated / 2,
          .demand_bytes = allocated + 7};
}

TEST(ViewLevelsTest, ShortTracesKeepEverySample) {
  ViewLevels levels;
  for (uint64_t i = 0; i < 100; ++i) levels.Add(Sample(i, i * i));
  const std::vector<ViewLevel> all = levels.Levels();
  ASSERT_EQ(all.size(), 1u);  // 100 buckets fit one tile
  EXPECT_EQ(all[0].width, 1u);
  ASSERT_EQ(all[0].buckets.size(), 100u);
  EXPECT_EQ(all[0].buckets[7].allocated_max, 49u);
  EXPECT_EQ(all[0].buckets[7].index, 21u);
}

// Against a brute force: each bucket of the finest level covers `width` consecutive samples (the
// last fewer) and keeps their min and max; coarser levels merge four at a time.
TEST(ViewLevelsTest, BucketsKeepTheExtremesOfTheSamplesTheyCover) {
  for (size_t cap : {2u, 3u, 8u, 64u}) {
    ViewLevels levels(cap);
    std::mt19937_64 random(cap);
    std::vector<ViewSample> samples;
    for (uint64_t i = 0; i < 1000; ++i) {
      samples.push_back(Sample(i, random() % 1000000));
      levels.Add(samples.back());
    }
    const ViewLevel finest = levels.Levels().front();
    ASSERT_LE(finest.buckets.size(), cap) << cap;
    for (size_t b = 0; b < finest.buckets.size(); ++b) {
      const size_t first = b * finest.width;
      const size_t last = std::min(samples.size(), first + finest.width);
      ASSERT_LT(first, samples.size());
      uint64_t lo = UINT64_MAX, hi = 0;
      for (size_t i = first; i < last; ++i) {
        lo = std::min(lo, samples[i].allocated_bytes);
        hi = std::max(hi, samples[i].allocated_bytes);
      }
      EXPECT_EQ(finest.buckets[b].index, samples[first].index) << cap << " " << b;
      EXPECT_EQ(finest.buckets[b].allocated_min, lo) << cap << " " << b;
      EXPECT_EQ(finest.buckets[b].allocated_max, hi) << cap << " " << b;
      EXPECT_EQ(finest.buckets[b].demand_max, hi + 7) << cap << " " << b;
    }
    EXPECT_GE(finest.buckets.size() * finest.width, samples.size()) << cap;
  }
}

TEST(ViewLevelsTest, CoarserLevelsEndInOneTile) {
  ViewLevels levels;
  for (uint64_t i = 0; i < 50000; ++i) levels.Add(Sample(i, i));
  const std::vector<ViewLevel> all = levels.Levels();
  ASSERT_EQ(all.size(), 3u);  // 50000, 12500, 3125 buckets
  EXPECT_EQ(all[1].width, 4u);
  EXPECT_EQ(all[2].width, 16u);
  EXPECT_LE(all.back().buckets.size(), ViewLevels::kTileBuckets);
  EXPECT_EQ(all[2].buckets[1].allocated_min, 16u);
  EXPECT_EQ(all[2].buckets[1].allocated_max, 31u);
}

TEST(ViewLevelsTest, TilesAreLittleEndianFloat64Columns) {
  ViewLevels levels;
  for (uint64_t i = 0; i < 10; ++i) levels.Add(Sample(i, i << 40));
  const ViewLevel finest = levels.Levels().front();
  std::string raw;
  ASSERT_TRUE(absl::Base64Unescape(ViewLevels::EncodeTile(finest, 8, 4096), &raw));
  ASSERT_EQ(raw.size(), 2 * kViewColumnCount * sizeof(double));  // buckets 8 and 9 only
  double values[2 * kViewColumnCount];
  std::memcpy(values, raw.data(), raw.size());
  EXPECT_EQ(values[0], 24.0);                                    // event
  EXPECT_EQ(values[3], static_cast<double>(uint64_t{8} << 40));  // allocated_max
  EXPECT_EQ(values[kViewColumnCount + 9], static_cast<double>((uint64_t{9} << 40) + 7));
  EXPECT_EQ(ViewLevels::EncodeTile(finest, 20, 4096), "");
}

}  // namespace
}  // namespace fragscope
