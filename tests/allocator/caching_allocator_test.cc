// Basic decisions of the caching allocator: the worked examples of docs/pytorch_allocator_rules.md
// (§1), best fit, splitting, merging, statistics, invalid frees. Behaviours ported from PyTorch's
// test_cuda.py carry its test name in a comment.
#include "allocator/caching_allocator.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/memory_summary.h"
#include "tests/allocator/allocator_fixture.h"

namespace fragscope {
namespace {

using CachingAllocatorTest = testing::AllocatorFixture;

TEST_F(CachingAllocatorTest, OneByteGetsA512ByteBlockInA2MiBSegment) {
  const DevicePtr p = Alloc(1);
  const DeviceStats s = Stats();
  EXPECT_EQ(Current(s.allocated_bytes), 512);
  EXPECT_EQ(Current(s.requested_bytes), 1);
  EXPECT_EQ(Current(s.reserved_bytes), static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(s.reserved_bytes[1].current, static_cast<int64_t>(2 * kMiB));  // small pool
  EXPECT_EQ(Current(s.inactive_split), 1);
  EXPECT_EQ(Current(s.inactive_split_bytes), static_cast<int64_t>(2 * kMiB - 512));
  Free(p);
  EXPECT_EQ(Current(Stats().inactive_split), 0);
}

TEST_F(CachingAllocatorTest, TwoOneMiBRequestsShareOneSmallSegment) {
  const DevicePtr a = Alloc(kMiB);
  const DevicePtr b = Alloc(kMiB);
  EXPECT_EQ(b, a + kMiB);
  EXPECT_EQ(Current(Stats().segment), 1);
  const DevicePtr c = Alloc(kMiB);  // test_mempool_with_allocator: the third opens another
  EXPECT_EQ(Current(Stats().segment), 2);
  Free(a);
  Free(b);
  Free(c);
}

TEST_F(CachingAllocatorTest, OneMiBPlusOneByteSplitsA20MiBLargeSegment) {
  const DevicePtr p = Alloc(kMiB + 1);
  const DeviceStats s = Stats();
  EXPECT_EQ(Current(s.allocated_bytes), 1049088);
  EXPECT_EQ(s.reserved_bytes[2].current, static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(Current(s.inactive_split_bytes), static_cast<int64_t>(20 * kMiB - 1049088));
  Free(p);
}

TEST_F(CachingAllocatorTest, TwelveMiBGetsAnExactSegment) {
  Alloc(12 * kMiB);
  const DeviceStats s = Stats();
  EXPECT_EQ(Current(s.reserved_bytes), static_cast<int64_t>(12 * kMiB));
  EXPECT_EQ(Current(s.inactive_split), 0);
}

TEST_F(CachingAllocatorTest, ElevenMiBPlusOneGetsAnUnsplitTwelveMiBBlock) {
  const DevicePtr p = Alloc(11 * kMiB + 1);
  DeviceStats s = Stats();
  EXPECT_EQ(Current(s.allocated_bytes), static_cast<int64_t>(12 * kMiB));
  EXPECT_EQ(Current(s.requested_bytes), static_cast<int64_t>(11 * kMiB + 1));
  EXPECT_EQ(Current(s.inactive_split), 0);
  Free(p);
  s = Stats();
  EXPECT_EQ(s.allocated_bytes[0].freed, static_cast<int64_t>(12 * kMiB));
}

// test_memory_allocation / test_memory_stats
TEST_F(CachingAllocatorTest, MemoryStatsTrackOneKiBTensor) {
  const DevicePtr p = Alloc(1024);
  DeviceStats s = Stats();
  EXPECT_EQ(s.active_bytes[0].current, 1024);
  EXPECT_EQ(s.active_bytes[0].freed, 0);
  Free(p);
  allocator_->EmptyCache();
  s = Stats();
  EXPECT_EQ(s.active_bytes[0].current, 0);
  EXPECT_EQ(s.active_bytes[0].freed, 1024);
  EXPECT_EQ(Current(s.reserved_bytes), 0);
  EXPECT_EQ(s.num_device_alloc, 1);
  EXPECT_EQ(s.num_device_free, 1);
}

// test_cachingAllocator_raw_alloc
TEST_F(CachingAllocatorTest, RawAllocRaisesRequestedBytesByExactlyOneMiB) {
  const int64_t before = Current(Stats().requested_bytes);
  const DevicePtr p = Alloc(kMiB);
  EXPECT_EQ(Current(Stats().requested_bytes) - before, static_cast<int64_t>(kMiB));
  Free(p);
}

// test_allocator_settings
TEST_F(CachingAllocatorTest, RoundupPower2DivisionsRoundsEightyFourMiBToNinetySix) {
  Init("roundup_power2_divisions:4");
  Alloc(84 * kMiB);
  const DeviceStats s = Stats();
  EXPECT_EQ(s.active_bytes[0].allocated, static_cast<int64_t>(96 * kMiB));
  EXPECT_EQ(s.requested_bytes[0].allocated, static_cast<int64_t>(84 * kMiB));
}

TEST_F(CachingAllocatorTest, SettingsStringResetsDivisions) {
  Init("roundup_power2_divisions:4");
  ASSERT_OK_AND_ASSIGN(AllocatorOptions next, ParseAllocatorOptions("max_split_size_mb:100"));
  allocator_->SetOptions(next);
  Alloc(84 * kMiB);
  EXPECT_EQ(Stats().active_bytes[0].allocated, static_cast<int64_t>(84 * kMiB));
}

TEST_F(CachingAllocatorTest, FreedBlockIsReusedAtTheSameAddress) {
  const DevicePtr a = Alloc(3 * kMiB);
  Free(a);
  EXPECT_EQ(Alloc(3 * kMiB), a);
  EXPECT_EQ(Stats().num_device_alloc, 1);
}

TEST_F(CachingAllocatorTest, BestFitPicksTheSmallestSufficientBlock) {
  // Three exact segments, all freed: free blocks of 32, 16 and 24 MiB.
  const DevicePtr a = Alloc(32 * kMiB);
  const DevicePtr b = Alloc(16 * kMiB);
  const DevicePtr c = Alloc(24 * kMiB);
  Free(a);
  Free(b);
  Free(c);
  // A 15 MiB request fits the 16 MiB block best.
  EXPECT_EQ(Alloc(15 * kMiB), b);
}

TEST_F(CachingAllocatorTest, BestFitPrefersTheLowerAddressAmongEqualSizes) {
  // Scripted device addresses: the second segment lies below the first.
  backend_->ScriptAddresses(
      {SimulatedBackend::kBaseAddress + kGiB, SimulatedBackend::kBaseAddress});
  const DevicePtr first = Alloc(12 * kMiB);
  const DevicePtr second = Alloc(12 * kMiB);
  EXPECT_LT(second, first);
  Free(first);
  Free(second);
  EXPECT_EQ(Alloc(12 * kMiB), second);
}

TEST_F(CachingAllocatorTest, FreeMergesWithBothNeighbours) {
  const DevicePtr a = Alloc(4 * kMiB);  // 20 MiB segment: [a 4][b 4][c 4][free 8]
  const DevicePtr b = Alloc(4 * kMiB);
  const DevicePtr c = Alloc(4 * kMiB);
  EXPECT_EQ(b, a + 4 * kMiB);
  EXPECT_EQ(c, b + 4 * kMiB);
  Free(a);
  Free(c);  // merges with the 8 MiB tail
  EXPECT_EQ(Current(Stats().inactive_split), 2);
  Free(b);  // merges with both: the segment is whole again
  const DeviceStats s = Stats();
  EXPECT_EQ(Current(s.inactive_split), 0);
  EXPECT_EQ(Current(s.inactive_split_bytes), 0);
  const AllocatorSnapshot snap = allocator_->Snapshot();
  ASSERT_EQ(snap.segments.size(), 1u);
  ASSERT_EQ(snap.segments[0].blocks.size(), 1u);
  EXPECT_EQ(snap.segments[0].blocks[0].size, 20 * kMiB);
}

TEST_F(CachingAllocatorTest, EmptyCacheKeepsSplitSegments) {
  const DevicePtr small = Alloc(4 * kMiB);
  const DevicePtr big = Alloc(40 * kMiB);
  Free(big);
  allocator_->EmptyCache();
  const DeviceStats s = Stats();
  EXPECT_EQ(Current(s.reserved_bytes), static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(Current(s.segment), 1);
  EXPECT_EQ(s.num_sync_all_streams, 1);
  Free(small);
  allocator_->EmptyCache();
  EXPECT_EQ(Current(Stats().reserved_bytes), 0);
}

TEST_F(CachingAllocatorTest, ZeroByteAllocationReturnsNullAndFreeOfNullIsANoOp) {
  ASSERT_OK_AND_ASSIGN(DevicePtr p, allocator_->Allocate(0, 0));
  EXPECT_EQ(p, 0u);
  EXPECT_OK(allocator_->Free(0));
  EXPECT_EQ(Stats().num_device_alloc, 0);
}

TEST_F(CachingAllocatorTest, FreeOfUnknownPointerIsAnError) {
  absl::Status status = allocator_->Free(0x1234);
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
  EXPECT_NE(status.message().find("invalid device pointer: 0x1234"), std::string::npos);
}

TEST_F(CachingAllocatorTest, FreeOfInteriorPointerIsAnErrorThatNamesTheBlock) {
  const DevicePtr p = Alloc(4 * kMiB);
  absl::Status status = allocator_->Free(p + 512);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("512 bytes into the allocated block"), std::string::npos)
      << status;
  Free(p);  // the block is intact
}

TEST_F(CachingAllocatorTest, DoubleFreeIsAnErrorAndChangesNothing) {
  const DevicePtr p = Alloc(4 * kMiB);
  const DevicePtr keep = Alloc(4 * kMiB);  // keeps the segment split, so p stays a free block
  Free(p);
  const DeviceStats before = Stats();
  absl::Status status = allocator_->Free(p);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("double free"), std::string::npos) << status;
  EXPECT_EQ(Stats(), before);
  Check();
  Free(keep);
}

TEST_F(CachingAllocatorTest, StatsPeaksAndResets) {
  const DevicePtr a = Alloc(4 * kMiB);
  const DevicePtr b = Alloc(4 * kMiB);
  Free(a);
  DeviceStats s = Stats();
  EXPECT_EQ(s.allocated_bytes[0].peak, static_cast<int64_t>(8 * kMiB));
  allocator_->ResetPeakStats();
  EXPECT_EQ(Stats().allocated_bytes[0].peak, static_cast<int64_t>(4 * kMiB));
  allocator_->ResetAccumulatedStats();
  s = Stats();
  EXPECT_EQ(s.allocated_bytes[0].allocated, 0);
  EXPECT_EQ(s.num_device_alloc, 0);
  EXPECT_EQ(s.allocated_bytes[0].current, static_cast<int64_t>(4 * kMiB));
  Free(b);
}

// The "all" entries are the pools' sums, and the "all" peak is the largest sum, which neither
// pool's peak shows: small 1 MiB + large 4 MiB live together, then each alone at its own peak.
TEST_F(CachingAllocatorTest, AllPoolsPeakIsTheLargestSumOfThePools) {
  const DevicePtr small = Alloc(kMiB);
  const DevicePtr large = Alloc(4 * kMiB);
  Free(small);
  Free(large);
  const DevicePtr large2 = Alloc(6 * kMiB);
  DeviceStats s = Stats();
  for (const StatArray* a : {&s.allocated_bytes, &s.active_bytes, &s.allocation, &s.segment,
                             &s.reserved_bytes, &s.requested_bytes, &s.inactive_split_bytes}) {
    EXPECT_EQ((*a)[0].current, (*a)[1].current + (*a)[2].current);
    EXPECT_EQ((*a)[0].allocated, (*a)[1].allocated + (*a)[2].allocated);
    EXPECT_EQ((*a)[0].freed, (*a)[1].freed + (*a)[2].freed);
  }
  EXPECT_EQ(s.allocated_bytes[1].peak, static_cast<int64_t>(kMiB));
  EXPECT_EQ(s.allocated_bytes[2].peak, static_cast<int64_t>(6 * kMiB));
  EXPECT_EQ(s.allocated_bytes[0].peak, static_cast<int64_t>(6 * kMiB));
  EXPECT_EQ(s.allocation[0].peak, 2);  // small and the first large together
  EXPECT_EQ(s.allocation[1].peak, 1);
  EXPECT_EQ(s.allocation[2].peak, 1);
  allocator_->ResetPeakStats();
  s = Stats();
  EXPECT_EQ(s.allocation[0].peak, 1);
  EXPECT_EQ(s.allocated_bytes[0].peak, static_cast<int64_t>(6 * kMiB));
  Free(large2);
  const DevicePtr small2 = Alloc(512);
  s = Stats();
  EXPECT_EQ(s.allocation[0].peak, 1);
  EXPECT_EQ(s.allocated_bytes[0].peak, static_cast<int64_t>(6 * kMiB));
  EXPECT_EQ(s.allocated_bytes[0].current, 512);
  Free(small2);
}

TEST_F(CachingAllocatorTest, FlattenedStatsUsePytorchKeys) {
  Alloc(1024);
  const auto flat = FlattenStats(Stats());
  auto find = [&](const std::string& key) -> int64_t {
    for (const auto& [k, v] : flat) {
      if (k == key) return v;
    }
    ADD_FAILURE() << "missing key " << key;
    return -1;
  };
  EXPECT_EQ(find("active_bytes.all.current"), 1024);
  EXPECT_EQ(find("allocation.small_pool.current"), 1);
  EXPECT_EQ(find("reserved_bytes.all.current"), static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(find("max_split_size"), -1);
  EXPECT_EQ(find("num_device_alloc"), 1);
  EXPECT_EQ(flat.size(), 9u * 3 * 4 + 2 * 4 + 6);
}

TEST_F(CachingAllocatorTest, SnapshotReportsSegmentsAndBlockStates) {
  const DevicePtr a = Alloc(4 * kMiB);
  Alloc(1000);
  const AllocatorSnapshot snap = allocator_->Snapshot();
  ASSERT_EQ(snap.segments.size(), 2u);
  // Addresses ascend; the large segment was created first.
  const SegmentInfo& large = snap.segments[0];
  EXPECT_EQ(large.segment_type, PoolKind::kLarge);
  EXPECT_EQ(large.address, a);
  EXPECT_EQ(large.total_size, 20 * kMiB);
  EXPECT_EQ(large.allocated_size, 4 * kMiB);
  EXPECT_EQ(large.requested_size, 4 * kMiB);
  ASSERT_EQ(large.blocks.size(), 2u);
  EXPECT_EQ(BlockStateName(large.blocks[0].state), "active_allocated");
  EXPECT_EQ(BlockStateName(large.blocks[1].state), "inactive");
  EXPECT_EQ(snap.segments[1].blocks[0].requested_size, 1000u);
}

TEST_F(CachingAllocatorTest, MemorySummaryHasPytorchRows) {
  Alloc(1024);
  const std::string summary = MemorySummary(Stats(), 0);
  for (const char* row :
       {"PyTorch CUDA memory summary, device ID 0", "CUDA OOMs: 0", "cudaMalloc retries: 0",
        "| Allocated memory      |   1024 B   |", "|       from small pool |   1024 B   |",
        "| GPU reserved memory   |", "| Non-releasable allocs |", "| Oversize GPU segments |"}) {
    EXPECT_NE(summary.find(row), std::string::npos) << row << "\n" << summary;
  }
  // Every line is 77 characters: 75 plus the borders.
  size_t start = 0;
  while (start < summary.size()) {
    const size_t end = summary.find('\n', start);
    EXPECT_EQ(end - start, 77u) << summary.substr(start, end - start);
    start = end + 1;
  }
}

// One small segment carved into 64 blocks, more than its arena group holds (8): the others live
// in overflow groups, found through the active-block index's map. Frees in a scrambled order
// merge them back (the home group's blocks merge away into survivors elsewhere, and the home
// group empties and is recycled) and every free finds its block; a second round reuses the
// segment, and second frees of blocks in and out of the home group are errors naming the address.
TEST_F(CachingAllocatorTest, BlocksBeyondTheirSegmentsArenaGroupAreFoundAndMerged) {
  for (int round = 0; round < 2; ++round) {
    std::vector<DevicePtr> ptrs;
    for (int i = 0; i < 64; ++i) ptrs.push_back(Alloc(16 * 1024));
    EXPECT_EQ(Stats().segment[0].current, 1);
    for (size_t i = 0; i < ptrs.size(); ++i) {
      const size_t j = (i * 37) % ptrs.size();  // 37 is prime to 64: every block once
      Free(ptrs[j]);
      absl::Status twice = allocator_->Free(ptrs[j]);
      EXPECT_TRUE(absl::IsInvalidArgument(twice)) << twice;
      // "double free" or, once merged, "not the start of an allocation": named either way.
      EXPECT_NE(twice.message().find(absl::StrFormat("0x%x", ptrs[j])), std::string::npos) << twice;
    }
    EXPECT_EQ(Stats().allocation[0].current, 0);
    EXPECT_EQ(Stats().inactive_split[0].current, 0);  // merged back into one block
  }
}

}  // namespace
}  // namespace fragscope
