// A CachingAllocator over a SimulatedBackend, with helpers that check every invariant after each
// operation.
#pragma once

#include <memory>
#include <string_view>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::testing {

class AllocatorFixture : public ::testing::Test {
 protected:
  void SetUp() override { Init(""); }

  void Init(std::string_view conf, uint64_t capacity_bytes = 16 * kGiB) {
    absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(conf);
    ASSERT_TRUE(options.ok()) << options.status();
    allocator_.reset();
    backend_ = std::make_unique<SimulatedBackend>(capacity_bytes);
    allocator_ = std::make_unique<CachingAllocator>(*backend_, *options);
  }

  // Allocates and checks invariants; fails the test on error.
  DevicePtr Alloc(uint64_t size, StreamId stream = 0) {
    absl::StatusOr<DevicePtr> ptr = allocator_->Allocate(size, stream);
    EXPECT_TRUE(ptr.ok()) << ptr.status();
    Check();
    return ptr.ok() ? *ptr : 0;
  }
  void Free(DevicePtr ptr) {
    EXPECT_OK(allocator_->Free(ptr));
    Check();
  }
  void Check() {
    absl::Status status = allocator_->CheckInvariants();
    EXPECT_TRUE(status.ok()) << status;
  }
  DeviceStats Stats() const { return allocator_->GetStats(); }
  int64_t Current(const StatArray& a) const { return a[0].current; }

  std::unique_ptr<SimulatedBackend> backend_;
  std::unique_ptr<CachingAllocator> allocator_;
};

}  // namespace fragscope::testing
