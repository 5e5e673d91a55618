// The retry ladder, out-of-memory reporting, memory fraction, max_split_size and garbage
// collection. Ported test_cuda.py behaviours carry its test name in a comment.
#include "allocator/caching_allocator.h"

#include "tests/allocator/allocator_fixture.h"

namespace fragscope {
namespace {

using CachingAllocatorOomTest = testing::AllocatorFixture;

bool Contains(const absl::Status& s, absl::string_view text) {
  return s.message().find(text) != std::string_view::npos;
}

// test_out_of_memory
TEST_F(CachingAllocatorOomTest, HugeRequestFailsWithPytorchMessage) {
  absl::StatusOr<DevicePtr> r = allocator_->Allocate(800000000 * kGiB, 0);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_TRUE(
      Contains(r.status(), "Tried to allocate 800000000.00 GiB. GPU 0 has a total capacity of"))
      << r.status();
  EXPECT_EQ(Stats().num_ooms, 1);
  r = allocator_->Allocate(uint64_t{1} << 61, 0);
  EXPECT_TRUE(Contains(r.status(), "Tried to allocate more than 1EB memory")) << r.status();
  // The allocator still works.
  Free(Alloc(kMiB));
}

TEST_F(CachingAllocatorOomTest, OomMessageMatchesPytorchTextExactly) {
  Init("", 100 * kMiB);
  const DevicePtr a = Alloc(60 * kMiB);
  absl::StatusOr<DevicePtr> r = allocator_->Allocate(60 * kMiB, 0);
  ASSERT_FALSE(r.ok());
  const std::string expected =
      "CUDA out of memory. Tried to allocate 60.00 MiB. GPU 0 has a total capacity of 100.00 MiB "
      "of which 40.00 MiB is free. Of the allocated memory 60.00 MiB is allocated by PyTorch, and "
      "0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
      "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
      "fragmentation.  See documentation for Memory Management  "
      "(https://docs.pytorch.org/docs/stable/notes/cuda.html"
      "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";
  EXPECT_EQ(r.status().message().substr(0, expected.size()), expected) << r.status();
  std::optional<OomReport> report = GetOomReport(r.status());
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->segment_bytes, 60 * kMiB);
  EXPECT_EQ(report->device_free_bytes, 40 * kMiB);
  EXPECT_FALSE(report->would_fit_in_free_cached());
  EXPECT_FALSE(report->would_fit_with_device_free());
  Free(a);
}

// test_out_of_memory_retry: 50% then another 50% fails; after the free it succeeds.
TEST_F(CachingAllocatorOomTest, RetryAfterFreeSucceeds) {
  Init("", kGiB);
  const DevicePtr half = Alloc(kGiB / 2 + 2 * kMiB);
  EXPECT_FALSE(allocator_->Allocate(kGiB / 2 + 2 * kMiB, 0).ok());
  Free(half);
  Free(Alloc(kGiB / 2 + 2 * kMiB));
}

TEST_F(CachingAllocatorOomTest, FullReleaseIsTheLastRetryAndIsCounted) {
  Init("", 100 * kMiB);
  // Cache a free 60 MiB segment, then ask for 50 MiB: it cannot reuse the 60 MiB block? It can
  // (no max_split): so ask for 70 MiB, which needs the cached 60 MiB returned first.
  Free(Alloc(60 * kMiB));
  const DevicePtr p = Alloc(70 * kMiB);
  const DeviceStats s = Stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_sync_all_streams, 1);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(Current(s.reserved_bytes), static_cast<int64_t>(70 * kMiB));
  Free(p);
}

