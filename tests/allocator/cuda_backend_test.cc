// CudaBackend over a fake CudaRuntimeTable: device switching, error mapping, the event pool and
// virtual memory present or absent, on CPU. The linked runtime is exercised on a device by
// tests/gpu/cuda_backend_gpu_test.cc, the interposer's table by tests/hooks/preload_test.cc.
#include "allocator/cuda_backend.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {

// The fake runtime's state; the table's functions are plain function pointers, hence a global.
struct FakeCuda {
  int current_device = 0;
  int sticky_error = kCudaSuccess;
  int malloc_error = kCudaSuccess;  // what the next cudaMalloc returns
  int free_error = kCudaSuccess;
  int query_result = kCudaSuccess;
  uint64_t next_address = 0x7f0000000000;
  std::map<uint64_t, size_t> allocations;
  std::vector<int> malloc_devices;  // the current device at each cudaMalloc
  int events_created = 0;
  int events_destroyed = 0;
  std::vector<std::pair<void*, void*>> records;  // (event, stream)
};
FakeCuda* g_fake = nullptr;

int Fail(int error) {
  g_fake->sticky_error = error;
  return error;
}

CudaRuntimeTable FakeTable(bool error_texts) {
  CudaRuntimeTable t;
  t.get_device = [](int* device) {
    *device = g_fake->current_device;
    return int{kCudaSuccess};
  };
  t.set_device = [](int device) {
    g_fake->current_device = device;
    return int{kCudaSuccess};
  };
  t.malloc = [](void** ptr, size_t size) {
    g_fake->malloc_devices.push_back(g_fake->current_device);
    if (g_fake->malloc_error != kCudaSuccess) return Fail(g_fake->malloc_error);
    const uint64_t address = g_fake->next_address;
    g_fake->next_address += size;
    g_fake->allocations[address] = size;
    *ptr = reinterpret_cast<void*>(address);
    return int{kCudaSuccess};
  };
  t.free = [](void* ptr) {
    if (g_fake->free_error != kCudaSuccess) return Fail(g_fake->free_error);
    g_fake->allocations.erase(reinterpret_cast<uint64_t>(ptr));
    return int{kCudaSuccess};
  };
  t.mem_get_info = [](size_t* free_bytes, size_t* total_bytes) {
    *total_bytes = 80 * kGiB;
    size_t used = 0;
    for (const auto& [address, bytes] : g_fake->allocations) used += bytes;
    *free_bytes = *total_bytes - used;
    return int{kCudaSuccess};
  };
  t.get_last_error = [] {
    const int error = g_fake->sticky_error;
    g_fake->sticky_error = kCudaSuccess;
    return error;
  };
  t.event_create_with_flags = [](void** event, unsigned flags) {
    if (flags != kCudaEventDisableTiming) return Fail(kCudaErrorInvalidValue);
    *event = reinterpret_cast<void*>(uintptr_t{0x1000} + uintptr_t(g_fake->events_created++));
    return int{kCudaSuccess};
  };
  t.event_record = [](void* event, void* stream) {
    g_fake->records.emplace_back(event, stream);
    return int{kCudaSuccess};
  };
  t.event_query = [](void*) {
    if (g_fake->query_result != kCudaSuccess) return Fail(g_fake->query_result);
    return int{kCudaSuccess};
  };
  t.event_synchronize = [](void*) { return int{kCudaSuccess}; };
  t.event_destroy = [](void*) {
    ++g_fake->events_destroyed;
    return int{kCudaSuccess};
  };
  if (error_texts) {
    t.get_error_name = [](int error) -> const char* {
      return error == kCudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation" : nullptr;
    };
    t.get_error_string = [](int error) -> const char* {
      return error == kCudaErrorMemoryAllocation ? "out of memory" : nullptr;
    };
  }
  return t;
}

// A VirtualMemory that records the device current at each call.
class FakeVirtualMemory final : public VirtualMemory {
 public:
  explicit FakeVirtualMemory(std::vector<int>* devices) : devices_(devices) {}
  ~FakeVirtualMemory() override { devices_->push_back(g_fake->current_device); }

  bool supported() const override { return true; }
  uint64_t granularity_bytes() const override { return 4 * kMiB; }
  absl::StatusOr<DevicePtr> ReserveAddressRange(uint64_t bytes) override {
    devices_->push_back(g_fake->current_device);
    reserved_ = bytes;
    return DevicePtr{0x100000000};
  }
  absl::Status MapPages(DevicePtr, uint64_t, uint64_t) override {
    devices_->push_back(g_fake->current_device);
    return absl::OkStatus();
  }
  absl::Status UnmapPages(DevicePtr, uint64_t, uint64_t, StreamId) override {
    devices_->push_back(g_fake->current_device);
    return absl::OkStatus();
  }
  absl::Status ReleaseAddressRange(DevicePtr, uint64_t) override {
    devices_->push_back(g_fake->current_device);
    reserved_ = 0;
    return absl::OkStatus();
  }
  bool empty() const override { return reserved_ == 0; }

 private:
  std::vector<int>* devices_;
  uint64_t reserved_ = 0;
};

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { g_fake = &fake_; }
  void TearDown() override { g_fake = nullptr; }

  FakeCuda fake_;
};

