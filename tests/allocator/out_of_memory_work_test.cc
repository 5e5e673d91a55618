// The work of an out-of-memory failure, counted (CachingAllocator::PoolBlocksWalked), not timed:
// its retry ladder's release and its report read running figures and the releasable blocks
// instead of walking every free block and segment, so that many failures over many segments
// (a replayed trace with many OOM records) cost linear time. The figures stay exact.
#include <cstdint>
#include <random>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/oom_report.h"
#include "allocator/simulated_backend.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {

constexpr uint64_t kRequest = 10 * kMiB + kMiB / 2;  // a 12 MiB segment, 1.5 MiB split off
constexpr uint64_t kSegment = 12 * kMiB;
constexpr uint64_t kRemainder = kSegment - kRequest;

// `segments` segments that each hold a live block and a free split remainder fill the device.
void FillWithSplitSegments(CachingAllocator& allocator, uint64_t segments) {
  for (uint64_t i = 0; i < segments; ++i) ASSERT_OK(allocator.Allocate(kRequest, 0).status());
}

TEST(OutOfMemoryWorkTest, ManyFailuresOverManySplitSegmentsWalkLinearly) {
  constexpr uint64_t kSegments = 5000, kFailures = 5000;
  SimulatedBackend backend(kSegments * kSegment);
  CachingAllocator allocator(backend, AllocatorOptions{});
  FillWithSplitSegments(allocator, kSegments);
  const uint64_t before = allocator.PoolBlocksWalked();
  for (uint64_t i = 0; i < kFailures; ++i) {
    absl::StatusOr<DevicePtr> r = allocator.Allocate(kRequest, 0);
    ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
    const std::optional<OomReport> report = GetOomReport(r.status());
    ASSERT_TRUE(report.has_value());
    ASSERT_EQ(report->free_cached_bytes, kSegments * kRemainder);
    ASSERT_EQ(report->free_cached_fragments, kSegments);
    ASSERT_EQ(report->largest_free_cached_block, kRemainder);
    ASSERT_EQ(report->reserved_bytes, kSegments * kSegment);
    ASSERT_EQ(report->pending_free_bytes, 0u);
    ASSERT_EQ(report->oversize_rejected_bytes, 0u);
  }
  // The first ladder walks the pool once and starts its releasable index (one more walk); then
  // each failure visits no free block. A walk per failure would be 25 million.
  EXPECT_LE(allocator.PoolBlocksWalked() - before, 3 * kSegments);
  EXPECT_OK(allocator.CheckInvariants());
}

// Between the failures a whole segment is freed into the cache: each ladder releases it,
// visiting it alone, and the report counts the device's memory after the release.
TEST(OutOfMemoryWorkTest, EachLadderVisitsOnlyTheSegmentsItReleases) {
  constexpr uint64_t kSegments = 3000, kRounds = 3000;
  SimulatedBackend backend((kSegments + 1) * kSegment);
  CachingAllocator allocator(backend, AllocatorOptions{});
  FillWithSplitSegments(allocator, kSegments);
  const uint64_t before = allocator.PoolBlocksWalked();
  for (uint64_t i = 0; i < kRounds; ++i) {
    absl::StatusOr<DevicePtr> whole = allocator.Allocate(kSegment, 0);  // a whole segment
    ASSERT_OK(whole.status());
    ASSERT_OK(allocator.Free(*whole));
    absl::StatusOr<DevicePtr> r = allocator.Allocate(2 * kSegment, 0);
    const std::optional<OomReport> report = GetOomReport(r.status());
    ASSERT_TRUE(report.has_value()) << r.status();
    ASSERT_EQ(report->reserved_bytes, kSegments * kSegment);  // the whole one was released
    ASSERT_EQ(report->device_free_bytes, kSegment);
    ASSERT_EQ(report->free_cached_fragments, kSegments);
  }
  EXPECT_EQ(allocator.GetStats().num_ooms, static_cast<int64_t>(kRounds));
  EXPECT_LE(allocator.PoolBlocksWalked() - before, 3 * kSegments + 2 * kRounds);
  EXPECT_OK(allocator.CheckInvariants());
}

// Random work on a device full of split segments, so that the pools' releasable index starts
// early: allocations of both pools on two streams, frees (some waiting for another stream's
// events), empty_cache and failures. The invariant checker compares the index with a walk of each
// pool, the running figures with their sums, after every 16 operations.
TEST(OutOfMemoryWorkTest, TheRunningFiguresStayExactUnderRandomWork) {
  SimulatedBackend backend(3000 * kSegment);
  CachingAllocator allocator(backend, AllocatorOptions{});
  FillWithSplitSegments(allocator, 2000);
  ASSERT_FALSE(allocator.Allocate(2000 * kSegment, 0).ok());  // walks, and starts the index
  backend.SetStreamBusy(9, true);
  std::mt19937_64 rng(3);
  std::vector<DevicePtr> live;
  for (int step = 0; step < 6000; ++step) {
    const uint64_t choice = rng() % 100;
    if (choice < 50 || live.empty()) {
      const uint64_t size = rng() % 2 == 0 ? 512 * (1 + rng() % 2048) : kMiB * (1 + rng() % 30);
      absl::StatusOr<DevicePtr> p = allocator.Allocate(size, rng() % 4 == 0 ? 7 : 0);
      if (p.ok()) live.push_back(*p);
    } else if (choice < 90) {
      const size_t i = rng() % live.size();
      if (rng() % 8 == 0) ASSERT_OK(allocator.RecordStream(live[i], 9));
      ASSERT_OK(allocator.Free(live[i]));
      live[i] = live.back();
      live.pop_back();
    } else if (choice < 95) {
      backend.CompleteStream(9);
      allocator.EmptyCache();
      backend.SetStreamBusy(9, true);
    } else {
      ASSERT_FALSE(allocator.Allocate(4000 * kSegment, 0).ok());
    }
    if (step % 16 != 0) continue;
    const absl::Status status = allocator.CheckInvariants();
    ASSERT_TRUE(status.ok()) << "step " << step << ": " << status;
  }
}

}  // namespace
}  // namespace fragscope
