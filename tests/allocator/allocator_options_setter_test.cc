// Tests of SetAllocatorOption / ResetAllocatorOption (the per-key edits the sweep makes) and of
// the keys a parse records as named (AllocatorOptions::given).
#include <string>

#include "allocator/allocator_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_options_test_util.h"

namespace fragscope {
namespace {

using ::fragscope::testing::kMB;
using ::fragscope::testing::ParseOk;
using ::testing::HasSubstr;

TEST(AllocatorOptionsSetterTest, ParseRecordsTheKeysNamedWhateverTheirValue) {
  const AllocatorOptions options =
      ParseOk("per_process_memory_fraction:1.0,release_lock_on_hipmalloc:False");
  EXPECT_TRUE(options.Given(AllocatorKey::kPerProcessMemoryFraction));
  EXPECT_TRUE(options.Given(AllocatorKey::kReleaseLockOnCudamalloc));  // through its alias
  EXPECT_FALSE(options.Given(AllocatorKey::kMaxSplitSizeMb));
  EXPECT_EQ(options.given.count(), 2u);
  // Defaults named are still the defaults.
  EXPECT_EQ(FormatAllocatorOptions(options), "");
  EXPECT_TRUE(ParseOk("").given.none());
}

TEST(AllocatorOptionsSetterTest, KeyNamesRoundTrip) {
  for (size_t i = 0; i < kAllocatorKeyCount; ++i) {
    const auto key = static_cast<AllocatorKey>(i);
    const std::optional<AllocatorKey> found = FindAllocatorKey(AllocatorKeyName(key));
    ASSERT_TRUE(found.has_value()) << AllocatorKeyName(key);
    EXPECT_EQ(*found, key);
  }
  EXPECT_EQ(FindAllocatorKey("pinned_use_hip_host_register"),
            AllocatorKey::kPinnedUseCudaHostRegister);
  EXPECT_FALSE(FindAllocatorKey("foo").has_value());
}

TEST(AllocatorOptionsSetterTest, SetEqualsParsingTheEditedString) {
  AllocatorOptions options = ParseOk("max_split_size_mb:256,roundup_power2_divisions:[64:8,>:1]");
  ASSERT_TRUE(SetAllocatorOption(options, AllocatorKey::kMaxSplitSizeMb, "128").ok());
  ASSERT_TRUE(SetAllocatorOption(options, AllocatorKey::kExpandableSegments, "True").ok());
  // A roundup list replaces the previous one (a parse applies a second list on top of the first).
  ASSERT_TRUE(SetAllocatorOption(options, AllocatorKey::kRoundupPower2Divisions, "[256:4]").ok());
  const AllocatorOptions expected =
      ParseOk("max_split_size_mb:128,expandable_segments:True,roundup_power2_divisions:[256:4]");
  EXPECT_EQ(FormatAllocatorOptions(options), FormatAllocatorOptions(expected));
  EXPECT_EQ(options.roundup_power2_divisions, expected.roundup_power2_divisions);
  EXPECT_EQ(options.given, expected.given);
  EXPECT_EQ(options.source, "max_split_size_mb:256,roundup_power2_divisions:[64:8,>:1]");
}

TEST(AllocatorOptionsSetterTest, SetChecksLikeTheParserAndLeavesOptionsUnchangedOnError) {
  AllocatorOptions options = ParseOk("large_segment_size_mb:40");
  const AllocatorOptions before = options;
  absl::Status s = SetAllocatorOption(options, AllocatorKey::kMaxSplitSizeMb, "30");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "max_split_size_mb: 30 is too small, must be >= 40");
  s = SetAllocatorOption(options, AllocatorKey::kGarbageCollectionThreshold, "1.5");
  EXPECT_THAT(s.message(), HasSubstr("garbage_collection_threshold: 1.5 is invalid"));
  s = SetAllocatorOption(options, AllocatorKey::kExpandableSegments, "True,max_split_size_mb:30");
  EXPECT_THAT(s.message(), HasSubstr("is not one value"));
  s = SetAllocatorOption(options, AllocatorKey::kPlacement, "worst_fit");
  EXPECT_THAT(s.message(), HasSubstr("worst_fit is not a placement policy"));
  EXPECT_TRUE(options == before);
}

TEST(AllocatorOptionsSetterTest, LargeSegmentSizeMovesTheDefaultRoundingWithIt) {
  AllocatorOptions options;
  ASSERT_TRUE(SetAllocatorOption(options, AllocatorKey::kLargeSegmentSizeMb, "64").ok());
  EXPECT_EQ(options.large_segment_size_bytes, 64 * kMB);
  EXPECT_EQ(options.max_non_split_rounding_bytes,
            64 * kMB);  // as ParseOk("large_segment_size_mb:64")
  // A max_split_size below the new large segment size is refused, as the parser refuses it.
  ASSERT_TRUE(SetAllocatorOption(options, AllocatorKey::kLargeSegmentSizeMb, "20").ok());
  ASSERT_TRUE(SetAllocatorOption(options, AllocatorKey::kMaxSplitSizeMb, "30").ok());
  EXPECT_FALSE(SetAllocatorOption(options, AllocatorKey::kLargeSegmentSizeMb, "40").ok());
  EXPECT_EQ(options.large_segment_size_bytes, 20 * kMB);
}

TEST(AllocatorOptionsSetterTest, ResetRestoresTheDefaultAndForgetsTheKey) {
  AllocatorOptions options = ParseOk("max_split_size_mb:128,expandable_segments:True");
  ASSERT_TRUE(ResetAllocatorOption(options, AllocatorKey::kMaxSplitSizeMb).ok());
  EXPECT_FALSE(options.max_split_size_set());
  EXPECT_FALSE(options.Given(AllocatorKey::kMaxSplitSizeMb));
  EXPECT_TRUE(options.Given(AllocatorKey::kExpandableSegments));
  EXPECT_EQ(FormatAllocatorOptions(options), "expandable_segments:True");
  // Back to 20 MiB would leave max_split_size_mb:15 below it.
  AllocatorOptions small = ParseOk("large_segment_size_mb:11,max_split_size_mb:15");
  EXPECT_FALSE(ResetAllocatorOption(small, AllocatorKey::kLargeSegmentSizeMb).ok());
}

}  // namespace
}  // namespace fragscope
