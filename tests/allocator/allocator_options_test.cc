// Tests of ParseAllocatorOptions / FormatAllocatorOptions against PyTorch's behaviour: the cases
// of c10/test/core/AllocatorConfig_test.cpp and test_cuda.py's test_allocator_settings /
// test_allocator_memory_fraction_setting (shared/reference/pytorch_allocator.md §10), the
// validation rules of the newest AllocatorConfig.cpp / CUDAAllocatorConfig.cpp, malformed input,
// and the Parse(Format(o)) == o round trip on random option sets.
#include "allocator/allocator_options.h"

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMB = kMiB;

AllocatorOptions ParseOk(std::string_view conf) {
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(conf);
  EXPECT_TRUE(options.ok()) << "'" << conf << "': " << options.status();
  return options.ok() ? *std::move(options) : AllocatorOptions{};
}

// The error message of a parse that must fail with kInvalidArgument.
std::string ParseError(std::string_view conf) {
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(conf);
  EXPECT_FALSE(options.ok()) << "'" << conf << "' was accepted";
  if (options.ok()) return "";
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument) << options.status();
  return std::string(options.status().message());
}

uint32_t DivisionsAtMB(const AllocatorOptions& options, uint64_t mb) {
  return RoundupPower2DivisionsFor(options, mb * kMB);
}

// Parse(Format(o)) must give back o, apart from the source string and the warnings.
void ExpectRoundTrip(const AllocatorOptions& options) {
  const std::string text = FormatAllocatorOptions(options);
  absl::StatusOr<AllocatorOptions> parsed = ParseAllocatorOptions(text);
  ASSERT_TRUE(parsed.ok()) << "'" << text << "': " << parsed.status();
  AllocatorOptions expected = options;
  expected.source = text;
  expected.warnings = parsed->warnings;
  EXPECT_TRUE(*parsed == expected)
      << "'" << text << "' parses to '" << FormatAllocatorOptions(*parsed) << "'";
  EXPECT_EQ(FormatAllocatorOptions(*parsed), text);
}

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

// --- Validation rules of the source ------------------------------------------------------------

TEST(AllocatorOptionsTest, GarbageCollectionThresholdMustBeInOpenUnitInterval) {
  EXPECT_EQ(ParseOk("garbage_collection_threshold:0.5").garbage_collection_threshold, 0.5);
  EXPECT_THAT(ParseError("garbage_collection_threshold:0"), HasSubstr("(0.0, 1.0)"));
  EXPECT_THAT(ParseError("garbage_collection_threshold:1"), HasSubstr("(0.0, 1.0)"));
}

TEST(AllocatorOptionsTest, MaxSplitSizeMustBeAtLeastTheLargeSegmentSize) {
  EXPECT_EQ(ParseOk("max_split_size_mb:20").max_split_size_bytes, 20 * kMB);
  EXPECT_EQ(ParseError("max_split_size_mb:19"),
            "max_split_size_mb: 19 is too small, must be >= 20");
  EXPECT_EQ(ParseOk("large_segment_size_mb:12,max_split_size_mb:12").max_split_size_bytes,
            12 * kMB);
}

TEST(AllocatorOptionsTest, MaxNonSplitRoundingMustBeAtLeastTheLargeSegmentSize) {
  EXPECT_EQ(ParseOk("max_non_split_rounding_mb:20").max_non_split_rounding_bytes, 20 * kMB);
  EXPECT_EQ(ParseError("max_non_split_rounding_mb:19"),
            "max_non_split_rounding_mb: 19 is too small, must be >= 20");
  EXPECT_EQ(ParseError("large_segment_size_mb:30,max_non_split_rounding_mb:25"),
            "max_non_split_rounding_mb: 25 is too small, must be >= 30");
}

