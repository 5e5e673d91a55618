// The observed logs of two training steps recorded on an H100 (tests/data/gpu/README.md: GPT-2
// 124M and a Mistral-like GQA model under fragscope.observe(), and one rank of GPT-2 under FSDP2,
// whose all-gathers and reduce-scatters allocate from side streams and whose unsharded parameters
// are storages resized in place): fragscope's allocator decides as PyTorch's did, and the
// replay's peaks and allocation count are exactly PyTorch's own counters (torch.cuda.memory_stats,
// in the JSON beside each log). The predictions of the same jobs are compared with these in
// bench/RESULTS.md ("Prediction accuracy").
#include <fstream>
#include <string>

#include "fslog/fslog_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/analysis/command_run.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/file_contents.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class RecordedGpuLogTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::string Path(const char* extension) const {
    return std::string(FRAGSCOPE_TEST_DATA_DIR) + "/gpu/" + GetParam() + extension;
  }
};

TEST_P(RecordedGpuLogTest, VerifiesFaithful) {
  const CommandRun verify = Fragscope({"verify", Path(".fslog")});
  EXPECT_EQ(verify.code, 0) << verify.err;
  EXPECT_THAT(verify.out, StartsWith("faithful"));
}

TEST_P(RecordedGpuLogTest, ReplayedPeaksArePyTorchsCounters) {
  std::ifstream in(Path(".json"));
  const nlohmann::json measured = nlohmann::json::parse(in);
  const CommandRun analyze =
      Fragscope({"analyze", Path(".fslog"), "--no-sweep", "--no-summary", "--json", "-"});
  ASSERT_EQ(analyze.code, 0) << analyze.err;
  const nlohmann::json rank = nlohmann::json::parse(analyze.out)["ranks"][0];
  EXPECT_EQ(rank["peaks"]["allocated_bytes"], measured["peak_allocated"]);
  EXPECT_EQ(rank["peaks"]["reserved_bytes"], measured["peak_reserved"]);
  EXPECT_EQ(rank["replay"]["allocations"], measured["allocations"]);
}

// An observe-mode log's header says it records no empty_cache calls (PyTorch traces only their
// segment frees); the replay then infers them as for a snapshot. The real H100 fragmentation OOM
// (its retry ladder frees cached segments before the OOM) verifies faithful either way, and dump
// says so.
TEST(RecordedGpuLogFlagTest, ALogWithoutEmptyCacheRecordsStillVerifies) {
  const std::string bytes =
      ReadFile(std::string(FRAGSCOPE_TEST_DATA_DIR) + "/gpu/h100_fragmentation_oom.fslog");
  const absl::StatusOr<size_t> size = ParseFileHeaderSize(bytes.substr(0, kFileHeaderBytes));
  ASSERT_TRUE(size.ok()) << size.status();
  absl::StatusOr<FslogHeader> header = ParseFileHeader(bytes.substr(0, *size));
  ASSERT_TRUE(header.ok()) << header.status();
  ASSERT_TRUE(header->records_empty_cache);
  header->records_empty_cache = false;
  const std::string flagged = SerializeFileHeader(*header);
  ASSERT_EQ(flagged.size(), *size);
  const std::string log = TempPath("no_empty_cache.fslog");
  WriteFile(log, flagged + bytes.substr(*size));
  const CommandRun verify = Fragscope(
      {"verify", log, "--memory-fraction", "0.05051862997816944", "--capacity", "85017493504"});
  EXPECT_EQ(verify.code, 0) << verify.out << verify.err;
  EXPECT_THAT(verify.out, StartsWith("faithful"));
  EXPECT_THAT(Fragscope({"dump", log, "--header", "--to", "0"}).out,
              HasSubstr("empty_cache: not recorded"));
}

INSTANTIATE_TEST_SUITE_P(TwoTrainingSteps, RecordedGpuLogTest,
                         ::testing::Values("h100_gpt2_124m_two_steps",
                                           "h100_mistral_gqa_two_steps"));
INSTANTIATE_TEST_SUITE_P(OneFsdp2Rank, RecordedGpuLogTest,
                         ::testing::Values("h100_fsdp2_gpt2_124m_w4r0"));

}  // namespace
}  // namespace fragscope::testing