TEST_F(CudaBackendTest, CallsRunOnTheBackendsDeviceAndRestoreTheCallers) {
  CudaBackend backend(FakeTable(true), 1, "fake", nullptr);
  EXPECT_EQ(backend.device(), 1);
  EXPECT_EQ(backend.name(), "fake");
  ASSERT_OK_AND_ASSIGN(DevicePtr ptr, backend.Malloc(3 * kMiB));
  EXPECT_EQ(fake_.malloc_devices, std::vector<int>{1});
  EXPECT_EQ(fake_.current_device, 0);
  EXPECT_EQ(backend.MemInfo().free_bytes, 80 * kGiB - 3 * kMiB);
  EXPECT_EQ(backend.MemInfo().total_bytes, 80 * kGiB);
  EXPECT_OK(backend.Free(ptr));
  EXPECT_TRUE(fake_.allocations.empty());
  EXPECT_EQ(fake_.current_device, 0);
}

TEST_F(CudaBackendTest, OutOfMemoryIsResourceExhaustedAndClearsTheStickyError) {
  CudaBackend backend(FakeTable(true), 0, "fake", nullptr);
  fake_.malloc_error = kCudaErrorMemoryAllocation;
  absl::StatusOr<DevicePtr> ptr = backend.Malloc(kGiB);
  EXPECT_EQ(ptr.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ptr.status().message(), "cudaMalloc failed: cudaErrorMemoryAllocation (out of memory)");
  EXPECT_EQ(fake_.sticky_error, kCudaSuccess);
}

TEST_F(CudaBackendTest, OtherErrorsAreInternalAndNameTheNumberWithoutErrorTexts) {
  CudaBackend backend(FakeTable(false), 0, "fake", nullptr);
  fake_.free_error = kCudaErrorInvalidValue;
  const absl::Status status = backend.Free(0x1234);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), "cudaFree failed: unknown CUDA error (1)");
  EXPECT_EQ(fake_.sticky_error, kCudaSuccess);
}

TEST_F(CudaBackendTest, EventsArePooledAndDestroyedWithTheBackend) {
  {
    CudaBackend backend(FakeTable(true), 0, "fake", nullptr);
    ASSERT_OK_AND_ASSIGN(EventHandle first, backend.RecordEvent(0x55));
    ASSERT_OK_AND_ASSIGN(bool done, backend.EventDone(first));
    EXPECT_TRUE(done);
    backend.ReleaseEvent(first);
    ASSERT_OK_AND_ASSIGN(EventHandle second, backend.RecordEvent(0x66));
    EXPECT_EQ(second, first) << "a released event is reused";
    EXPECT_EQ(fake_.events_created, 1);
    ASSERT_EQ(fake_.records.size(), 2u);
    EXPECT_EQ(fake_.records[1].second, reinterpret_cast<void*>(0x66));

    fake_.query_result = kCudaErrorNotReady;
    ASSERT_OK_AND_ASSIGN(done, backend.EventDone(second));
    EXPECT_FALSE(done);
    EXPECT_EQ(fake_.sticky_error, kCudaSuccess) << "not ready is not left as the sticky error";
    fake_.query_result = kCudaErrorInvalidValue;
    EXPECT_EQ(backend.EventDone(second).status().code(), absl::StatusCode::kInternal);
    EXPECT_OK(backend.SynchronizeEvent(second));
    backend.ReleaseEvent(second);
    EXPECT_EQ(fake_.events_destroyed, 0);
  }
  EXPECT_EQ(fake_.events_destroyed, 1);
}

TEST_F(CudaBackendTest, WithoutVirtualMemoryExpandableSegmentCallsAreUnimplemented) {
  CudaBackend backend(FakeTable(true), 0, "CUDA device 0", nullptr);
  EXPECT_FALSE(backend.SupportsVirtualMemory());
  EXPECT_EQ(backend.PageGranularity(), 2 * kMiB);
  absl::StatusOr<DevicePtr> base = backend.ReserveAddressRange(20 * kMiB);
  EXPECT_EQ(base.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(base.status().message().find("CUDA device 0"), std::string::npos) << base.status();
  EXPECT_EQ(backend.MapPages(0x100000000, 2 * kMiB, 2 * kMiB).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(backend.UnmapPages(0x100000000, 2 * kMiB, 2 * kMiB, 0).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(backend.ReleaseAddressRange(0x100000000, 20 * kMiB).code(),
            absl::StatusCode::kUnimplemented);
}

TEST_F(CudaBackendTest, VirtualMemoryCallsRunOnTheBackendsDevice) {
  std::vector<int> devices;
  {
    CudaBackend backend(FakeTable(true), 2, "fake", std::make_unique<FakeVirtualMemory>(&devices));
    EXPECT_TRUE(backend.SupportsVirtualMemory());
    EXPECT_EQ(backend.PageGranularity(), 4 * kMiB);
    ASSERT_OK_AND_ASSIGN(DevicePtr base, backend.ReserveAddressRange(20 * kMiB));
    EXPECT_OK(backend.MapPages(base, 4 * kMiB, 4 * kMiB));
    EXPECT_OK(backend.UnmapPages(base, 4 * kMiB, 4 * kMiB, 0));
    EXPECT_EQ(fake_.current_device, 0);
    // The reservation is still held: the backend frees it on its device when destroyed.
  }
  EXPECT_EQ(devices, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(fake_.current_device, 0);
}

}  // namespace
}  // namespace fragscope
