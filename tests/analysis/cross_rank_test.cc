// The cross-rank report (analysis/ranks/cross_rank.h) on synthetic rank logs: an outlier rank named
// with its phase, a rank with memory outside PyTorch, pipeline-stage grouping, a mix of .fslog
// logs and snapshot pickles, and the rank rules.
#include "analysis/ranks/cross_rank.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "analysis/ranks/rank_inputs.h"
#include "analysis/ranks/rank_reduction.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/command_run.h"
#include "tests/analysis/rank_logs_test_util.h"

namespace fragscope {
namespace {

using ::fragscope::testing::Fragscope;
using ::fragscope::testing::FreshDir;
using ::fragscope::testing::WriteRankLogs;
using ::testing::HasSubstr;

std::vector<std::string> Traces(const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> traces = ExpandTraceInputs({dir});
  EXPECT_TRUE(traces.ok()) << traces.status();
  return traces.ok() ? *traces : std::vector<std::string>{};
}

CrossRankReport Report(const std::string& dir) {
  AnalysisOptions options;
  options.run_sweep = false;
  absl::StatusOr<std::vector<RankSummary>> summaries =
      SummarizeRanks(Traces(dir), options, {.threads = 2});
  EXPECT_TRUE(summaries.ok()) << summaries.status();
  if (!summaries.ok()) return {};
  absl::StatusOr<CrossRankReport> report = BuildCrossRankReport(*std::move(summaries));
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *std::move(report) : CrossRankReport{};
}

std::vector<const RankOutlier*> OutliersOf(const CrossRankReport& report, OutlierMetric metric) {
  std::vector<const RankOutlier*> found;
  for (const RankOutlier& o : report.outliers) {
    if (o.metric == metric) found.push_back(&o);
  }
  return found;
}

TEST(CrossRankTest, OutlierRankIsFlaggedWithThePhaseItsExcessAroseIn) {
  const std::string dir = WriteRankLogs("outlier", 8, 20'000, [](SyntheticRankSpec& s) {
    if (s.rank == 5) s.extra_optimizer_bytes = 4 * kGiB;
  });
  const CrossRankReport report = Report(dir);
  ASSERT_EQ(report.ranks.size(), 8u);
  EXPECT_EQ(report.world_size, 8);
  const auto reserved = OutliersOf(report, OutlierMetric::kPeakReserved);
  ASSERT_EQ(reserved.size(), 1u);
  const RankOutlier& o = *reserved[0];
  EXPECT_EQ(o.rank, 5);
  EXPECT_EQ(o.phase, "optimizer");
  EXPECT_GE(o.phase_share, 0.8);
  EXPECT_GE(o.phase_excess_bytes, 4 * kGiB - 64 * kMiB);
  EXPECT_GT(o.value - o.median, 3.0 * kGiB);
  EXPECT_GE(o.mads, kOutlierMads);
  EXPECT_THAT(o.sentence, HasSubstr("rank 5 reserves"));
  EXPECT_THAT(o.sentence, HasSubstr("more than the median"));
  EXPECT_THAT(o.sentence, HasSubstr("of it in the optimizer phase"));
  // No OOM: the worst rank is the one that reserved the most.
  ASSERT_TRUE(report.worst.has_value());
  EXPECT_EQ(report.ranks[*report.worst].rank, 5);
  EXPECT_THAT(report.worst_reason, HasSubstr("rank 5 reserved the most"));
}

TEST(CrossRankTest, RankWithMemoryOutsidePyTorchIsNamed) {
  const std::string dir = WriteRankLogs("outside", 6, 10'000, [](SyntheticRankSpec& s) {
    if (s.rank == 2) s.outside_bytes = 6 * kGiB;
  });
  const CrossRankReport report = Report(dir);
  ASSERT_TRUE(report.median_outside_pytorch_bytes.has_value());
  EXPECT_EQ(*report.median_outside_pytorch_bytes, 512 * kMiB);
  const auto outside = OutliersOf(report, OutlierMetric::kOutsidePyTorch);
  ASSERT_EQ(outside.size(), 1u);
  EXPECT_EQ(outside[0]->rank, 2);
  EXPECT_THAT(outside[0]->sentence,
              HasSubstr("rank 2 has 6.00 GiB of device memory outside PyTorch (when its log "
                        "opened), 5.50 GiB more than the median (512.00 MiB)"));
  EXPECT_EQ(report.ranks[2].outside_source, "log open");
  EXPECT_TRUE(OutliersOf(report, OutlierMetric::kPeakReserved).empty());
}