TEST(AllocatorOptionsTest, LargeSegmentSizeAlsoSetsTheMaxNonSplitRoundingDefault) {
  EXPECT_EQ(ParseOk("large_segment_size_mb:30").max_non_split_rounding_bytes, 30 * kMB);
  EXPECT_EQ(ParseOk("large_segment_size_mb:12").max_non_split_rounding_bytes, 12 * kMB);
  EXPECT_EQ(
      ParseOk("max_non_split_rounding_mb:50,large_segment_size_mb:30").max_non_split_rounding_bytes,
      50 * kMB);
}

TEST(AllocatorOptionsTest, LargeSegmentSizeMustExceedTenMegabytes) {
  EXPECT_EQ(ParseError("large_segment_size_mb:10"),
            "large_segment_size_mb: 10 is too small, must be > 10");
  EXPECT_EQ(ParseOk("large_segment_size_mb:11").large_segment_size_bytes, 11 * kMB);
}

TEST(AllocatorOptionsTest, MegabyteSizesBeyondTheByteRangeAreClampedLikePyTorch) {
  const uint64_t max_mb = UINT64_MAX / kMB;
  const AllocatorOptions options = ParseOk(
      "large_segment_size_mb:18446744073709551615,max_split_size_mb:18446744073709551615,"
      "max_non_split_rounding_mb:17592186044416");
  EXPECT_EQ(options.large_segment_size_bytes, max_mb * kMB);
  EXPECT_EQ(options.max_split_size_bytes, max_mb * kMB);
  EXPECT_TRUE(options.max_split_size_set());
  EXPECT_EQ(options.max_non_split_rounding_bytes, max_mb * kMB);
  ExpectRoundTrip(options);
}

TEST(AllocatorOptionsTest, BooleansMustBeExactlyTrueOrFalse) {
  EXPECT_TRUE(ParseOk("expandable_segments:True").expandable_segments);
  EXPECT_FALSE(ParseOk("expandable_segments:False").expandable_segments);
  for (const char* value : {"true", "TRUE", "1", "yes", "False0"}) {
    EXPECT_THAT(ParseError(absl::StrCat("expandable_segments:", value)),
                HasSubstr(absl::StrCat("expandable_segments: ", value, " is not a boolean")));
  }
}

TEST(AllocatorOptionsTest, WhitespaceIsIgnoredEverywhereEvenInsideWords) {
  const AllocatorOptions options =
      ParseOk("  max_split _size_mb : 4 0 ,\texpandable_segments:\nTrue\r\n");
  EXPECT_EQ(options.max_split_size_bytes, 40 * kMB);
  EXPECT_TRUE(options.expandable_segments);
}

TEST(AllocatorOptionsTest, HipAliasesSetTheCudaFields) {
  const AllocatorOptions options =
      ParseOk("release_lock_on_hipmalloc:True,pinned_use_hip_host_register:True");
  EXPECT_TRUE(options.release_lock_on_cudamalloc);
  EXPECT_TRUE(options.pinned_use_cuda_host_register);
  EXPECT_EQ(FormatAllocatorOptions(options),
            "release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True");
}

TEST(AllocatorOptionsTest, BackendIsNativeOrCudaMallocAsync) {
  EXPECT_EQ(ParseOk("backend:native").backend, "native");
  EXPECT_EQ(ParseOk("backend:cudaMallocAsync").backend, "cudaMallocAsync");
  for (const char* value : {"hipMallocAsync", "async", "Native"}) {
    EXPECT_EQ(ParseError(absl::StrCat("backend:", value)),
              absl::StrCat("backend: ", value,
                           " is not a known allocator backend, options are native and "
                           "cudaMallocAsync"));
  }
}

TEST(AllocatorOptionsTest, CudaMallocAsyncWithCudaNativeKeysWarnsLikePyTorch) {
  EXPECT_TRUE(ParseOk("backend:cudaMallocAsync").warnings.empty());
  // PyTorch's CUDA parser only counts its own keys towards the warning.
  EXPECT_TRUE(ParseOk("backend:cudaMallocAsync,max_split_size_mb:40").warnings.empty());
  const AllocatorOptions options = ParseOk("pinned_num_register_threads:8,backend:cudaMallocAsync");
  ASSERT_EQ(options.warnings.size(), 1u);
  EXPECT_THAT(options.warnings[0], HasSubstr("backend:cudaMallocAsync ignores"));
  EXPECT_TRUE(ParseOk("backend:native,pinned_num_register_threads:8").warnings.empty());
}

