// Metrics on hand-computed traces: every figure below is derived by hand from PyTorch's rules
// (20 MiB segments for 1-10 MiB requests, 2 MiB small segments, 512-byte rounding, best fit,
// large-pool split only when more than 1 MiB remains). Definitions: analysis/METRICS.md.
#include <algorithm>

#include "analysis/analyzer.h"
#include "analysis/metrics/timeline.h"
#include "gtest/gtest.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {

using ::fragscope::testing::TraceBuilder;

// a = 3 MiB        -> new 20 MiB segment S1: [a 3 MiB | free 17 MiB]
// b = 1000 B       -> new 2 MiB small segment S2: [b 1024 B | free 2 MiB - 1024]
// c = 12 MiB + 1   -> rounds to 12 MiB + 512, best fit in S1's 17 MiB hole, split:
//                     S1: [a | c 12 MiB + 512 | free 5 MiB - 512]
// d = 40 MiB       -> new 40 MiB segment S3 (reserved 62 MiB: the peak)
// then d, a, c, b are freed and the cache emptied.
std::string HandTrace() {
  TraceBuilder t(1 * kGiB);
  t.Mark("step 0 / forward");
  DevicePtr a = t.Alloc(3 * kMiB);
  DevicePtr b = t.Alloc(1000);
  DevicePtr c = t.Alloc(12 * kMiB + 1);
  t.Mark("step 0 / backward");
  DevicePtr d = t.Alloc(40 * kMiB);
  t.Free(d);
  t.Free(a);
  t.Free(c);
  t.Free(b);
  t.EmptyCache();
  return t.Finish();
}

RankReport Analyze(const std::string& path, std::optional<uint64_t> at = std::nullopt) {
  AnalysisOptions options;
  options.run_sweep = false;
  options.at_index = at;
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(path);
  EXPECT_OK(opener.status());
  absl::StatusOr<RankReport> report = AnalyzeTrace(*opener, options);
  EXPECT_OK(report.status());
  return *report;
}

TEST(MetricsTest, PeaksAndFragmentationAtPeakAreExact) {
  const RankReport r = Analyze(HandTrace());
  const MemoryMetrics& m = r.metrics;
  const uint64_t allocated = 55 * kMiB + 1536;  // a + b + c + d block sizes
  const uint64_t requested = 55 * kMiB + 1001;  // 3 MiB + 1000 + 12 MiB + 1 + 40 MiB
  EXPECT_EQ(m.peak_reserved_bytes, 62 * kMiB);
  EXPECT_EQ(m.peak_allocated_bytes, allocated);
  EXPECT_EQ(m.peak_active_bytes, allocated);
  EXPECT_EQ(m.peak_requested_bytes, requested);
  EXPECT_EQ(m.allocations, 4u);
  EXPECT_EQ(m.frees, 4u);
  // The peak moment: right after d's allocation, trace record 7 (marker 0, segment_alloc 1,
  // alloc a 2, segment_alloc 3, alloc b 4, alloc c 5, marker 6, segment_alloc 7, alloc d 8).
  EXPECT_EQ(m.at_peak.index, 8u);
  EXPECT_EQ(m.at_peak.reserved_bytes, 62 * kMiB);
  EXPECT_EQ(m.at_peak.allocated_bytes, allocated);
  EXPECT_EQ(m.at_peak.free_cached_bytes, 7 * kMiB - 1536);  // S1's hole + S2's hole
  EXPECT_EQ(m.at_peak.largest_free_block, 5 * kMiB - 512);  // S1's hole
  EXPECT_EQ(m.at_peak.internal_waste_bytes, 24u + 511u);    // b: 1024 - 1000, c: 512 - 1
  EXPECT_EQ(m.peak_internal_waste_bytes, 535u);
  EXPECT_EQ(m.final_internal_waste_bytes, 0u);
  EXPECT_EQ(m.reserved_but_unallocated_at_peak, 7 * kMiB - 1536);
  EXPECT_DOUBLE_EQ(m.rmm_fragmentation_at_peak, 1.0 - static_cast<double>(5 * kMiB - 512) /
                                                          static_cast<double>(7 * kMiB - 1536));
  EXPECT_DOUBLE_EQ(m.realized_fragmentation,
                   static_cast<double>(7 * kMiB - 1536) / static_cast<double>(allocated));
  EXPECT_DOUBLE_EQ(m.utilization, static_cast<double>(allocated) / static_cast<double>(62 * kMiB));
  EXPECT_DOUBLE_EQ(m.internal_waste_fraction_at_peak, 535.0 / static_cast<double>(allocated));
  // PyTorch's statistics at the end: everything freed and released.
  EXPECT_EQ(m.final_stats.reserved_bytes[0].current, 0);
  EXPECT_EQ(m.final_stats.allocation[0].allocated, 4);
  EXPECT_EQ(m.final_stats.num_device_alloc, 3);
  EXPECT_EQ(m.final_stats.num_device_free, 3);
  EXPECT_EQ(r.final_layout.segments, 0u);
}