TEST(CrossRankTest, RanksAreGroupedByPipelineStageAndComparedWithinIt) {
  // Two stages of four ranks; the second holds more activations (as a last stage does), and
  // rank 1 of the first stage has more optimizer state.
  const std::string dir = WriteRankLogs("stages", 8, 12'000, [](SyntheticRankSpec& s) {
    s.pp_size = 2;
    s.tp_size = 2;
    if (s.rank >= 4) s.extra_activation_bytes = 96 * kMiB;
    if (s.rank == 1) s.extra_optimizer_bytes = 3 * kGiB;
  });
  const CrossRankReport report = Report(dir);
  EXPECT_EQ(report.pp_size, 2);
  ASSERT_EQ(report.stages.size(), 2u);
  EXPECT_EQ(report.stages[0].first_rank, 0);
  EXPECT_EQ(report.stages[0].last_rank, 3);
  EXPECT_EQ(report.stages[1].ranks, 4u);
  EXPECT_GT(report.stages[1].median_peak_reserved_bytes,
            report.stages[0].median_peak_reserved_bytes + kGiB);
  EXPECT_EQ(report.stages[0].max_rank, 1);
  ASSERT_EQ(report.tp_groups.size(), 4u);
  EXPECT_EQ(report.tp_groups[3].first_rank, 6);
  // The second stage's ranks are not outliers: they are compared with their own stage.
  const auto reserved = OutliersOf(report, OutlierMetric::kPeakReserved);
  ASSERT_EQ(reserved.size(), 1u);
  EXPECT_EQ(reserved[0]->rank, 1);
  EXPECT_EQ(reserved[0]->compared_with, "pipeline stage 0");
  EXPECT_THAT(reserved[0]->sentence, HasSubstr("than the median of pipeline stage 0"));
  // The text report shows the stages.
  testing::CommandRun run = Fragscope({"analyze", dir, "--no-sweep", "--no-summary"});
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("Pipeline stages:\n  0: ranks 0-3 (4 here)"));
  EXPECT_THAT(run.out, HasSubstr("Tensor-parallel groups:"));
}

TEST(CrossRankTest, FslogLogsAndSnapshotPicklesMix) {
  const std::string logs = WriteRankLogs("mix_src", 5, 6'000, [](SyntheticRankSpec& s) {
    if (s.rank == 3) s.extra_optimizer_bytes = 4 * kGiB;
  });
  const std::string dir = FreshDir("mix");
  // Ranks 0-2 as logs; rank 3 as a pickle named as torchtitan names them; rank 4 as a pickle
  // whose name says nothing, given last (position 4).
  for (int r = 0; r < 3; ++r) {
    std::filesystem::copy_file(absl::StrFormat("%s/rank%d.fslog", logs, r),
                               absl::StrFormat("%s/rank%d.fslog", dir, r));
  }
  const std::string named = dir + "/rank3_memory_snapshot.pickle";
  const std::string unnamed = dir + "/zz_snapshot.pickle";
  ASSERT_EQ(Fragscope({"convert", logs + "/rank3.fslog", named}).code, 0);
  ASSERT_EQ(Fragscope({"convert", logs + "/rank4.fslog", unnamed}).code, 0);
  const std::vector<std::string> traces = Traces(dir);
  ASSERT_EQ(traces.size(), 5u);
  EXPECT_EQ(traces.back(), unnamed);
  const CrossRankReport report = Report(dir);
  ASSERT_EQ(report.ranks.size(), 5u);
  EXPECT_EQ(report.ranks[3].rank_source, RankSource::kFileName);
  EXPECT_EQ(report.ranks[3].format, "pytorch-snapshot");
  EXPECT_EQ(report.ranks[4].rank_source, RankSource::kOrderGiven);
  EXPECT_EQ(report.ranks[4].path, unnamed);
  EXPECT_EQ(report.ranks[0].rank_source, RankSource::kLogHeader);
  EXPECT_FALSE(report.ranks[3].outside_pytorch_bytes.has_value()) << "a snapshot's is unknown";
  ASSERT_FALSE(report.notes.empty());
  EXPECT_THAT(report.notes.back(), HasSubstr("1 from their file names, 1 from the order given"));
  const auto reserved = OutliersOf(report, OutlierMetric::kPeakReserved);
  ASSERT_EQ(reserved.size(), 1u);
  EXPECT_EQ(reserved[0]->rank, 3);
}

TEST(CrossRankTest, TwoTracesOfOneRankOrTwoWorldSizesAreNotOneJob) {
  const std::string dir = WriteRankLogs("dup", 3, 2'000, [](SyntheticRankSpec& s) {
    if (s.rank == 2) s.rank = 1;
  });
  AnalysisOptions options;
  absl::StatusOr<std::vector<RankSummary>> summaries =
      SummarizeRanks(Traces(dir), options, {.threads = 1});
  ASSERT_TRUE(summaries.ok());
  absl::StatusOr<CrossRankReport> report = BuildCrossRankReport(*summaries);
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("not the ranks of one job: "));
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("both claim rank 1"));
  (*summaries)[2].rank = 2;
  (*summaries)[2].world_size = 4;
  report = BuildCrossRankReport(*summaries);
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("has world size 3 but"));
}