TEST_F(CachingAllocatorOomTest, FragmentationOomSaysTheRequestWouldFitIfContiguous) {
  Init("", 100 * kMiB);
  // Two 40 MiB segments, each pinned by a live 4 MiB block at its start: 2 x 36 MiB stay
  // reserved but free, and neither can be returned to the device.
  Free(Alloc(40 * kMiB));
  Free(Alloc(40 * kMiB + 2 * kMiB));        // second segment (42 MiB), so sizes differ
  const DevicePtr pin1 = Alloc(4 * kMiB);   // best fit: the 40 MiB block, split
  const DevicePtr fill = Alloc(36 * kMiB);  // takes its 36 MiB remainder exactly
  const DevicePtr pin2 = Alloc(4 * kMiB);   // only the 42 MiB block is left: split
  Free(fill);
  absl::StatusOr<DevicePtr> r = allocator_->Allocate(60 * kMiB, 0);
  ASSERT_FALSE(r.ok());
  std::optional<OomReport> report = GetOomReport(r.status());
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->reserved_bytes, 82 * kMiB);
  EXPECT_EQ(report->allocated_bytes, 8 * kMiB);
  EXPECT_EQ(report->free_cached_bytes, 74 * kMiB);
  EXPECT_EQ(report->free_cached_fragments, 2u);
  EXPECT_EQ(report->largest_free_cached_block, 38 * kMiB);
  EXPECT_TRUE(report->would_fit_in_free_cached());
  EXPECT_TRUE(Contains(r.status(), "74.00 MiB is reserved by PyTorch but unallocated"))
      << r.status();
  EXPECT_TRUE(Contains(r.status(), "(fragmentation)")) << r.status();
  const DeviceStats s = Stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);
  Free(pin1);
  Free(pin2);
}

// test_set_per_process_memory_fraction
TEST_F(CachingAllocatorOomTest, MemoryFractionCapsReservedMemory) {
  Init("", kGiB);
  EXPECT_TRUE(absl::IsInvalidArgument(allocator_->SetMemoryFraction(-0.1)));
  EXPECT_TRUE(absl::IsInvalidArgument(allocator_->SetMemoryFraction(1.1)));
  ASSERT_OK(allocator_->SetMemoryFraction(0.5));
  const uint64_t ok_size = static_cast<uint64_t>(0.499 * static_cast<double>(kGiB)) -
                           static_cast<uint64_t>(Stats().reserved_bytes[0].peak);
  Free(Alloc(ok_size));
  allocator_->EmptyCache();
  absl::StatusOr<DevicePtr> r = allocator_->Allocate(kGiB / 2 + kMiB, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status(), "CUDA out of memory")) << r.status();
  EXPECT_TRUE(Contains(r.status(), "512.00 MiB allowed; ")) << r.status();
}

// set_per_process_memory_fraction(0) is a cap of 0 bytes, not "no cap": every device allocation
// fails, and the message says "0 bytes allowed" as PyTorch's does. A fraction of 1.0 is no cap in
// PyTorch 2.11 (its allowed_memory_maximum is left empty): no "allowed" clause then.
TEST_F(CachingAllocatorOomTest, FractionZeroIsACapOfZeroBytes) {
  Init("", kGiB);
  ASSERT_OK(allocator_->SetMemoryFraction(0.0));
  absl::StatusOr<DevicePtr> r = allocator_->Allocate(512, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status(), "is free. 0 bytes allowed; Of the allocated")) << r.status();
  const std::optional<OomReport> report = GetOomReport(r.status());
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->allowed_bytes, std::optional<uint64_t>(0));
  ASSERT_OK(allocator_->SetMemoryFraction(1.0));
  Free(Alloc(512));
  r = allocator_->Allocate(2 * kGiB, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(Contains(r.status(), "allowed")) << r.status();
}

// test_get_per_process_memory_fraction
TEST_F(CachingAllocatorOomTest, MemoryFractionRoundTrips) {
  for (double f : {1.0, 0.0, 0.25, 0.3333, 0.75}) {
    ASSERT_OK(allocator_->SetMemoryFraction(f));
    EXPECT_NEAR(allocator_->GetMemoryFraction(), f, 1e-9);
  }
}