TEST(AllocatorOptionsTest, PinnedNumRegisterThreadsIsAPowerOfTwoUpTo128) {
  EXPECT_EQ(ParseOk("pinned_num_register_threads:1").pinned_num_register_threads, 1u);
  EXPECT_EQ(ParseOk("pinned_num_register_threads:128").pinned_num_register_threads, 128u);
  EXPECT_EQ(ParseError("pinned_num_register_threads:3"),
            "pinned_num_register_threads: 3 is not a power of 2");
  EXPECT_EQ(ParseError("pinned_num_register_threads:0"),
            "pinned_num_register_threads: 0 is not a power of 2");
  EXPECT_THAT(ParseError("pinned_num_register_threads:256"), HasSubstr("must be <= 128"));
}

TEST(AllocatorOptionsTest, PinnedKeysAreRecorded) {
  const AllocatorOptions options = ParseOk(
      "pinned_reserve_segment_size_mb:64,pinned_free_catch_all:True,"
      "pinned_use_background_threads:True,pinned_use_cuda_host_register:True");
  EXPECT_EQ(options.pinned_reserve_segment_size_mb, 64u);
  EXPECT_TRUE(options.pinned_free_catch_all);
  EXPECT_TRUE(options.pinned_use_background_threads);
  EXPECT_TRUE(options.pinned_use_cuda_host_register);
  EXPECT_EQ(ParseError("pinned_reserve_segment_size_mb:0"),
            "pinned_reserve_segment_size_mb: 0 is invalid, must be > 0");
}

TEST(AllocatorOptionsTest, GraphCaptureReuseAndThrowOnOomAreBooleans) {
  const AllocatorOptions options =
      ParseOk("graph_capture_record_stream_reuse:True,throw_on_cudamalloc_oom:True");
  EXPECT_TRUE(options.graph_capture_record_stream_reuse);
  EXPECT_TRUE(options.throw_on_cudamalloc_oom);
  EXPECT_THAT(ParseError("throw_on_cudamalloc_oom:1"), HasSubstr("throw_on_cudamalloc_oom: 1"));
}

TEST(AllocatorOptionsTest, ExpandableSegmentsReserveIsAFractionOrGibibytes) {
  auto reserve = ParseOk("expandable_segments_reserve:0.5").expandable_segments_reserve;
  ASSERT_TRUE(reserve.has_value());
  EXPECT_TRUE(*reserve == (ExpandableSegmentsReserve{.is_fraction = true, .value = 0.5}));
  reserve = ParseOk("expandable_segments_reserve:40g").expandable_segments_reserve;
  ASSERT_TRUE(reserve.has_value());
  EXPECT_TRUE(*reserve == (ExpandableSegmentsReserve{.is_fraction = false, .value = 40}));
}

TEST(AllocatorOptionsTest, InvalidExpandableSegmentsReserveWarnsAndKeepsTheDefault) {
  for (const char* value : {"abc", "0", "-1", "G", "inf", "nan", "0.5GG", "1e999"}) {
    const AllocatorOptions options = ParseOk(absl::StrCat("expandable_segments_reserve:", value));
    EXPECT_FALSE(options.expandable_segments_reserve.has_value()) << value;
    ASSERT_EQ(options.warnings.size(), 1u) << value;
    EXPECT_THAT(options.warnings[0],
                HasSubstr(absl::StrCat("expandable_segments_reserve: ignoring invalid value '",
                                       value, "'")));
  }
  // A later invalid value keeps the earlier valid one, as PyTorch's nullopt does.
  EXPECT_TRUE(ParseOk("expandable_segments_reserve:0.25,expandable_segments_reserve:x")
                  .expandable_segments_reserve.has_value());
}

