#include "allocator/size_policy.h"

#include "allocator/allocator_options.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {

TEST(SizePolicyTest, RoundsTinyRequestsToMinimumBlock) {
  AllocatorOptions o;
  EXPECT_EQ(RoundSize(1, o), 512u);
  EXPECT_EQ(RoundSize(512, o), 512u);
  EXPECT_EQ(RoundSize(513, o), 1024u);
}

TEST(SizePolicyTest, ChoosesPoolBySizeWithOneMebibyteBoundary) {
  AllocatorOptions o;
  EXPECT_EQ(PoolFor(RoundSize(kMiB, o)), PoolKind::kSmall);
  EXPECT_EQ(PoolFor(RoundSize(kMiB + 1, o)), PoolKind::kLarge);
  EXPECT_EQ(RoundSize(kMiB + 1, o), 1049088u);
}

TEST(SizePolicyTest, SegmentSizesFollowPytorch) {
  AllocatorOptions o;
  EXPECT_EQ(SegmentSizeFor(512, o), 2 * kMiB);
  EXPECT_EQ(SegmentSizeFor(kMiB, o), 2 * kMiB);
  EXPECT_EQ(SegmentSizeFor(kMiB + 512, o), 20 * kMiB);
  EXPECT_EQ(SegmentSizeFor(10 * kMiB - 512, o), 20 * kMiB);
  EXPECT_EQ(SegmentSizeFor(10 * kMiB, o), 10 * kMiB);
  EXPECT_EQ(SegmentSizeFor(12 * kMiB, o), 12 * kMiB);
  EXPECT_EQ(SegmentSizeFor(11 * kMiB + 512, o), 12 * kMiB);
}

TEST(SizePolicyTest, LargeSegmentSizeOptionChangesMidSizeSegments) {
  ASSERT_OK_AND_ASSIGN(AllocatorOptions o, ParseAllocatorOptions("large_segment_size_mb:16"));
  EXPECT_EQ(SegmentSizeFor(2 * kMiB, o), 16 * kMiB);
}

TEST(SizePolicyTest, ElevenMebibytesPlusOneIsNotSplit) {
  AllocatorOptions o;
  const uint64_t rounded = RoundSize(11 * kMiB + 1, o);
  EXPECT_EQ(rounded, 11 * kMiB + 512);
  EXPECT_EQ(SegmentSizeFor(rounded, o), 12 * kMiB);
  // The remainder, 1 MiB - 512 B, is not more than 1 MiB.
  EXPECT_FALSE(ShouldSplit(12 * kMiB, rounded, PoolKind::kLarge, o));
}

TEST(SizePolicyTest, SmallPoolSplitsAnyRemainderOfAtLeast512) {
  AllocatorOptions o;
  EXPECT_TRUE(ShouldSplit(2 * kMiB, 2 * kMiB - 512, PoolKind::kSmall, o));
  EXPECT_FALSE(ShouldSplit(2 * kMiB, 2 * kMiB, PoolKind::kSmall, o));
}

TEST(SizePolicyTest, LargePoolSplitNeedsMoreThanOneMebibyteAndRequestBelowMaxSplit) {
  ASSERT_OK_AND_ASSIGN(AllocatorOptions o, ParseAllocatorOptions("max_split_size_mb:40"));
  EXPECT_FALSE(ShouldSplit(20 * kMiB, 19 * kMiB, PoolKind::kLarge, o));  // exactly 1 MiB left
  EXPECT_TRUE(ShouldSplit(20 * kMiB, 19 * kMiB - 512, PoolKind::kLarge, o));
  EXPECT_FALSE(ShouldSplit(100 * kMiB, 40 * kMiB, PoolKind::kLarge, o));  // request >= max
}

TEST(SizePolicyTest, RoundupPower2Divisions) {
  EXPECT_EQ(RoundupPower2NextDivision(1200, 4), 1280u);
  EXPECT_EQ(RoundupPower2NextDivision(84 * kMiB, 4), 96 * kMiB);
  EXPECT_EQ(RoundupPower2NextDivision(84 * kMiB, 8), 88 * kMiB);
  EXPECT_EQ(RoundupPower2NextDivision(64 * kMiB, 8), 64 * kMiB);  // powers of two unchanged
  ASSERT_OK_AND_ASSIGN(AllocatorOptions o, ParseAllocatorOptions("roundup_power2_divisions:4"));
  EXPECT_EQ(RoundSize(84 * kMiB, o), 96 * kMiB);
  // Sizes up to 512 * divisions only get 512-rounding.
  EXPECT_EQ(RoundSize(2000, o), 2048u);
}

TEST(SizePolicyTest, RoundupListFormFromTestAllocatorSettings) {
  ASSERT_OK_AND_ASSIGN(
      AllocatorOptions o,
      ParseAllocatorOptions("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]"));
  EXPECT_EQ(RoundSize(84 * kMiB, o), 88 * kMiB);
  EXPECT_EQ(RoundSize(400 * kMiB, o), 512 * kMiB);
}

TEST(SizePolicyTest, OversizeRules) {
  ASSERT_OK_AND_ASSIGN(AllocatorOptions o, ParseAllocatorOptions("max_split_size_mb:40"));
  EXPECT_TRUE(OversizeRuleRejects(100 * kMiB, 30 * kMiB, o));   // oversize never serves small
  EXPECT_FALSE(OversizeRuleRejects(39 * kMiB, 30 * kMiB, o));   // below max: fine
  EXPECT_FALSE(OversizeRuleRejects(100 * kMiB, 90 * kMiB, o));  // within 20 MiB
  EXPECT_TRUE(OversizeRuleRejects(110 * kMiB, 90 * kMiB, o));   // 20 MiB or more over
  AllocatorOptions unlimited;
  EXPECT_FALSE(OversizeRuleRejects(100 * kGiB, 512, unlimited));
}

}  // namespace
}  // namespace fragscope
