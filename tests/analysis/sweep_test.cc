// The sweep: configuration grid, parallel replay equal to sequential, the recommendation rule,
// and on the demo workload a max_split_size_mb setting that avoids a fragmentation OOM.
#include "analysis/explain/sweep.h"
#include "analysis/demo_job.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {

using ::fragscope::testing::TempPath;
using ::fragscope::testing::TraceBuilder;
using ::testing::HasSubstr;

std::vector<std::string> Labels(const std::vector<SweepConfig>& configs) {
  std::vector<std::string> labels;
  for (const SweepConfig& c : configs) labels.push_back(c.label);
  return labels;
}

TEST(SweepTest, GridStartsWithTheTraceConfigAndDropsDuplicates) {
  ASSERT_OK_AND_ASSIGN(std::vector<SweepConfig> configs,
                       BuildSweepConfigs(AllocatorOptions(), SweepSpec()));
  EXPECT_EQ(Labels(configs),
            (std::vector<std::string>{"(default)", "max_split_size_mb:64", "max_split_size_mb:128",
                                      "max_split_size_mb:256", "max_split_size_mb:512",
                                      "max_split_size_mb:1024", "expandable_segments:True",
                                      "max_split_size_mb:64,expandable_segments:True",
                                      "max_split_size_mb:128,expandable_segments:True",
                                      "max_split_size_mb:256,expandable_segments:True",
                                      "max_split_size_mb:512,expandable_segments:True",
                                      "max_split_size_mb:1024,expandable_segments:True"}));
  EXPECT_TRUE(configs[0].is_trace_config);
  EXPECT_EQ(configs[1].changes_from_trace, 1);
  EXPECT_EQ(configs[7].changes_from_trace, 2);
}

TEST(SweepTest, PlacementPoliciesAreComparedButNeverRecommended) {
  SweepSpec spec;
  spec.max_split_size_mb = {0};
  spec.expandable_segments = {""};
  spec.placements = {"best_fit", "first_fit"};
  ASSERT_OK_AND_ASSIGN(std::vector<SweepConfig> configs,
                       BuildSweepConfigs(AllocatorOptions(), spec));
  ASSERT_EQ(Labels(configs), (std::vector<std::string>{"(default)", "placement:first_fit"}));
  EXPECT_TRUE(configs[0].pytorch_applicable);
  EXPECT_FALSE(configs[1].pytorch_applicable);
  std::vector<SweepResult> rows(2);
  rows[0].config = configs[0];
  rows[0].peak_reserved_bytes = 2 * kGiB;
  rows[1].config = configs[1];
  rows[1].peak_reserved_bytes = 1 * kGiB;  // better, but not a PyTorch setting
  std::optional<SweepRecommendation> rec = RecommendConfig(rows, false);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->index, 0u);
  EXPECT_FALSE(SmallestFixFor(rows, 0).has_value());
  // When only first_fit gets past the OOM, the reason says so instead of "nothing avoids it".
  rows[0].ooms = 1;
  EXPECT_FALSE(RecommendConfig(rows, true).has_value());
  EXPECT_THAT(NoRecommendationReason(rows), HasSubstr("only fragscope-only placements"));
  rows[1].ooms = 1;
  EXPECT_EQ(NoRecommendationReason(rows), "no tested configuration avoids the OOM");

  spec.placements = {"worst_fit"};
  absl::StatusOr<std::vector<SweepConfig>> bad = BuildSweepConfigs(AllocatorOptions(), spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("worst_fit is not a placement policy"), std::string::npos)
      << bad.status();
}

TEST(SweepTest, ListsAreMeasuredAgainstTheBaseAndEquivalentsAreOneRow) {
  SweepSpec spec;
  spec.max_split_size_mb = {0};
  spec.expandable_segments = {"", "True"};
  // 1 and [>:1] round as no setting does (PyTorch splits only for divisions > 1); the row without
  // a roundup is there to beat even though the list does not name it.
  spec.roundup_power2_divisions = {"1", "[>:1]", "4"};
  ASSERT_OK_AND_ASSIGN(std::vector<SweepConfig> configs,
                       BuildSweepConfigs(AllocatorOptions(), spec));
  EXPECT_EQ(Labels(configs),
            (std::vector<std::string>{"(default)", "roundup_power2_divisions:4",
                                      "expandable_segments:True",
                                      "roundup_power2_divisions:4,expandable_segments:True"}));
  // A threshold needs a fraction: added when no cap is given, never in place of one given.
  spec = SweepSpec();
  spec.max_split_size_mb = {0};
  spec.expandable_segments = {""};
  spec.garbage_collection_thresholds = {0.6};
  ASSERT_OK_AND_ASSIGN(configs, BuildSweepConfigs(AllocatorOptions(), spec));
  EXPECT_EQ(
      Labels(configs),
      (std::vector<std::string>{
          "(default)", "garbage_collection_threshold:0.6,per_process_memory_fraction:0.999"}));
  spec.capped = true;
  ASSERT_OK_AND_ASSIGN(configs, BuildSweepConfigs(AllocatorOptions(), spec));
  EXPECT_EQ(Labels(configs),
            (std::vector<std::string>{"(default)", "garbage_collection_threshold:0.6"}));
}

