// The memory fraction's bytes (Note [The memory fraction's bytes] in allocator/memory_fraction.h):
// PyTorch 2.11 truncates fraction * total, and the fraction a log records gives back the cap.
#include "allocator/memory_fraction.h"

#include <cstdint>
#include <random>

#include "gtest/gtest.h"

namespace fragscope {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kH100Bytes = 85017493504;   // totalGlobalMem of the H100s of tests/data/gpu
constexpr uint64_t kH200Bytes = 150109880320;  // of the H200 of tests/data/oracle

TEST(MemoryFractionTest, PyTorchTruncatesTheProduct) {
  // The H100 job of tests/data/gpu asked for 4 GiB / total: PyTorch capped at 4 GiB - 1.
  EXPECT_EQ(AllowedBytesForFraction(0.05051862997816944, kH100Bytes), 4 * kGiB - 1);
  EXPECT_EQ(AllowedBytesForFraction(2.0 / 3.0, kGiB), 715827882u);  // 715827882.67
  EXPECT_EQ(AllowedBytesForFraction(0.5, kGiB), kGiB / 2);
  EXPECT_EQ(AllowedBytesForFraction(0.0, kGiB), 0u);
  EXPECT_EQ(AllowedBytesForFraction(1.0, kGiB), kGiB);
}

TEST(MemoryFractionTest, AllowedOverTotalDoesNotAlwaysGiveTheCapBack) {
  // Why logs do not record getMemoryFraction() as it is: 62 MiB of 78 MiB comes back 1 byte short.
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  const double reported = static_cast<double>(62 * kMiB) / static_cast<double>(78 * kMiB);
  EXPECT_EQ(AllowedBytesForFraction(reported, 78 * kMiB), 62 * kMiB - 1);
  EXPECT_EQ(AllowedBytesOfReportedFraction(reported, 78 * kMiB), 62 * kMiB);
  const double logged = FractionForAllowedBytes(62 * kMiB, 78 * kMiB);
  EXPECT_LT(logged, 1.0);
  EXPECT_EQ(AllowedBytesForFraction(logged, 78 * kMiB), 62 * kMiB);
}

TEST(MemoryFractionTest, RecordedFractionsGiveBackEveryCap) {
  std::mt19937_64 rng(7);
  for (const uint64_t total : {kGiB, 16 * kGiB, kH100Bytes, kH200Bytes, uint64_t{1} << 48}) {
    for (int i = 0; i < 20000; ++i) {
      uint64_t allowed = rng() % total;
      if (i % 4 == 0) allowed &= ~uint64_t{(1 << 21) - 1};  // round caps (2 MiB multiples) too
      const double logged = FractionForAllowedBytes(allowed, total);
      ASSERT_LT(logged, 1.0) << allowed << " of " << total;
      ASSERT_EQ(AllowedBytesForFraction(logged, total), allowed) << allowed << " of " << total;
      // What PyTorch reports for that cap maps back to it as well.
      const double reported = static_cast<double>(allowed) / static_cast<double>(total);
      ASSERT_EQ(AllowedBytesOfReportedFraction(reported, total), allowed);
    }
  }
}

TEST(MemoryFractionTest, PlainFractionsStayPlainAndFullCapsStayBelowOne) {
  EXPECT_EQ(FractionForAllowedBytes(kGiB / 2, kGiB), 0.5);  // logs read per_process_..:0.5
  EXPECT_EQ(FractionForAllowedBytes(0, kGiB), 0.0);
  EXPECT_LT(FractionForAllowedBytes(kGiB, kGiB), 1.0);  // 1.0 would mean no cap at all
  EXPECT_LT(FractionForAllowedBytes(2 * kGiB, kGiB), 1.0);
}

}  // namespace
}  // namespace fragscope
