// Tests of ParseAllocatorOptions on malformed input: syntax errors with their offset, numbers
// out of range or not whole, and error messages that name the key and the value.
#include "allocator/allocator_options.h"

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_options_test_util.h"

namespace fragscope {
namespace {

using ::fragscope::testing::kMB;
using ::fragscope::testing::ParseError;
using ::fragscope::testing::ParseOk;
using ::testing::HasSubstr;

TEST(AllocatorOptionsTest, MalformedSyntaxIsRejectedWithTheOffset) {
  EXPECT_EQ(ParseError("max_split_size_mb"),
            "expected ':' after key 'max_split_size_mb', got the end of the input (offset 17)");
  EXPECT_EQ(ParseError("max_split_size_mb:"),
            "max_split_size_mb: expected a value, got the end of the input (offset 18)");
  EXPECT_EQ(ParseError("max_split_size_mb,40"),
            "expected ':' after key 'max_split_size_mb', got ',' at offset 17");
  EXPECT_EQ(ParseError(":40"), "expected a key, got ':' at offset 0");
  EXPECT_EQ(ParseError("max_split_size_mb:40:50"),
            "max_split_size_mb: expected ',' or the end after the value, got ':' at offset 20");
  EXPECT_EQ(ParseError("roundup_power2_divisions:[64:8"),
            "roundup_power2_divisions: unterminated list, '[' at offset 25 has no ']'");
  EXPECT_EQ(ParseError("max_split_size_mb:[40:1]"),
            "max_split_size_mb: expected a single value, got a list at offset 18");
  EXPECT_EQ(ParseError("a:1,,b:2"), "expected a key, got ',' at offset 4");
}

TEST(AllocatorOptionsTest, EveryMalformedStringIsAnInvalidArgument) {
  for (const char* conf : {",",
                           "]",
                           "[",
                           ":",
                           "::",
                           "a:",
                           "a::1",
                           "a:1:",
                           ",a:1",
                           "max_split_size_mb:40,,",
                           "max_split_size_mb:]",
                           "max_split_size_mb:[",
                           "roundup_power2_divisions:[64]",
                           "roundup_power2_divisions:[64:]",
                           "roundup_power2_divisions:[:8]",
                           "roundup_power2_divisions:[64:8]]",
                           "roundup_power2_divisions:[64:8 128:2",
                           "roundup_power2_divisions:[64:8;128:2]",
                           "roundup_power2_divisions:[[64:8]]",
                           "roundup_power2_divisions:[64:8]x",
                           "roundup_power2_divisions:[,]",
                           "expandable_segments:True expandable_segments:False"}) {
    ParseError(conf);
  }
  // NUL is an ordinary byte: it stays in the word and makes it invalid.
  EXPECT_THAT(ParseError(std::string_view("max_split_size_mb:4\0"
                                          "0",
                                          21)),
              HasSubstr("is not a non-negative integer"));
  EXPECT_THAT(ParseError(std::string_view("a\0b:1", 5)), HasSubstr("Unrecognized key"));
}

TEST(AllocatorOptionsTest, NumbersMustBeWholeFiniteAndInRange) {
  EXPECT_EQ(ParseError("max_split_size_mb:40abc"),
            "max_split_size_mb: 40abc is not a non-negative integer");
  EXPECT_EQ(ParseError("max_split_size_mb:-40"),
            "max_split_size_mb: -40 is not a non-negative integer");
  EXPECT_THAT(ParseError("max_split_size_mb:4e1"), HasSubstr("not a non-negative integer"));
  EXPECT_THAT(ParseError("max_split_size_mb:0x40"), HasSubstr("not a non-negative integer"));
  EXPECT_THAT(ParseError("max_split_size_mb:+"), HasSubstr("not a non-negative integer"));
  EXPECT_EQ(ParseError("max_split_size_mb:99999999999999999999"),
            "max_split_size_mb: 99999999999999999999 is out of range, must be < 2^64");
  for (const char* value : {"nan", "NaN", "inf", "-inf", "0.5x", "1e999", "+-0.5", "0x1p-1"}) {
    EXPECT_EQ(
        ParseError(absl::StrCat("garbage_collection_threshold:", value)),
        absl::StrCat("garbage_collection_threshold: ", value, " is not a finite decimal number"));
  }
  EXPECT_THAT(ParseError("per_process_memory_fraction:nan"), HasSubstr("not a finite"));
}

TEST(AllocatorOptionsTest, LeadingPlusAndZerosAreAcceptedLikeStoull) {
  EXPECT_EQ(ParseOk("max_split_size_mb:+040").max_split_size_bytes, 40 * kMB);
  EXPECT_EQ(ParseOk("garbage_collection_threshold:+.25").garbage_collection_threshold, 0.25);
  EXPECT_EQ(ParseOk("garbage_collection_threshold:2.5e-1").garbage_collection_threshold, 0.25);
}

TEST(AllocatorOptionsTest, ErrorMessagesNameTheKeyAndTheValue) {
  struct Case {
    const char* conf;
    const char* key;
    const char* value;
  };
  for (const Case& c : std::vector<Case>{
           {"max_split_size_mb:2", "max_split_size_mb", "2"},
           {"max_non_split_rounding_mb:7", "max_non_split_rounding_mb", "7"},
           {"large_segment_size_mb:5", "large_segment_size_mb", "5"},
           {"garbage_collection_threshold:1.5", "garbage_collection_threshold", "1.5"},
           {"per_process_memory_fraction:2", "per_process_memory_fraction", "2"},
           {"roundup_power2_divisions:5", "roundup_power2_divisions", "5"},
           {"roundup_power2_divisions:[64:5]", "roundup_power2_divisions", "64:5"},
           {"roundup_power2_divisions:[63:4]", "roundup_power2_divisions", "63:4"},
           {"expandable_segments:yes", "expandable_segments", "yes"},
           {"release_lock_on_hipmalloc:no", "release_lock_on_hipmalloc", "no"},
           {"pinned_use_hip_host_register:0", "pinned_use_hip_host_register", "0"},
           {"pinned_use_background_threads:x", "pinned_use_background_threads", "x"},
           {"pinned_num_register_threads:6", "pinned_num_register_threads", "6"},
           {"pinned_reserve_segment_size_mb:-1", "pinned_reserve_segment_size_mb", "-1"},
           {"graph_capture_record_stream_reuse:T", "graph_capture_record_stream_reuse", "T"},
           {"backend:cuda", "backend", "cuda"},
           {"placement:next_fit", "placement", "next_fit"},
           {"max_split_size_mb:lots", "max_split_size_mb", "lots"},
           {"max_split_size_mb:[20:1]", "max_split_size_mb", "offset 18"},
           {"foo:1", "foo", "foo"},
       }) {
    const std::string error = ParseError(c.conf);
    EXPECT_THAT(error, HasSubstr(c.key)) << c.conf;
    EXPECT_THAT(error, HasSubstr(c.value)) << c.conf;
  }
}

}  // namespace
}  // namespace fragscope
