// Stream-ordered reuse: blocks never cross streams, record_stream delays reuse until the
// recorded streams' work completes.
#include "allocator/caching_allocator.h"

#include <string>

#include "tests/allocator/allocator_fixture.h"

namespace fragscope {
namespace {

using CachingAllocatorStreamTest = testing::AllocatorFixture;

constexpr StreamId kMain = 0;
constexpr StreamId kSide = 0x51de;

TEST_F(CachingAllocatorStreamTest, BlocksAreNeverReusedAcrossStreams) {
  const DevicePtr a = Alloc(4 * kMiB, kMain);
  Free(a);
  const DevicePtr b = Alloc(4 * kMiB, kSide);
  EXPECT_NE(a, b);
  EXPECT_EQ(Current(Stats().segment), 2);
  EXPECT_EQ(Alloc(4 * kMiB, kMain), a);
}

// test_record_stream
TEST_F(CachingAllocatorStreamTest, RecordedBlockIsNotReusedWhileTheStreamIsBusy) {
  const DevicePtr a = Alloc(4 * kMiB, kMain);
  ASSERT_OK(allocator_->RecordStream(a, kSide));
  backend_->SetStreamBusy(kSide, true);
  Free(a);
  DeviceStats s = Stats();
  EXPECT_EQ(Current(s.allocated_bytes), 0);                            // freed for the user...
  EXPECT_EQ(Current(s.active_bytes), static_cast<int64_t>(4 * kMiB));  // ...but still active
  EXPECT_EQ(BlockStateName(allocator_->Snapshot().segments[0].blocks[0].state),
            "active_pending_free");
  const DevicePtr b = Alloc(4 * kMiB, kMain);
  EXPECT_NE(a, b);
  backend_->CompleteStream(kSide);
  // The next allocation polls events: the block returns to the pool and is reused.
  EXPECT_EQ(Alloc(4 * kMiB, kMain), a);
  s = Stats();
  EXPECT_EQ(backend_->live_events(), 0u);
  Free(b);
}

TEST_F(CachingAllocatorStreamTest, RecordStreamOnTheAllocationStreamIsIgnored) {
  const DevicePtr a = Alloc(4 * kMiB, kMain);
  ASSERT_OK(allocator_->RecordStream(a, kMain));
  backend_->SetStreamBusy(kMain, true);
  Free(a);
  EXPECT_EQ(Alloc(4 * kMiB, kMain), a);
}

// test_record_stream_on_shifted_view
TEST_F(CachingAllocatorStreamTest, RecordStreamThroughAViewProtectsTheWholeBlock) {
  const DevicePtr a = Alloc(4 * kMiB, kMain);
  ASSERT_OK(allocator_->RecordStream(a + 4096, kSide));
  backend_->SetStreamBusy(kSide, true);
  Free(a);
  EXPECT_NE(Alloc(4 * kMiB, kMain), a);
}

TEST_F(CachingAllocatorStreamTest, PendingBlocksDoNotMergeUntilTheirEventsComplete) {
  const DevicePtr a = Alloc(4 * kMiB, kMain);
  const DevicePtr b = Alloc(4 * kMiB, kMain);
  ASSERT_OK(allocator_->RecordStream(a, kSide));
  backend_->SetStreamBusy(kSide, true);
  Free(a);
  Free(b);  // b merges with the tail but not with pending a
  EXPECT_EQ(allocator_->Snapshot().segments[0].blocks.size(), 2u);
  backend_->CompleteStream(kSide);
  allocator_->EmptyCache();  // syncs events, merges, then releases the whole segment
  EXPECT_EQ(Current(Stats().reserved_bytes), 0);
}

TEST_F(CachingAllocatorStreamTest, DoubleFreeOfPendingBlockIsAnError) {
  const DevicePtr a = Alloc(4 * kMiB, kMain);
  ASSERT_OK(allocator_->RecordStream(a, kSide));
  backend_->SetStreamBusy(kSide, true);
  Free(a);
  absl::Status status = allocator_->Free(a);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("waiting for events"), std::string::npos) << status;
}

// test_caching_allocator_record_stream_oom (#19219): 100 x 160 MB, each recorded on a busy
// stream, must not OOM: the retry ladder synchronizes events and frees them.
TEST_F(CachingAllocatorStreamTest, RecordStreamAllocationsDoNotOomBecauseTheRetrySyncs) {
  Init("", 2 * kGiB);
  backend_->SetStreamBusy(kSide, true);
  for (int i = 0; i < 100; ++i) {
    const DevicePtr p = Alloc(160 * 1000 * 1000, kMain);
    ASSERT_OK(allocator_->RecordStream(p, kSide));
    Free(p);
  }
  EXPECT_GE(Stats().num_sync_all_streams, 1);
}

TEST_F(CachingAllocatorStreamTest, EventsArePolledPerStreamWithoutHeadOfLineBlocking) {
  constexpr StreamId kSlow = 0x510;
  const DevicePtr a = Alloc(4 * kMiB, kMain);
  const DevicePtr b = Alloc(12 * kMiB, kMain);
  ASSERT_OK(allocator_->RecordStream(a, kSlow));
  ASSERT_OK(allocator_->RecordStream(b, kSide));
  backend_->SetStreamBusy(kSlow, true);
  backend_->SetStreamBusy(kSide, true);
  Free(a);
  Free(b);
  backend_->CompleteStream(kSide);  // only b's stream finishes
  EXPECT_EQ(Alloc(12 * kMiB, kMain), b);
}

// Block::event_count is 16 bits: a block waits for at most kMaxStreamUses other streams, and one
// more is refused with an error that says so, not a wrapped count.
TEST_F(CachingAllocatorStreamTest, RecordStreamRefusesMoreStreamsThanABlockCanWaitFor) {
  const DevicePtr a = Alloc(4 * kMiB, kMain);
  for (StreamId stream = 1; stream <= CachingAllocator::kMaxStreamUses; ++stream) {
    ASSERT_OK(allocator_->RecordStream(a, stream));
  }
  const absl::Status refused = allocator_->RecordStream(a, 0x10000);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("already in use on 32767 other streams"), std::string::npos)
      << refused;
  ASSERT_OK(allocator_->RecordStream(a, 7));  // a stream already recorded is no new use
  backend_->SetStreamBusy(7, true);
  Free(a);
  EXPECT_EQ(backend_->live_events(), CachingAllocator::kMaxStreamUses);
  EXPECT_NE(Alloc(4 * kMiB, kMain), a);
  backend_->CompleteStream(7);
  EXPECT_EQ(Alloc(4 * kMiB, kMain), a);
  EXPECT_EQ(backend_->live_events(), 0u);
}

}  // namespace
}  // namespace fragscope
