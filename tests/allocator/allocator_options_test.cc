// Tests of ParseAllocatorOptions against PyTorch's own tests: the defaults, the cases of
// c10/test/core/AllocatorConfig_test.cpp and test_cuda.py's test_allocator_settings /
// test_allocator_memory_fraction_setting (docs/pytorch_allocator_rules.md §8). The other
// topics are in allocator_options_{validation,divisions,malformed,format}_test.cc.
#include "allocator/allocator_options.h"

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_options_test_util.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;

// --- Defaults and the source string ------------------------------------------------------------

TEST(AllocatorOptionsTest, EmptyStringGivesPyTorchDefaults) {
  const AllocatorOptions options = ParseOk("");
  EXPECT_TRUE(options == AllocatorOptions{});
  EXPECT_FALSE(options.max_split_size_set());
  EXPECT_EQ(options.max_split_size_bytes, kUnlimitedBytes);
  EXPECT_EQ(options.max_non_split_rounding_bytes, 20 * kMB);
  EXPECT_EQ(options.large_segment_size_bytes, 20 * kMB);
  for (uint32_t divisions : options.roundup_power2_divisions) EXPECT_EQ(divisions, 0u);
  EXPECT_EQ(options.garbage_collection_threshold, 0.0);
  EXPECT_EQ(options.per_process_memory_fraction, 1.0);
  EXPECT_FALSE(options.expandable_segments);
  EXPECT_EQ(options.backend, "native");
  EXPECT_EQ(options.pinned_num_register_threads, 1u);
  EXPECT_EQ(options.placement, PlacementPolicy::kBestFit);
  EXPECT_TRUE(options.warnings.empty());
}

TEST(AllocatorOptionsTest, WhitespaceOnlyStringGivesDefaults) {
  EXPECT_TRUE(ParseOk(" \t\n") == AllocatorOptions{.source = " \t\n"});
}

TEST(AllocatorOptionsTest, SourceRecordsTheInputStringVerbatim) {
  EXPECT_EQ(ParseOk(" max_split_size_mb: 40 ").source, " max_split_size_mb: 40 ");
}

// --- AllocatorConfig_test.cpp ------------------------------------------------------------------

TEST(AllocatorOptionsTest, ParsesTheAllocatorConfigTestString) {
  const AllocatorOptions options = ParseOk(
      "max_split_size_mb:40,max_non_split_rounding_mb:30,garbage_collection_threshold:0.5,"
      "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1],expandable_segments:True,"
      "pinned_use_background_threads:True");
  EXPECT_EQ(options.large_segment_size_bytes, 20 * kMB);
  EXPECT_EQ(options.max_split_size_bytes, 40 * kMB);
  EXPECT_EQ(options.max_non_split_rounding_bytes, 30 * kMB);
  EXPECT_EQ(options.garbage_collection_threshold, 0.5);
  EXPECT_EQ(DivisionsAtMB(options, 32), 8u);
  EXPECT_EQ(DivisionsAtMB(options, 64), 8u);
  EXPECT_EQ(DivisionsAtMB(options, 128), 2u);
  EXPECT_EQ(DivisionsAtMB(options, 256), 4u);
  EXPECT_EQ(DivisionsAtMB(options, 512), 2u);
  EXPECT_EQ(DivisionsAtMB(options, 1024), 4u);
  EXPECT_EQ(DivisionsAtMB(options, 2048), 1u);
  EXPECT_EQ(DivisionsAtMB(options, 4096), 1u);
  EXPECT_EQ(DivisionsAtMB(options, 8192), 1u);
  EXPECT_TRUE(options.expandable_segments);
  EXPECT_TRUE(options.pinned_use_background_threads);
}

TEST(AllocatorOptionsTest, LargeSegmentSizeBelowMaxSplitSizeIsAccepted) {
  const AllocatorOptions options = ParseOk(
      "large_segment_size_mb:15,max_split_size_mb:20,max_non_split_rounding_mb:40,"
      "garbage_collection_threshold:0.8");
  EXPECT_EQ(options.large_segment_size_bytes, 15 * kMB);
  EXPECT_EQ(options.max_split_size_bytes, 20 * kMB);
  EXPECT_EQ(options.max_non_split_rounding_bytes, 40 * kMB);
  EXPECT_EQ(options.garbage_collection_threshold, 0.8);
}

TEST(AllocatorOptionsTest, MaxSplitSizeBelowALaterLargeSegmentSizeIsRejected) {
  // PyTorch reads large_segment_size_mb before every other key, wherever it is written.
  const std::string error = ParseError("max_split_size_mb:20,large_segment_size_mb:25");
  EXPECT_THAT(error, HasSubstr("max_split_size_mb: 20 is too small, must be >= 25"));
}

