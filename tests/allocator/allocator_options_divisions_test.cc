// Tests of roundup_power2_divisions: the list form's intervals, its limits (powers of two,
// 2^31), repeated keys, and RoundupPower2DivisionsFor's lookup by log2 of the size.
#include "allocator/allocator_options.h"

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_options_test_util.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;

TEST(AllocatorOptionsTest, GreaterThanListedFirstFillsFromIntervalOne) {
  AllocatorOptions options = ParseOk("roundup_power2_divisions:[>:4]");
  EXPECT_EQ(options.roundup_power2_divisions[0], 0u);
  for (size_t i = 1; i < options.roundup_power2_divisions.size(); ++i) {
    EXPECT_EQ(options.roundup_power2_divisions[i], 4u) << i;
  }
  // A later first numeric key still fills below itself.
  options = ParseOk("roundup_power2_divisions:[>:4,64:8]");
  EXPECT_EQ(DivisionsAtMB(options, 1), 8u);
  EXPECT_EQ(DivisionsAtMB(options, 64), 8u);
  EXPECT_EQ(DivisionsAtMB(options, 128), 4u);
}

TEST(AllocatorOptionsTest, ListKeysBeyond32GigabytesShareTheLastInterval) {
  const AllocatorOptions options = ParseOk("roundup_power2_divisions:[1:2,65536:4]");
  EXPECT_EQ(options.roundup_power2_divisions[0], 2u);
  EXPECT_EQ(options.roundup_power2_divisions[1], 0u);
  EXPECT_EQ(options.roundup_power2_divisions[15], 4u);
}

TEST(AllocatorOptionsTest, ListAcceptsZeroDivisionsButSingleValueDoesNot) {
  EXPECT_EQ(DivisionsAtMB(ParseOk("roundup_power2_divisions:[64:0,>:4]"), 64), 0u);
  EXPECT_EQ(ParseError("roundup_power2_divisions:0"),
            "roundup_power2_divisions: 0 is not a power of 2");
  EXPECT_EQ(ParseError("roundup_power2_divisions:3"),
            "roundup_power2_divisions: 3 is not a power of 2");
}

TEST(AllocatorOptionsTest, ListKeysAndDivisionsMustBePowersOfTwo) {
  EXPECT_EQ(ParseError("roundup_power2_divisions:[64:3]"),
            "roundup_power2_divisions: 64:3 has a division that is not 0 or a power of 2");
  EXPECT_EQ(ParseError("roundup_power2_divisions:[48:4]"),
            "roundup_power2_divisions: 48:4 has an interval that is not a power of 2 (in MB)");
  EXPECT_THAT(ParseError("roundup_power2_divisions:[0:4]"), HasSubstr("0:4 has an interval"));
  EXPECT_THAT(ParseError("roundup_power2_divisions:[abc:4]"),
              HasSubstr("roundup_power2_divisions: abc is not a non-negative integer"));
}

TEST(AllocatorOptionsTest, DivisionsAbove2To31AreRejected) {
  EXPECT_EQ(DivisionsAtMB(ParseOk("roundup_power2_divisions:2147483648"), 1), 2147483648u);
  EXPECT_THAT(ParseError("roundup_power2_divisions:4294967296"),
              HasSubstr("4294967296 is too large, must be <= 2147483648"));
  EXPECT_THAT(ParseError("roundup_power2_divisions:[64:4294967296]"),
              HasSubstr("64:4294967296 has too many divisions"));
}

TEST(AllocatorOptionsTest, RepeatedKeysOverrideAndRoundupListsStack) {
  EXPECT_EQ(ParseOk("max_split_size_mb:40,max_split_size_mb:60").max_split_size_bytes, 60 * kMB);
  const AllocatorOptions options =
      ParseOk("roundup_power2_divisions:[64:8],roundup_power2_divisions:[256:2]");
  EXPECT_EQ(DivisionsAtMB(options, 1), 2u);    // filled below 256 by the second list
  EXPECT_EQ(DivisionsAtMB(options, 256), 2u);  // set by the second list
  EXPECT_EQ(DivisionsAtMB(options, 512), 0u);
}

TEST(AllocatorOptionsTest, RoundupPower2DivisionsForIndexesByLog2OfTheSize) {
  AllocatorOptions options;
  for (size_t i = 0; i < options.roundup_power2_divisions.size(); ++i) {
    options.roundup_power2_divisions[i] = static_cast<uint32_t>(i + 100);
  }
  EXPECT_EQ(RoundupPower2DivisionsFor(options, 0), 100u);
  EXPECT_EQ(RoundupPower2DivisionsFor(options, 1), 100u);
  EXPECT_EQ(RoundupPower2DivisionsFor(options, 2 * kMB - 1), 100u);
  EXPECT_EQ(RoundupPower2DivisionsFor(options, 2 * kMB), 101u);
  EXPECT_EQ(RoundupPower2DivisionsFor(options, 84 * kMB), 106u);
  EXPECT_EQ(RoundupPower2DivisionsFor(options, 32 * kGiB - 1), 114u);
  EXPECT_EQ(RoundupPower2DivisionsFor(options, 32 * kGiB), 115u);
  EXPECT_EQ(RoundupPower2DivisionsFor(options, UINT64_MAX), 115u);
}

}  // namespace
}  // namespace fragscope::testing
