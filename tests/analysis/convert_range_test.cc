// `fragscope convert --events FIRST:LAST`: a time range of a trace as a snapshot (memory_viz) or a
// Chrome trace (Perfetto).
#include <fstream>
#include <string>

#include "analysis/sources/pytorch_snapshot.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/analysis/command_run.h"
#include "tests/analysis/trace_builder.h"

namespace fragscope {
namespace {

using testing::Fragscope;
using ::testing::HasSubstr;
using testing::TempPath;

std::string DemoLog() {
  const std::string log = TempPath("demo.fslog");
  EXPECT_EQ(Fragscope({"demo", "--no-html", "--log", log}).code, 0);
  return log;
}

size_t Entries(const std::string& pickle) {
  absl::StatusOr<PyTorchSnapshot> s = ReadPyTorchSnapshotFile(pickle);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? s->device_traces.at(0).size() : 0;
}

TEST(ConvertRangeTest, ASnapshotOfARangeHasItsEntriesAndTheLayoutAfterIt) {
  const std::string log = DemoLog();
  const std::string whole = TempPath("whole.pickle");
  const std::string part = TempPath("part.pickle");
  const std::string tail = TempPath("tail.pickle");
  ASSERT_EQ(Fragscope({"convert", log, whole}).code, 0);
  testing::CommandRun run = Fragscope({"convert", log, part, "--events", "5000:9000"});
  ASSERT_EQ(run.code, 0) << run.err;
  ASSERT_EQ(Fragscope({"convert", log, tail, "--events", "9001:"}).code, 0);
  const size_t n_whole = Entries(whole), n_part = Entries(part), n_tail = Entries(tail);
  EXPECT_GT(n_part, 100u);
  EXPECT_LT(n_part + n_tail, n_whole);  // the head, 0 to 4999, is in neither
  // The range replays: its blocks from before are the snapshot's, and the analysis runs.
  testing::CommandRun analyzed = Fragscope({"analyze", part, "--capacity", "16GiB", "--no-sweep"});
  EXPECT_EQ(analyzed.code, 0) << analyzed.err;
}

TEST(ConvertRangeTest, AChromeTraceOfARangeStartsAtItsFirstEvent) {
  const std::string log = DemoLog();
  const std::string whole = TempPath("whole.json");
  const std::string part = TempPath("part.json");
  ASSERT_EQ(Fragscope({"convert", log, whole}).code, 0);
  ASSERT_EQ(Fragscope({"convert", log, part, "--events", "5000:9000"}).code, 0);
  auto counters = [](const std::string& path) {
    std::ifstream in(path);
    const nlohmann::json j = nlohmann::json::parse(in);
    std::vector<uint64_t> ts;
    for (const nlohmann::json& e : j["traceEvents"]) {
      if (e["ph"] == "C") ts.push_back(e["ts"].get<uint64_t>());
    }
    return ts;
  };
  const std::vector<uint64_t> all = counters(whole), some = counters(part);
  ASSERT_FALSE(some.empty());
  EXPECT_LT(some.size(), all.size() / 2);
  EXPECT_GT(some.front(), all.front());
  EXPECT_LT(some.back(), all.back());
}

TEST(ConvertRangeTest, BadRangesAreUsageErrors) {
  const std::string log = DemoLog();
  for (const char* range : {"5", ":", "9:5", "a:b", "-1:5", "1:99999999999999999999999"}) {
    testing::CommandRun run = Fragscope({"convert", log, TempPath("x.pickle"), "--events", range});
    EXPECT_EQ(run.code, 2) << range;
    EXPECT_THAT(run.err, HasSubstr("--events")) << range;
  }
  testing::CommandRun fslog = Fragscope({"convert", log, TempPath("x.fslog"), "--events", "1:5"});
  EXPECT_EQ(fslog.code, 2);
  EXPECT_THAT(fslog.err, HasSubstr("converted whole"));
}

}  // namespace
}  // namespace fragscope
