// Tests of ParseAllocatorOptions: the validation rules of the newest AllocatorConfig.cpp /
// CUDAAllocatorConfig.cpp key by key (ranges, cross-key constraints, booleans, aliases, backends,
// pinned-memory keys, expandable-segments reserves) and fragscope's `placement` extension.
#include "allocator/allocator_options.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_options_test_util.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;

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
      "pinned_reserve_segment_size_mb:64,"
      "pinned_use_background_threads:True,pinned_use_cuda_host_register:True");
  EXPECT_EQ(options.pinned_reserve_segment_size_mb, 64u);
  EXPECT_TRUE(options.pinned_use_background_threads);
  EXPECT_TRUE(options.pinned_use_cuda_host_register);
  EXPECT_EQ(ParseError("pinned_reserve_segment_size_mb:0"),
            "pinned_reserve_segment_size_mb: 0 is invalid, must be > 0");
}

TEST(AllocatorOptionsTest, GraphCaptureReuseIsABoolean) {
  EXPECT_TRUE(ParseOk("graph_capture_record_stream_reuse:True").graph_capture_record_stream_reuse);
  EXPECT_THAT(ParseError("graph_capture_record_stream_reuse:1"),
              HasSubstr("graph_capture_record_stream_reuse: 1"));
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

}  // namespace
}  // namespace fragscope::testing
