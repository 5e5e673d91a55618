// fragscope_simulate replaces the registry behind the C ABI while other threads are inside it: a
// storage finalizer freeing on PyTorch's autograd thread, stats read on the main thread. The
// replaced registry must outlive every call that reached it, and its logs must still be whole when
// fragscope_simulate returns. Meant for ThreadSanitizer (scripts/sanitize.sh thread), where a
// registry freed under a reader is a reported race; a plain build may crash instead.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/simulated_backend.h"
#include "fslog/fslog_reader.h"
#include "gtest/gtest.h"
#include "hooks/fragscope_alloc.h"
#include "hooks/pluggable_allocator.h"
#include "tests/fslog/fslog_test_util.h"

namespace fragscope::hooks {
namespace {

constexpr int kSwaps = 200;

cudaStream_t Stream(uintptr_t id) { return reinterpret_cast<cudaStream_t>(id); }

class RegistrySwapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("FRAGSCOPE_ALLOC_CONF");
    unsetenv("FRAGSCOPE_LOG");
    ResetPluggableAllocatorForTesting();
    ASSERT_EQ(fragscope_simulate(1 * kGiB, "", ""), 0) << fragscope_last_error();
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("fragscope_swap_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    stop_.store(true);
    for (std::thread& t : threads_) t.join();
    ResetPluggableAllocatorForTesting();
    std::filesystem::remove_all(dir_);
  }

  // Runs `body` in a loop on a new thread until the test ends; `started` counts its first rounds.
  template <typename Body>
  void Loop(Body body) {
    threads_.emplace_back([this, body] {
      bool counted = false;
      while (!stop_.load(std::memory_order_relaxed)) {
        body();
        if (!counted) started_.fetch_add(1);
        counted = true;
      }
    });
  }
  void AwaitStarted() {
    while (started_.load() < static_cast<int>(threads_.size())) std::this_thread::yield();
  }

  std::filesystem::path dir_;
  std::atomic<bool> stop_{false};
  std::atomic<int> started_{0};
  std::vector<std::thread> threads_;
};

// The predictor's pattern: a finalizer thread frees while the main thread reads stats and starts
// the next prediction over.
TEST_F(RegistrySwapTest, FreesAndStatReadsDuringRepeatedSimulate) {
  Loop([] {
    // A pair inside one registry, or its free reaching the next one (then reported, not fatal).
    void* p = fragscope_malloc(4096, 0, Stream(0));
    fragscope_free(p, 4096, 0, Stream(0));
  });
  Loop([] {
    int64_t values[256];
    fragscope_stat_values(0, values, 256);
    fragscope_pool_use_count(0, 1, 1);
    fragscope_free(reinterpret_cast<void*>(uintptr_t{0x1000}), 0, 0, Stream(0));
  });
  AwaitStarted();
  for (int i = 0; i < kSwaps; ++i) {
    ASSERT_EQ(fragscope_simulate(1 * kGiB, "", ""), 0) << fragscope_last_error();
  }
}

// Each replaced registry's log is flushed, closed and readable to its end as soon as
// fragscope_simulate returns, while other threads still allocate, mark and flush.
TEST_F(RegistrySwapTest, EachReplacedLogIsWholeWhenSimulateReturns) {
  Loop([] {
    void* p = fragscope_malloc(1 << 20, 0, Stream(0));
    fragscope_mark("worker");
    fragscope_free(p, 1 << 20, 0, Stream(0));
  });
  Loop([] {
    int64_t values[256];
    fragscope_stat_values(0, values, 256);
    fragscope_flush();
  });
  AwaitStarted();
  for (int i = 0; i < 20; ++i) {
    const std::string log = (dir_ / absl::StrCat("swap", i, ".fslog")).string();
    ASSERT_EQ(fragscope_simulate(1 * kGiB, "", log.c_str()), 0) << fragscope_last_error();
    ASSERT_NE(fragscope_malloc(512, 0, Stream(7)), nullptr);  // the log exists from here on
    ASSERT_EQ(fragscope_simulate(1 * kGiB, "", ""), 0) << fragscope_last_error();
    const testing::ReadResult read = testing::ReadFile(log);
    EXPECT_TRUE(read.status.ok()) << log << ": " << read.status;
    EXPECT_EQ(read.torn_tail_bytes, 0u) << log;
    int allocs = 0;
    for (const LogEntry& e : read.entries) allocs += e.kind() == EventKind::kAlloc;
    EXPECT_GE(allocs, 1) << log;
  }
}

// A thread inside the C ABI cannot be waited for by itself: fragscope_simulate from a thread that
// already holds the registry (a backend factory calling back) is refused, not a deadlock.
TEST_F(RegistrySwapTest, SimulateFromInsideTheRegistryIsRefused) {
  ResetPluggableAllocatorForTesting([](int device) {
    EXPECT_EQ(fragscope_simulate(1 * kGiB, "", ""), -1);
    EXPECT_NE(std::string(fragscope_last_error()).find("inside"), std::string::npos)
        << fragscope_last_error();
    return absl::StatusOr<std::unique_ptr<DeviceBackend>>(
        std::make_unique<SimulatedBackend>(1 * kGiB, device));
  });
  void* p = fragscope_malloc(512, 0, Stream(0));
  ASSERT_NE(p, nullptr);
  fragscope_free(p, 512, 0, Stream(0));
}

// Note [Pointers of a replaced registry]: a pointer of the replaced registry freed afterwards is
// reported and changes nothing while no fresh block starts there; the fresh registry hands the
// same address out again, which is why callers must drop such frees.
TEST_F(RegistrySwapTest, APointerOfTheReplacedRegistryIsReportedThenItsAddressReused) {
  void* old = fragscope_malloc(1 << 20, 0, Stream(0));
  ASSERT_NE(old, nullptr);
  ASSERT_EQ(fragscope_simulate(1 * kGiB, "", ""), 0) << fragscope_last_error();
  fragscope_free(old, 1 << 20, 0, Stream(0));
  EXPECT_NE(std::string(fragscope_last_error()).find("not a fragscope allocation"),
            std::string::npos)
      << fragscope_last_error();
  EXPECT_EQ(fragscope_stat(0, "allocation.all.current"), 0);
  void* fresh = fragscope_malloc(1 << 20, 0, Stream(0));
  EXPECT_EQ(fresh, old);
  fragscope_free(fresh, 1 << 20, 0, Stream(0));
}

}  // namespace
}  // namespace fragscope::hooks
