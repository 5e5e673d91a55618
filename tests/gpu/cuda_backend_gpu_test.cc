// CudaBackend and the pluggable C ABI (libfragscope_alloc.so) on a real device. Skipped without
// one (GTEST_SKIP when CudaBackend::DeviceCount() == 0).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/allocator_options.h"
#include "allocator/caching_allocator.h"
#include "allocator/cuda_backend.h"
#include "gtest/gtest.h"
#include "hooks/fragscope_alloc.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaBackend::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

using CudaBackendGpuTest = GpuTest;

TEST_F(CudaBackendGpuTest, MallocFreeAndMemInfo) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<CudaBackend> backend, CudaBackend::Create(0));
  EXPECT_FALSE(backend->name().empty());
  const DeviceMemInfo before = backend->MemInfo();
  ASSERT_GT(before.total_bytes, 0u);
  ASSERT_OK_AND_ASSIGN(DevicePtr ptr, backend->Malloc(64 * kMiB));
  EXPECT_NE(ptr, 0u);
  EXPECT_EQ(cudaMemset(reinterpret_cast<void*>(ptr), 0, 64 * kMiB), cudaSuccess);
  EXPECT_LT(backend->MemInfo().free_bytes, before.free_bytes);
  EXPECT_OK(backend->Free(ptr));
}

TEST_F(CudaBackendGpuTest, OutOfMemoryIsResourceExhaustedAndClearsTheError) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<CudaBackend> backend, CudaBackend::Create(0));
  absl::StatusOr<DevicePtr> huge = backend->Malloc(uint64_t{1} << 50);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the sticky error was cleared";
}

TEST_F(CudaBackendGpuTest, EventsTrackStreamWork) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<CudaBackend> backend, CudaBackend::Create(0));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_OK_AND_ASSIGN(EventHandle event, backend->RecordEvent(reinterpret_cast<StreamId>(stream)));
  EXPECT_OK(backend->SynchronizeEvent(event));
  ASSERT_OK_AND_ASSIGN(bool done, backend->EventDone(event));
  EXPECT_TRUE(done);
  backend->ReleaseEvent(event);
  cudaStreamDestroy(stream);
}

TEST_F(CudaBackendGpuTest, CachingAllocatorOnTheDevice) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<CudaBackend> backend, CudaBackend::Create(0));
  CachingAllocator allocator(*backend, AllocatorOptions{});
  std::vector<DevicePtr> blocks;
  for (uint64_t size : {uint64_t{100}, 3 * kMiB, 25 * kMiB, 512 * kMiB}) {
    ASSERT_OK_AND_ASSIGN(DevicePtr ptr, allocator.Allocate(size, 0));
    EXPECT_EQ(cudaMemset(reinterpret_cast<void*>(ptr), 1, size), cudaSuccess);
    blocks.push_back(ptr);
  }
  for (DevicePtr ptr : blocks) EXPECT_OK(allocator.Free(ptr));
  EXPECT_OK(allocator.CheckInvariants());
  allocator.EmptyCache();
  EXPECT_EQ(allocator.GetStats().reserved_bytes[0].current, 0);
}

// --- Virtual memory (expandable segments) ---

class CudaVirtualMemoryGpuTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create(0);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
    if (!backend_->SupportsVirtualMemory()) {
      GTEST_SKIP() << "device 0 has no virtual memory management: "
                   << backend_->ReserveAddressRange(kGiB).status();
    }
    // Every NVIDIA GPU so far reports 2 MiB; the tests' page sizes assume it divides 2 MiB.
    ASSERT_GT(backend_->PageGranularity(), 0u);
    ASSERT_EQ(2 * kMiB % backend_->PageGranularity(), 0u) << backend_->PageGranularity();
  }

  // Fills [ptr, ptr + bytes) with `value` on the device.
  static void Fill(DevicePtr ptr, uint64_t bytes, int value) {
    ASSERT_EQ(cudaMemset(reinterpret_cast<void*>(ptr), value, bytes), cudaSuccess);
  }
  // The bytes of [ptr, ptr + bytes), copied back to the host.
  static std::vector<uint8_t> Read(DevicePtr ptr, uint64_t bytes) {
    std::vector<uint8_t> host(bytes);
    EXPECT_EQ(cudaMemcpy(host.data(), reinterpret_cast<void*>(ptr), bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
  static bool AllEqual(const std::vector<uint8_t>& bytes, uint64_t begin, uint64_t end,
                       uint8_t value) {
    return std::all_of(bytes.begin() + static_cast<std::ptrdiff_t>(begin),
                       bytes.begin() + static_cast<std::ptrdiff_t>(end),
                       [value](uint8_t b) { return b == value; });
  }
  // How much less free memory `after` shows. Unchanged means within kSlackBytes: lazily loaded
  // memset kernels and page tables take a little.
  static constexpr int64_t kSlackBytes = int64_t{8 * kMiB};
  static int64_t FreeDrop(const DeviceMemInfo& before, const DeviceMemInfo& after) {
    return static_cast<int64_t>(before.free_bytes) - static_cast<int64_t>(after.free_bytes);
  }

  std::unique_ptr<CudaBackend> backend_;
};

TEST_F(CudaVirtualMemoryGpuTest, MappedPagesHoldDataAndCountAsUsedMemory) {
  ASSERT_OK_AND_ASSIGN(DevicePtr base, backend_->ReserveAddressRange(kGiB));
  EXPECT_NE(base, 0u);
  const DeviceMemInfo before = backend_->MemInfo();

  // Three 2 MiB pages at offset 0 and one 20 MiB page at 40 MiB, as PyTorch's small and large
  // expandable segments map them.
  ASSERT_OK(backend_->MapPages(base, 6 * kMiB, 2 * kMiB));
  ASSERT_OK(backend_->MapPages(base + 40 * kMiB, 20 * kMiB, 20 * kMiB));
  const DeviceMemInfo mapped = backend_->MemInfo();
  EXPECT_GE(FreeDrop(before, mapped), int64_t{26 * kMiB} - kSlackBytes);
  EXPECT_LE(FreeDrop(before, mapped), int64_t{26 * kMiB} + kSlackBytes);

  // One value per 2 MiB page, written per page and read back across the page boundaries.
  for (int page = 0; page < 3; ++page)
    Fill(base + static_cast<uint64_t>(page) * 2 * kMiB, 2 * kMiB, 0x11 * (page + 1));
  Fill(base + 40 * kMiB, 20 * kMiB, 0x7E);
  const std::vector<uint8_t> small = Read(base, 6 * kMiB);
  for (int page = 0; page < 3; ++page) {
    const uint64_t begin = static_cast<uint64_t>(page) * 2 * kMiB;
    EXPECT_TRUE(AllEqual(small, begin, begin + 2 * kMiB, static_cast<uint8_t>(0x11 * (page + 1))))
        << "page " << page;
  }
  const std::vector<uint8_t> large = Read(base + 40 * kMiB, 20 * kMiB);
  EXPECT_TRUE(AllEqual(large, 0, large.size(), 0x7E));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // Shrink from the top as expandable segments do, then the rest.
  EXPECT_OK(backend_->UnmapPages(base + 4 * kMiB, 2 * kMiB, 2 * kMiB, 0));
  EXPECT_OK(backend_->UnmapPages(base, 4 * kMiB, 2 * kMiB, 0));
  EXPECT_OK(backend_->UnmapPages(base + 40 * kMiB, 20 * kMiB, 20 * kMiB, 0));
  EXPECT_LE(FreeDrop(before, backend_->MemInfo()), kSlackBytes);
  EXPECT_OK(backend_->ReleaseAddressRange(base, kGiB));
}

TEST_F(CudaVirtualMemoryGpuTest, UnmapWaitsForTheStream) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_OK_AND_ASSIGN(DevicePtr base, backend_->ReserveAddressRange(64 * kMiB));
  ASSERT_OK(backend_->MapPages(base, 64 * kMiB, 2 * kMiB));
  for (int i = 0; i < 256; ++i) {  // a few milliseconds of work
    ASSERT_EQ(cudaMemsetAsync(reinterpret_cast<void*>(base), i, 64 * kMiB, stream), cudaSuccess);
  }
  EXPECT_OK(backend_->UnmapPages(base, 64 * kMiB, 2 * kMiB, reinterpret_cast<StreamId>(stream)));
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess) << "the stream's work finished first";
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "no fault from unmapping under queued work";
  EXPECT_OK(backend_->ReleaseAddressRange(base, 64 * kMiB));
  cudaStreamDestroy(stream);
}

TEST_F(CudaVirtualMemoryGpuTest, MappingBeyondFreeMemoryIsResourceExhaustedAndMapsNothing) {
  const uint64_t page = 256 * kMiB;
  const DeviceMemInfo before = backend_->MemInfo();
  // More pages than the whole device holds.
  const uint64_t bytes = (before.total_bytes / page + 2) * page;
  ASSERT_OK_AND_ASSIGN(DevicePtr base, backend_->ReserveAddressRange(bytes));

  const absl::Status status = backend_->MapPages(base, bytes, page);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(std::string(status.message()).find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos)
      << status;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  const int64_t drop = FreeDrop(before, backend_->MemInfo());
  EXPECT_LE(drop, kSlackBytes) << "the pages created before the failure were released";
  EXPECT_GE(drop, -kSlackBytes);

  // Nothing is left mapped: the first page maps again, and the reservation can be freed.
  ASSERT_OK(backend_->MapPages(base, page, page));
  EXPECT_OK(backend_->UnmapPages(base, page, page, 0));
  EXPECT_OK(backend_->ReleaseAddressRange(base, bytes));
}