// The cap in bytes: fraction * total truncated, as PyTorch 2.11 computes it, or exactly the bytes
// given to SetAllowed; fraction 1.0 and nullopt remove it.
TEST_F(CachingAllocatorOomTest, AllowedBytesAreTheCapInForce) {
  Init("", kGiB);
  EXPECT_EQ(allocator_->Allowed(), std::nullopt);
  ASSERT_OK(allocator_->SetMemoryFraction(2.0 / 3.0));
  EXPECT_EQ(allocator_->Allowed(), std::optional<uint64_t>(715827882));  // 715827882.67
  allocator_->SetAllowed(300 * kMiB + 1);
  EXPECT_EQ(allocator_->Allowed(), std::optional<uint64_t>(300 * kMiB + 1));
  EXPECT_NEAR(allocator_->GetMemoryFraction(), (300.0 * 1048576 + 1) / 1073741824.0, 1e-12);
  const DevicePtr x = Alloc(280 * kMiB);
  const DevicePtr y = Alloc(20 * kMiB);              // 300 MiB reserved: under the cap
  EXPECT_FALSE(allocator_->Allocate(kMiB, 0).ok());  // a 2 MiB segment: over it
  // What a log records for the cap gives it back through SetMemoryFraction.
  const double recorded = allocator_->RecordedMemoryFraction();
  allocator_->SetAllowed(std::nullopt);
  EXPECT_EQ(allocator_->RecordedMemoryFraction(), 1.0);
  ASSERT_OK(allocator_->SetMemoryFraction(recorded));
  EXPECT_EQ(allocator_->Allowed(), std::optional<uint64_t>(300 * kMiB + 1));
  allocator_->SetAllowed(std::nullopt);
  Free(Alloc(kMiB));
  Free(x);
  Free(y);
  EXPECT_EQ(allocator_->GetMemoryFraction(), 1.0);
  ASSERT_OK(allocator_->SetMemoryFraction(0.5));
  ASSERT_OK(allocator_->SetMemoryFraction(1.0));
  EXPECT_EQ(allocator_->Allowed(), std::nullopt);
}

TEST_F(CachingAllocatorOomTest, FractionOptionAppliesAtConstruction) {
  Init("per_process_memory_fraction:0.25", kGiB);
  EXPECT_DOUBLE_EQ(allocator_->GetMemoryFraction(), 0.25);
  EXPECT_FALSE(allocator_->Allocate(300 * kMiB, 0).ok());
}

// test_raises_oom[max_split_size_mb_setting]
TEST_F(CachingAllocatorOomTest, OneTebibyteFailsWithAndWithoutMaxSplit) {
  EXPECT_TRUE(absl::IsResourceExhausted(allocator_->Allocate(1024 * kGiB, 0).status()));
  Init("max_split_size_mb:1024");
  EXPECT_TRUE(absl::IsResourceExhausted(allocator_->Allocate(1024 * kGiB, 0).status()));
}

TEST_F(CachingAllocatorOomTest, OversizeBlockNeverServesASmallerRequest) {
  Init("max_split_size_mb:40");
  const DevicePtr big = Alloc(100 * kMiB);
  Free(big);
  const DevicePtr small = Alloc(30 * kMiB);
  EXPECT_NE(small, big);
  EXPECT_EQ(Current(Stats().segment), 2);
  // 90 MiB is within 20 MiB of 100 MiB: the oversize block serves it whole.
  EXPECT_EQ(Alloc(90 * kMiB), big);
  const DeviceStats s = Stats();
  EXPECT_EQ(s.oversize_allocations.current, 1);
  EXPECT_EQ(s.oversize_segments.current, 1);
  EXPECT_EQ(s.max_split_size, static_cast<int64_t>(40 * kMiB));
  EXPECT_EQ(Current(s.allocated_bytes), static_cast<int64_t>(130 * kMiB));
}

TEST_F(CachingAllocatorOomTest, OversizeBlockRejectsRequestsTwentyMiBSmaller) {
  Init("max_split_size_mb:40");
  const DevicePtr big = Alloc(100 * kMiB);
  Free(big);
  EXPECT_NE(Alloc(80 * kMiB), big);  // 100 >= 80 + 20
}

TEST_F(CachingAllocatorOomTest, MaxNonSplitRoundingWidensTheTolerance) {
  Init("max_split_size_mb:40,max_non_split_rounding_mb:30");
  const DevicePtr big = Alloc(100 * kMiB);
  Free(big);
  EXPECT_EQ(Alloc(80 * kMiB), big);  // 100 < 80 + 30
}