TEST(CrossRankTest, IdenticalRanksHaveNoOutliersAndFewRanksAreNotJudged) {
  std::vector<RankSummary> ranks(5);
  for (size_t r = 0; r < 5; ++r) {
    ranks[r].rank = static_cast<int32_t>(r);
    ranks[r].peak_reserved_bytes = 10 * kGiB + r * kMiB;  // within the floor
    ranks[r].peak_allocated_bytes = 9 * kGiB;
    ranks[r].utilization = 0.9;
  }
  absl::StatusOr<CrossRankReport> report = BuildCrossRankReport(ranks);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->outliers.empty());
  // Two ranks: nothing to compare against, however far apart.
  ranks.resize(2);
  ranks[1].peak_reserved_bytes = 40 * kGiB;
  report = BuildCrossRankReport(ranks);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->outliers.empty());
  EXPECT_EQ(report->ranks[*report->worst].rank, 1);
}

// A tenth of the ranks alike but above the rest (the others all equal: MAD 0) is a group, not
// outliers; a rank beyond the group still is one.
TEST(CrossRankTest, AGroupOfRanksIsNotOutliers) {
  std::vector<RankSummary> ranks(100);
  for (size_t r = 0; r < ranks.size(); ++r) {
    ranks[r].rank = static_cast<int32_t>(r);
    ranks[r].peak_reserved_bytes = r % 10 == 3 ? 11 * kGiB : 10 * kGiB;
    ranks[r].peak_allocated_bytes = 9 * kGiB;
    ranks[r].utilization = 0.9;
  }
  ranks[57].peak_reserved_bytes = 16 * kGiB;
  absl::StatusOr<CrossRankReport> report = BuildCrossRankReport(ranks);
  ASSERT_TRUE(report.ok());
  const auto reserved = OutliersOf(*report, OutlierMetric::kPeakReserved);
  ASSERT_EQ(reserved.size(), 1u);
  EXPECT_EQ(reserved[0]->rank, 57);
  ASSERT_FALSE(report->notes.empty());
  EXPECT_THAT(report->notes[0], HasSubstr("peak_reserved: 11 of 100 ranks (all ranks) pass the "
                                          "outlier rule, too many to be outliers"));
}

TEST(RankInputsTest, RanksFromLauncherFileNames) {
  EXPECT_EQ(RankFromFileName("/x/rank7_memory_snapshot.pickle"), 7);
  EXPECT_EQ(RankFromFileName("oom_rank12.pickle"), 12);
  EXPECT_EQ(RankFromFileName("snap_rank-3.pkl"), 3);
  EXPECT_EQ(RankFromFileName("/runs/rank9/oom_rank4.pickle"), 4) << "the file's name, last";
  EXPECT_EQ(RankFromFileName("snapshot.pickle"), std::nullopt);
  EXPECT_EQ(RankFromFileName("rank99999999999.pickle"), std::nullopt);
  const RankHint hint{6, std::nullopt};
  EXPECT_EQ(AssignRank("a.pickle", TraceFormat::kPyTorchSnapshot, 0, hint).second,
            RankSource::kOrderGiven);
  EXPECT_EQ(AssignRank("a.pickle", TraceFormat::kPyTorchSnapshot, 0, hint).first, 6);
  EXPECT_EQ(AssignRank("rank2.fslog", TraceFormat::kFslog, 9, hint).first, 9);
  EXPECT_EQ(AssignRank("x", TraceFormat::kFslog, 9, {0, 4}).second, RankSource::kFlag);
}

TEST(RankInputsTest, DirectoriesAndPatternsExpandInNaturalOrder) {
  const std::string dir = FreshDir("expand");
  for (const char* name : {"rank10.fslog", "rank2.fslog", "rank1.pickle", "notes.txt"}) {
    std::ofstream(dir + "/" + name) << "x";
  }
  absl::StatusOr<std::vector<std::string>> all = ExpandTraceInputs({dir});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, (std::vector<std::string>{dir + "/rank1.pickle", dir + "/rank2.fslog",
                                            dir + "/rank10.fslog"}));
  absl::StatusOr<std::vector<std::string>> pattern = ExpandTraceInputs({dir + "/rank*.fslog"});
  ASSERT_TRUE(pattern.ok());
  EXPECT_EQ(pattern->size(), 2u);
  EXPECT_THAT(std::string(ExpandTraceInputs({dir + "/none*.fslog"}).status().message()),
              HasSubstr("the pattern matches no file"));
  const std::string empty = FreshDir("expand_empty");
  EXPECT_THAT(std::string(ExpandTraceInputs({empty}).status().message()),
              HasSubstr("a directory with no trace"));
  EXPECT_TRUE(NaturalLess("rank2", "rank10"));
  EXPECT_FALSE(NaturalLess("rank10", "rank2"));
}

}  // namespace
}  // namespace fragscope