TEST_F(CudaVirtualMemoryGpuTest, BadRangesAreErrorsThatNameTheAddressAndChangeNothing) {
  const auto expect_error = [](const absl::Status& status, absl::StatusCode code,
                               DevicePtr address) {
    EXPECT_EQ(status.code(), code) << status;
    const std::string hex = absl::StrFormat("%#x", address);
    EXPECT_NE(std::string(status.message()).find(hex), std::string::npos)
        << status << " does not name " << hex;
  };
  using absl::StatusCode;
  const uint64_t granularity = backend_->PageGranularity();
  EXPECT_EQ(backend_->ReserveAddressRange(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->ReserveAddressRange(granularity + 4096).status().code(),
            StatusCode::kInvalidArgument);

  ASSERT_OK_AND_ASSIGN(DevicePtr base, backend_->ReserveAddressRange(64 * kMiB));
  // Not a multiple of the page size from the base; page size not a multiple of the granularity;
  // bytes not a multiple of the page size.
  expect_error(backend_->MapPages(base + 2 * kMiB, 20 * kMiB, 20 * kMiB),
               StatusCode::kInvalidArgument, base + 2 * kMiB);
  const uint64_t odd_page = granularity + granularity / 2;
  expect_error(backend_->MapPages(base, 2 * odd_page, odd_page), StatusCode::kInvalidArgument,
               base);
  expect_error(backend_->MapPages(base, 3 * kMiB, 2 * kMiB), StatusCode::kInvalidArgument, base);
  // Running past the reservation's end; outside any reservation.
  expect_error(backend_->MapPages(base + 62 * kMiB, 4 * kMiB, 2 * kMiB),
               StatusCode::kInvalidArgument, base + 62 * kMiB);
  expect_error(backend_->MapPages(base + 64 * kMiB, 2 * kMiB, 2 * kMiB),
               StatusCode::kInvalidArgument, base + 64 * kMiB);
  const DeviceMemInfo before = backend_->MemInfo();

  // Overlapping a mapped page, whichever side.
  ASSERT_OK(backend_->MapPages(base + 20 * kMiB, 2 * kMiB, 2 * kMiB));
  expect_error(backend_->MapPages(base + 18 * kMiB, 4 * kMiB, 2 * kMiB),
               StatusCode::kFailedPrecondition, base + 20 * kMiB);
  expect_error(backend_->MapPages(base + 20 * kMiB, 20 * kMiB, 20 * kMiB),
               StatusCode::kFailedPrecondition, base + 20 * kMiB);
  // Unmapping what is not mapped, or with another page size.
  expect_error(backend_->UnmapPages(base + 22 * kMiB, 2 * kMiB, 2 * kMiB, 0),
               StatusCode::kFailedPrecondition, base + 22 * kMiB);
  expect_error(backend_->UnmapPages(base + 20 * kMiB, 4 * kMiB, 2 * kMiB, 0),
               StatusCode::kFailedPrecondition, base + 22 * kMiB);
  expect_error(backend_->UnmapPages(base + 20 * kMiB, 20 * kMiB, 20 * kMiB, 0),
               StatusCode::kFailedPrecondition, base + 20 * kMiB);
  // Releasing with a page mapped, with the wrong size, or not at the base.
  expect_error(backend_->ReleaseAddressRange(base, 64 * kMiB), StatusCode::kFailedPrecondition,
               base + 20 * kMiB);
  expect_error(backend_->ReleaseAddressRange(base, 32 * kMiB), StatusCode::kInvalidArgument, base);
  expect_error(backend_->ReleaseAddressRange(base + 2 * kMiB, 62 * kMiB),
               StatusCode::kInvalidArgument, base + 2 * kMiB);

  // None of the errors touched the page: it still holds data, and unmaps and releases cleanly.
  Fill(base + 20 * kMiB, 2 * kMiB, 0x5A);
  const std::vector<uint8_t> page = Read(base + 20 * kMiB, 2 * kMiB);
  EXPECT_TRUE(AllEqual(page, 0, page.size(), 0x5A));
  EXPECT_OK(backend_->UnmapPages(base + 20 * kMiB, 2 * kMiB, 2 * kMiB, 0));
  EXPECT_LE(FreeDrop(before, backend_->MemInfo()), kSlackBytes);
  EXPECT_OK(backend_->ReleaseAddressRange(base, 64 * kMiB));
  expect_error(backend_->ReleaseAddressRange(base, 64 * kMiB), StatusCode::kInvalidArgument, base);
}

TEST_F(CudaVirtualMemoryGpuTest, DestroyingTheBackendReleasesWhatIsLeft) {
  const DeviceMemInfo before = backend_->MemInfo();
  ASSERT_OK_AND_ASSIGN(DevicePtr base, backend_->ReserveAddressRange(kGiB));
  ASSERT_OK(backend_->MapPages(base, 200 * kMiB, 20 * kMiB));
  EXPECT_GE(FreeDrop(before, backend_->MemInfo()), int64_t{198 * kMiB});
  backend_.reset();  // forgets UnmapPages and ReleaseAddressRange
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<CudaBackend> other, CudaBackend::Create(0));
  EXPECT_LE(FreeDrop(before, other->MemInfo()), kSlackBytes);
  // The address range is free again: a new reservation of the same size succeeds and maps.
  ASSERT_OK_AND_ASSIGN(DevicePtr again, other->ReserveAddressRange(kGiB));
  EXPECT_OK(other->MapPages(again, 20 * kMiB, 20 * kMiB));
  EXPECT_OK(other->UnmapPages(again, 20 * kMiB, 20 * kMiB, 0));
  EXPECT_OK(other->ReleaseAddressRange(again, kGiB));
}