TEST_F(CachingAllocatorOomTest, ReleasesOversizeBlocksBeforeTheFullFlush) {
  Init("max_split_size_mb:40", 200 * kMiB);
  const DevicePtr pin = Alloc(4 * kMiB);  // a split 20 MiB segment that must stay
  Free(Alloc(150 * kMiB));                // a cached oversize block
  // 100 MiB may not use the 150 MiB block (150 >= 100 + 20) and does not fit beside it, so the
  // ladder releases that one oversize block and allocates again, without a full flush.
  const DevicePtr p = Alloc(100 * kMiB);
  const DeviceStats s = Stats();
  EXPECT_EQ(s.num_alloc_retries, 0);
  EXPECT_EQ(s.num_sync_all_streams, 0);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(Current(s.reserved_bytes), static_cast<int64_t>(120 * kMiB));
  Free(p);
  Free(pin);
}

TEST_F(CachingAllocatorOomTest, OversizeReleaseThatFreesTooLittleFallsThroughToTheFullFlush) {
  Init("max_split_size_mb:40", 200 * kMiB);
  const DevicePtr pin = Alloc(4 * kMiB);
  Free(Alloc(100 * kMiB));
  // 150 MiB: releasing the 100 MiB oversize block is not enough (PyTorch releases it anyway and
  // reports failure), so the full release runs and counts a retry.
  const DevicePtr p = Alloc(150 * kMiB);
  const DeviceStats s = Stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_device_free, 1);
  Free(p);
  Free(pin);
}

TEST_F(CachingAllocatorOomTest, GarbageCollectionFreesOldCachedBlocksUnderTheThreshold) {
  Init("garbage_collection_threshold:0.5,per_process_memory_fraction:0.5", kGiB);
  // Allowed = 512 MiB, GC threshold = 256 MiB. Cache 300 MiB of unsplit blocks.
  Free(Alloc(150 * kMiB));
  Free(Alloc(150 * kMiB + 2 * kMiB));  // a different size: a second segment
  EXPECT_EQ(Current(Stats().reserved_bytes), static_cast<int64_t>(302 * kMiB));
  // A request that does not fit the cache triggers GC before allocating.
  const DevicePtr p = Alloc(200 * kMiB);
  const DeviceStats s = Stats();
  EXPECT_GE(s.num_device_free, 1);
  EXPECT_EQ(s.num_alloc_retries, 0);
  EXPECT_LE(Current(s.reserved_bytes), static_cast<int64_t>(512 * kMiB));
  Free(p);
}

TEST_F(CachingAllocatorOomTest, FreeMemoryCallbacksRunBeforeNewSegments) {
  int calls = 0;
  allocator_->AddFreeMemoryCallback([&] {
    ++calls;
    return false;
  });
  Free(Alloc(kMiB));
  EXPECT_EQ(calls, 1);  // the first allocation found nothing cached
  Alloc(kMiB);
  EXPECT_EQ(calls, 1);  // cached block reused: no callback
}

TEST_F(CachingAllocatorOomTest, NonOomBackendErrorIsReturnedAsIs) {
  Init("", kGiB);
  backend_->FailNextMallocs(1);  // injected as out-of-memory: the ladder retries and succeeds
  Free(Alloc(4 * kMiB));
  EXPECT_EQ(Stats().num_alloc_retries, 1);
}

TEST_F(CachingAllocatorOomTest, BackendHandingOutALiveAddressIsAnErrorNotACrash) {
  // A scripted device that returns the same address twice (the simulated backend's overlap check
  // is bypassed by freeing the first allocation behind the allocator's back).
  backend_->ScriptAddresses({SimulatedBackend::kBaseAddress, SimulatedBackend::kBaseAddress});
  const DevicePtr a = Alloc(12 * kMiB);
  ASSERT_OK(backend_->Free(a));
  absl::StatusOr<DevicePtr> b = allocator_->Allocate(14 * kMiB, 0);
  EXPECT_TRUE(absl::IsInternal(b.status())) << b.status();
  EXPECT_NE(b.status().message().find("address of a live segment"), std::string::npos);
}

}  // namespace
}  // namespace fragscope