TEST(SweepTest, GridCombinesSettingsOnTopOfTheTraceOnes) {
  SweepSpec spec;
  spec.max_split_size_mb = {0, 128};
  spec.roundup_power2_divisions = {"", "4"};
  spec.garbage_collection_thresholds = {0.0, 0.8};
  spec.expandable_segments = {""};
  ASSERT_OK_AND_ASSIGN(AllocatorOptions base, ParseAllocatorOptions("max_split_size_mb:256"));
  ASSERT_OK_AND_ASSIGN(std::vector<SweepConfig> configs, BuildSweepConfigs(base, spec));
  EXPECT_EQ(configs.size(), 9u);  // the trace's own + 2 x 2 x 2
  EXPECT_EQ(configs[0].label, "max_split_size_mb:256");
  bool saw_gc = false;
  for (const SweepConfig& c : configs) {
    if (c.options.garbage_collection_threshold > 0) {
      saw_gc = true;
      EXPECT_DOUBLE_EQ(c.options.per_process_memory_fraction, 0.999) << c.label;
    }
  }
  EXPECT_TRUE(saw_gc);
}

TEST(SweepTest, InvalidValuesAreNamed) {
  SweepSpec spec;
  spec.max_split_size_mb = {10};
  absl::StatusOr<std::vector<SweepConfig>> configs = BuildSweepConfigs(AllocatorOptions(), spec);
  ASSERT_FALSE(configs.ok());
  EXPECT_NE(configs.status().message().find("max_split_size_mb"), std::string::npos)
      << configs.status();
}

SweepResult Row(uint64_t peak, int64_t mallocs, std::optional<uint64_t> oom, int changes = 1) {
  SweepResult r;
  r.peak_reserved_bytes = peak;
  r.device_mallocs = mallocs;
  r.first_oom_index = oom;
  r.ooms = oom.has_value() ? 1 : 0;
  r.config.changes_from_trace = changes;
  return r;
}

TEST(SweepTest, RecommendationAvoidsTheOomWithTheLowestPeakThenFewerMallocs) {
  std::vector<SweepResult> rows = {Row(10, 5, 100, 0), Row(14, 9, std::nullopt),
                                   Row(12, 30, std::nullopt), Row(12, 20, std::nullopt),
                                   Row(11, 1, 200)};
  rows[0].config.is_trace_config = true;
  std::optional<SweepRecommendation> rec = RecommendConfig(rows, /*trace_has_oom=*/true);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->index, 3u);  // 12 bytes peak, 20 mallocs beats 30
  // The smallest fix for the OOM at event 150: row 4 fails only later (200), with one change.
  EXPECT_EQ(SmallestFixFor(rows, 150), std::optional<size_t>(4));
  EXPECT_EQ(SmallestFixFor(rows, 250), std::optional<size_t>(3));
  std::vector<SweepResult> all_fail = {Row(10, 5, 100), Row(11, 5, 90)};
  EXPECT_FALSE(RecommendConfig(all_fail, true).has_value());
}

// The headline (the HTML report's card) says "recommended setting" only for a row that avoids an
// OOM the replay reproduces; otherwise what the row is: the lowest peak, and why nothing is fixed.
TEST(SweepTest, RecommendationHeadlineSaysWhetherAReproducedOomIsAvoided) {
  auto headline = [](std::vector<SweepResult> rows, bool trace_has_oom) {
    std::optional<SweepRecommendation> rec = RecommendConfig(rows, trace_has_oom);
    return rec.has_value() ? std::string(rec->headline) : "(none)";
  };
  std::vector<SweepResult> rows = {Row(10, 5, 100, 0), Row(12, 20, std::nullopt)};
  rows[0].config.is_trace_config = true;
  EXPECT_EQ(headline(rows, true), "recommended setting");
  rows[0].ends_at_trace_oom = true;
  EXPECT_EQ(headline(rows, true), "recommended setting (as far as the trace goes)");

  rows[0] = Row(10, 5, std::nullopt, 0);  // the job's own settings replay without its OOM
  rows[0].config.is_trace_config = true;
  EXPECT_EQ(headline(rows, false), "lowest-peak setting (no OOM to avoid)");
  EXPECT_EQ(headline(rows, true), "lowest-peak setting (the job's OOM is not reproduced)");
  rows[0].unrecorded_cap_ooms = 1;
  EXPECT_EQ(headline(rows, true), "lowest-peak setting (the job's OOM is not reproduced)");
  rows[0].unrecorded_cap_ooms = 0;
  rows[0].config.base_from_conf = true;
  EXPECT_EQ(headline(rows, true), "lowest-peak setting (no OOM under --conf)");
  rows[0].raised_cap_ooms = 1;  // --conf gave the job more memory than its recorded cap
  EXPECT_EQ(headline(rows, true), "lowest-peak setting (the job's OOM is not reproduced)");
  EXPECT_NE(RecommendConfig(rows, true)
                ->reason.find("under the --conf settings the job has more memory than the "
                              "per_process_memory_fraction it ran under"),
            std::string::npos);
  rows[0].cap_from_flags = true;  // a cap flag did
  EXPECT_NE(RecommendConfig(rows, true)->reason.find("under the cap given"), std::string::npos);
}