// The caching allocator with expandable_segments:True on the driver's virtual memory: blocks
// hold their data across page boundaries, frees re-merge, and empty_cache unmaps the free pages.
TEST_F(CudaVirtualMemoryGpuTest, CachingAllocatorWithExpandableSegments) {
  ASSERT_OK_AND_ASSIGN(AllocatorOptions options, ParseAllocatorOptions("expandable_segments:True"));
  CachingAllocator allocator(*backend_, options);
  const std::vector<uint64_t> sizes = {100, 3 * kMiB, 25 * kMiB, 300 * kMiB, 7 * kMiB};
  std::vector<DevicePtr> blocks;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(DevicePtr ptr, allocator.Allocate(sizes[i], 0));
    Fill(ptr, sizes[i], static_cast<int>(0x21 + i));
    blocks.push_back(ptr);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(AllEqual(Read(blocks[i], sizes[i]), 0, sizes[i], static_cast<uint8_t>(0x21 + i)))
        << "block " << i;
  }
  EXPECT_OK(allocator.CheckInvariants());
  const int64_t reserved = allocator.GetStats().reserved_bytes[0].current;
  EXPECT_GE(reserved, int64_t{335 * kMiB});
  // Everything but the first block is freed; empty_cache unmaps the now free large pages.
  for (size_t i = 1; i < blocks.size(); ++i) EXPECT_OK(allocator.Free(blocks[i]));
  EXPECT_OK(allocator.CheckInvariants());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const DeviceMemInfo before_empty = backend_->MemInfo();
  allocator.EmptyCache();
  EXPECT_OK(allocator.CheckInvariants());
  EXPECT_LE(FreeDrop(before_empty, backend_->MemInfo()), -int64_t{300 * kMiB})
      << "the freed large pages went back to the device";
  EXPECT_LE(allocator.GetStats().reserved_bytes[0].current, int64_t{2 * kMiB});
  // A large block maps again at the lowest address, and the kept small block is intact.
  ASSERT_OK_AND_ASSIGN(DevicePtr again, allocator.Allocate(40 * kMiB, 0));
  Fill(again, 40 * kMiB, 0x5A);
  EXPECT_TRUE(AllEqual(Read(again, 40 * kMiB), 0, 40 * kMiB, 0x5A));
  EXPECT_TRUE(AllEqual(Read(blocks[0], sizes[0]), 0, sizes[0], 0x21));
  EXPECT_OK(allocator.Free(again));
  EXPECT_OK(allocator.Free(blocks[0]));
  allocator.EmptyCache();
  EXPECT_EQ(allocator.GetStats().reserved_bytes[0].current, 0);
  EXPECT_OK(allocator.CheckInvariants());
}

using PluggableGpuTest = GpuTest;

TEST_F(PluggableGpuTest, TheCAbiServesRealDeviceMemory) {
  ASSERT_EQ(fragscope_configure("", ""), 0) << fragscope_last_error();
  void* p = fragscope_malloc(5 * kMiB, 0, nullptr);
  ASSERT_NE(p, nullptr) << fragscope_last_error();
  EXPECT_EQ(cudaMemset(p, 7, 5 * kMiB), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(fragscope_stat(0, "allocated_bytes.all.current"), int64_t{5 * kMiB});
  EXPECT_EQ(fragscope_stat(0, "reserved_bytes.all.current"), int64_t{20 * kMiB});
  fragscope_free(p, 5 * kMiB, 0, nullptr);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(fragscope_malloc(size_t{1} << 50, 0, nullptr), nullptr);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("CUDA out of memory"), std::string::npos) << err;
  EXPECT_EQ(fragscope_stat(0, "num_ooms"), 1);
  fragscope_empty_cache();
  EXPECT_EQ(fragscope_stat(0, "reserved_bytes.all.current"), 0);
}

}  // namespace
}  // namespace fragscope
