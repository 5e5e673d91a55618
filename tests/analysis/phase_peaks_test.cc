// PhasePeakCollector (analysis/metrics/phase_peaks.h) on a hand-computed trace: each phase's rises
// of the peaks add up to the peaks.
#include "analysis/metrics/phase_peaks.h"

#include <string>

#include "analysis/ranks/rank_summary.h"
#include "gtest/gtest.h"
#include "tests/analysis/trace_builder.h"

namespace fragscope {
namespace {

using ::fragscope::testing::TraceBuilder;

RankSummary Summarize(const std::string& path) {
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(path);
  EXPECT_TRUE(opener.ok()) << opener.status();
  AnalysisOptions options;
  options.run_sweep = false;
  absl::StatusOr<RankSummary> summary = SummarizeTrace(*opener, options, {});
  EXPECT_TRUE(summary.ok()) << summary.status();
  return summary.ok() ? *summary : RankSummary{};
}

// forward:   a = 3 MiB        -> 20 MiB segment         reserved +20, allocated +3
// backward:  d = 40 MiB       -> 40 MiB segment         reserved +40, allocated +40 (43)
//            d freed (cached)
// forward:   e = 3 MiB        -> S1's hole              no rise (6 MiB allocated)
// optimizer: f = 30 MiB       -> d's cached segment     no rise (36 MiB)
//            g = 50 MiB       -> 50 MiB segment         reserved +50, allocated +43 (86)
TEST(PhasePeaksTest, RisesOfEachPhaseAddUpToThePeaks) {
  TraceBuilder t(1 * kGiB, "", "phases.fslog");
  t.Mark("step 0 / forward");
  const DevicePtr a = t.Alloc(3 * kMiB);
  t.Mark("step 0 / backward");
  const DevicePtr d = t.Alloc(40 * kMiB);
  t.Free(d);
  t.Mark("step 1 / forward");
  const DevicePtr e = t.Alloc(3 * kMiB);
  t.Mark("Optimizer.step#AdamW.step");
  const DevicePtr f = t.Alloc(30 * kMiB);
  const DevicePtr g = t.Alloc(50 * kMiB);
  for (DevicePtr p : {a, e, f, g}) t.Free(p);
  const RankSummary s = Summarize(t.Finish());
  EXPECT_EQ(s.peak_reserved_bytes, 110 * kMiB);
  EXPECT_EQ(s.peak_allocated_bytes, 86 * kMiB);
  ASSERT_EQ(s.phases.size(), 3u);
  EXPECT_EQ(s.phases[0].phase, "forward");
  EXPECT_EQ(s.phases[0].reserved_rise_bytes, 20 * kMiB);
  EXPECT_EQ(s.phases[0].allocated_rise_bytes, 3 * kMiB);
  EXPECT_EQ(s.phases[1].phase, "backward");
  EXPECT_EQ(s.phases[1].reserved_rise_bytes, 40 * kMiB);
  EXPECT_EQ(s.phases[1].allocated_rise_bytes, 40 * kMiB);
  EXPECT_EQ(s.phases[2].phase, "optimizer");
  EXPECT_EQ(s.phases[2].reserved_rise_bytes, 50 * kMiB);
  EXPECT_EQ(s.phases[2].allocated_rise_bytes, 43 * kMiB);
}

TEST(PhasePeaksTest, PhaseKinds) {
  EXPECT_EQ(PhaseKindOf("step 12 / forward"), "forward");
  EXPECT_EQ(PhaseKindOf("step 12 / backward"), "backward");
  EXPECT_EQ(PhaseKindOf("Optimizer.step#AdamW.step"), "optimizer");
  EXPECT_EQ(PhaseKindOf("zero_grad.step"), "optimizer");
  EXPECT_EQ(PhaseKindOf("eval 3 / batch 17"), "eval N / batch N");
  EXPECT_EQ(PhaseKindOf("(no marker)"), "(no marker)");
  EXPECT_EQ(PhaseKindOf(std::string(100, 'x')).size(), 48u);
}

TEST(PhasePeaksTest, KindsBeyondTheLimitAreGathered) {
  TraceBuilder t(8 * kGiB, "", "many_phases.fslog");
  for (int i = 0; i < 40; ++i) {
    // Distinct kinds: letters, not digits (digits fold into "N").
    t.Mark(std::string("phase ") + static_cast<char>('A' + i % 26) +
           static_cast<char>('a' + i / 26));
    t.Alloc(64 * kMiB);  // a new segment every time: every phase rises
  }
  const RankSummary s = Summarize(t.Finish());
  ASSERT_EQ(s.phases.size(), PhasePeakCollector::kMaxPhases);
  EXPECT_EQ(s.phases.back().phase, PhasePeakCollector::kOtherPhases);
  EXPECT_EQ(s.phases.back().reserved_rise_bytes, 9 * 64 * kMiB);  // phases 32-40
  uint64_t total = 0;
  for (const PhaseRise& p : s.phases) total += p.reserved_rise_bytes;
  EXPECT_EQ(total, s.peak_reserved_bytes);
}

}  // namespace
}  // namespace fragscope