TEST(SweepTest, ParallelSweepEqualsSequential) {
  TraceBuilder t(4 * kGiB);
  std::vector<DevicePtr> live;
  for (uint64_t i = 0; i < 200; ++i) {
    live.push_back(t.Alloc((i * 37 % 23 + 1) * kMiB + i * 4096));
    if (i % 3 == 0) {
      t.Free(live.front());
      live.erase(live.begin());
    }
  }
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(t.Finish());
  ASSERT_OK(opener.status());
  ASSERT_OK_AND_ASSIGN(std::vector<SweepConfig> configs,
                       BuildSweepConfigs(AllocatorOptions(), SweepSpec()));
  const SweepReplaySettings settings{4 * kGiB, std::nullopt};
  std::vector<SweepResult> one = RunSweep(*opener, configs, settings, 1);
  std::vector<SweepResult> many = RunSweep(*opener, configs, settings, 4);
  ASSERT_EQ(one.size(), many.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i].error, "");
    EXPECT_EQ(one[i].peak_reserved_bytes, many[i].peak_reserved_bytes) << one[i].config.label;
    EXPECT_EQ(one[i].device_mallocs, many[i].device_mallocs);
    EXPECT_EQ(one[i].first_oom_index, many[i].first_oom_index);
  }
}

// A configuration whose replay the simulated device cannot carry out (here: expandable segments
// reserve 9/8 of a 4 TiB device per stream and pool, and 16 streams need more address space than
// it has) is an error row, never a row with the figures of what did replay, which once made it
// the recommendation: "0 bytes" of peak reserved memory.
TEST(SweepTest, ReplaysWithFailedAllocationsAreErrorRows) {
  const uint64_t capacity = SimulatedBackend::kMaxCapacityBytes;
  TraceBuilder t(capacity);
  for (StreamId stream = 1; stream <= 16; ++stream) {
    t.Free(t.Alloc(4 * kMiB, stream));
    t.Free(t.Alloc(4 * kKiB, stream));
  }
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(t.Finish());
  ASSERT_OK(opener.status());
  SweepSpec spec;
  spec.max_split_size_mb = {0};
  ASSERT_OK_AND_ASSIGN(std::vector<SweepConfig> configs,
                       BuildSweepConfigs(AllocatorOptions(), spec));
  ASSERT_EQ(Labels(configs), (std::vector<std::string>{"(default)", "expandable_segments:True"}));
  std::vector<SweepResult> rows = RunSweep(*opener, configs, {capacity, std::nullopt}, 1);
  EXPECT_EQ(rows[0].error, "");
  EXPECT_EQ(rows[0].device_mallocs, 32);
  EXPECT_NE(rows[1].error.find("allocations failed other than by running out of memory; the "
                               "first: event "),
            std::string::npos)
      << rows[1].error;
  EXPECT_NE(rows[1].error.find("simulated virtual address space exhausted"), std::string::npos);
  std::optional<SweepRecommendation> rec = RecommendConfig(rows, false);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->index, 0u);
}

// The demo's job (cli/demo_command.cc): a fragmentation OOM on 16 GiB that a
// max_split_size_mb setting avoids.
TEST(SweepTest, DemoWorkloadOomIsAvoidedByAMaxSplitSetting) {
  DemoWorkloadConfig w;
  w.micro_batch = 10;
  w.seed = 3;
  w.steps = 12;
  w.flash_attention = true;
  FslogHeader header;
  header.device_total_bytes = 16 * kGiB;
  const std::string path = TempPath("demo.fslog");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FslogFileWriter> log, FslogFileWriter::Open(path, header));
  ASSERT_OK_AND_ASSIGN(DemoJobResult job, RunDemoJob(w, AllocatorOptions(), 16 * kGiB, log.get()));
  ASSERT_OK(log->Close());
  EXPECT_FALSE(job.completed);
  EXPECT_NE(job.oom_message.find("would have fit in the free cached memory"), std::string::npos);
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(path);
  ASSERT_OK(opener.status());
  ASSERT_OK_AND_ASSIGN(std::vector<SweepConfig> configs,
                       BuildSweepConfigs(AllocatorOptions(), SweepSpec()));
  std::vector<SweepResult> rows = RunSweep(*opener, configs, {16 * kGiB, std::nullopt}, 2);
  EXPECT_TRUE(rows[0].first_oom_index.has_value());  // the trace's own config fails as it did
  std::optional<SweepRecommendation> rec = RecommendConfig(rows, true);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rows[rec->index].ooms, 0);
  ASSERT_OK_AND_ASSIGN(AllocatorOptions fix, ParseAllocatorOptions("max_split_size_mb:256"));
  ASSERT_OK_AND_ASSIGN(DemoJobResult rerun, RunDemoJob(w, fix, 16 * kGiB));
  EXPECT_TRUE(rerun.completed);
  EXPECT_EQ(rerun.steps_completed, 12);
}

}  // namespace
}  // namespace fragscope
