// expandable_segments:True, by worked examples: page mapping and growth, the best-fit preference
// for blocks away from the growing edge, unmapping on empty_cache, segment release, OOM, streams,
// the max_split_size interaction PyTorch has (pytorch#123548), and switching the option off.
// (tests/allocator/pytorch_oracle_test.cc replays a 3000-step trace recorded from PyTorch 2.11.)
#include "allocator/caching_allocator.h"
#include "tests/allocator/allocator_fixture.h"

namespace fragscope {
namespace {

class ExpandableSegmentsTest : public testing::AllocatorFixture {
 protected:
  void SetUp() override { Init("expandable_segments:True"); }

  // The one expandable segment's address ranges as the snapshot reports them.
  std::vector<std::pair<DevicePtr, uint64_t>> MappedRanges() {
    std::vector<std::pair<DevicePtr, uint64_t>> ranges;
    for (const SegmentInfo& s : allocator_->Snapshot().segments) {
      EXPECT_TRUE(s.is_expandable);
      ranges.emplace_back(s.address, s.total_size);
    }
    return ranges;
  }
};

TEST_F(ExpandableSegmentsTest, MapsWholePagesAtTheBaseAndCountsNoSegment) {
  const DevicePtr small = Alloc(5187);
  EXPECT_EQ(Current(Stats().reserved_bytes), 2 * kMiB);  // one 2 MiB small-pool page
  // 87,998,371 B rounds to 87,998,464 and needs five 20 MiB pages (oracle event 2).
  const DevicePtr large = Alloc(87998371);
  const DeviceStats s = Stats();
  EXPECT_EQ(s.reserved_bytes[2].current, 100 * kMiB);
  EXPECT_EQ(s.reserved_bytes[1].current, 2 * kMiB);
  EXPECT_EQ(Current(s.segment), 0);
  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(Current(s.inactive_split), 0);
  EXPECT_EQ(backend_->reservation_count(), 2u);  // one per pool
  EXPECT_EQ(backend_->mapped_bytes(), 102 * kMiB);
  // The reservations are 9/8 of the device, in pages of the pool.
  const uint64_t total = 16 * kGiB;
  EXPECT_EQ(MappedRanges(),
            (std::vector<std::pair<DevicePtr, uint64_t>>{{small, 2 * kMiB}, {large, 100 * kMiB}}));
  EXPECT_EQ(large - small, (total + total / 8 + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB));
}

TEST_F(ExpandableSegmentsTest, GrowsByMappingOnlyWhatTheFreeEdgeLacks) {
  const DevicePtr a = Alloc(10 * kMiB);  // maps [0, 20): a, free [10, 20)
  const DevicePtr b = Alloc(15 * kMiB);  // extends the free 10 MiB: maps [20, 40)
  EXPECT_EQ(b, a + 10 * kMiB);
  EXPECT_EQ(Current(Stats().reserved_bytes), 40 * kMiB);
  EXPECT_EQ(Stats().num_device_alloc, 2);
  EXPECT_EQ(MappedRanges().size(), 1u);  // one contiguous mapped range
}

TEST_F(ExpandableSegmentsTest, EmptyCacheUnmapsWholeFreePagesAndReleasesAnEmptySegment) {
  const DevicePtr a = Alloc(10 * kMiB);
  const DevicePtr b = Alloc(15 * kMiB);
  Free(b);  // free [10, 40)
  allocator_->EmptyCache();
  Check();
  // Only the page [20, 40) lies wholly inside the free block; [10, 20) shares a page with a.
  EXPECT_EQ(Current(Stats().reserved_bytes), 20 * kMiB);
  EXPECT_EQ(Stats().num_device_free, 1);
  EXPECT_EQ(MappedRanges(), (std::vector<std::pair<DevicePtr, uint64_t>>{{a, 20 * kMiB}}));
  // The unmapped page is mapped again by the next request that needs it, at the same address.
  const DevicePtr again = Alloc(15 * kMiB);
  EXPECT_EQ(again, b);
  Free(again);
  Free(a);
  allocator_->EmptyCache();
  Check();
  EXPECT_EQ(Current(Stats().reserved_bytes), 0);
  EXPECT_EQ(backend_->reservation_count(), 0u);
  EXPECT_EQ(backend_->mapped_bytes(), 0u);
  EXPECT_TRUE(allocator_->Snapshot().segments.empty());
}

TEST_F(ExpandableSegmentsTest, UnmappedHolesAreRefilledLowestAddressFirst) {
  const DevicePtr a = Alloc(20 * kMiB);
  const DevicePtr hole = Alloc(40 * kMiB);
  const DevicePtr c = Alloc(20 * kMiB);
  Free(hole);
  allocator_->EmptyCache();  // unmaps [20, 60) between a and c
  EXPECT_EQ(MappedRanges().size(), 2u);
  EXPECT_EQ(Current(Stats().reserved_bytes), 40 * kMiB);
  // 30 MiB fits the 40 MiB hole of unmapped space below c: mapped there, not above c.
  EXPECT_EQ(Alloc(30 * kMiB), hole);
  EXPECT_EQ(Current(Stats().reserved_bytes), 80 * kMiB);  // two 20 MiB pages
  (void)a;
  (void)c;
}

// Best fit counts the unmapped space after a free block as part of it, so it prefers a larger
// block away from the growing edge (oracle events 13-22).
TEST_F(ExpandableSegmentsTest, BestFitPrefersABlockAwayFromTheGrowingEdge) {
  const DevicePtr a = Alloc(1030908);
  Alloc(490385);
  Alloc(987);
  Free(a);  // free: 1,031,168 B at the base, 574,464 B at the top of the page
  EXPECT_EQ(Alloc(29421), a);
}

TEST_F(ExpandableSegmentsTest, OutOfMemoryWhenNoPagesCanBeMapped) {
  Init("expandable_segments:True", 100 * kMiB);
  Alloc(50 * kMiB);  // maps 60 MiB
  Alloc(50 * kMiB);  // extends the free 10 MiB by 40 MiB: the device is full
  EXPECT_EQ(backend_->mapped_bytes(), 100 * kMiB);
  absl::StatusOr<DevicePtr> p = allocator_->Allocate(30 * kMiB, 0);
  EXPECT_TRUE(absl::IsResourceExhausted(p.status())) << p.status();
  Check();
  EXPECT_EQ(backend_->mapped_bytes(), 100 * kMiB);
  EXPECT_EQ(Stats().num_ooms, 1);
  EXPECT_EQ(Stats().num_alloc_retries, 1);
}

TEST_F(ExpandableSegmentsTest, EachStreamHasItsOwnSegment) {
  const DevicePtr on_a = Alloc(1 * kMiB, /*stream=*/0xa);
  const DevicePtr on_b = Alloc(1 * kMiB, /*stream=*/0xb);
  EXPECT_EQ(backend_->reservation_count(), 2u);
  Free(on_a);
  EXPECT_EQ(Alloc(1 * kMiB, 0xb), on_b + 1 * kMiB);  // not the free block of stream a
}

// PyTorch applies the oversize rules to expandable blocks too (pytorch#123548): a free 60 MiB
// block is refused to a 30 MiB request, which maps new pages instead. fragscope reproduces it.
TEST_F(ExpandableSegmentsTest, MaxSplitSizeMakesReservedGrowAsInPytorch) {
  Init("expandable_segments:True,max_split_size_mb:40");
  const DevicePtr big = Alloc(60 * kMiB);  // [0, 60)
  Alloc(2 * kMiB);                         // maps [60, 80): a fence at 60, free [62, 80)
  Free(big);
  EXPECT_EQ(Alloc(30 * kMiB), big + 62 * kMiB);  // maps [80, 100)
  EXPECT_EQ(Current(Stats().reserved_bytes), 100 * kMiB);

  Init("expandable_segments:True");
  const DevicePtr big2 = Alloc(60 * kMiB);
  Alloc(2 * kMiB);
  Free(big2);
  EXPECT_EQ(Alloc(30 * kMiB), big2);  // without max_split_size the free block serves it
  EXPECT_EQ(Current(Stats().reserved_bytes), 80 * kMiB);
}

TEST_F(ExpandableSegmentsTest, TurningTheOptionOffStopsReusingExpandableBlocks) {
  const DevicePtr expandable = Alloc(10 * kMiB);
  Free(expandable);
  allocator_->SetOptions(AllocatorOptions{});
  const DevicePtr regular = Alloc(10 * kMiB);
  EXPECT_NE(regular, expandable);
  EXPECT_EQ(Current(Stats().segment), 1);  // a cudaMalloc segment
  allocator_->EmptyCache();                // still unmaps the expandable pages
  Check();
  EXPECT_EQ(Current(Stats().reserved_bytes), 10 * kMiB);  // regular's 10 MiB segment
  EXPECT_EQ(backend_->reservation_count(), 0u);
  Free(regular);
  allocator_->EmptyCache();
  EXPECT_EQ(Current(Stats().reserved_bytes), 0);
}

// A backend with no virtual memory: expandable segments are refused with a clear error.
class NoVirtualMemoryBackend final : public DeviceBackend {
 public:
  absl::StatusOr<DevicePtr> Malloc(uint64_t bytes) override { return inner_.Malloc(bytes); }
  absl::Status Free(DevicePtr ptr) override { return inner_.Free(ptr); }
  DeviceMemInfo MemInfo() override { return inner_.MemInfo(); }
  absl::StatusOr<EventHandle> RecordEvent(StreamId s) override { return inner_.RecordEvent(s); }
  absl::StatusOr<bool> EventDone(EventHandle e) override { return inner_.EventDone(e); }
  absl::Status SynchronizeEvent(EventHandle e) override { return inner_.SynchronizeEvent(e); }
  void ReleaseEvent(EventHandle e) override { inner_.ReleaseEvent(e); }
  int device() const override { return 0; }
  std::string name() const override { return "a device without VMM"; }

 private:
  SimulatedBackend inner_{16 * kGiB};
};

TEST(ExpandableSegmentsWithoutVirtualMemoryTest, AllocationFailsNamingTheOption) {
  NoVirtualMemoryBackend backend;
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions("expandable_segments:True");
  ASSERT_TRUE(options.ok());
  CachingAllocator allocator(backend, *options);
  absl::StatusOr<DevicePtr> p = allocator.Allocate(1 * kMiB, 0);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(p.status().message(),
            "expandable_segments:True needs virtual memory support, which a device without VMM "
            "lacks");
  EXPECT_TRUE(allocator.CheckInvariants().ok());
}

}  // namespace
}  // namespace fragscope
