// CudaBackend and the pluggable C ABI (libfragscope_alloc.so) on a real device. Skipped without
// one (GTEST_SKIP when CudaBackend::DeviceCount() == 0).
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

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
