// Snapshots as PyTorch 2.11 writes them (tests/data/pickle/snapshot_211.p5.pickle, written by
// Python's pickle at protocol 5): every device's trace analyzed and verified, --device picking
// one, and the entries' user_metadata / compile_context and 'annotate' entries as markers that
// reach the OOM explanation and `convert`'s .fslog.
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "analysis/analyzer.h"
#include "analysis/sources/open_trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/command_run.h"
#include "tests/analysis/trace_builder.h"

namespace fragscope::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Snapshot211() {
  return std::string(FRAGSCOPE_TEST_DATA_DIR) + "/pickle/snapshot_211.p5.pickle";
}

AnalysisOptions Quiet() {
  AnalysisOptions options;
  options.run_sweep = false;
  return options;
}

TEST(SnapshotDevicesTest, AnalyzesEveryDeviceAsAReportOfItsOwn) {
  absl::StatusOr<AnalysisReport> report = AnalyzeTraces({Snapshot211()}, Quiet());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->per_device);
  ASSERT_EQ(report->ranks.size(), 2u);
  EXPECT_EQ(report->ranks[0].info.device, 0);
  EXPECT_EQ(report->ranks[1].info.device, 1);
  EXPECT_EQ(report->ranks[0].oom_count, 1u);
  EXPECT_EQ(report->ranks[1].oom_count, 0u);
  EXPECT_EQ(report->ranks[1].metrics.allocations, 1u);
  ASSERT_TRUE(report->worst.has_value());
  EXPECT_EQ(*report->worst, 0u);
  EXPECT_THAT(report->worst_reason, HasSubstr("device 0 ran out of memory first"));
}

TEST(SnapshotDevicesTest, AnalyzeCommandSaysWhichDeviceEachFigureIsFor) {
  CommandRun r = Fragscope({"analyze", Snapshot211(), "--no-sweep", "--no-summary"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("a snapshot with 2 devices' traces"));
  EXPECT_THAT(r.out, HasSubstr("Worst device (>): device 0 ran out of memory first"));
  EXPECT_THAT(r.out, HasSubstr("=== device 0 ===\nfragscope analysis of"));
  EXPECT_THAT(r.out, HasSubstr("(pytorch-snapshot, device 0, rank 0)"));
  EXPECT_THAT(r.out, HasSubstr("=== device 1 ===\nfragscope analysis of"));
  EXPECT_THAT(r.out, HasSubstr("(pytorch-snapshot, device 1, rank 0)"));

  const std::string json = TempPath("devices.json");
  CommandRun j = Fragscope({"analyze", Snapshot211(), "--no-sweep", "--json", json});
  ASSERT_EQ(j.code, 0) << j.err;
  std::ifstream in(json);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("\"per_device\": true"));
  EXPECT_THAT(text, HasSubstr("\"worst_device\": 0"));
}

TEST(SnapshotDevicesTest, DeviceFlagAnalyzesOneDevice) {
  CommandRun r =
      Fragscope({"analyze", Snapshot211(), "--device", "1", "--no-sweep", "--no-summary"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("(pytorch-snapshot, device 1, rank 0)"));
  EXPECT_THAT(r.out, Not(HasSubstr("device 0")));
  CommandRun missing = Fragscope({"analyze", Snapshot211(), "--device", "2", "--no-sweep"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err,
              HasSubstr("no trace for device 2 (the snapshot has traces for devices: 0, 1)"));
}

TEST(SnapshotDevicesTest, VerifyChecksEveryDevice) {
  CommandRun r = Fragscope({"verify", Snapshot211(), "--capacity", "64MiB"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  // Markers count as events; the expandable pages of device 1 are compared as maps and unmaps.
  EXPECT_THAT(r.out, HasSubstr("device 0:\nfaithful (12 events): 1 segment event, 2 allocations "
                               "and 1 OOM match the trace"));
  EXPECT_THAT(r.out, HasSubstr("\n\ndevice 1:\nfaithful (5 events): 2 segment events (1 segment "
                               "map, 1 unmap), 1 allocation"));
  CommandRun one = Fragscope({"verify", Snapshot211(), "--device", "0"});
  EXPECT_EQ(one.code, 0) << one.out << one.err;
  EXPECT_THAT(one.out, Not(HasSubstr("device 0:")));
}

TEST(SnapshotDevicesTest, OtherCommandsAskForADevice) {
  CommandRun r = Fragscope({"sweep", Snapshot211()});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("traces for devices 0, 1; choose one with --device N"));
}

// The markers of device 0's trace: record_function regions, then each change of the entries'
// user_metadata or compile_context, and the 'annotate' entry.
TEST(SnapshotDevicesTest, EntryContextAndAnnotateEntriesBecomeMarkers) {
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(Snapshot211(), {.device = 0});
  ASSERT_TRUE(opener.ok()) << opener.status();
  absl::StatusOr<std::unique_ptr<TraceSource>> source = opener->Open();
  ASSERT_TRUE(source.ok()) << source.status();
  std::vector<std::string> markers;
  TraceEvent e;
  while (true) {
    absl::StatusOr<bool> more = (*source)->Next(&e);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    if (e.kind == EventKind::kMarker) markers.push_back(e.text);
  }
  EXPECT_THAT(markers,
              ElementsAre("forward", "forward | user_metadata: stage 2",
                          "forward | user_metadata: stage 2 | compile_context: Torch-Compiled "
                          "Region: 0/1",
                          "user_metadata: stage 2 | compile_context: Torch-Compiled Region: 0/1",
                          "checkpoint", "user_metadata: stage 3"));
}

TEST(SnapshotDevicesTest, TheOomSaysTheUserMetadataItRanIn) {
  AnalysisOptions options = Quiet();
  options.device = 0;
  absl::StatusOr<AnalysisReport> report = AnalyzeTraces({Snapshot211()}, options);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->ranks.size(), 1u);
  EXPECT_FALSE(report->per_device);
  ASSERT_EQ(report->ranks[0].ooms.size(), 1u);
  EXPECT_EQ(report->ranks[0].ooms[0].phase, "user_metadata: stage 3");
}

TEST(SnapshotDevicesTest, ConvertKeepsTheContextAsFslogMarkers) {
  const std::string log = TempPath("device0.fslog");
  CommandRun c = Fragscope({"convert", Snapshot211(), log, "--device", "0"});
  ASSERT_EQ(c.code, 0) << c.err;
  CommandRun d = Fragscope({"dump", log, "--kind", "marker"});
  ASSERT_EQ(d.code, 0) << d.err;
  // dump quotes texts as excerpts, in single quotes.
  EXPECT_THAT(d.out, HasSubstr("'forward | user_metadata: stage 2'"));
  EXPECT_THAT(d.out, HasSubstr("'checkpoint'"));
  EXPECT_THAT(d.out, HasSubstr("'user_metadata: stage 3'"));
}

}  // namespace
}  // namespace fragscope::testing