TEST(AllocatorOptionsTest, ReserveByClassSkipsInvalidItemsAndLaterNamesWin) {
  const AllocatorOptions options = ParseOk(
      "expandable_segments_reserve_by_class:[decode:0.25,prefill:40G,bad:zero,decode:0.5,]");
  ASSERT_EQ(options.expandable_segments_reserve_by_class.size(), 2u);
  EXPECT_EQ(options.expandable_segments_reserve_by_class.at("decode").value, 0.5);
  EXPECT_FALSE(options.expandable_segments_reserve_by_class.at("prefill").is_fraction);
  ASSERT_EQ(options.warnings.size(), 1u);
  EXPECT_THAT(options.warnings[0], HasSubstr("'zero'"));
  EXPECT_TRUE(ParseOk("expandable_segments_reserve_by_class:[]")
                  .expandable_segments_reserve_by_class.empty());
  EXPECT_THAT(ParseError("expandable_segments_reserve_by_class:0.5"),
              HasSubstr("expandable_segments_reserve_by_class: 0.5 is not a list"));
}

TEST(AllocatorOptionsTest, PlacementIsAFragscopeExtension) {
  EXPECT_EQ(ParseOk("placement:best_fit").placement, PlacementPolicy::kBestFit);
  EXPECT_EQ(ParseOk("placement:first_fit").placement, PlacementPolicy::kFirstFit);
  EXPECT_EQ(ParseError("placement:worst_fit"),
            "placement: worst_fit is not a placement policy, options are best_fit, first_fit");
  EXPECT_EQ(PlacementPolicyName(PlacementPolicy::kBestFit), "best_fit");
  EXPECT_EQ(PlacementPolicyName(PlacementPolicy::kFirstFit), "first_fit");
  EXPECT_EQ(FormatAllocatorOptions(ParseOk("placement:first_fit")), "placement:first_fit");
  EXPECT_EQ(FormatAllocatorOptions(ParseOk("placement:best_fit")), "");
}

// --- roundup_power2_divisions details ----------------------------------------------------------

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

// --- Malformed input ---------------------------------------------------------------------------

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
           {"pinned_free_catch_all:t", "pinned_free_catch_all", "t"},
           {"graph_capture_record_stream_reuse:T", "graph_capture_record_stream_reuse", "T"},
           {"throw_on_cudamalloc_oom:F", "throw_on_cudamalloc_oom", "F"},
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

// --- Formatting and round trips ----------------------------------------------------------------

TEST(AllocatorOptionsTest, FormatOfDefaultsIsEmpty) {
  EXPECT_EQ(FormatAllocatorOptions(AllocatorOptions{}), "");
}

TEST(AllocatorOptionsTest, FormatWritesNonDefaultKeysInTableOrder) {
  const AllocatorOptions options = ParseOk(
      " expandable_segments:True , pinned_use_background_threads:True, "
      "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1],max_split_size_mb:40,"
      "max_non_split_rounding_mb:30,garbage_collection_threshold:0.5,backend:native");
  EXPECT_EQ(FormatAllocatorOptions(options),
            "max_split_size_mb:40,max_non_split_rounding_mb:30,garbage_collection_threshold:0.5,"
            "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1],"
            "expandable_segments:True,pinned_use_background_threads:True");
  ExpectRoundTrip(options);
}

TEST(AllocatorOptionsTest, FormatLeavesOutMaxNonSplitRoundingEqualToTheLargeSegmentSize) {
  EXPECT_EQ(FormatAllocatorOptions(ParseOk("large_segment_size_mb:30")),
            "large_segment_size_mb:30");
  EXPECT_EQ(
      FormatAllocatorOptions(ParseOk("large_segment_size_mb:30,max_non_split_rounding_mb:30")),
      "large_segment_size_mb:30");
  EXPECT_EQ(
      FormatAllocatorOptions(ParseOk("max_non_split_rounding_mb:30,large_segment_size_mb:25")),
      "large_segment_size_mb:25,max_non_split_rounding_mb:30");
}

