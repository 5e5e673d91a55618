// What a PyTorch snapshot does not record (the device's memory, the per-process memory fraction)
// and the commands need: `convert` refuses an expandable-segments snapshot without --capacity
// (its output would carry the replay's addresses, and then verify faithful to itself), and
// `verify` of a snapshot whose settings set garbage_collection_threshold, without its cap, says
// that the job had one.
#include <filesystem>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/command_run.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/unwrapped.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Oracle(const std::string& name) {
  return absl::StrCat(FRAGSCOPE_TEST_DATA_DIR, "/oracle/", name, ".pickle");
}

constexpr char kH200Bytes[] = "150109880320";

TEST(UnrecordedSettingsTest, ConvertRefusesExpandableSegmentsWithoutTheCapacity) {
  for (const char* name : {"expandable.fslog", "expandable.pickle", "expandable.json"}) {
    const std::string out = TempPath(name);
    const auto refused = Fragscope({"convert", Oracle("micro_expandable"), out});
    EXPECT_EQ(refused.code, 2) << name;
    EXPECT_THAT(Unwrapped(refused.err),
                HasSubstr("micro_expandable.pickle: the trace uses expandable segments"));
    EXPECT_THAT(refused.err, HasSubstr("--capacity"));
    EXPECT_FALSE(std::filesystem::exists(out)) << name;
  }
  // With the device's memory the converted log has the trace's addresses (its first large
  // mapping is at 0x2a54000000, not at the start of a 1 TiB replay's reservation), and verifies.
  const std::string out = TempPath("expandable.fslog");
  const auto converted =
      Fragscope({"convert", Oracle("micro_expandable"), out, "--capacity", kH200Bytes});
  ASSERT_EQ(converted.code, 0) << converted.err;
  const auto dump = Fragscope({"dump", out});
  EXPECT_THAT(dump.out, HasSubstr("segment_map    ptr=0x2a54000000 size=100.00 MiB"));
  const auto verified = Fragscope({"verify", out});
  EXPECT_EQ(verified.code, 0) << verified.out;
  EXPECT_THAT(verified.out, HasSubstr("153 segment maps, 99 unmaps"));
}

TEST(UnrecordedSettingsTest, VerifyOfAGarbageCollectingSnapshotWithoutItsCapSaysSo) {
  const auto uncapped = Fragscope({"verify", Oracle("micro_fraction_3g_gc")});
  EXPECT_EQ(uncapped.code, 1);
  EXPECT_THAT(uncapped.out, HasSubstr("diverged at event"));
  const std::string joined = Unwrapped(uncapped.out);
  EXPECT_THAT(joined, HasSubstr("hint: the trace's settings set garbage_collection_threshold:0.6, "
                                "which PyTorch applies only under a per-process memory fraction"));
  EXPECT_THAT(joined, HasSubstr("Pass --memory-fraction or --allowed, and --capacity."));
  std::istringstream lines(uncapped.out);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
  // With its cap it is faithful; its sibling without a GC threshold keeps its own hint.
  const auto capped = Fragscope(
      {"verify", Oracle("micro_fraction_3g_gc"), "--capacity", kH200Bytes, "--allowed", "3GiB"});
  EXPECT_EQ(capped.code, 0) << capped.out;
  const auto sibling = Fragscope({"verify", Oracle("micro_fraction_3g")});
  EXPECT_EQ(sibling.code, 1);
  EXPECT_THAT(sibling.out, HasSubstr("PyTorch ran out of memory here"));
  EXPECT_THAT(sibling.out, Not(HasSubstr("garbage_collection_threshold")));
}

}  // namespace
}  // namespace fragscope::testing
