// Tests of FormatAllocatorOptions and the Parse(Format(o)) == o round trip: key order, shortest
// division lists, every key, random option sets, and mutated strings (a cheap stand-in for the
// fuzzer).
#include "allocator/allocator_options.h"

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_options_test_util.h"

namespace fragscope {
namespace {

using ::fragscope::testing::ExpectRoundTrip;
using ::fragscope::testing::ParseOk;

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
      "graph_capture_record_stream_reuse:True,"
      "pinned_use_cuda_host_register:True,pinned_num_register_threads:16,"
      "pinned_reserve_segment_size_mb:128,placement:best_fit");
  EXPECT_EQ(FormatAllocatorOptions(options),
            "large_segment_size_mb:32,max_split_size_mb:64,max_non_split_rounding_mb:48,"
            "garbage_collection_threshold:0.6,roundup_power2_divisions:[2:1,16:4,>:8],"
            "expandable_segments:True,pinned_use_background_threads:True,"
            "backend:cudaMallocAsync,release_lock_on_cudamalloc:True,"
            "per_process_memory_fraction:0.75,graph_capture_record_stream_reuse:True,"
            "pinned_use_cuda_host_register:True,pinned_num_register_threads:16,"
            "pinned_reserve_segment_size_mb:128");
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
  o.graph_capture_record_stream_reuse = coin();
  o.pinned_use_cuda_host_register = coin();
  o.pinned_num_register_threads = uint32_t{1} << (rng() % 8);
  o.pinned_use_background_threads = coin();
  if (coin()) o.pinned_reserve_segment_size_mb = 1 + rng() % 100000;
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
      "large_segment_size_mb:15,pinned_reserve_segment_size_mb:64,release_lock_on_cudamalloc:True",
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
