// Private pools (CUDA-graph pools and MemPools) by worked examples of PyTorch 2.11's rules
// (allocator/README.md, "Private pools"): routing while a pool is active, reuse only within a
// pool, release and deletion, use_on_oom, no_split, the rules while a capture is underway, and
// what the OOM message, the snapshot and the events say about pools.
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/oom_report.h"
#include "gmock/gmock.h"
#include "tests/allocator/allocator_fixture.h"

namespace fragscope {
namespace {

using ::testing::HasSubstr;

constexpr PoolId kGraph{1, 0};    // a graph pool, as graph_pool_handle() numbers them
constexpr PoolId kMemPool{0, 1};  // a torch.cuda.MemPool
constexpr StreamId kCapture = 7;  // the capturing stream

auto OnStream(StreamId s) {
  return [s](StreamId stream) { return stream == s; };
}

class PrivatePoolTest : public testing::AllocatorFixture {
 protected:
  PoolId PoolOfSegmentAt(DevicePtr ptr) {
    for (const SegmentInfo& s : allocator_->Snapshot().segments) {
      if (ptr >= s.address && ptr < s.address + s.total_size) return s.pool_id;
    }
    ADD_FAILURE() << "no segment holds 0x" << std::hex << ptr;
    return {};
  }
  size_t SegmentCount() { return allocator_->Snapshot().segments.size(); }
};

TEST_F(PrivatePoolTest, RoutesTheFilteredStreamAndReusesBlocksOnlyWithinThePool) {
  ASSERT_OK(allocator_->BeginAllocateToPool(kGraph, OnStream(kCapture)));
  const DevicePtr in_graph = Alloc(4 * kMiB, kCapture);
  const DevicePtr outside = Alloc(4 * kMiB, 0);  // another stream: the default pool
  EXPECT_EQ(PoolOfSegmentAt(in_graph), kGraph);
  EXPECT_EQ(PoolOfSegmentAt(outside), kDefaultPoolId);
  Free(in_graph);
  // Within the pool, the freed block is reused as usual.
  EXPECT_EQ(Alloc(4 * kMiB, kCapture), in_graph);
  Free(in_graph);
  ASSERT_OK(allocator_->EndAllocateToPool(kGraph));
  // After the capture the same request on the same stream goes to the default pool, which does
  // not see the graph pool's free 20 MiB segment: a new segment.
  const size_t before = SegmentCount();
  const DevicePtr after = Alloc(4 * kMiB, kCapture);
  EXPECT_EQ(SegmentCount(), before + 1);
  EXPECT_EQ(PoolOfSegmentAt(after), kDefaultPoolId);
  // Private memory counts in the same statistics as the default pool's (2.11 keeps no per-pool
  // statistics): three 20 MiB segments.
  EXPECT_EQ(Current(Stats().reserved_bytes), 60 * kMiB);
}

TEST_F(PrivatePoolTest, TheLatestBegunPoolWinsWhenFiltersOverlap) {
  ASSERT_OK(allocator_->BeginAllocateToPool(kGraph, [](StreamId) { return true; }));
  ASSERT_OK(allocator_->BeginAllocateToPool(kMemPool, OnStream(kCapture)));
  EXPECT_EQ(PoolOfSegmentAt(Alloc(512, kCapture)), kMemPool);
  EXPECT_EQ(PoolOfSegmentAt(Alloc(512, 0)), kGraph);
  ASSERT_OK(allocator_->EndAllocateToPool(kMemPool));
  EXPECT_EQ(PoolOfSegmentAt(Alloc(512, kCapture)), kGraph);
}

TEST_F(PrivatePoolTest, BeginTwiceAndEndWithoutBeginFailWithPyTorchsMessages) {
  ASSERT_OK(allocator_->BeginAllocateToPool(kGraph, OnStream(kCapture)));
  absl::Status twice = allocator_->BeginAllocateToPool(kGraph, OnStream(kCapture));
  EXPECT_EQ(twice.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(twice.message(), HasSubstr("already recording to mempool_id"));
  // As in PyTorch, the failed begin still took a use of the pool.
  EXPECT_EQ(*allocator_->PoolUseCount(kGraph), 2);
  absl::Status end = allocator_->EndAllocateToPool(kMemPool);
  EXPECT_THAT(end.message(), HasSubstr("not currently recording to mempool_id"));
  EXPECT_EQ(allocator_->ReleasePool(kMemPool).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(allocator_->Allocate(512, 0, kMemPool).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(PrivatePoolTest, APoolInUseKeepsItsSegmentsThroughEmptyCache) {
  ASSERT_OK(allocator_->BeginAllocateToPool(kGraph, OnStream(kCapture)));
  Free(Alloc(30 * kMiB, kCapture));  // a free unsplit 30 MiB segment of the pool
  ASSERT_OK(allocator_->EndAllocateToPool(kGraph));
  allocator_->EmptyCache();
  Check();
  EXPECT_EQ(Current(Stats().reserved_bytes), 30 * kMiB);
  EXPECT_EQ(*allocator_->PoolUseCount(kGraph), 1);
}

TEST_F(PrivatePoolTest, ReleasedPoolIsFreedByEmptyCacheAndDeletedOnceEmpty) {
  ASSERT_OK(allocator_->BeginAllocateToPool(kGraph, OnStream(kCapture)));
  const DevicePtr kept = Alloc(30 * kMiB, kCapture);  // the graph's output, still referenced
  Free(Alloc(40 * kMiB, kCapture));
  ASSERT_OK(allocator_->EndAllocateToPool(kGraph));
  ASSERT_OK(allocator_->ReleasePool(kGraph));  // the graph was destroyed
  EXPECT_EQ(*allocator_->PoolUseCount(kGraph), 0);
  allocator_->EmptyCache();
  Check();
  // The free segment went back; the one with a live block stays, and so does the pool.
  EXPECT_EQ(Current(Stats().reserved_bytes), 30 * kMiB);
  EXPECT_EQ(allocator_->PrivatePoolIds(), std::vector<PoolId>{kGraph});
  Free(kept);
  allocator_->EmptyCache();
  Check();
  EXPECT_EQ(Current(Stats().reserved_bytes), 0);
  EXPECT_TRUE(allocator_->PrivatePoolIds().empty());
  EXPECT_EQ(allocator_->PoolUseCount(kGraph).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(PrivatePoolTest, EmptyCacheOfOnePoolFreesOnlyThatFreeablePool) {
  ASSERT_OK(allocator_->BeginAllocateToPool(kGraph, OnStream(kCapture)));
  Free(Alloc(30 * kMiB, kCapture));
  ASSERT_OK(allocator_->EndAllocateToPool(kGraph));
  ASSERT_OK(allocator_->BeginAllocateToPool(kMemPool, OnStream(kCapture)));
  Free(Alloc(40 * kMiB, kCapture));
  ASSERT_OK(allocator_->EndAllocateToPool(kMemPool));
  Free(Alloc(50 * kMiB, 0));         // the default pool's
  allocator_->EmptyCache(kMemPool);  // in use: nothing happens
  EXPECT_EQ(Current(Stats().reserved_bytes), 120 * kMiB);
  ASSERT_OK(allocator_->ReleasePool(kMemPool));
  ASSERT_OK(allocator_->ReleasePool(kGraph));
  allocator_->EmptyCache(kMemPool);  // that pool only; the default pool and kGraph keep theirs
  Check();
  EXPECT_EQ(Current(Stats().reserved_bytes), 80 * kMiB);
  EXPECT_EQ(allocator_->PrivatePoolIds(), std::vector<PoolId>{kGraph});
  allocator_->EmptyCache();
  EXPECT_EQ(Current(Stats().reserved_bytes), 0);
}

TEST_F(PrivatePoolTest, UseOnOomPoolLendsAFreeBlockBeforeTheCacheIsReleased) {
  Init("", 64 * kMiB);
  ASSERT_OK(allocator_->CreateOrIncrefPool(kMemPool));
  ASSERT_OK(allocator_->SetUseOnOom(kMemPool, true));
  Free(*allocator_->Allocate(40 * kMiB, 0, kMemPool));  // the MemPool caches 40 MiB
  Check();
  // 30 MiB more do not fit on the device (64 - 40): the default pool borrows the pool's block,
  // handed out whole (40 - 30 > 1 MiB splits it: the block is the front 30 MiB).
  const DevicePtr lent = Alloc(30 * kMiB, 0);
  EXPECT_EQ(PoolOfSegmentAt(lent), kMemPool);
  EXPECT_EQ(Stats().num_alloc_retries, 0);  // served before the full release
  Free(lent);
  // Without use_on_oom the same request is an OOM (the pool's memory is out of reach).
  ASSERT_OK(allocator_->SetUseOnOom(kMemPool, false));
  absl::StatusOr<DevicePtr> refused = allocator_->Allocate(30 * kMiB, 0);
  ASSERT_FALSE(refused.ok());
  std::optional<OomReport> report = GetOomReport(refused.status());
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->private_pool_count, 1u);
  EXPECT_EQ(report->graph_pool_count, 0u);
  EXPECT_EQ(report->private_pool_reserved_bytes, 40 * kMiB);
  EXPECT_EQ(report->private_pool_free_bytes, 40 * kMiB);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("is allocated by PyTorch, with 40.00 MiB allocated in private pools "
                        "(e.g., CUDA Graphs), and 0 bytes is reserved by PyTorch but "
                        "unallocated."));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("40.00 MiB is reserved in 1 private pool, 40.00 MiB of it free and "
                        "unusable by this allocation"));
}

TEST_F(PrivatePoolTest, NoSplitPoolHandsOutWholeBlocks) {
  ASSERT_OK(allocator_->CreateOrIncrefPool(kMemPool));
  ASSERT_OK(allocator_->SetNoSplit(kMemPool));
  absl::StatusOr<DevicePtr> a = allocator_->Allocate(2 * kMiB, 0, kMemPool);
  ASSERT_OK(a.status());
  Check();
  const SegmentInfo segment = allocator_->Snapshot().segments.at(0);
  ASSERT_EQ(segment.blocks.size(), 1u);  // the whole 20 MiB segment, not split
  EXPECT_EQ(segment.blocks[0].size, 20 * kMiB);
  EXPECT_EQ(Current(Stats().allocated_bytes), 20 * kMiB);
  // The default pool splits as usual.
  Alloc(2 * kMiB, 0);
  EXPECT_EQ(Current(Stats().allocated_bytes), 22 * kMiB);
}

TEST_F(PrivatePoolTest, DuringACaptureTheOomRetryDoesNotReleaseTheCache) {
  Init("", 64 * kMiB);
  Free(Alloc(40 * kMiB, 0));  // a free unsplit default-pool segment
  ASSERT_OK(allocator_->BeginAllocateToPool(kGraph, OnStream(kCapture)));
  // 30 MiB in the graph pool: the device has 24 MiB left, and the cached 40 MiB may not be
  // released while a capture may be underway: OOM.
  absl::StatusOr<DevicePtr> during = allocator_->Allocate(30 * kMiB, kCapture);
  ASSERT_FALSE(during.ok());
  EXPECT_EQ(during.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Stats().num_alloc_retries, 0);
  ASSERT_OK(allocator_->EndAllocateToPool(kGraph));
  // Outside the capture the same request releases the default pool's cache and succeeds.
  const DevicePtr after = Alloc(30 * kMiB, kCapture);
  EXPECT_EQ(PoolOfSegmentAt(after), kDefaultPoolId);
  EXPECT_EQ(Stats().num_alloc_retries, 1);
}

TEST_F(PrivatePoolTest, FreesOfBlocksUsedOnOtherStreamsWaitForTheCaptureToEnd) {
  const DevicePtr shared = Alloc(4 * kMiB, 0);
  ASSERT_OK(allocator_->RecordStream(shared, 3));  // used on stream 3 before the capture
  backend_->SetStreamBusy(3, true);
  backend_->SetStreamBusy(5, true);
  ASSERT_OK(allocator_->BeginAllocateToPool(kGraph, OnStream(kCapture)));
  const DevicePtr captured = Alloc(4 * kMiB, kCapture);
  ASSERT_OK(allocator_->RecordStream(captured, 5));  // used on stream 5 during the capture
  Free(captured);
  Free(shared);
  // Both wait: no event is recorded during a capture.
  EXPECT_EQ(backend_->live_events(), 0u);
  const std::vector<SegmentInfo> during = allocator_->Snapshot().segments;
  int pending = 0;
  for (const SegmentInfo& s : during) {
    for (const BlockInfo& b : s.blocks) pending += b.state == BlockState::kActivePendingFree;
  }
  EXPECT_EQ(pending, 2);
  ASSERT_OK(allocator_->EndAllocateToPool(kGraph));
  // The next allocation's poll: the captured block's only other use was during the capture, so
  // it is free at once; the other waits for an event on stream 3.
  Alloc(512, 0);
  EXPECT_EQ(backend_->live_events(), 1u);
  int still_pending = 0;
  for (const SegmentInfo& s : allocator_->Snapshot().segments) {
    for (const BlockInfo& b : s.blocks) {
      if (b.state == BlockState::kActivePendingFree) {
        ++still_pending;
        EXPECT_EQ(b.address, shared);
      }
    }
  }
  EXPECT_EQ(still_pending, 1);
}

TEST_F(PrivatePoolTest, EventsAndSnapshotsNameThePool) {
  struct Recorder : AllocatorObserver {
    void OnEvent(const AllocatorEvent& e) override { events.push_back(e); }
    std::vector<AllocatorEvent> events;
  } recorder;
  allocator_->AddObserver(&recorder);
  ASSERT_OK(allocator_->BeginAllocateToPool(kGraph, OnStream(kCapture)));
  Free(Alloc(512, kCapture));
  ASSERT_OK(allocator_->EndAllocateToPool(kGraph));
  ASSERT_OK(allocator_->ReleasePool(kGraph));
  allocator_->EmptyCache();
  allocator_->RemoveObserver(&recorder);
  std::vector<EventKind> kinds;
  for (const AllocatorEvent& e : recorder.events) {
    kinds.push_back(e.kind);
    if (e.kind != EventKind::kEmptyCache) {
      EXPECT_EQ(e.pool_id, kGraph) << EventKindName(e.kind);
    }
  }
  EXPECT_EQ(kinds, (std::vector<EventKind>{EventKind::kSegmentAlloc, EventKind::kAlloc,
                                           EventKind::kFreeRequested, EventKind::kFreeCompleted,
                                           EventKind::kSegmentFree, EventKind::kEmptyCache}));
  EXPECT_EQ(Stats().num_sync_all_streams, 1);
}

TEST_F(PrivatePoolTest, EmptyCacheDuringACaptureSynchronizesNothing) {
  ASSERT_OK(allocator_->BeginAllocateToPool(kGraph, OnStream(kCapture)));
  Free(Alloc(30 * kMiB, 0));
  allocator_->EmptyCache();  // the default pool is left alone while a capture is underway
  EXPECT_EQ(Current(Stats().reserved_bytes), 30 * kMiB);
  EXPECT_EQ(Stats().num_sync_all_streams, 0);
}

TEST_F(PrivatePoolTest, ARevivedReleasedPoolIsRefused) {
  ASSERT_OK(allocator_->CreateOrIncrefPool(kMemPool));
  Alloc(512, 0);
  ASSERT_OK(allocator_->Allocate(512, 0, kMemPool).status());
  ASSERT_OK(allocator_->ReleasePool(kMemPool));
  EXPECT_EQ(allocator_->CreateOrIncrefPool(kMemPool).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(allocator_->ReleasePool(kMemPool).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(allocator_->CreateOrIncrefPool(kDefaultPoolId).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fragscope