// The job (64 MiB device) holds 30 + 20 MiB and is refused a third 20 MiB block; replayed on a
// larger device, the replay serves it with a new segment that the job never had. The figures
// are the job's: that segment is in no peak and no timeline point, before or after its release.
TEST(MetricsTest, MemoryReservedForARefusedRequestIsNotTheJobs) {
  TraceBuilder t(64 * kMiB);
  const DevicePtr a = t.Alloc(30 * kMiB);
  const DevicePtr b = t.Alloc(20 * kMiB);
  t.AllocExpectOom(20 * kMiB);
  t.Free(a);
  t.Free(b);
  t.EmptyCache();
  AnalysisOptions options;
  options.run_sweep = false;
  options.capacity_bytes = 1 * kGiB;
  ASSERT_OK_AND_ASSIGN(TraceOpener opener, TraceOpener::Create(t.Finish()));
  ASSERT_OK_AND_ASSIGN(RankReport r, AnalyzeTrace(opener, options));
  ASSERT_EQ(r.ooms.size(), 1u);
  EXPECT_FALSE(r.ooms[0].in_replay);
  const MemoryMetrics& m = r.metrics;
  EXPECT_EQ(m.peak_reserved_bytes, 50 * kMiB);
  EXPECT_EQ(m.at_peak.reserved_bytes, 50 * kMiB);
  EXPECT_EQ(m.peak_allocated_bytes, 50 * kMiB);
  EXPECT_DOUBLE_EQ(m.utilization, 1.0);
  for (const TimelinePoint& p : m.timeline) EXPECT_LE(p.reserved_bytes, 50 * kMiB) << p.index;
  EXPECT_EQ(m.timeline.back().reserved_bytes, 0u);  // after empty_cache, refused segment included
}

TEST(MetricsTest, LayoutAtAnEventShowsHolesAndTheBlocksThatSplitThem) {
  const RankReport r = Analyze(HandTrace(), /*at=*/8);
  ASSERT_TRUE(r.at_layout.has_value());
  const LayoutSummary& l = *r.at_layout;
  EXPECT_EQ(l.index, 8u);
  EXPECT_EQ(l.segments, 3u);
  EXPECT_EQ(l.totals.fragmented_segments, 2u);  // S1 and S2; S3 is one unsplit block
  EXPECT_EQ(l.totals.holes, 2u);
  EXPECT_EQ(l.totals.largest_hole, 5 * kMiB - 512);
  EXPECT_EQ(l.totals.free_cached_bytes, 7 * kMiB - 1536);
  ASSERT_EQ(l.maps.size(), 3u);
  const SegmentMap& s1 = l.maps[0];  // lowest address: the first segment
  EXPECT_EQ(s1.size, 20 * kMiB);
  ASSERT_EQ(s1.blocks.size(), 3u);
  EXPECT_EQ(s1.blocks[0].size, 3 * kMiB);
  EXPECT_EQ(s1.blocks[0].phase, "step 0 / forward");
  EXPECT_EQ(s1.blocks[1].size, 12 * kMiB + 512);
  EXPECT_EQ(s1.blocks[1].requested_bytes, 12 * kMiB + 1);
  EXPECT_EQ(s1.blocks[1].origin.index, 5u);
  EXPECT_EQ(s1.blocks[2].state, MapBlockState::kFree);
  EXPECT_EQ(s1.blocks[2].size, 5 * kMiB - 512);
  EXPECT_DOUBLE_EQ(l.rmm_fragmentation, 1.0 - static_cast<double>(5 * kMiB - 512) /
                                                  static_cast<double>(7 * kMiB - 1536));
}

TEST(MetricsTest, TimelineIsBoundedAndKeepsPeaks) {
  Timeline timeline(100);
  for (uint64_t i = 0; i < 100000; ++i) {
    TimelinePoint p;
    p.index = i;
    p.allocated_bytes = i == 77777 ? 1'000'000 : i % 1000;
    p.reserved_bytes = 2'000'000;
    timeline.Add(p);
  }
  const std::vector<TimelinePoint> points = timeline.Points();
  EXPECT_LE(points.size(), 100u);
  EXPECT_GE(points.size(), 50u);
  EXPECT_EQ(points.front().index, 0u);
  uint64_t peak = 0;
  for (const TimelinePoint& p : points) peak = std::max(peak, p.allocated_bytes);
  EXPECT_EQ(peak, 1'000'000u);  // the spike survives downsampling
  EXPECT_TRUE(std::is_sorted(points.begin(), points.end(),
                             [](const auto& a, const auto& b) { return a.index < b.index; }));
}

TEST(MetricsTest, EveryReplayedOperationIsSampledExactlyOnce) {
  const RankReport r = Analyze(HandTrace());
  // 8 user operations + 1 empty_cache; fewer than 600 points, so none are merged.
  EXPECT_EQ(r.metrics.timeline.size(), 9u);
  EXPECT_EQ(r.metrics.timeline[3].reserved_bytes, 62 * kMiB);
}

}  // namespace
}  // namespace fragscope