TEST(AllocatorOptionsTest, ListFormFirstKeyFillsLowerIntervalsAndGreaterFillsTheRest) {
  const AllocatorOptions options =
      ParseOk("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]");
  EXPECT_EQ(DivisionsAtMB(options, 64), 8u);
  EXPECT_EQ(DivisionsAtMB(options, 128), 8u);
  EXPECT_EQ(DivisionsAtMB(options, 256), 16u);
  EXPECT_EQ(DivisionsAtMB(options, 512), 1u);
  EXPECT_EQ(DivisionsAtMB(options, 1024), 0u);
  EXPECT_EQ(DivisionsAtMB(options, 2048), 8u);
  EXPECT_EQ(DivisionsAtMB(options, 4096), 2u);
}

TEST(AllocatorOptionsTest, SingleDivisionValueFillsEveryInterval) {
  const AllocatorOptions options = ParseOk("roundup_power2_divisions:4");
  EXPECT_EQ(DivisionsAtMB(options, 64), 4u);
  EXPECT_EQ(DivisionsAtMB(options, 256), 4u);
  EXPECT_EQ(DivisionsAtMB(options, 2048), 4u);
  for (uint32_t divisions : options.roundup_power2_divisions) EXPECT_EQ(divisions, 4u);
}

TEST(AllocatorOptionsTest, UnknownKeysAreRejected) {
  EXPECT_EQ(ParseError("foo:123,bar:456"), "Unrecognized key 'foo' in CUDA allocator config.");
}

TEST(AllocatorOptionsTest, MalformedConfigsOfAllocatorConfigTestAreRejected) {
  for (const char* conf : {"max_split_size_mb", "max_split_size_mb:",
                           "roundup_power2_divisions:[64:8", "garbage_collection_threshold:"}) {
    EXPECT_THAT(ParseError(conf), HasSubstr(std::string(conf).substr(0, 12))) << conf;
  }
}

TEST(AllocatorOptionsTest, TrailingCommaIsAccepted) {
  EXPECT_FALSE(ParseOk("expandable_segments:False,").expandable_segments);
  EXPECT_TRUE(ParseOk("expandable_segments:True,").expandable_segments);
}

// --- test_cuda.py: test_allocator_settings, test_allocator_memory_fraction_setting ------------

TEST(AllocatorOptionsTest, DivisionsOfTestAllocatorSettingsCoverItsSizes) {
  // 84 MiB rounds to 96 MiB with 4 divisions; with the list, 84 MiB uses 8 divisions (88 MiB)
  // and 400 MiB uses 2 (512 MiB).
  EXPECT_EQ(RoundupPower2DivisionsFor(ParseOk("roundup_power2_divisions:4"), 84 * kMB), 4u);
  const AllocatorOptions list =
      ParseOk("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]");
  EXPECT_EQ(RoundupPower2DivisionsFor(list, 84 * kMB), 8u);
  EXPECT_EQ(RoundupPower2DivisionsFor(list, 400 * kMB), 2u);
}

TEST(AllocatorOptionsTest, RejectsTheValuesOfTestAllocatorSettings) {
  EXPECT_THAT(ParseError("foo:1,bar:2"), HasSubstr("Unrecognized key 'foo'"));
  EXPECT_EQ(ParseError("garbage_collection_threshold:1.2"),
            "garbage_collection_threshold: 1.2 is invalid, set it in (0.0, 1.0)");
  EXPECT_EQ(ParseError("max_split_size_mb:2"), "max_split_size_mb: 2 is too small, must be >= 20");
  EXPECT_EQ(ParseError("release_lock_on_cudamalloc:none"),
            "release_lock_on_cudamalloc: none is not a boolean, expected True or False");
  EXPECT_EQ(ParseError("pinned_use_cuda_host_register:none"),
            "pinned_use_cuda_host_register: none is not a boolean, expected True or False");
  EXPECT_EQ(ParseError("pinned_num_register_threads:none"),
            "pinned_num_register_threads: none is not a non-negative integer");
  EXPECT_EQ(ParseError("pinned_num_register_threads:1024"),
            "pinned_num_register_threads: 1024 is too large, must be <= 128");
}

TEST(AllocatorOptionsTest, PerProcessMemoryFractionMustBeInClosedUnitInterval) {
  EXPECT_EQ(ParseOk("per_process_memory_fraction:0.5").per_process_memory_fraction, 0.5);
  EXPECT_EQ(ParseOk("per_process_memory_fraction:0").per_process_memory_fraction, 0.0);
  EXPECT_EQ(ParseOk("per_process_memory_fraction:1").per_process_memory_fraction, 1.0);
  EXPECT_EQ(ParseError("per_process_memory_fraction:-0.1"),
            "per_process_memory_fraction: -0.1 is invalid, set it in [0.0, 1.0]");
  EXPECT_EQ(ParseError("per_process_memory_fraction:1.1"),
            "per_process_memory_fraction: 1.1 is invalid, set it in [0.0, 1.0]");
}

}  // namespace
}  // namespace fragscope::testing
