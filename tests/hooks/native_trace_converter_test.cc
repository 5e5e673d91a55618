#include "hooks/native_trace_converter.h"

#include <cstring>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::hooks {
namespace {

using A = NativeTraceAction;

NativeTraceEntry Entry(A action, uint64_t addr, uint64_t size, uint64_t stream = 0) {
  NativeTraceEntry e;
  e.action = action;
  e.device = 2;
  e.addr = addr;
  e.size = size;
  e.stream = stream;
  return e;
}

constexpr uint64_t kSeg = 0x7f0000000000;

TEST(NativeTraceConverterTest, SegmentsAndBlocksOfASmallAllocation) {
  NativeTraceConverter converter(AllocatorOptions{}, 80 * kGiB);
  AllocatorEvent event;
  ASSERT_TRUE(converter.Convert(Entry(A::kSegmentAlloc, kSeg, 2 * kMiB, 5), &event));
  EXPECT_EQ(event.kind, EventKind::kSegmentAlloc);
  EXPECT_EQ(event.pool, PoolKind::kSmall);
  EXPECT_EQ(event.ptr, kSeg);
  EXPECT_EQ(event.bytes, 2 * kMiB);
  EXPECT_EQ(event.device, 2);
  EXPECT_EQ(event.stream, 5u);
  EXPECT_EQ(converter.reserved_bytes(), 2 * kMiB);

  ASSERT_TRUE(converter.Convert(Entry(A::kAlloc, kSeg + 512, 100, 5), &event));
  EXPECT_EQ(event.kind, EventKind::kAlloc);
  EXPECT_EQ(event.requested_bytes, 100u);
  EXPECT_EQ(event.bytes, 512u) << "block size inferred by PyTorch's rounding";
  EXPECT_NE(event.flags & kEventFlagSizeInferred, 0) << "and flagged as such";
  EXPECT_EQ(event.segment, 0u) << "not recorded: it follows from the log's segment events";
  EXPECT_EQ(event.pool, PoolKind::kSmall);
  EXPECT_EQ(converter.allocated_bytes(), 512u);

  ASSERT_TRUE(converter.Convert(Entry(A::kFreeRequested, kSeg + 512, 100, 5), &event));
  EXPECT_EQ(event.kind, EventKind::kFreeRequested);
  EXPECT_EQ(converter.allocated_bytes(), 0u);
  ASSERT_TRUE(converter.Convert(Entry(A::kFreeCompleted, kSeg + 512, 100, 5), &event));
  EXPECT_EQ(event.kind, EventKind::kFreeCompleted);
  EXPECT_EQ(event.merged_count, 0) << "not known from a trace";

  ASSERT_TRUE(converter.Convert(Entry(A::kSegmentFree, kSeg, 2 * kMiB, 5), &event));
  EXPECT_EQ(event.kind, EventKind::kSegmentFree);
  EXPECT_EQ(converter.reserved_bytes(), 0u);
}

TEST(NativeTraceConverterTest, LargeBlocksUseTheJobsOptions) {
  absl::StatusOr<AllocatorOptions> options =
      ParseAllocatorOptions("roundup_power2_divisions:4,max_split_size_mb:64");
  ASSERT_OK(options);
  NativeTraceConverter converter(*options, 80 * kGiB);
  AllocatorEvent event;
  ASSERT_TRUE(converter.Convert(Entry(A::kSegmentAlloc, kSeg, 96 * kMiB), &event));
  EXPECT_EQ(event.pool, PoolKind::kLarge);
  EXPECT_NE(event.flags & kEventFlagOversize, 0);
  ASSERT_TRUE(converter.Convert(Entry(A::kAlloc, kSeg, 84 * kMiB), &event));
  EXPECT_EQ(event.bytes, 96 * kMiB);
  EXPECT_EQ(event.pool, PoolKind::kLarge);
  EXPECT_NE(event.flags & kEventFlagOversize, 0);
}

TEST(NativeTraceConverterTest, ExpandableMapsAndPartialUnmaps) {
  NativeTraceConverter converter(AllocatorOptions{}, 80 * kGiB);
  AllocatorEvent event;
  ASSERT_TRUE(converter.Convert(Entry(A::kSegmentMap, kSeg, 60 * kMiB), &event));
  EXPECT_EQ(event.kind, EventKind::kSegmentMap);
  EXPECT_NE(event.flags & kEventFlagExpandable, 0);
  EXPECT_EQ(event.pool, PoolKind::kLarge);
  ASSERT_TRUE(converter.Convert(Entry(A::kSegmentUnmap, kSeg + 40 * kMiB, 20 * kMiB), &event));
  EXPECT_EQ(event.kind, EventKind::kSegmentUnmap);
  EXPECT_EQ(converter.reserved_bytes(), 40 * kMiB);
}

TEST(NativeTraceConverterTest, OomCarriesDeviceFreeAndRunningTotals) {
  NativeTraceConverter converter(AllocatorOptions{}, 80 * kGiB);
  AllocatorEvent event;
  ASSERT_TRUE(converter.Convert(Entry(A::kSegmentAlloc, kSeg, 100 * kMiB), &event));
  ASSERT_TRUE(converter.Convert(Entry(A::kAlloc, kSeg, 60 * kMiB), &event));
  ASSERT_TRUE(converter.Convert(Entry(A::kOom, /*device free*/ 3 * kMiB, 30 * kMiB, 9), &event));
  EXPECT_EQ(event.kind, EventKind::kOom);
  EXPECT_EQ(event.device_free_bytes, 3 * kMiB);
  EXPECT_EQ(event.device_total_bytes, 80 * kGiB);
  EXPECT_EQ(event.bytes, 30 * kMiB);
  EXPECT_EQ(event.reserved_bytes, 100 * kMiB);
  EXPECT_EQ(event.allocated_bytes, 60 * kMiB);
  EXPECT_EQ(event.stream, 9u);
  EXPECT_NE(event.flags & kEventFlagWouldFitIfContiguous, 0);
}

// The block events store every field in place (no zeroing first): one converted into an event
// that held an OOM, with a reused AllocatorEvent as the observer does, carries nothing of it.
TEST(NativeTraceConverterTest, BlockEventsOverwriteEveryFieldOfAReusedEvent) {
  NativeTraceConverter converter(AllocatorOptions{}, 80 * kGiB);
  for (A action : {A::kAlloc, A::kFreeRequested, A::kFreeCompleted}) {
    AllocatorEvent event;
    ASSERT_TRUE(converter.Convert(Entry(A::kOom, 123 * kMiB, 4 * kGiB, 9), &event));
    event.merged_count = 2;
    event.split_bytes = event.result_bytes = 77;
    event.flags = 0xFF;
    ASSERT_TRUE(converter.Convert(Entry(action, kSeg, 3 * kMiB, 5), &event));
    AllocatorEvent expected;
    expected.kind = action == A::kAlloc           ? EventKind::kAlloc
                    : action == A::kFreeRequested ? EventKind::kFreeRequested
                                                  : EventKind::kFreeCompleted;
    expected.pool = PoolKind::kLarge;
    expected.flags = kEventFlagSizeInferred;
    expected.device = 2;
    expected.ptr = kSeg;
    expected.bytes = expected.requested_bytes = 3 * kMiB;
    expected.stream = 5;
    EXPECT_EQ(std::memcmp(&event, &expected, sizeof(event)), 0) << "action " << int(action);
  }
}

TEST(NativeTraceConverterTest, SnapshotAndUnknownActionsHaveNoEvent) {
  NativeTraceConverter converter(AllocatorOptions{}, 0);
  AllocatorEvent event;
  EXPECT_FALSE(converter.Convert(Entry(A::kSnapshot, 0, 123), &event));
  EXPECT_FALSE(converter.Convert(Entry(A::kUnknown, 1, 2), &event));
}

}  // namespace
}  // namespace fragscope::hooks