TEST(AllocatorOptionsTest, FormatWritesTheShortestEquivalentDivisionList) {
  const auto format = [](std::string_view conf) { return FormatAllocatorOptions(ParseOk(conf)); };
  EXPECT_EQ(format("roundup_power2_divisions:[1:4,>:4]"), "roundup_power2_divisions:4");
  EXPECT_EQ(format("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]"),
            "roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]");
  EXPECT_EQ(format("roundup_power2_divisions:[64:0]"), "");
  EXPECT_EQ(format("roundup_power2_divisions:[>:4]"), "roundup_power2_divisions:[1:0,>:4]");
  EXPECT_EQ(format("roundup_power2_divisions:[64:2,32768:0]"), "roundup_power2_divisions:[64:2]");
}

TEST(AllocatorOptionsTest, EveryKeyRoundTrips) {
  const AllocatorOptions options = ParseOk(
      "large_segment_size_mb:32,max_split_size_mb:64,max_non_split_rounding_mb:48,"
      "garbage_collection_threshold:0.6,roundup_power2_divisions:[2:1,16:4,>:8],"
      "expandable_segments:True,pinned_use_background_threads:True,backend:cudaMallocAsync,"
      "release_lock_on_cudamalloc:True,per_process_memory_fraction:0.75,"
      "throw_on_cudamalloc_oom:True,graph_capture_record_stream_reuse:True,"
      "expandable_segments_reserve:1.5G,expandable_segments_reserve_by_class:[b:0.5,a:2G],"
      "pinned_use_cuda_host_register:True,pinned_num_register_threads:16,"
      "pinned_reserve_segment_size_mb:128,pinned_free_catch_all:True,placement:best_fit");
  EXPECT_EQ(FormatAllocatorOptions(options),
            "large_segment_size_mb:32,max_split_size_mb:64,max_non_split_rounding_mb:48,"
            "garbage_collection_threshold:0.6,roundup_power2_divisions:[2:1,16:4,>:8],"
            "expandable_segments:True,pinned_use_background_threads:True,"
            "backend:cudaMallocAsync,release_lock_on_cudamalloc:True,"
            "per_process_memory_fraction:0.75,throw_on_cudamalloc_oom:True,"
            "graph_capture_record_stream_reuse:True,expandable_segments_reserve:1.5G,"
            "expandable_segments_reserve_by_class:[a:2G,b:0.5],"
            "pinned_use_cuda_host_register:True,pinned_num_register_threads:16,"
            "pinned_reserve_segment_size_mb:128,pinned_free_catch_all:True");
  ExpectRoundTrip(options);
}

// A random value from {0, 1, 2, 4, ..., 2^31}, weighted towards small tables of few values.
uint32_t RandomDivision(std::mt19937_64& rng) {
  const uint64_t pick = rng() % 40;
  return pick < 8 ? 0u : uint32_t{1} << (pick < 32 ? pick % 4 : pick - 8);
}

TEST(AllocatorOptionsTest, RandomDivisionTablesRoundTrip) {
  std::mt19937_64 rng(20240601);
  for (int iteration = 0; iteration < 20000; ++iteration) {
    AllocatorOptions options;
    uint32_t run_value = RandomDivision(rng);
    for (uint32_t& division : options.roundup_power2_divisions) {
      if (rng() % 3 == 0) run_value = RandomDivision(rng);
      division = run_value;
    }
    ExpectRoundTrip(options);
    if (HasFailure()) break;
  }
}

// A random double in (0, 1).
double RandomUnitFraction(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double x = uniform(rng);
  return x == 0.0 ? 0.5 : (rng() % 2 == 0 ? x : static_cast<double>(rng() % 100 + 1) / 128.0);
}

ExpandableSegmentsReserve RandomReserve(std::mt19937_64& rng) {
  return {
      .is_fraction = rng() % 2 == 0,
      .value = rng() % 2 == 0 ? RandomUnitFraction(rng) * 4 : static_cast<double>(rng() % 80 + 1)};
}

AllocatorOptions RandomOptions(std::mt19937_64& rng) {
  const auto coin = [&] { return rng() % 2 == 0; };
  const uint64_t max_mb = UINT64_MAX / kMiB;
  AllocatorOptions o;
  if (coin()) o.large_segment_size_bytes = (coin() ? 11 + rng() % 200 : max_mb) * kMiB;
  const uint64_t large_mb = o.large_segment_size_bytes / kMiB;
  const auto at_least_large = [&] { return std::min(large_mb + rng() % 5000, max_mb) * kMiB; };
  o.max_non_split_rounding_bytes = coin() ? o.large_segment_size_bytes : at_least_large();
  if (coin()) o.max_split_size_bytes = at_least_large();
  if (coin()) {
    for (uint32_t& division : o.roundup_power2_divisions) division = RandomDivision(rng);
  }
  if (coin()) o.garbage_collection_threshold = RandomUnitFraction(rng);
  if (coin()) o.per_process_memory_fraction = coin() ? 0.0 : RandomUnitFraction(rng);
  o.expandable_segments = coin();
  o.release_lock_on_cudamalloc = coin();
  if (coin()) o.backend = "cudaMallocAsync";
  o.throw_on_cudamalloc_oom = coin();
  o.graph_capture_record_stream_reuse = coin();
  if (coin()) o.expandable_segments_reserve = RandomReserve(rng);
  for (uint64_t n = rng() % 4; n > 0; --n) {
    o.expandable_segments_reserve_by_class[absl::StrCat("class", rng() % 10)] = RandomReserve(rng);
  }
  o.pinned_use_cuda_host_register = coin();
  o.pinned_num_register_threads = uint32_t{1} << (rng() % 8);
  o.pinned_use_background_threads = coin();
  if (coin()) o.pinned_reserve_segment_size_mb = 1 + rng() % 100000;
  o.pinned_free_catch_all = coin();
  return o;
}

TEST(AllocatorOptionsTest, RandomOptionSetsRoundTrip) {
  std::mt19937_64 rng(7);
  for (int iteration = 0; iteration < 5000; ++iteration) {
    ExpectRoundTrip(RandomOptions(rng));
    if (HasFailure()) break;
  }
}

// A cheap, deterministic stand-in for tests/fuzz/allocator_options_fuzz.cc: mutated strings
// never crash, and whatever parses also round-trips.
TEST(AllocatorOptionsTest, MutatedStringsParseOrFailCleanlyAndRoundTrip) {
  const std::vector<std::string> seeds = {
      "max_split_size_mb:40,max_non_split_rounding_mb:30,garbage_collection_threshold:0.5",
      "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1],expandable_segments:True",
      "large_segment_size_mb:15,expandable_segments_reserve_by_class:[a:0.5,b:4G]",
      "backend:cudaMallocAsync,pinned_num_register_threads:8,per_process_memory_fraction:0.5"};
  const std::string alphabet = ",:[]> \t0123456789.eGTrueFalse+-_abx";
  std::mt19937_64 rng(11);
  for (int iteration = 0; iteration < 20000; ++iteration) {
    std::string conf = seeds[rng() % seeds.size()];
    for (uint64_t edits = 1 + rng() % 4; edits > 0; --edits) {
      const size_t at = rng() % (conf.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          conf.insert(at, 1, c);
          break;
        case 1:
          if (at < conf.size()) conf.erase(at, 1);
          break;
        default:
          if (at < conf.size()) conf[at] = c;
          break;
      }
    }
    absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(conf);
    if (!options.ok()) {
      EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument) << conf;
      EXPECT_FALSE(options.status().message().empty()) << conf;
      continue;
    }
    EXPECT_EQ(options->source, conf);
    ExpectRoundTrip(*options);
    if (HasFailure()) break;
  }
}

}  // namespace
}  // namespace fragscope
